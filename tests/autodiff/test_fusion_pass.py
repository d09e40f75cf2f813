"""The fusion pass (``plan/fusion.py``): a table-driven rewrite of every plan's equation list.

What proves a fused plan equals the unfused one is here, not a check at run time: each pattern
of the table, on inputs full of zeros, negative values and ties (max-pooling windows whose
maximum appears twice, ReLU inputs exactly 0), fused in a plan and unfused in eager mode, bit
for bit; in forward-only plans, training plans and plans that differentiate twice."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.autodiff.plan.fusion import FUSIONS


def _ties(rng, shape, dtype):
    """Values from {-2, -1, 0, 1, 2} / 4: zeros, negatives and ties everywhere."""
    return (rng.integers(-2, 3, size=shape) / 4).astype(dtype)


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _replays_match_eager(step, params, draws) -> tg.CompiledFunction:
    """Compile ``step`` and, for each argument tuple ``draws`` yields, check the compiled call's
    loss and every parameter's gradient against an eager call's, bit for bit."""
    f = tg.compile(step)
    for args in draws:
        eager_loss = step(*args).data.copy()
        eager = [p.grad.copy() for p in params]
        assert _bits(f(*args).data) == _bits(eager_loss)
        for p, g in zip(params, eager):
            assert _bits(p.grad) == _bits(g)
    return f


def _mlp():
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def _cnn(dims: int):
    conv, pool = (nn.Conv1d, nn.MaxPool1d) if dims == 1 else (nn.Conv2d, nn.MaxPool2d)
    return nn.Sequential(conv(2, 3, 3), nn.ReLU(), pool(2), nn.Flatten())


def _bn():
    # BatchNorm in training (its running statistics fused in too) then ReLU; a bias of 0 and
    # inputs of ties put normalised values at exactly 0
    return nn.Sequential(nn.Conv2d(2, 3, 3, bias=False), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten())


def _inputs(kind: str, rng, dtype):
    return {
        "mlp": (_ties(rng, (7, 6), dtype),),
        "cnn1": (_ties(rng, (4, 2, 9), dtype),),
        "cnn2": (_ties(rng, (4, 2, 8, 8), dtype),),
        "bn": (_ties(rng, (4, 2, 6, 6), dtype),),
    }[kind]


MODELS = {"mlp": _mlp, "cnn1": lambda: _cnn(1), "cnn2": lambda: _cnn(2), "bn": _bn}
FUSED = {"mlp": ("bias_relu", "bias_relu_backward"), "cnn1": ("relu_max_pool",) * 2}
FUSED["cnn1"] = ("relu_max_pool", "relu_max_pool_backward")
FUSED["cnn2"] = FUSED["cnn1"]
FUSED["bn"] = ("batch_norm_relu_train_moments", "batch_norm_relu_backward")


def _model(kind, dtype):
    tg.manual_seed(0)
    m = MODELS[kind]()
    rng = np.random.default_rng(1)
    for p in m.parameters():  # weights of ties too, so that pre-activations hit 0 exactly
        p.data[...] = _ties(rng, p.shape, p.data.dtype)
    return m.to(dtype=dtype) if dtype != np.float32 else m


def _names(plan) -> list[str]:
    return [e.prim.name for e in plan.eqs]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_forward_only_plans_fuse_and_match_eager(kind, dtype):
    model = _model(kind, dtype)
    f = tg.compile(lambda x: model(x))
    rng = np.random.default_rng(2)
    for _ in range(4):
        (x,) = _inputs(kind, rng, dtype)
        assert _bits(f(x).data) == _bits(model(x).data)
    names = _names(f.all_plans[0])
    assert FUSED[kind][0] in names and "relu" not in names


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_training_plans_fuse_both_ways_and_match_eager(kind, dtype):
    model = _model(kind, dtype)
    params = list(model.parameters())

    def step(x, w):
        for p in params:
            p.grad = None
        loss = (model(x) * w).sum()
        loss.backward()
        return loss

    rng = np.random.default_rng(3)

    def draws():
        for _ in range(4):
            (x,) = _inputs(kind, rng, dtype)
            yield x, _ties(rng, model(x).shape, dtype)

    f = _replays_match_eager(step, params, draws())
    names = _names(f.all_plans[0])
    assert all(n in names for n in FUSED[kind]), names
    assert not {"relu", "relu_backward", "greater", "where", "max_pool_backward"} & set(names)


def test_plans_that_differentiate_twice_run_the_pass_and_match_eager():
    """A gradient penalty (create_graph): the pass runs on the plan; where the second-order
    equations read a pattern's intermediate values the rule leaves that pattern alone."""
    model = _model("mlp", np.float64)
    params = list(model.parameters())

    def step(x):
        for p in params:
            p.grad = None
        xt = tg.tensor(x, requires_grad=True)
        out = model(xt)
        (gx,) = tg.gradients(out.sum(), [xt], create_graph=True)
        loss = out.sum() + (gx * gx).sum()
        loss.backward()
        return loss

    rng = np.random.default_rng(4)
    _replays_match_eager(step, params, (_inputs("mlp", rng, np.float64) for _ in range(3)))


def test_an_intermediate_read_elsewhere_is_not_fused():
    model = _model("mlp", np.float32)
    lin, act = model[0], model[1]
    f = tg.compile(lambda x: (lin(x), act(lin(x))))  # the pre-activation is returned too
    x = _ties(np.random.default_rng(5), (7, 6), np.float32)
    h, y = f(x)
    assert _bits(y.data) == _bits(act(lin(x)).data)
    assert _bits(h.data) == _bits(lin(x).data)


def test_the_table_names_every_rule_once():
    anchors = [a for a, _ in FUSIONS]
    assert anchors == ["batch_moments", "conv_weight", "max_pool1d", "max_pool2d", "relu"]


def test_a_channels_last_convolutions_two_gradients_fuse_and_match_eager():
    """The text CNN's pattern: embeddings permuted into a Conv1d (a channels-last input), ReLU
    and max pooling, so the output gradient is sparse and both of the convolution's gradients
    take the direct kernel: one pass of it (conv_grads) in the plan, eager's bits."""
    tg.manual_seed(0)
    emb, conv = nn.Embedding(40, 6), nn.Conv1d(6, 4, 3)
    pool = nn.MaxPool1d(4)
    params = [*emb.parameters(), *conv.parameters()]

    def step(ids, w):
        for p in params:
            p.grad = None
        h = conv(emb(ids).permute(0, 2, 1))
        loss = (pool(h.relu()) * w).sum()
        loss.backward()
        return loss

    rng = np.random.default_rng(6)
    draws = (
        (rng.integers(0, 40, (5, 18)), rng.standard_normal((5, 4, 4)).astype(np.float32))
        for _ in range(4)
    )
    f = _replays_match_eager(step, params, draws)
    names = _names(f.all_plans[0])
    assert "conv_grads" in names and "conv_weight" not in names
