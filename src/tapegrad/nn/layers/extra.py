"""More of PyTorch's layers: ``Unflatten``, ``RMSNorm``, the padding layers
(``ZeroPad1d/2d``, ``ConstantPad1d/2d``, ``ReflectionPad1d/2d``, ``ReplicationPad1d/2d``,
``CircularPad1d/2d``), ``Dropout1d`` and ``PairwiseDistance``, with PyTorch's arguments."""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import float_dtype
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import functional as F
from ..module import Module
from ..parameter import Parameter
from .dropout import Dropout


class Unflatten(Module):
    """Split axis ``dim`` into ``unflattened_size`` (the inverse of ``Flatten``)."""

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        self.dim, self.unflattened_size = int(dim), tuple(int(s) for s in unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dim % x.ndim
        return ops.reshape(x, tuple(x.shape[:d]) + self.unflattened_size + tuple(x.shape[d + 1 :]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last ``len(normalized_shape)`` axes."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:  # fmt: skip
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape, self.eps = tuple(int(s) for s in shape), eps
        self.elementwise_affine = bool(elementwise_affine)
        ones = np.ones(self.normalized_shape, float_dtype(dtype))
        self.weight = Parameter(ones) if self.elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class _PadNd(Module):
    d, mode = 1, "constant"

    def __init__(self, padding, value: float = 0.0) -> None:
        super().__init__()
        pad = (padding,) * (2 * self.d) if isinstance(padding, int) else tuple(padding)
        if len(pad) != 2 * self.d:
            raise ValueError(f"{type(self).__name__}: padding must be an int or {2 * self.d} ints")
        self.padding, self.value = tuple(int(p) for p in pad), float(value)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (self.d + 1, self.d + 2):
            raise ShapeError(
                f"{type(self).__name__}: expects {self.d + 1}-d or {self.d + 2}-d input, got "
                f"shape {tuple(x.shape)}"
            )
        return F.pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"{self.padding}" + (f", value={self.value}" if self.mode == "constant" else "")


def _pad(name: str, d: int, mode: str, doc: str, constant: bool = False) -> type:
    body = {"d": d, "mode": mode, "__doc__": doc, "__module__": __name__}
    if not constant:
        body["__init__"] = lambda self, padding: _PadNd.__init__(self, padding)
    return type(name, (_PadNd,), body)


ZeroPad1d = _pad("ZeroPad1d", 1, "constant", "Pad the last axis with zeros.")
ZeroPad2d = _pad("ZeroPad2d", 2, "constant", "Pad the last two axes with zeros.")
ConstantPad1d = _pad("ConstantPad1d", 1, "constant", "Pad the last axis with ``value``.", True)
ConstantPad2d = _pad("ConstantPad2d", 2, "constant", "Pad the last two axes with ``value``.", True)
ReflectionPad1d = _pad("ReflectionPad1d", 1, "reflect", "Pad the last axis by reflection.")
ReflectionPad2d = _pad("ReflectionPad2d", 2, "reflect", "Pad the last two axes by reflection.")
ReplicationPad1d = _pad("ReplicationPad1d", 1, "replicate", "Pad the last axis by its edges.")
ReplicationPad2d = _pad("ReplicationPad2d", 2, "replicate", "Pad the last two axes by edges.")
CircularPad1d = _pad("CircularPad1d", 1, "circular", "Pad the last axis circularly.")
CircularPad2d = _pad("CircularPad2d", 2, "circular", "Pad the last two axes circularly.")


class Dropout1d(Dropout):
    """Channel dropout of ``(N, C, L)`` or ``(C, L)`` input in training; identity in eval."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout1d(x, self.p, self.training, rng=self.rng)


class PairwiseDistance(Module):
    """``||x1 - x2 + eps||_p`` over the last axis."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = float(p), float(eps), bool(keepdim)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
