"""Loss modules: callable wrappers of the functional losses with a fixed ``reduction``."""

from __future__ import annotations

from ..autodiff.tensor import Tensor
from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        F._check_reduction(type(self).__name__, reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits ``(N, C)`` against int labels ``(N,)`` or probability
    rows ``(N, C)``; see :func:`tapegrad.nn.functional.cross_entropy`."""

    def forward(self, logits: Tensor, target) -> Tensor:
        return F.cross_entropy(logits, target, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy on logits; see
    :func:`tapegrad.nn.functional.binary_cross_entropy_with_logits`."""

    def forward(self, logits: Tensor, target) -> Tensor:
        return F.binary_cross_entropy_with_logits(logits, target, self.reduction)


class MSELoss(_Loss):
    """Mean squared error; see :func:`tapegrad.nn.functional.mse_loss`."""

    def forward(self, input: Tensor, target) -> Tensor:
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """Mean absolute error; see :func:`tapegrad.nn.functional.l1_loss`."""

    def forward(self, input: Tensor, target) -> Tensor:
        return F.l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    """Smooth L1; see :func:`tapegrad.nn.functional.smooth_l1_loss`."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input: Tensor, target) -> Tensor:
        return F.smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    """Huber loss; see :func:`tapegrad.nn.functional.huber_loss`."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input: Tensor, target) -> Tensor:
        return F.huber_loss(input, target, self.reduction, self.delta)


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities; see
    :func:`tapegrad.nn.functional.binary_cross_entropy`."""

    def forward(self, input: Tensor, target) -> Tensor:
        return F.binary_cross_entropy(input, target, self.reduction)


class KLDivLoss(Module):
    """KL divergence of log-probabilities; see :func:`tapegrad.nn.functional.kl_div`."""

    def __init__(self, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__()
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise ValueError(f"KLDivLoss: unknown reduction {reduction!r}")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input: Tensor, target) -> Tensor:
        return F.kl_div(input, target, self.reduction, self.log_target)


class NLLLoss(_Loss):
    """Negative log-likelihood of class ids; see :func:`tapegrad.nn.functional.nll_loss`."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, log_probs: Tensor, target) -> Tensor:
        return F.nll_loss(log_probs, target, self.weight, self.ignore_index, self.reduction)
