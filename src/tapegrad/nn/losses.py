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
