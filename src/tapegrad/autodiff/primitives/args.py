"""What the public wrappers of the operations read of their arguments (Tensors, ndarrays or
numbers) before recording: values, shapes and dtypes, without making a graph."""

from __future__ import annotations

import numpy as np

from ..core.state import TensorBase
from ..errors import IndexOutOfRange, ShapeError


def normalize_axis(axis, ndim: int, op: str = "") -> tuple[int, ...]:
    """``axis`` (None, int or sequence, negatives allowed) as a sorted tuple of axes >= 0.

    A 0-d array accepts axis 0 and -1 (as PyTorch does) and has no axis to reduce: ``()``.
    An axis out of range raises ``IndexOutOfRange`` (an ``IndexError``, as in PyTorch) whose
    message starts with ``op`` when given."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < max(ndim, 1) and not (ndim == 0 and a in (0, -1)):
            lo, hi = -max(ndim, 1), max(ndim, 1) - 1
            raise IndexOutOfRange(
                f"{op + ': ' if op else ''}dimension {a} is out of range for a tensor of rank "
                f"{ndim} (expected in [{lo}, {hi}])"
            )
        if ndim:
            out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {tuple(axis)}")
    return tuple(sorted(out))


def is_tensor(x) -> bool:
    """Whether ``x`` is a Tensor (a Parameter too)."""
    return isinstance(x, TensorBase)


def plain(x):
    """The array (or number) behind ``x``: a Tensor's ``data``, anything else as it is."""
    return x.data if isinstance(x, TensorBase) else x


def shape_of(x) -> tuple:
    return tuple(np.shape(plain(x)))


def dtype_of(x) -> np.dtype:
    p = plain(x)
    return p.dtype if hasattr(p, "dtype") and hasattr(p, "shape") else np.asarray(p).dtype


def axes_of(op: str, axis, shape: tuple) -> tuple[int, ...]:
    """``normalize_axis`` whose error names the operation and the input shape."""
    try:
        return normalize_axis(axis, len(shape), op)
    except IndexError as e:
        raise type(e)(f"{e} (input shape {shape})") from None
    except (ValueError, TypeError) as e:
        raise ShapeError(f"{op}: {e} (input shape {shape})") from None


def one_axis(op: str, axis, shape: tuple) -> int | None:
    """One axis (an int, negatives allowed) as a non-negative int; None for a 0-d tensor."""
    if isinstance(axis, (tuple, list, bool)) or axis is None:
        raise ShapeError(f"{op}: takes one axis (dim), got {axis!r}")
    axes = axes_of(op, axis, shape)
    return axes[0] if axes else None


def pick_axis(op: str, axis, keepdims, dim, keepdim, default=None) -> tuple:
    """``(axis, keepdims)`` from NumPy's names or PyTorch's (``dim=``, ``keepdim=``), not both."""
    if dim is not None:
        if axis is not default:
            raise TypeError(f"{op}: give axis or dim, not both")
        axis = dim
    return axis, bool(keepdims if keepdim is None else keepdim)


def _into(out, result: np.ndarray) -> np.ndarray:
    """The forward contract: write into ``out`` when a buffer is given, else return a new array."""
    if out is None:
        return result
    np.copyto(out, result)
    return out
