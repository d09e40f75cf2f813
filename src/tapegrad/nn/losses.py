"""Loss modules: callable wrappers of the functional losses (:mod:`tapegrad.nn.functional`)
with PyTorch's constructor arguments, in PyTorch's order, including the deprecated
``size_average``/``reduce`` flags (a string given where one of them stands is refused, naming
``reduction=``)."""

from __future__ import annotations

from ..autodiff.tensor import Tensor
from . import functional as F
from ._functional.losses import legacy_reduction
from .module import Module


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = legacy_reduction(type(self).__name__, size_average, reduce, reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean") -> None:
        super().__init__(size_average, reduce, reduction)
        if isinstance(weight, str):
            raise TypeError(
                f"{type(self).__name__}: weight must be an array, got the string {weight!r}; "
                f"pass reduction=... by keyword"
            )
        self.weight = weight


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross-entropy of logits ``(N, C)`` / ``(N, C, d1, ...)`` against class ids or
    probabilities; see :func:`tapegrad.nn.functional.cross_entropy`."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = int(ignore_index), float(label_smoothing)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.cross_entropy(
            input,
            target,
            self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class ids; see :func:`tapegrad.nn.functional.nll_loss`."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = int(ignore_index)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.nll_loss(
            input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction
        )


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities; see
    :func:`tapegrad.nn.functional.binary_cross_entropy`."""

    def forward(self, input: Tensor, target) -> Tensor:
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Sigmoid + binary cross-entropy on logits, with per-entry ``weight`` and per-class
    ``pos_weight``; see :func:`tapegrad.nn.functional.binary_cross_entropy_with_logits`."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
        pos_weight=None,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.pos_weight = pos_weight

    def forward(self, input: Tensor, target) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight
        )


class MSELoss(_Loss):
    """Mean squared error; see :func:`tapegrad.nn.functional.mse_loss`."""

    def forward(self, input: Tensor, target) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error; see :func:`tapegrad.nn.functional.l1_loss`."""

    def forward(self, input: Tensor, target) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Smooth L1; see :func:`tapegrad.nn.functional.smooth_l1_loss`."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = float(beta)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Huber loss; see :func:`tapegrad.nn.functional.huber_loss`."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = float(delta)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(Module):
    """KL divergence of log-probabilities; see :func:`tapegrad.nn.functional.kl_div`."""

    def __init__(
        self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False
    ) -> None:
        super().__init__()
        if reduction != "batchmean":
            reduction = legacy_reduction("KLDivLoss", size_average, reduce, reduction)
        self.reduction, self.log_target = reduction, bool(log_target)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CosineEmbeddingLoss(_Loss):
    """``1 - cos`` for pairs labelled 1, ``max(0, cos - margin)`` for pairs labelled -1; see
    :func:`tapegrad.nn.functional.cosine_embedding_loss`."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = float(margin)

    def forward(self, input1: Tensor, input2: Tensor, target) -> Tensor:
        return F.cosine_embedding_loss(
            input1, input2, target, self.margin, reduction=self.reduction
        )


class CosineSimilarity(Module):
    """Cosine similarity along ``dim``; see :func:`tapegrad.nn.functional.cosine_similarity`."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"
