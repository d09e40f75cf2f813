"""The one place where tapegrad names its array module.

Every primitive, kernel wrapper and helper reaches arrays through ``xp`` and the helpers here,
so that another array module with NumPy's API (CuPy, in a later round) can slot in by changing
this file alone.
"""

from __future__ import annotations

import numpy as np

from .kernels.reduce import sum_rows

xp = np
"""The array module. NumPy today."""

ndarray = np.ndarray

DEFAULT_DTYPE = np.dtype(np.float32)
"""Tensors made from Python numbers or lists are float32 unless a dtype is given."""


def unbroadcast(g: np.ndarray, shape: tuple[int, ...], out: np.ndarray | None = None):
    """Sum ``g`` down to ``shape``: the adjoint of broadcasting ``shape`` up to ``g.shape``
    (written into ``out`` when given). The forward of the ``sum_to`` primitive, which every rule
    of a broadcasting primitive ends with: the one place broadcasting is undone."""
    shape = tuple(shape)
    if g.shape == shape:
        if out is None:
            return g
        np.copyto(out, g)
        return out
    if type(g) is np.ndarray and g.ndim == 2 and shape in ((g.shape[1],), (1, g.shape[1])):
        # a bias's gradient: the rows summed in order by a compiled (CPU) loop, 3x NumPy's
        # speed; another array module takes the generic path below
        rows = np.empty(g.shape[1], g.dtype) if out is None else out.reshape(-1)
        sum_rows(g, rows)
        return rows.reshape(shape) if out is None else out
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        extra + i for i, n in enumerate(shape) if n == 1 and g.shape[extra + i] != 1
    )
    kept = tuple(1 if i in axes else n for i, n in enumerate(g.shape))
    if out is None:
        return np.sum(g, axis=axes, keepdims=True).reshape(shape)
    np.sum(g, axis=axes, keepdims=True, out=out.reshape(kept))
    return out


def normalize_axis(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, int or sequence, negatives allowed) as a sorted tuple of axes >= 0.

    A 0-d array accepts axis 0 and -1 (as PyTorch does) and has no axis to reduce: ``()``."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < max(ndim, 1) and not (ndim == 0 and a in (0, -1)):
            raise ValueError(f"axis {a} is out of range for an array of rank {ndim}")
        if ndim:
            out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {tuple(axis)}")
    return tuple(sorted(out))


def expand_reduced(g: np.ndarray, in_ndim: int, axes: tuple[int, ...], keepdims: bool):
    """Give a reduction's output gradient back the reduced axes (as size-1 dims)."""
    if keepdims or not axes or in_ndim == 0:
        return g
    shape = list(g.shape)
    for a in axes:  # axes are sorted, so each insert lands at its final position
        shape.insert(a, 1)
    return g.reshape(shape)
