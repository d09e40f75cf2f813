"""tapegrad.compile: plans replay exactly what eager mode computes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.models import build_model


def _train_pair(name, steps, batch, seed=0, **kw):
    """Train two copies of a preset, eagerly and compiled, on the same batches."""
    models = [build_model(name, seed=seed, **kw) for _ in range(2)]
    opts = [optim.Adam(m.parameters(), lr=1e-2) for m in models]
    binary = "text" in name

    def step(model, opt, x, y):
        logits = model(x)
        if binary:
            loss = nn.functional.binary_cross_entropy_with_logits(logits.reshape((-1,)), y)
        else:
            loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, logits

    compiled = tg.compile(lambda x, y: step(models[1], opts[1], x, y))
    rng = np.random.default_rng(seed)
    for i in range(steps):
        n = batch if i < steps - 1 else batch // 2 + 1  # a short last batch: a second plan
        if binary:
            x = rng.integers(0, kw["vocab_size"], (n, 130)).astype(np.int32)
            y = rng.integers(0, 2, n).astype(np.float32)
        else:
            x = rng.random((n, 28, 28), dtype=np.float32)
            y = rng.integers(0, 10, n)
        le, ge = step(models[0], opts[0], tg.tensor(x), y)
        lc, gc = compiled(x, y)
        assert le.item() == lc.item(), (name, i)
        np.testing.assert_array_equal(ge.data, gc.data)
    return models, compiled


@pytest.mark.parametrize("name", ["seed-cnn", "seed-rnn", "mlp", "text-cnn-learned"])
def test_compiled_training_equals_eager_bit_for_bit(name):
    kw = {"vocab_size": 300} if "text" in name else {}
    (eager, comp), compiled = _train_pair(name, steps=4, batch=16, **kw)
    assert len(compiled.plans) == 2  # the short last batch got a plan of its own
    for (k, a), (_, b) in zip(eager.state_dict().items(), comp.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_dropout_draws_fresh_masks_on_every_replay():
    drop = nn.Dropout(0.5, rng=np.random.default_rng(0))
    f = tg.compile(lambda x: drop(x) * 1.0)
    x = np.ones((8, 8), np.float32)
    first = f(x).data.copy()
    second = f(x).data.copy()
    assert not np.array_equal(first, second)
    assert set(np.unique(second)) <= {0.0, 2.0}


def test_python_control_flow_on_traced_values_is_an_error():
    @tg.compile
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y
        return -y

    with pytest.raises(tg.TraceError, match="Python truth"):
        f(np.ones(3, np.float32))
    with pytest.raises(tg.TraceError, match=r"item\(\)"):
        tg.compile(lambda x: (x * 2).sum().item())(np.ones(3, np.float32))


def test_values_made_from_inputs_outside_tapegrad_are_caught():
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)

    @tg.compile
    def f(x):
        return (w * tg.tensor(x.data.astype(np.float32) * 1)).sum()  # escapes the trace

    with pytest.raises(tg.TraceError, match="constant equal to input 0"):
        f(np.arange(3, dtype=np.float32) + 1)


def test_replays_compute_with_each_calls_inputs():
    f = tg.compile(lambda x: x * 2)
    a = f(np.ones(2, np.float32))
    np.testing.assert_array_equal(a.data, [2, 2])  # the traced call's own result
    np.testing.assert_array_equal(f(np.full(2, 3, np.float32)).data, [6, 6])
    np.testing.assert_array_equal(f(np.full(2, 5, np.float32)).data, [10, 10])


def test_non_array_arguments_key_the_plan():
    f = tg.compile(lambda x, k: x * k)
    assert f(np.ones(2, np.float32), 2).data[0] == 2
    assert f(np.ones(2, np.float32), 3).data[0] == 3
    assert len(f.plans) == 2
    assert f(np.ones(2, np.float32), [3]).data[0] == 3  # a list is a structure of leaves
    with pytest.raises(tg.TraceError, match="nor hashable"):
        f(np.ones(2, np.float32), {1})


UNARY = [
    lambda t: t.tanh(),
    lambda t: t.sigmoid(),
    lambda t: t.relu(),
    lambda t: t * t,
    lambda t: (t * 0.5).tanh().exp(),  # bounded: chains of exp must not overflow
    lambda t: t.softmax(axis=-1),
    lambda t: t[:, ::-1] + 1.0,
]


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(st.integers(0, len(UNARY) - 1), min_size=1, max_size=5),
    reduce=st.sampled_from(["sum", "mean", "max", "logsumexp"]),
    seed=st.integers(0, 999),
)
def test_random_graphs_compiled_equal_eager(ops, reduce, seed):
    rng = np.random.default_rng(seed)
    w = tg.tensor(rng.normal(size=(4, 3)).astype(np.float32), requires_grad=True)
    b = tg.tensor(rng.normal(size=(3,)).astype(np.float32), requires_grad=True)

    def f(x):
        h = x @ w + b
        for k in ops:
            h = UNARY[k](h)
        loss = getattr(h, reduce)()
        w.grad = b.grad = None
        loss.backward()
        return loss

    compiled = tg.compile(f)
    for _ in range(3):
        x = rng.normal(size=(5, 4)).astype(np.float32)
        le = f(tg.tensor(x))
        ge = (w.grad.copy(), b.grad.copy())
        lc = compiled(x)
        assert np.isfinite(le.item()) and le.item() == lc.item()
        np.testing.assert_array_equal(ge[0], w.grad)
        np.testing.assert_array_equal(ge[1], b.grad)


@pytest.mark.parametrize(
    "conv,shape",
    [
        (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), (5, 3, 9, 7)),
        (lambda: nn.Conv2d(2, 3, (2, 3), padding=(1, 0)), (2, 2, 6, 6)),
        (lambda: nn.Conv1d(4, 5, 3, padding=2), (3, 4, 11)),
        (lambda: nn.Conv1d(4, 5, 3, stride=2), (3, 4, 11)),
    ],
)
def test_compiled_convolutions_equal_eager(conv, shape):
    tg.manual_seed(0)
    layer = conv()
    pool = nn.MaxPool2d(2) if len(shape) == 4 else nn.MaxPool1d(3, stride=2)
    x_grad = tg.tensor(np.zeros(shape, np.float32), requires_grad=True)

    def f(x):
        y = pool(layer(x + x_grad).relu())
        loss = (y * y).mean()
        layer.zero_grad()
        x_grad.grad = None
        loss.backward()
        return loss

    compiled = tg.compile(f)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.normal(size=shape).astype(np.float32)
        le = f(tg.tensor(x))
        expect = [p.grad.copy() for p in layer.parameters()] + [x_grad.grad.copy()]
        lc = compiled(x)
        got = [p.grad for p in layer.parameters()] + [x_grad.grad]
        assert le.item() == lc.item()
        for a, b in zip(expect, got):
            np.testing.assert_array_equal(a, b)
    assert not compiled.all_plans[0].allocating  # every equation writes into the plan's buffers


def test_conv_after_an_elementwise_op_on_a_channels_last_view_equals_eager():
    # The conv backward's path (direct kernel or BLAS) depends on its input's memory layout.
    # Eager, ``x * 2`` of a permuted (channels-last) view keeps that layout; the plan's
    # plan's product must keep it too, or the plan takes the other path and its gradients
    # differ from eager's in the last bits.
    tg.manual_seed(0)
    emb, conv, pool = nn.Embedding(40, 16), nn.Conv1d(16, 8, 3), nn.MaxPool1d(8)
    params = [*emb.parameters(), *conv.parameters()]

    def f(idx):
        x = tg.permute(emb(idx), (0, 2, 1)) * 2.0
        loss = (pool(conv(x).relu()) ** 2).mean()
        for p in params:
            p.grad = None
        loss.backward()
        return loss

    compiled = tg.compile(f)
    rng = np.random.default_rng(3)
    for _ in range(3):
        idx = rng.integers(0, 40, (4, 26))
        le = f(tg.tensor(idx))
        expect = [p.grad.copy() for p in params]
        lc = compiled(idx)
        assert le.item() == lc.item()
        for a, p in zip(expect, params):
            np.testing.assert_array_equal(a, p.grad)


def test_embedding_index_out_of_range_raises_on_replay():
    emb = nn.Embedding(10, 4)
    f = tg.compile(lambda i: emb(i).sum())
    f(np.array([[1, 2]]))
    with pytest.raises(IndexError, match="index 12 is out of range for a table of 10 rows"):
        f(np.array([[1, 12]]))


def test_replacing_a_parameter_array_retraces():
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    f = tg.compile(lambda x: (x * w).sum())
    assert f(np.ones(3, np.float32)).item() == 3
    assert f(np.ones(3, np.float32)).item() == 3
    w.data = np.full(3, 2, np.float32)  # rebinding (not updating in place) the parameter
    assert f(np.ones(3, np.float32)).item() == 6


def test_arguments_that_require_grad_are_refused():
    f = tg.compile(lambda x: (x * 2).sum())
    with pytest.raises(tg.TraceError, match="argument 0 requires grad"):
        f(tg.tensor(np.ones(3, np.float32), requires_grad=True))
    assert f(tg.tensor(np.ones(3, np.float32))).item() == 6


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_compiled_losses_equal_eager_for_every_reduction(reduction):
    rng = np.random.default_rng(3)
    w = tg.tensor(rng.normal(size=(6, 5)).astype(np.float32), requires_grad=True)

    def step(x, y, t):
        z = x @ w
        ce = nn.functional.cross_entropy(z, y, reduction=reduction)
        bce = nn.functional.binary_cross_entropy_with_logits(z, t, reduction=reduction)
        loss = ce.sum() + bce.sum()
        w.grad = None
        loss.backward()
        return ce, bce

    compiled = tg.compile(step)
    for _ in range(3):
        x = rng.normal(size=(7, 6)).astype(np.float32)
        y = rng.integers(0, 5, 7)
        t = rng.uniform(0, 1, (7, 5)).astype(np.float32)
        ce_e, bce_e = step(tg.tensor(x), y, t)
        grad_e = w.grad.copy()
        ce_c, bce_c = compiled(x, y, t)
        np.testing.assert_array_equal(ce_e.data, ce_c.data)
        np.testing.assert_array_equal(bce_e.data, bce_c.data)
        np.testing.assert_array_equal(grad_e, w.grad)
    plan = compiled.all_plans[0]
    into_buffers = {e.prim.name for e in plan.eqs if e.prim.writes_out}
    assert {"softmax_cross_entropy", "bce_with_logits", "ce_grad", "bce_grad"} <= into_buffers


def test_class_id_out_of_range_raises_on_replay():
    w = tg.tensor(np.ones((3, 4), np.float32), requires_grad=True)
    f = tg.compile(lambda x, y: nn.functional.cross_entropy(x @ w, y))
    f(np.ones((2, 3), np.float32), np.array([0, 3]))
    with pytest.raises(tg.ShapeError, match=r"class id 4 is out of range \[0, 4\)"):
        f(np.ones((2, 3), np.float32), np.array([4, 1]))


@pytest.mark.parametrize("shared", [False, True])
def test_bias_relu_fuses_only_when_the_sum_has_one_reader(shared):
    rng = np.random.default_rng(4)
    w = tg.tensor(rng.normal(size=(5, 6)).astype(np.float32), requires_grad=True)
    b = tg.tensor(rng.normal(size=6).astype(np.float32), requires_grad=True)

    def step(x):
        z = x @ w + b
        h = tg.relu(z)
        loss = (h * h).sum()
        if shared:
            loss = loss + z.sum()
        w.grad = b.grad = None
        loss.backward()
        return loss

    compiled = tg.compile(step)
    for n in (4, 4, 3):
        x = rng.normal(size=(n, 5)).astype(np.float32)
        le = step(tg.tensor(x))
        ge = [w.grad.copy(), b.grad.copy()]
        lc = compiled(x)
        assert le.item() == lc.item()
        np.testing.assert_array_equal(ge[0], w.grad)
        np.testing.assert_array_equal(ge[1], b.grad)
    plan = compiled.all_plans[0]
    names = [e.prim.name for e in plan.eqs]
    fused = "bias_relu" in names  # one equation over the add's inputs (x @ w, b)
    assert fused != shared
    assert ("relu" in names) == shared
    bias_adds = [e for e in plan.eqs if e.prim.name == "add" and e.ins[1][1] is b]
    assert len(bias_adds) == shared  # unshared, the add was dead code once fused


@pytest.mark.parametrize("clear", ["never", "sometimes"])
def test_gradients_accumulate_over_calls_like_eager(clear):
    # A plan computes a leaf's gradient straight into the leaf's .grad buffer; gradients that
    # accumulate over calls (no zero_grad) must still add up as in eager mode.
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    ws = [tg.tensor(w0.copy(), requires_grad=True) for _ in range(2)]

    def step(w, x):
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss

    compiled = tg.compile(lambda x: step(ws[1], x))
    for k in range(5):
        x = rng.normal(size=(5, 4)).astype(np.float32)
        if clear == "sometimes" and k == 2:
            ws[0].grad = ws[1].grad = None
        step(ws[0], tg.tensor(x))
        compiled(x)
        np.testing.assert_array_equal(ws[0].grad, ws[1].grad)
    assert ws[1].grad is not compiled.all_plans[0].leaf_grads[id(ws[1])]  # moved aside


def test_values_computed_in_the_step_are_read_on_every_replay():
    # argmax/argmin/all/any, a Tensor index computed in the step, detach(), and (values,
    # indices) returned from the step: none of them may be frozen at their traced values
    w = tg.tensor(np.arange(6.0, dtype=np.float32), requires_grad=True)
    running = tg.tensor(np.zeros(3, np.float32))

    def step(x):
        t = tg.tensor(x)
        picked = w[t.argmax(0)] + w[t.argmin(0)] * 2
        with tg.no_grad():
            running.add_(t.detach()[:3])
        return picked, t.max(dim=0), tg.all(t > 0.2), tg.any(t > 0.9), w[tg.argsort(t)[:2]]

    compiled = tg.compile(step)
    eager_running = np.zeros(3, np.float32)
    for k in range(4):
        x = np.random.default_rng(k).random(6).astype(np.float32)
        got = compiled(x)
        eager_running += x[:3]
        want = step(x)  # eager (after the compiled call: both update running the same way)
        eager_running += x[:3]
        assert got[0].item() == want[0].item() == 5 * 0 + float(x.argmax()) + 2 * float(x.argmin())
        assert got[1].indices.item() == x.argmax() and got[1].values.item() == x.max()
        assert got[2].item() == bool((x > 0.2).all()) and got[3].item() == bool((x > 0.9).any())
        np.testing.assert_array_equal(got[4].data, np.argsort(x, kind="stable")[:2])
    np.testing.assert_array_equal(running.data, eager_running)


def test_a_cast_copy_of_an_input_is_caught():
    w = tg.tensor(np.ones((3, 4), np.float32), requires_grad=True)

    @tg.compile
    def f(x, y):
        labels = y.data.astype(np.int64)  # escapes the trace: frozen at this call's labels
        return nn.functional.cross_entropy(x @ w, labels)

    with pytest.raises(tg.TraceError, match="constant equal to input 1"):
        f(np.ones((4, 3), np.float32), np.array([0, 3, 1, 2], np.int32))
