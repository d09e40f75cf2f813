"""batch_norm, layer_norm, group_norm and their layers against torch (values, input and
parameter gradients, running statistics, float32 and float64), BatchNorm's buffers and
state_dict, compiled training steps updating the running statistics bit for bit as eager ones
do, float64 gradchecks, and errors naming the layer and the shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from nn_helpers import assert_compiled_equals_eager, compare_fn_with_torch, compare_with_torch

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.nn import functional as F


def _x(shape, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)


SHAPES = [(6, 4), (5, 4, 7), (3, 4, 5, 6)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_matches_torch(shape, dtype, affine):
    c = shape[1]
    rm0, rv0 = _x((c,), 1, dtype) * 0.1, np.abs(_x((c,), 2, dtype)) + 0.5
    ours_stats = [tg.tensor(rm0.copy()), tg.tensor(rv0.copy())]
    th_stats = [torch.tensor(rm0.copy()), torch.tensor(rv0.copy())]
    inputs = [_x(shape, dtype=dtype)] + ([_x((c,), 3, dtype), _x((c,), 4, dtype)] if affine else [])
    compare_fn_with_torch(
        lambda x, *wb: F.batch_norm(x, *ours_stats, *wb, training=True, momentum=0.3, eps=1e-3),
        lambda x, *wb: TF.batch_norm(x, *th_stats, *wb, training=True, momentum=0.3, eps=1e-3),
        inputs,
    )
    tol = 1e-12 if dtype == np.float64 else 1e-6
    for a, b in zip(ours_stats, th_stats):  # running mean, and the unbiased running variance
        np.testing.assert_allclose(a.data, b.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batch_norm_evaluation_matches_torch(shape, dtype):
    c = shape[1]
    rm, rv = _x((c,), 1, dtype), np.abs(_x((c,), 2, dtype)) + 0.5
    compare_fn_with_torch(
        lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False),
        lambda x, w, b: TF.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b),
        [_x(shape, dtype=dtype), _x((c,), 3, dtype), _x((c,), 4, dtype)],
    )


@pytest.mark.parametrize(
    "kind, shape",
    [("BatchNorm1d", (8, 3)), ("BatchNorm1d", (4, 3, 5)), ("BatchNorm2d", (4, 3, 5, 2))],
)
@pytest.mark.parametrize(
    "kw",
    [{}, {"momentum": None}, {"affine": False, "momentum": 0.5}, {"track_running_stats": False}],
    ids=str,
)
def test_batch_norm_layers_match_torch_over_steps(kind, shape, kw):
    th = getattr(torch.nn, kind)(3, **kw)
    ours = getattr(nn, kind)(3, **kw)
    assert list(ours.state_dict()) == list(th.state_dict())
    with torch.no_grad():
        for p in th.parameters():
            p.uniform_(0.5, 1.5)
    for step in range(3):
        compare_with_torch(ours, th, [_x(shape, seed=step, dtype=np.float32)])
        for name, want in th.state_dict().items():
            np.testing.assert_allclose(
                ours.state_dict()[name], want.numpy(), rtol=1e-5, atol=1e-6, err_msg=name
            )
    ours.eval(), th.eval()
    compare_with_torch(ours, th, [_x(shape, seed=9, dtype=np.float32)])
    if ours.track_running_stats:
        assert ours.num_batches_tracked.item() == 3 and ours.num_batches_tracked.dtype == np.int64


def test_batch_norm_buffers_and_state_dict():
    bn = nn.BatchNorm2d(3)
    assert [n for n, _ in bn.named_buffers()] == [
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    th = torch.nn.BatchNorm2d(3)
    th(torch.randn(4, 3, 2, 2))
    bn.load_state_dict({k: v.numpy() for k, v in th.state_dict().items()})
    np.testing.assert_array_equal(bn.running_var.data, th.running_var.numpy())
    assert bn.num_batches_tracked.item() == 1
    bn.to(np.float64)
    assert bn.running_mean.dtype == np.float64 and bn.num_batches_tracked.dtype == np.int64
    bn.reset_running_stats()
    assert bn.num_batches_tracked.item() == 0 and np.all(bn.running_var.data == 1)
    plain = nn.BatchNorm1d(3, track_running_stats=False)
    assert list(plain.state_dict()) == ["weight", "bias"] and plain.running_mean is None


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3 * 4 * 4, 2)
        self.bn1 = nn.BatchNorm1d(2, momentum=None)

    def forward(self, x):
        return self.bn1(self.fc(tg.flatten(self.bn(self.conv(x)), 1)))


def test_compiled_steps_update_running_statistics_as_eager_ones_do():
    nets = []
    for _ in range(2):
        tg.manual_seed(0)
        nets.append(_Net())
    opts = [optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in nets]

    def step(net, opt, x, y):
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def evaluate(net, x):
        return net(x).sum()

    train = tg.compile(lambda x, y: step(nets[1], opts[1], x, y))
    test = tg.compile(lambda x: evaluate(nets[1], x))
    rng = np.random.default_rng(0)
    for k in range(5):
        x = rng.standard_normal((6, 2, 6, 6)).astype(np.float32)
        y = rng.integers(0, 2, 6)
        for n in nets:
            n.train()
        assert step(nets[0], opts[0], tg.tensor(x), y).item() == train(x, y).item()
        for (name, a), (_, b) in zip(nets[0].state_dict().items(), nets[1].state_dict().items()):
            np.testing.assert_array_equal(a, b, err_msg=f"step {k}: {name}")
        for n in nets:
            n.eval()
        assert evaluate(nets[0], tg.tensor(x)).item() == test(x).item()
    assert nets[1].bn.num_batches_tracked.item() == 5
    np.testing.assert_array_equal(nets[1].bn1.num_batches_tracked.data, 5)
    assert len(train.all_plans) == 1  # switching modes between the two functions: no retrace


@pytest.mark.parametrize("normalized_shape", [5, (4, 5)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layer_norm_matches_torch(normalized_shape, dtype):
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    compare_fn_with_torch(
        lambda x, w, b: F.layer_norm(x, ns, w, b, eps=1e-4),
        lambda x, w, b: TF.layer_norm(x, ns, w, b, eps=1e-4),
        [_x((3, 4, 5), dtype=dtype), _x(ns, 1, dtype), _x(ns, 2, dtype)],
    )
    for kw in ({}, {"elementwise_affine": False}, {"bias": False}):
        th = torch.nn.LayerNorm(normalized_shape, **kw)
        ours = nn.LayerNorm(normalized_shape, **kw)
        compare_with_torch(ours, th, [_x((3, 4, 5), dtype=np.float32)])


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("shape", [(3, 6), (3, 6, 5), (2, 6, 3, 4)])
def test_group_norm_matches_torch(groups, shape):
    compare_fn_with_torch(
        lambda x, w, b: F.group_norm(x, groups, w, b),
        lambda x, w, b: TF.group_norm(x, groups, w, b),
        [_x(shape), _x((6,), 1), _x((6,), 2)],
    )
    if np.prod(shape[1:]) == groups:
        return  # one value per group: float32 output is (x - mean) rounding noise / sqrt(eps)
    for affine in (True, False):
        compare_with_torch(
            nn.GroupNorm(groups, 6, affine=affine),
            torch.nn.GroupNorm(groups, 6, affine=affine),
            [_x(shape, dtype=np.float32)],
        )


def test_gradchecks():
    x = _x((4, 3, 2))
    w, b = _x((3,), 1), _x((3,), 2)
    tg.gradcheck(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)
    tg.gradcheck(lambda x, w, b: F.layer_norm(x, (3, 2), w, b), x, _x((3, 2), 1), _x((3, 2), 2))
    tg.gradcheck(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b)


def test_errors_name_the_layer_and_shapes():
    with pytest.raises(tg.ShapeError, match=r"BatchNorm2d\(3.*\(N, 3, H, W\).*\(4, 3, 5\)"):
        nn.BatchNorm2d(3)(tg.tensor(_x((4, 3, 5))))
    with pytest.raises(tg.ShapeError, match=r"BatchNorm1d\(3.*\(N, 3\) or \(N, 3, L\).*\(4, 2\)"):
        nn.BatchNorm1d(3)(tg.tensor(_x((4, 2))))
    with pytest.raises(ValueError, match=r"more than 1 value per channel.*\(1, 3\)"):
        nn.BatchNorm1d(3, dtype=np.float64)(tg.tensor(_x((1, 3))))
    with pytest.raises(tg.ShapeError, match=r"LayerNorm\(\(5,\).*\(\.\.\., 5\).*\(3, 4\)"):
        nn.LayerNorm(5)(tg.tensor(_x((3, 4))))
    with pytest.raises(tg.ShapeError, match=r"GroupNorm\(2, 6.*\(N, 6, \.\.\.\).*\(3, 4\)"):
        nn.GroupNorm(2, 6)(tg.tensor(_x((3, 4))))
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    with pytest.raises(tg.ShapeError, match=r"batch_norm: weight must have shape \(3,\)"):
        F.batch_norm(_x((4, 3)), None, None, _x((4,)), training=True)
    with pytest.raises(ValueError, match="evaluation.*running_mean"):
        F.batch_norm(_x((4, 3)), None, None)


def test_layer_and_group_norm_compiled_equal_eager():
    ln, gn = nn.LayerNorm((4, 5)), nn.GroupNorm(2, 4)
    for p in (*ln.parameters(), *gn.parameters()):
        p.data[...] = _x(p.shape, 3, np.float32)

    def f(x):
        return (ln(x) * gn(x)).sum() + (F.layer_norm(x, (5,)) ** 2).mean()

    calls = [[_x((3, 4, 5), k, np.float32)] for k in range(3)]
    assert_compiled_equals_eager(f, [*ln.parameters(), *gn.parameters()], calls)
