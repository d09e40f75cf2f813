"""Compiled plans never replay stale state or skip work: guards re-trace, tracing refuses what a
replay could not repeat (see tapegrad/autodiff/plan/__init__.py's docstring)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.autodiff import plan as plan_mod

X = np.ones((4, 8), np.float32)


def test_dropout_follows_eval_and_train_without_retracing_twice():
    drop = nn.Dropout(0.5, rng=np.random.default_rng(0))
    f = tg.compile(lambda x: drop(x))
    assert (f(X).data == 0).any()
    drop.eval()
    np.testing.assert_array_equal(f(X).data, X)
    assert f.retraces == ["Dropout was switched to evaluation mode"]
    drop.train()
    assert (f(X).data == 0).any()
    drop.eval()
    np.testing.assert_array_equal(f(X).data, X)
    assert len(f.retraces) == 1  # both plans are kept: switching back costs no trace
    assert len(f.all_plans) == 2


def test_rebound_parameter_is_read_after_rebinding():
    lin = nn.Linear(3, 2, rng=np.random.default_rng(0))
    f = tg.compile(lambda x: lin(x).sum())
    x = np.ones((1, 3), np.float32)
    f(x)
    lin.weight = nn.Parameter(np.zeros((2, 3), np.float32))
    lin.bias = nn.Parameter(np.full(2, 0.5, np.float32))
    assert f(x).item() == 1.0
    assert f.retraces == ["a parameter, buffer or sub-module of Linear was replaced"]


def test_replaced_parameter_array_retraces():
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    f = tg.compile(lambda x: (w * x).sum())
    x = np.ones(3, np.float32)
    assert f(x).item() == 3.0
    w.data = np.full(3, 2.0, np.float32)
    assert f(x).item() == 6.0
    assert "was replaced" in f.retraces[0]


SCALE = 0.5


def _helper(t):
    return t * SCALE


def test_changed_global_closure_and_helper_values_retrace():
    global SCALE
    offset = 1.0
    f = tg.compile(lambda x: (tg.tensor(x) * SCALE + offset).sum())
    g = tg.compile(lambda x: _helper(tg.tensor(x)).sum())
    x = np.ones(2, np.float32)
    try:
        assert f(x).item() == 3.0 and g(x).item() == 1.0
        SCALE = 2.0
        assert f(x).item() == 6.0 and g(x).item() == 4.0
        assert f.retraces == [
            "the global 'SCALE' of "
            "test_changed_global_closure_and_helper_values_retrace.<locals>."
            "<lambda> changed from 0.5 to 2.0"
        ]
        offset = 3.0  # noqa: F841 (read by f's closure)
        assert f(x).item() == 10.0
        assert "closure variable 'offset'" in f.retraces[-1]
        assert len(g.retraces) == 1 and "'SCALE' of _helper" in g.retraces[0]
    finally:
        SCALE = 0.5


def test_unchanged_values_replay_without_tracing():
    lin = nn.Linear(3, 2, rng=np.random.default_rng(0))
    lr = 0.1
    f = tg.compile(lambda x: (lin(x) * lr).sum())
    x = np.ones((1, 3), np.float32)
    for _ in range(5):
        f(x)
    assert f.retraces == [] and len(f.all_plans) == 1


K = 0.0


def test_retracing_every_call_warns_once():
    global K
    f = tg.compile(lambda x: (tg.tensor(x) * K).sum())
    x = np.ones(2, np.float32)
    with pytest.warns(RuntimeWarning, match="traced 5 times in a row, last because the global 'K'"):
        for k in range(plan_mod.RETRACE_WARNING + 1):
            K = float(k)
            assert f(x).item() == 2.0 * k
    assert len(f.retraces) == plan_mod.RETRACE_WARNING
    assert len(f.all_plans) == plan_mod.MAX_PLANS  # the oldest plans were dropped


def _regression():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32)).astype(np.float32)
    return x, y


def test_manual_update_through_data_is_refused_with_what_to_write():
    x, y = _regression()
    w = tg.tensor(np.zeros(3, np.float32), requires_grad=True)

    def step(x, y):
        loss = ((tg.tensor(x) @ w - y) ** 2).mean()
        loss.backward()
        w.data -= 0.1 * w.grad
        w.grad = None
        return loss

    with pytest.raises(tg.TraceError, match=r"p.data -= lr \* p.grad.*tg.effect"):
        tg.compile(step)(x, y)


def test_manual_update_wrapped_in_effect_replays_like_eager():
    x, y = _regression()

    def run(compiled):
        w = tg.tensor(np.zeros(3, np.float32), requires_grad=True)

        def update():
            w.data -= np.float32(0.1) * w.grad

        def step(x, y):
            loss = ((tg.tensor(x) @ w - y) ** 2).mean()
            w.grad = None
            loss.backward()
            tg.effect(update)
            return loss

        f = tg.compile(step) if compiled else step
        losses = [f(x, y).item() for _ in range(20)]
        return w.data.copy(), losses

    we, le = run(False)
    wc, lc = run(True)
    np.testing.assert_array_equal(we, wc)
    assert le == lc and lc[-1] < lc[0] / 2


def _clip_model_step(compiled, clip):
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = optim.SGD(model.parameters(), lr=0.05)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 4)).astype(np.float32) * 10
    y = rng.standard_normal((16, 1)).astype(np.float32) * 10

    def step(x, y):
        loss = ((model(tg.tensor(x)) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        norm = clip(model.parameters())
        opt.step()
        return loss, norm

    f = tg.compile(step) if compiled else step
    out = []
    for _ in range(4):
        loss, norm = f(x, y)
        out.append((loss.item(), float(norm) if norm is not None else None))
    return [p.data.copy() for p in model.parameters()], out


@pytest.mark.parametrize(
    "clip",
    [lambda ps: optim.clip_grad_norm_(ps, 1.0), lambda ps: optim.clip_grad_value_(ps, 0.1)],
    ids=["norm", "value"],
)
def test_gradient_clipping_is_replayed(clip):
    pe, oe = _clip_model_step(False, clip)
    pc, oc = _clip_model_step(True, clip)
    assert oe == oc
    for a, b in zip(pe, pc):
        np.testing.assert_array_equal(a, b)
    if oe[0][1] is not None:
        assert oe[0][1] > 1.0 and len({n for _, n in oe}) == len(oe)  # clipped; norm is live


def test_numpy_clipping_of_grad_is_refused():
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    def step(x):
        loss = (w * tg.tensor(x)).sum()
        opt.zero_grad()
        loss.backward()
        np.clip(w.grad, -0.1, 0.1, out=w.grad)
        opt.step()
        return loss

    with pytest.raises(
        tg.TraceError, match=r"np.clip of a gradient would be computed once.*tg.effect"
    ):
        tg.compile(step)(np.ones(3, np.float32))


def test_numpy_random_draws_are_refused():
    def global_draw(x):
        return (tg.tensor(x) + np.random.randn(3).astype(np.float32)).sum()  # noqa: NPY002 (the refused habit)

    gen = np.random.default_rng(0)

    def generator_draw(x):
        return (tg.tensor(x) + gen.standard_normal(3, dtype=np.float32)).sum()

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.rng = np.random.default_rng(1)

        def forward(self, x):
            return x + self.rng.standard_normal(x.shape).astype(np.float32)

    noisy = Noisy()
    x = np.zeros(3, np.float32)
    with pytest.raises(tg.TraceError, match="NumPy's global generator.*tg.randn_like"):
        tg.compile(global_draw)(x)
    with pytest.raises(tg.TraceError, match="a Generator the step holds"):
        tg.compile(generator_draw)(x)
    with pytest.raises(tg.TraceError, match="a Generator the step holds"):
        tg.compile(lambda x: noisy(tg.tensor(x)).sum())(x)


def test_tapegrad_random_draws_are_fresh_on_every_replay_and_match_eager():
    """A VAE-style reparameterisation: compiled == eager draw for draw."""

    def run(compiled):
        gen = np.random.default_rng(5)
        mu = tg.tensor(np.zeros((2, 3), np.float32), requires_grad=True)

        def step(x):
            z = mu + tg.randn_like(mu, rng=gen) * tg.tensor(x)
            loss = (z**2).sum()
            mu.grad = None
            loss.backward()
            return z

        f = tg.compile(step) if compiled else step
        return [(f(np.ones((2, 3), np.float32)).data.copy(), mu.grad.copy()) for _ in range(3)]

    eager, comp = run(False), run(True)
    for (ze, ge), (zc, gc) in zip(eager, comp):
        np.testing.assert_array_equal(ze, zc)
        np.testing.assert_array_equal(ge, gc)
    assert not np.array_equal(comp[0][0], comp[1][0])


def test_random_creation_ops():
    gen = np.random.default_rng(0)
    a = tg.randn(2, 3, rng=gen)
    b = tg.rand((4,), dtype=np.float64, rng=np.random.default_rng(0))
    assert a.shape == (2, 3) and a.dtype == np.float32
    assert b.dtype == np.float64 and (b.data >= 0).all() and (b.data < 1).all()
    np.testing.assert_array_equal(
        tg.randn(5, rng=np.random.default_rng(3)).data,
        np.random.default_rng(3).standard_normal(5, dtype=np.float32),
    )
    assert tg.rand_like(np.zeros((2, 2), np.int64)).dtype == np.float32
    with pytest.raises(TypeError, match="float32 or float64"):
        tg.randn(2, dtype=np.int32)


def test_global_and_nonlocal_assignments_are_refused():
    def counting(x):
        global K
        K = 1.0
        return tg.tensor(x).sum()

    total = 0.0

    def summing(x):
        nonlocal total
        total += 1.0
        return tg.tensor(x).sum()

    x = np.ones(2, np.float32)
    with pytest.raises(tg.TraceError, match="assigns the global variable 'K'"):
        tg.compile(counting)(x)
    with pytest.raises(tg.TraceError, match="assigns the nonlocal variable 'total'"):
        tg.compile(summing)(x)
