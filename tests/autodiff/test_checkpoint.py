"""Gradient checkpointing: the same gradients as a plain backward (dropout included), eager and
compiled, with only the segments' inputs kept in the graph."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.autodiff.graph import toposort


def _blocks(n=4, width=16, p=0.25):
    tg.manual_seed(0)
    return [
        nn.Sequential(
            nn.Linear(width, width), nn.Tanh(), nn.Dropout(p, rng=np.random.default_rng(k))
        )
        for k in range(n)
    ]


def _forward(blocks, x, ck):
    h = x
    for b in blocks:
        h = tg.checkpoint(b, h) if ck else b(h)
    return (h * h).mean()


def test_checkpointed_gradients_equal_plain_ones_with_dropout():
    x0 = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    results = []
    for ck in (False, True):
        blocks = _blocks()
        x = tg.tensor(x0, requires_grad=True)
        _forward(blocks, x, ck).backward()
        results.append([x.grad] + [p.grad for b in blocks for p in b.parameters()])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_the_graph_keeps_only_segment_boundaries():
    blocks = _blocks(n=6)
    x = tg.tensor(np.ones((2, 16), np.float32))
    plain, ck = _forward(blocks, x, False), _forward(blocks, x, True)
    inner = [t for t in toposort(ck) if t._node is not None]
    assert sorted({t._node.prim.name for t in inner}) == ["checkpoint", "mean", "mul"]
    assert len(inner) == 6 + 2
    assert len([t for t in toposort(plain) if t._node is not None]) > 6 * 4


def test_gradients_reach_parameters_through_a_checkpoint():
    x = tg.tensor(np.ones((2, 16), np.float32))
    blocks = _blocks(n=2)
    params = [p for b in blocks for p in b.parameters()]
    grads = tg.gradients(_forward(blocks, x, True), params)
    blocks = _blocks(n=2)  # the same weights and dropout generators, drawn afresh
    _forward(blocks, x, False).backward()
    for g, p in zip(grads, [p for b in blocks for p in b.parameters()]):
        np.testing.assert_array_equal(g.data, p.grad)


def test_compiled_training_with_checkpoints_equals_eager():
    def train(compiled, ck):
        blocks = _blocks(n=3)
        params = [p for b in blocks for p in b.parameters()]
        opt = optim.SGD(params, lr=0.1)
        rng = np.random.default_rng(2)
        x = rng.standard_normal((8, 16)).astype(np.float32)

        def step(x):
            loss = _forward(blocks, tg.tensor(x), ck)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        f = tg.compile(step) if compiled else step
        losses = [f(x).item() for _ in range(4)]
        if compiled:  # each segment is one equation each way: nothing inside it is recorded
            names = [e.prim.name for plan in f.all_plans for e in plan.eqs]
            assert names.count("checkpoint") == names.count("checkpoint_backward") == 3
            assert not {"matmul", "tanh", "dropout_mask"} & set(names), names
        return losses, [p.data.copy() for p in params]

    (lp, pp), (lc, pc) = train(False, False), train(True, True)
    assert lp == lc
    for a, b in zip(pp, pc):
        np.testing.assert_array_equal(a, b)


def test_mistakes_are_named():
    x = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(TypeError, match="must return one Tensor"):
        tg.checkpoint(lambda t: (t, t), x)
    with pytest.raises(TypeError, match="argument 1 is a float"):
        tg.checkpoint(lambda t, s: t * s, x, 2.0)
    assert tg.checkpoint(lambda t, s: t * s, x, s=2.0).data.tolist() == [2.0, 2.0, 2.0]
    y = tg.checkpoint(lambda t: t * t, x).sum()
    with pytest.raises(tg.GraphError, match="checkpoint: its gradient cannot be differentiated"):
        tg.gradients(y, [x], create_graph=True)
