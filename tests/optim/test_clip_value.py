"""clip_grad_value_ against torch.nn.utils.clip_grad_value_, bit for bit, at the edges: NaN and
infinite gradients, -0.0, bounds of other dtypes, zero and huge bounds, missing gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import optim


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _grads(dtype):
    rng = np.random.default_rng(5)
    edge = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 0.25, -0.25, 1e-30], dtype)
    return [rng.normal(scale=2.0, size=(4, 3)).astype(dtype), edge, np.asarray(dtype(3.5))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    "clip_value",
    [0.25, 1.5, 1, 0.0, np.float64(0.1), np.float32(0.1), math.inf, 1e-35],
    ids=lambda v: repr(v),
)
def test_matches_torch_bit_for_bit(torch, dtype, clip_value):
    grads = _grads(dtype)
    mine = []
    for g in grads:
        p = tg.tensor(np.zeros_like(g), requires_grad=True)
        p.grad = g.copy()
        mine.append(p)
    mine.append(tg.tensor(np.zeros(2, dtype), requires_grad=True))  # no gradient: skipped
    theirs = []
    for g in grads:
        t = torch.zeros(g.shape, dtype=torch.from_numpy(g).dtype, requires_grad=True)
        t.grad = torch.from_numpy(g.copy())
        theirs.append(t)
    optim.clip_grad_value_(mine, clip_value)
    torch.nn.utils.clip_grad_value_(theirs, clip_value)
    for p, t in zip(mine, theirs):
        a, b = p.grad, t.grad.numpy()
        assert a.dtype == b.dtype == dtype
        np.testing.assert_array_equal(a, b)  # NaN where torch has NaN
        np.testing.assert_array_equal(np.signbit(a), np.signbit(b))  # -0.0 stays -0.0
    assert mine[-1].grad is None


def test_bound_beyond_the_dtype_clips_nothing():
    """PyTorch raises for 1e40 on float32 gradients; tapegrad clips nothing, silently."""
    g = np.array([0.5, -3e38, np.nan, np.inf, -np.inf], np.float32)
    p = tg.tensor(np.zeros(5, np.float32), requires_grad=True)
    p.grad = g.copy()
    with np.errstate(all="raise"):
        optim.clip_grad_value_(p, 1e40)
        optim.clip_grad_value_(p, 10**400)
    np.testing.assert_array_equal(p.grad, g)


@pytest.mark.parametrize(
    "bad,exc,match",
    [
        (-0.5, ValueError, "clip_value must be >= 0, got -0.5"),
        (float("nan"), ValueError, "clip_value must be >= 0, got nan"),
        (True, TypeError, "clip_value must be a number"),
        ("1", TypeError, "clip_value must be a number"),
    ],
)
def test_bad_clip_values(bad, exc, match):
    p = tg.tensor(np.zeros(2, np.float32), requires_grad=True)
    p.grad = np.ones(2, np.float32)
    with pytest.raises(exc, match=match):
        optim.clip_grad_value_([p], bad)
    np.testing.assert_array_equal(p.grad, np.ones(2, np.float32))
