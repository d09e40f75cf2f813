"""A compiled step is never silently different from eager (issue: the engine as passes, item 0).

Hand-written parameter updates read the live gradient on every replay, pytree arguments are
replayed instead of traced anew, a function that traces on every call says why, the guard does
not mistake an attribute name for a global, and tracing stays linear in the operations."""

from __future__ import annotations

import sys
import warnings
from collections import namedtuple

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import TraceError, nn
from tapegrad.autodiff import plan as plan_mod


def _regression_data(n=64, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = x @ np.arange(1, d + 1, dtype=np.float32)[:, None] + 0.5
    return x, y


UPDATES = {
    "isub": lambda p, lr: p.__isub__(lr * p.grad),
    "add_alpha": lambda p, lr: p.add_(p.grad, alpha=-lr),
    "add_scaled": lambda p, lr: p.add_(-lr * p.grad),
    "sub_product": lambda p, lr: p.sub_(p.grad * lr),
    "setitem": lambda p, lr: p.__setitem__(Ellipsis, p - p.grad * lr),
}


def _train_regression(update, compiled: bool, steps: int, reset: str = "none"):
    tg.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = _regression_data()
    lr = 0.05

    def step(xb, yb):
        if reset == "none":
            for p in model.parameters():
                p.grad = None
        elif reset == "zero_grad":
            model.zero_grad()
        loss = ((model(xb) - yb) ** 2).mean()
        loss.backward()
        with tg.no_grad():
            for p in model.parameters():
                update(p, lr)
        return loss

    f = tg.compile(step) if compiled else step
    losses = [float(f(x, y).item()) for _ in range(steps)]
    return losses, [p.data.copy() for p in model.parameters()], f


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_manual_updates_replay_the_live_gradient(name):
    eager, w_eager, _ = _train_regression(UPDATES[name], False, 300)
    comp, w_comp, f = _train_regression(UPDATES[name], True, 300)
    assert comp == eager  # bit for bit, every step
    for a, b in zip(w_eager, w_comp):
        np.testing.assert_array_equal(a, b)
    assert eager[-1] < 1e-6 * eager[0]  # it converged (it did not before: loss ~4.5e3)
    assert len(f.all_plans) == 1 and f.retraces == []
    assert any(label.startswith("read_grad") for label in f.all_plans[0].labels)


def test_manual_update_with_accumulating_gradients():
    """Without resetting .grad, gradients accumulate across calls; the update reads the sum."""
    eager, w_eager, _ = _train_regression(UPDATES["isub"], False, 40, reset="keep")
    comp, w_comp, _ = _train_regression(UPDATES["isub"], True, 40, reset="keep")
    assert comp == eager
    for a, b in zip(w_eager, w_comp):
        np.testing.assert_array_equal(a, b)


def test_manual_update_after_zero_grad_and_clipping_in_a_language_model():
    """A word-language-model step as PyTorch's example writes it: clip, then p.add_(grad)."""

    def run(compiled):
        tg.manual_seed(1)
        emb, rnn, head = nn.Embedding(20, 8), nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 20)
        params = [*emb.parameters(), *rnn.parameters(), *head.parameters()]
        rng = np.random.default_rng(3)
        data = rng.integers(0, 20, (3, 4, 7))  # three batches, seen ten times
        lr = 2.0

        def step(x, y):
            for p in params:
                p.grad = None
            out, _ = rnn(emb(x))
            loss = nn.functional.cross_entropy(head(out).reshape(-1, 20), y.reshape(-1))
            loss.backward()
            tg.optim.clip_grad_norm_(params, 0.25)
            with tg.no_grad():
                for p in params:
                    p.add_(p.grad, alpha=-lr)
            return loss

        f = tg.compile(step) if compiled else step
        losses = []
        for i in range(30):
            if i == 15:
                lr = 0.5  # annealed as the example does: the plan is traced again
            x, y = data[i % 3, :, :-1], data[i % 3, :, 1:]
            losses.append(float(f(x, y).item()))
        return losses, [p.data.copy() for p in params], f

    eager, w_eager, _ = run(False)
    comp, w_comp, f = run(True)
    assert len(f.retraces) == 1 and "'lr'" in f.retraces[0]
    assert comp == eager
    for a, b in zip(w_eager, w_comp):
        np.testing.assert_array_equal(a, b)
    assert sum(eager[-3:]) < 0.9 * sum(eager[:3])


def _step_with(body):
    model = nn.Linear(3, 2)

    def step(x):
        for p in model.parameters():
            p.grad = None
        model(x).sum().backward()
        with tg.no_grad():
            body(model.weight)
        return model.weight

    return tg.compile(step)


@pytest.mark.parametrize(
    "body",
    [
        lambda p: p.sub_(np.linalg.norm(p.grad)),
        lambda p: p.sub_(p.grad.sum()),
        lambda p: p.sub_(float(p.grad[0, 0])),
        lambda p: p.sub_(p.grad.item(0)),
        lambda p: p.grad.__imul__(2.0),
        lambda p: p.grad.__setitem__(Ellipsis, 0.0),
        lambda p: p.sub_(np.clip(p.grad, -1, 1)),
        lambda p: p.sub_(np.asarray(p.grad)),
        lambda p: p.sub_(np.asarray(p.grad * 2)),
        lambda p: p.data.__isub__(0.1 * p.grad),
    ],
    ids=["norm", "sum", "float", "item", "imul", "setitem", "clip", "asarray", "derived", "data"],
)
def test_numpy_on_a_gradient_is_refused_at_trace_time(body):
    f = _step_with(body)
    with pytest.raises(TraceError, match="frozen|could not replay|would happen once"):
        f(np.ones((4, 3), np.float32))


def test_a_gradient_view_is_an_ordinary_array_after_tracing():
    kept = []
    model = nn.Linear(3, 2)

    def step(x):
        model.zero_grad()
        model(x).sum().backward()
        kept.append(model.weight.grad)
        return model.weight

    tg.compile(step)(np.ones((4, 3), np.float32))
    g = kept[0]
    assert float(np.linalg.norm(g)) >= 0 and isinstance(g * 2, np.ndarray)


# -- arguments that are tuples, lists and dicts of tensors ------------------------------------
def test_a_tuple_state_argument_replays_one_plan_and_matches_eager():
    def run(compiled):
        tg.manual_seed(0)
        cell = nn.LSTMCell(3, 5)
        opt = tg.optim.SGD(cell.parameters(), lr=0.1)

        def step(x, hc):
            h, c = cell(x, hc)
            loss = (h**2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss, (h.detach(), c.detach())

        f = tg.compile(step) if compiled else step
        x = np.random.default_rng(0).random((4, 3)).astype(np.float32)
        hc = (tg.zeros(4, 5), tg.zeros(4, 5))
        losses = []
        for _ in range(25):
            loss, (h, c) = f(x, hc)
            losses.append(float(loss.item()))
            hc = (tg.tensor(h.data.copy()), tg.tensor(c.data.copy()))
        return losses, f

    eager, _ = run(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no re-trace warning either
        comp, f = run(True)
    assert comp == eager
    assert len(f.all_plans) == 1 and f.retraces == []


def test_dicts_lists_and_namedtuples_of_arrays_are_inputs():
    Pair = namedtuple("Pair", "a b")

    @tg.compile
    def f(d, items, pair, scale):
        return (d["x"] * items[0] + pair.b).sum() * scale

    rng = np.random.default_rng(0)
    for _ in range(4):
        x, z, b = (rng.random(3).astype(np.float32) for _ in range(3))
        out = f({"x": x}, [tg.tensor(z)], Pair(1, b), 2.0)
        expected = (tg.tensor(x) * tg.tensor(z) + tg.tensor(b)).sum() * 2.0
        assert float(out.item()) == float(expected.item())
    assert len(f.all_plans) == 1
    f({"x": x}, [tg.tensor(z)], Pair(1, b), 3.0)  # another value: another plan, and said why
    assert f.retraces == ["a new input signature: argument 3 changed from 2.0 to 3.0"]


def test_tracing_on_every_call_warns_naming_the_argument():
    @tg.compile
    def f(x, s):
        return (x * s).sum()

    x = np.ones(3, np.float32)
    with pytest.warns(RuntimeWarning, match="argument 1 changed from") as rec:
        for i in range(plan_mod.CHURN_WARNING + 2):
            f(x, float(i))
    assert len(rec) == 1 and "in a row" in str(rec[0].message)


def test_a_new_batch_size_is_no_churn():
    @tg.compile
    def f(x):
        return (x * 2).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(10):
            f(np.ones((8, 3), np.float32))
            f(np.ones((5, 3), np.float32))
    assert len(f.all_plans) == 2 and f.retraces == []


# -- the guard reads globals, not attribute names -------------------------------------------
_MODEL = nn.Linear(3, 1)
_OPT = tg.optim.SGD(_MODEL.parameters(), lr=0.1)


def _train_step(x):
    loss = (_MODEL(x) ** 2).mean()
    _OPT.zero_grad()
    loss.backward()
    _OPT.step()
    return loss


def test_an_attribute_named_like_a_changing_global_is_not_guarded():
    f = tg.compile(_train_step)
    x = np.ones((4, 3), np.float32)
    global step  # the loop variable of a script's training loop, named like opt.step
    for step in range(5):  # noqa: B007
        f(x)
    assert f.retraces == [] and len(f.all_plans) == 1


# -- tracing is linear in the number of operations ------------------------------------------
def _calls_to_trace(length: int) -> int:
    cell = nn.LSTMCell(1, 8).double()

    def step(x):
        h = c = np.zeros((2, 8))
        total = 0.0
        for t in range(x.shape[1]):
            h, c = cell(x[:, t : t + 1], (h, c))
            total = total + h.sum()
        cell.zero_grad()
        total.backward()
        return total

    f = tg.compile(step)
    x = np.ones((2, length))
    calls = [0]

    def count(frame, event, arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    sys.setprofile(count)
    try:
        f(x)
    finally:
        sys.setprofile(None)
    return calls[0]


def test_tracing_is_linear_in_the_number_of_operations():
    _calls_to_trace(8)  # kernels compiled, caches warm
    small, large = _calls_to_trace(100), _calls_to_trace(400)
    assert large < 4.4 * small, (small, large)  # quadratic pooling gave ~8x
