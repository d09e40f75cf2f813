"""Losses of a float32 model against float64 targets (and back) follow PyTorch (issue 26):
``mse_loss``, ``l1_loss``, ``smooth_l1_loss``, ``kl_div`` and
``binary_cross_entropy_with_logits`` compute in the wider dtype and return the input's
gradient in its own dtype; ``binary_cross_entropy`` and ``huber_loss``, which PyTorch
refuses, are refused with the dtypes named."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

LOSSES = [
    "cross_entropy",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "kl_div",
    "binary_cross_entropy_with_logits",
]


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")  # kl_div's own advice
@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_float32_input_float64_target_promotes_like_torch(name, reduction):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    t = rng.random((5, 3))  # float64 (class probabilities for cross_entropy)
    ours_x = tg.tensor(x, requires_grad=True)
    theirs_x = torch.tensor(x, requires_grad=True)
    ours = getattr(F, name)(ours_x, tg.tensor(t), reduction=reduction)
    theirs = getattr(TF, name)(theirs_x, torch.tensor(t), reduction=reduction)
    assert ours.dtype == np.float64 and theirs.dtype == torch.float64
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-6)
    ours.sum().backward()
    theirs.sum().backward()
    assert ours_x.grad.dtype == np.float32
    np.testing.assert_allclose(ours_x.grad, theirs_x.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "kl_div"])
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
def test_float64_input_float32_target_computes_in_float64(name):
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal(6), rng.random(6).astype(np.float32)
    ours = getattr(F, name)(tg.tensor(x), t)  # a NumPy target, too
    # PyTorch takes kl_div's log(target) in float32 first (~1e-8 off): compare with the
    # target already widened, which is what tapegrad computes
    theirs = getattr(TF, name)(torch.tensor(x), torch.tensor(t).double())
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["binary_cross_entropy", "huber_loss"])
def test_losses_torch_refuses_are_refused(name):
    x = tg.tensor(np.full(3, 0.5, np.float32))
    with pytest.raises(tg.DTypeError, match=f"{name}: target has dtype float64, input has float32"):
        getattr(F, name)(x, np.ones(3))
