"""More of ``nn.functional`` in PyTorch's forms: ``normalize``, ``pairwise_distance``,
``rms_norm`` and ``one_hot``; each composes engine operations."""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from ...creation import one_hot as _one_hot


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim`` (unit vectors)."""
    x = _t(x)
    return x / ops.clip(ops.norm(x, p, dim, True), eps, None)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``||x1 - x2 + eps||_p`` over the last axis (PyTorch adds ``eps`` to the difference)."""
    return ops.norm(_t(x1) - x2 + eps, p, -1, keepdim)


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last ``len(normalized_shape)`` axes
    (``eps`` None: the dtype's machine epsilon, as PyTorch)."""
    x = _t(x)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape) :]) != shape:
        raise ShapeError(f"rms_norm: input shape {tuple(x.shape)} does not end in {shape}")
    eps = float(np.finfo(x.dtype).eps) if eps is None else float(eps)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    y = x * ops.rsqrt(ops.mean(x * x, axes, True) + eps)
    return y if weight is None else y * weight


def one_hot(tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot vectors of the integer ``tensor`` (``num_classes=-1``: largest + 1)."""
    return _one_hot(tensor, num_classes)
