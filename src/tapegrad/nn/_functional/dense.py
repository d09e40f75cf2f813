"""``nn.functional``'s dense layer and dropout: ``linear``, ``dropout``, ``dropout1d`` and
``dropout2d`` (below the other families, which build on them)."""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import beside
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import init as _init

ArrayLike = Tensor | np.ndarray


def linear(x: ArrayLike, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` for ``x`` of shape ``(..., in)``, ``weight (out, in)``.

    Inputs of rank above 2 are folded to one ``(rows, in)`` matrix first, so the weight
    gradient is one matrix product rather than a batch of them.
    """
    shape = x.shape
    if len(shape) > 2:
        x = ops.reshape(x, (-1, shape[-1]))
    y = ops.matmul(x, ops.transpose(weight))
    if bias is not None:
        y = y + bias
    if len(shape) > 2:
        y = ops.reshape(y, (*shape[:-1], weight.shape[0]))
    return y


def dropout(
    x: ArrayLike, p: float = 0.5, training: bool = True, rng: np.random.Generator | None = None
) -> Tensor:
    """Inverted dropout: zero each entry with probability ``p`` and scale the survivors by
    ``1 / (1 - p)``, so the expectation is unchanged and evaluation needs no rescaling.
    Identity when ``training`` is false or ``p == 0``. ``rng=None`` uses ``nn.init``'s
    default generator."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not isinstance(x, Tensor):
        x = Tensor(x)
    if not training or p == 0.0:
        return x
    dtype = x.dtype
    if p == 1.0:
        return x * beside(x, np.zeros(x.shape, dtype=dtype))
    gen = rng if rng is not None else _init.default_generator()
    return x * ops.dropout_mask(x, p=float(p), rng=gen)


def dropout2d(
    x: ArrayLike, p: float = 0.5, training: bool = True, rng: np.random.Generator | None = None
) -> Tensor:
    """Channel dropout: zero whole channels of ``x (N, C, H, W)`` (or ``(N, C, L)``) with
    probability ``p``, one draw per sample and channel, and scale the kept ones by
    ``1 / (1 - p)``. Identity when ``training`` is false or ``p == 0``; masks come from
    ``rng`` (default ``nn.init``'s generator; a compiled step draws afresh every call)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout2d: p must be in [0, 1], got {p}")
    if not isinstance(x, Tensor):
        x = Tensor(x)
    if x.ndim not in (3, 4):
        raise ShapeError(f"dropout2d: input must be (N, C, H, W) or (N, C, L), got {x.shape}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * beside(x, np.zeros(x.shape, dtype=x.dtype))
    gen = rng if rng is not None else _init.default_generator()
    one_per_channel = x[(slice(None), slice(None)) + (slice(0, 1),) * (x.ndim - 2)]
    return x * ops.dropout_mask(one_per_channel, p=float(p), rng=gen)


def dropout1d(x, p: float = 0.5, training: bool = True, inplace: bool = False, rng=None):
    """Channel dropout of ``(N, C, L)`` or ``(C, L)`` input: whole channels zeroed with
    probability ``p``, the rest scaled by ``1 / (1 - p)``."""
    if not isinstance(x, Tensor):
        x = Tensor(x)
    if x.ndim not in (2, 3):
        raise ShapeError(f"dropout1d: expects (N, C, L) or (C, L) input, got {tuple(x.shape)}")
    if x.ndim == 2:
        return dropout2d(x[None], p, training, rng)[0]
    return dropout2d(x, p, training, rng)
