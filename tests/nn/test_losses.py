"""Losses against torch: values and gradients for every reduction, both target kinds, and
clear errors for bad labels and shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F

RTOL, ATOL = 1e-5, 1e-6


def _x(shape, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _check(ours_fn, theirs_fn, logits, target, target_grad=False):
    a = tg.tensor(logits, requires_grad=True)
    b = torch.tensor(logits, requires_grad=True)
    ta = tg.tensor(target, requires_grad=True) if target_grad else target
    tb = torch.tensor(  # torch wants int64 labels; ours take any integer dtype
        target.astype(np.int64) if target.dtype.kind in "iu" else target, requires_grad=target_grad
    )
    la, lb = ours_fn(a, ta), theirs_fn(b, tb)
    np.testing.assert_allclose(la.data, lb.detach().numpy(), rtol=RTOL, atol=ATOL)
    v = np.random.default_rng(5).standard_normal(la.shape).astype(np.float32)
    (la * v).sum().backward()
    (lb * torch.from_numpy(v)).sum().backward()
    np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=RTOL, atol=ATOL)
    if target_grad:
        np.testing.assert_allclose(ta.grad, tb.grad.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_int_labels(reduction):
    labels = np.array([0, 3, 3, 1, 4, 2])
    _check(
        lambda a, t: F.cross_entropy(a, t, reduction=reduction),
        lambda b, t: TF.cross_entropy(b, t, reduction=reduction),
        _x((6, 5)),
        labels,
    )
    _check(
        lambda a, t: nn.CrossEntropyLoss(reduction=reduction)(a, t),
        lambda b, t: torch.nn.CrossEntropyLoss(reduction=reduction)(b, t),
        _x((6, 5), seed=1),
        labels.astype(np.int32),
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probability_targets(reduction):
    p = np.random.default_rng(2).dirichlet(np.ones(5), size=6).astype(np.float32)
    _check(
        lambda a, t: F.cross_entropy(a, t, reduction=reduction),
        lambda b, t: TF.cross_entropy(b, t, reduction=reduction),
        _x((6, 5)),
        p,
    )
    onehot = np.eye(5, dtype=np.float32)[[1, 0, 4, 4, 2, 3]]
    _check(
        lambda a, t: F.cross_entropy(a, t, reduction=reduction),
        lambda b, t: TF.cross_entropy(b, t, reduction=reduction),
        _x((6, 5), seed=3),
        onehot,
    )


def test_cross_entropy_large_logits_are_stable():
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    _check(F.cross_entropy, TF.cross_entropy, logits, np.array([2, 1]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits(reduction):
    t = np.random.default_rng(4).integers(0, 2, (4, 3)).astype(np.float32)
    _check(
        lambda a, tt: F.binary_cross_entropy_with_logits(a, tt, reduction=reduction),
        lambda b, tt: TF.binary_cross_entropy_with_logits(b, tt, reduction=reduction),
        _x((4, 3), scale=10.0),
        t,
    )
    _check(
        lambda a, tt: nn.BCEWithLogitsLoss(reduction=reduction)(a, tt),
        lambda b, tt: torch.nn.BCEWithLogitsLoss(reduction=reduction)(b, tt),
        _x((7, 1)),
        np.random.default_rng(6).uniform(size=(7, 1)).astype(np.float32),
    )


def test_bce_accepts_integer_targets():
    a = tg.tensor(_x((5,)))
    t = np.array([0, 1, 1, 0, 1])
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(a, t).data,
        F.binary_cross_entropy_with_logits(a, t.astype(np.float32)).data,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse(reduction):
    _check(
        lambda a, t: F.mse_loss(a, t, reduction=reduction),
        lambda b, t: TF.mse_loss(b, t, reduction=reduction),
        _x((4, 3)),
        _x((4, 3), seed=9),
        target_grad=True,
    )
    assert repr(nn.MSELoss(reduction="sum")) == "MSELoss(reduction='sum')"


def test_loss_errors():
    logits = tg.tensor(_x((4, 3)))
    with pytest.raises(IndexError, match=r"label 3 is out of range for 3 classes"):
        F.cross_entropy(logits, np.array([0, 1, 3, 2]))
    with pytest.raises(IndexError, match=r"label -1"):
        nn.CrossEntropyLoss()(logits, np.array([0, -1, 1, 2]))
    with pytest.raises(tg.ShapeError, match=r"shape \(4,\).*\(4, 3\).*\(5,\)"):
        F.cross_entropy(logits, np.array([0, 1, 2, 2, 1]))
    with pytest.raises(tg.ShapeError, match=r"logits' shape \(4, 3\), got \(4, 2\)"):
        F.cross_entropy(logits, np.zeros((4, 2), np.float32))
    with pytest.raises(tg.ShapeError, match=r"labels must have shape \(\) .*\(4,\), got \(1,\)"):
        F.cross_entropy(tg.tensor(_x((4,))), np.array([0]))
    with pytest.raises(tg.ShapeError, match=r"logits must be \(N, C\)"):
        F.cross_entropy(tg.tensor(np.float32(1.0)), np.array(0))
    with pytest.raises(TypeError, match="integer labels or float"):
        F.cross_entropy(logits, np.array(["a", "b", "c", "d"]))
    with pytest.raises(tg.ShapeError, match=r"target shape \(4,\) differs from logits \(4, 1\)"):
        nn.BCEWithLogitsLoss()(tg.tensor(_x((4, 1))), np.zeros(4, np.float32))
    with pytest.raises(tg.ShapeError, match=r"mse_loss: target shape \(3,\)"):
        F.mse_loss(tg.tensor(_x((3, 1))), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(
        TypeError,
        match=r"MSELoss: size_average is PyTorch's deprecated flag.*"
        r"reduction=",
    ):
        nn.MSELoss("sum")  # PyTorch's first argument is size_average, not reduction
    with pytest.raises(TypeError, match="cross_entropy: weight must be class weights.*reduction="):
        F.cross_entropy(logits, np.array([0, 1, 2, 0]), "sum")
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, np.array([0, 1, 2, 0]), reduction="max")
