"""Gradient clipping against torch.nn.utils, and its handling of NaN/inf and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import optim


def _pair(seed, scale, dtype=np.float32):
    rng = np.random.default_rng(seed)
    grads = [rng.normal(scale=scale, size=s).astype(dtype) for s in [(4, 3), (5,), ()]]
    mine = []
    for g in grads:
        p = tg.tensor(np.zeros_like(g), requires_grad=True)
        p.grad = g.copy()
        mine.append(p)
    theirs = []
    for g in grads:
        t = torch.zeros(g.shape, dtype=torch.from_numpy(g).dtype, requires_grad=True)
        t.grad = torch.from_numpy(g.copy())
        theirs.append(t)
    return mine, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])  # clipped, and left alone
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    mine, theirs = _pair(0, 2.0)
    total = optim.clip_grad_norm_(mine, max_norm, norm_type)
    ref = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(total, float)
    assert total == pytest.approx(ref.item(), rel=1e-6)
    for p, t in zip(mine, theirs):
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-6, atol=1e-7)
    if max_norm < total:  # the clipped gradients have the requested norm
        flat = np.concatenate([p.grad.ravel() for p in mine]).astype(np.float64)
        assert np.linalg.norm(flat, norm_type) == pytest.approx(max_norm, rel=1e-5)


def test_clip_grad_norm_ignores_missing_grads_and_huge_values():
    a = tg.tensor(np.zeros(3, np.float32), requires_grad=True)
    b = tg.tensor(np.zeros(3, np.float32), requires_grad=True)
    a.grad = np.array([3e20, 4e20, 0], np.float32)  # squares overflow float32
    total = optim.clip_grad_norm_([a, b], 1.0)
    assert total == pytest.approx(5e20, rel=1e-6)
    np.testing.assert_allclose(a.grad, [0.6, 0.8, 0], rtol=1e-5)
    assert b.grad is None
    assert optim.clip_grad_norm_([b], 1.0) == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_clip_grad_norm_nonfinite(bad):
    mine, _ = _pair(1, 1.0)
    mine[1].grad[2] = bad
    before = [p.grad.copy() for p in mine]
    total = optim.clip_grad_norm_(mine, 0.1)
    assert math.isnan(total) if np.isnan(bad) else total == math.inf
    for p, g in zip(mine, before):  # left unchanged, so the caller can skip the step
        np.testing.assert_array_equal(p.grad, g)
    with pytest.raises(FloatingPointError, match=r"non-finite gradients in parameter\(s\) \[1\]"):
        optim.clip_grad_norm_(mine, 0.1, error_if_nonfinite=True)
    # NaN in a later parameter than a larger finite norm is still seen
    mine[0].grad[...] = 1e6
    assert not math.isfinite(optim.clip_grad_norm_(mine, 0.1, norm_type=math.inf))


def test_clip_grad_value_matches_torch():
    mine, theirs = _pair(2, 3.0)
    optim.clip_grad_value_(mine, 1.5)
    torch.nn.utils.clip_grad_value_(theirs, 1.5)
    for p, t in zip(mine, theirs):
        np.testing.assert_array_equal(p.grad, t.grad.numpy())
    assert max(np.abs(p.grad).max() for p in mine) == np.float32(1.5)


def test_clip_bad_input():
    p = tg.tensor(np.zeros(2, np.float32), requires_grad=True)
    p.grad = np.ones(2, np.float32)
    with pytest.raises(ValueError, match="max_norm must be >= 0"):
        optim.clip_grad_norm_([p], -1.0)
    with pytest.raises(ValueError, match="norm_type must be > 0"):
        optim.clip_grad_norm_([p], 1.0, norm_type=0)
    with pytest.raises(ValueError, match="clip_value must be >= 0"):
        optim.clip_grad_value_([p], -1.0)
    with pytest.raises(TypeError, match="parameter 0 is a ndarray"):
        optim.clip_grad_norm_([np.ones(2)], 1.0)
    # a single Tensor is accepted
    assert optim.clip_grad_norm_(p, 1.0) == pytest.approx(math.sqrt(2))
