"""The regression, probability and likelihood losses against PyTorch (values and gradients,
float64), and their modules."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5)) * 2
T = RNG.standard_normal((4, 5)) * 2
P = RNG.uniform(0.02, 0.98, (4, 5))
Y = RNG.uniform(0, 1, (4, 5))
LOGP = np.log(np.exp(X) / np.exp(X).sum(axis=1, keepdims=True))
Q = np.exp(T) / np.exp(T).sum(axis=1, keepdims=True)
Q[0, 1] = 0.0  # a zero target probability contributes nothing to the KL divergence

CASES = {
    "l1": (
        lambda x, r: F.l1_loss(x, T, reduction=r),
        lambda x, r: TF.l1_loss(x, torch.tensor(T), reduction=r),
        X,
    ),
    "smooth_l1": (
        lambda x, r: F.smooth_l1_loss(x, T, reduction=r, beta=0.7),
        lambda x, r: TF.smooth_l1_loss(x, torch.tensor(T), reduction=r, beta=0.7),
        X,
    ),
    "huber": (
        lambda x, r: F.huber_loss(x, T, reduction=r, delta=1.3),
        lambda x, r: TF.huber_loss(x, torch.tensor(T), reduction=r, delta=1.3),
        X,
    ),
    "bce": (
        lambda x, r: F.binary_cross_entropy(x, Y, reduction=r),
        lambda x, r: TF.binary_cross_entropy(x, torch.tensor(Y), reduction=r),
        P,
    ),
    "kl": (
        lambda x, r: F.kl_div(x, Q, reduction=r),
        lambda x, r: TF.kl_div(x, torch.tensor(Q), reduction=r),
        LOGP,
    ),
    "kl_log_target": (
        lambda x, r: F.kl_div(x, np.log(Q + 1e-3), reduction=r, log_target=True),
        lambda x, r: TF.kl_div(x, torch.tensor(np.log(Q + 1e-3)), reduction=r, log_target=True),
        LOGP,
    ),
    "mse": (
        lambda x, r: F.mse_loss(x, T, reduction=r),
        lambda x, r: TF.mse_loss(x, torch.tensor(T), reduction=r),
        X,
    ),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_losses_match_torch(name, reduction):
    f, tf, x0 = CASES[name]
    w = RNG.standard_normal(x0.shape) if reduction == "none" else None
    x = tg.tensor(x0, requires_grad=True)
    y = f(x, reduction)
    (y * tg.tensor(w) if w is not None else y).sum().backward()
    tx = torch.tensor(x0, requires_grad=True)
    with warnings.catch_warnings():  # PyTorch warns that its kl_div "mean" will change meaning
        warnings.simplefilter("ignore", UserWarning)
        ty = tf(tx, reduction)
    (ty * torch.tensor(w) if w is not None else ty).sum().backward()
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_kl_batchmean_and_bce_clamp():
    x = tg.tensor(LOGP, requires_grad=True)
    got = F.kl_div(x, Q, reduction="batchmean")
    want = TF.kl_div(torch.tensor(LOGP), torch.tensor(Q), reduction="batchmean")
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    edge = np.array([0.0, 1.0, 0.5])
    got = F.binary_cross_entropy(tg.tensor(edge), np.array([1.0, 0.0, 1.0]), reduction="none")
    want = TF.binary_cross_entropy(
        torch.tensor(edge), torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64), reduction="none"
    )
    np.testing.assert_allclose(got.data, want.numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_with_weights_and_ignore_index(reduction):
    ids = np.array([0, 3, -100, 4])
    weight = np.array([0.5, 1.0, 2.0, 1.5, 0.25])
    x = tg.tensor(LOGP, requires_grad=True)
    y = F.nll_loss(x, ids, weight=weight, reduction=reduction)
    y.sum().backward()
    tx = torch.tensor(LOGP, requires_grad=True)
    ty = TF.nll_loss(tx, torch.tensor(ids), weight=torch.tensor(weight), reduction=reduction)
    ty.sum().backward()
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-12)
    with pytest.raises(IndexError, match="label 5 is out of range for 5 classes"):
        F.nll_loss(tg.tensor(LOGP), np.array([0, 1, 2, 5]))


def test_cosine_similarity_matches_torch():
    x = tg.tensor(X, requires_grad=True)
    y = F.cosine_similarity(x, tg.tensor(T), axis=1)
    y.sum().backward()
    tx = torch.tensor(X, requires_grad=True)
    ty = TF.cosine_similarity(tx, torch.tensor(T), dim=1)
    ty.sum().backward()
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_loss_modules_call_the_functions():
    x = tg.tensor(X)
    assert nn.L1Loss()(x, T).item() == F.l1_loss(x, T).item()
    assert nn.SmoothL1Loss(beta=0.5)(x, T).item() == F.smooth_l1_loss(x, T, beta=0.5).item()
    assert nn.HuberLoss("sum", 2.0)(x, T).item() == F.huber_loss(x, T, "sum", 2.0).item()
    assert nn.BCELoss()(tg.tensor(P), Y).item() == F.binary_cross_entropy(tg.tensor(P), Y).item()
    assert nn.KLDivLoss(reduction="batchmean")(tg.tensor(LOGP), Q).item() == pytest.approx(
        F.kl_div(tg.tensor(LOGP), Q, reduction="batchmean").item()
    )
    ids = np.array([1, 2, 0, 4])
    assert nn.NLLLoss()(tg.tensor(LOGP), ids).item() == F.nll_loss(tg.tensor(LOGP), ids).item()
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.KLDivLoss(reduction="avg")
