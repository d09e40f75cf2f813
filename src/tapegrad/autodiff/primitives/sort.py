"""Sorting: ``argsort`` (a primitive: int64 indices, no gradient), and ``sort`` and ``topk``, which
gather the values at those indices (so their gradient goes to the entries they come from).

Ordering rules, the same for all three: the sort is stable (equal values keep the order they
had, ascending or descending); NaN sorts as the largest value (last ascending, first
descending); ``topk`` returns its ``k`` values sorted, ties going to the earlier entry.
"""

from __future__ import annotations

import numpy as np

from ..backend import xp_of
from ..errors import DTypeError, ShapeError
from . import samples as S
from .args import _into, dtype_of, one_axis, shape_of
from .indexing import gather
from .registry import Sample, primitive
from .scan import ValuesIndices


def _argsort_fwd(x, axis, descending, out=None):
    if not descending:
        return _into(out, np.argsort(x, axis=axis, kind="stable").astype(np.int64, copy=False))
    # stable and descending: sort the reversed order ascending, reverse the result back, so
    # equal values keep their original order and NaN (last ascending) comes first
    n = x.shape[axis]
    r = np.argsort(np.flip(x, axis), axis=axis, kind="stable").astype(np.int64, copy=False)
    return _into(out, np.flip(n - 1 - r, axis))


def _argsort_reference(x, axis, descending):
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros(xm.shape, dtype=np.int64)
    for k in np.ndindex(*xm.shape[:-1]):
        row = xm[k]

        def key(i, row=row):
            v = row[i]
            if descending:
                return (0 if np.isnan(v) else 1, 0.0 if np.isnan(v) else -v, i)
            return (1 if np.isnan(v) else 0, 0.0 if np.isnan(v) else v, i)

        out[k] = sorted(range(len(row)), key=key)
    return np.moveaxis(out, -1, axis)


def _argsort_samples(rng):
    ties = np.array([[2.0, 1.0, 2.0, np.nan, 1.0, 3.0], [0.5, 0.5, 0.5, -1.0, np.nan, np.nan]])
    return [
        Sample((S.distinct(rng, (2, 3, 4)),), {"axis": 1, "descending": False}),
        Sample((S.distinct(rng, (2, 3, 4)),), {"axis": 2, "descending": True}),
        Sample((S.values(rng, (7,)),), {"axis": 0, "descending": False}),
        Sample((ties,), {"axis": 1, "descending": False}),
        Sample((ties,), {"axis": 1, "descending": True}),
        Sample((np.zeros((0, 3)),), {"axis": 0, "descending": True}),
    ]


_argsort = primitive(
    "argsort",
    _argsort_fwd,
    None,
    reference=_argsort_reference,
    samples=_argsort_samples,
    doc="The indices that sort x along axis: stable, NaN largest (int64, not differentiable).",
)


def _topk_fwd(x, k, axis, largest, out=None):
    xm = np.moveaxis(x, axis, -1)
    n = xm.shape[-1]
    rows = xm.reshape(-1, n)
    if k == 0:
        idx = xp_of(rows).zeros((rows.shape[0], 0), np.int64)
    elif 2 * k >= n or not rows.size or (x.dtype.kind == "f" and np.isnan(rows).any()):
        idx = _argsort_fwd(rows, 1, largest)[:, :k]  # few to skip, or NaN: sort everything
    else:
        # the k-th value by partition (linear time), then the entries beyond it and, of the
        # entries equal to it, the earliest ones; only those k are sorted (stably)
        at = n - k if largest else k - 1
        kth = np.partition(rows, at, axis=1)[:, at : at + 1]
        beyond = rows > kth if largest else rows < kth
        tie = rows == kth
        chosen = beyond | tie
        crowded = np.nonzero(chosen.sum(1) > k)[0]  # rows with more ties than places
        if crowded.size:
            t, b = tie[crowded], beyond[crowded]
            chosen[crowded] = b | (t & (np.cumsum(t, axis=1) <= k - b.sum(1, keepdims=True)))
        cols = np.nonzero(chosen)[1].reshape(-1, k)  # each row's k, in index order
        order = _argsort_fwd(np.take_along_axis(rows, cols, 1), 1, largest)
        idx = np.take_along_axis(cols, order, 1).astype(np.int64, copy=False)
    return _into(out, np.moveaxis(idx.reshape(xm.shape[:-1] + (k,)), -1, axis))


def _topk_samples(rng):
    ties = np.array([[2.0, 1.0, 2.0, 0.5, 1.0, 3.0, 2.0, 0.0], [5.0] * 8])
    return [
        Sample((S.distinct(rng, (3, 4, 9)),), {"k": 2, "axis": 2, "largest": True}),
        Sample((S.distinct(rng, (3, 9, 2)),), {"k": 3, "axis": 1, "largest": False}),
        Sample((S.distinct(rng, (6,)),), {"k": 6, "axis": 0, "largest": True}),
        Sample((ties,), {"k": 3, "axis": 1, "largest": True}),
        Sample((ties,), {"k": 2, "axis": 1, "largest": False}),
        Sample(
            (np.array([1.0, np.nan, 3.0, 2.0, 0.0, 7.0]),), {"k": 2, "axis": 0, "largest": True}
        ),
        Sample((S.values(rng, (2, 5)),), {"k": 0, "axis": 1, "largest": True}),
    ]


_topk_indices = primitive(
    "topk_indices",
    _topk_fwd,
    None,
    reference=lambda x, k, axis, largest: np.moveaxis(
        np.moveaxis(_argsort_reference(x, axis, largest), axis, -1)[..., :k], -1, axis
    ),
    samples=_topk_samples,
    doc="Where the k largest (smallest) entries along axis are, in sorted order: the first k of "
    "the stable sort (ties to the earlier entry, NaN largest), found by partition when k is "
    "small (int64, not differentiable).",
)


def _sort_axis(op: str, x, axis) -> int:
    if dtype_of(x).kind not in "fiub":
        raise DTypeError(f"{op}: needs a numeric tensor, got dtype {dtype_of(x)}")
    ax = one_axis(op, axis, shape_of(x))
    return -1 if ax is None else ax  # -1: a 0-d tensor, its one entry


def argsort(x, axis: int = -1, descending: bool = False):
    """The indices that sort ``x`` along ``axis`` (int64): stable, NaN counted as the largest."""
    ax = _sort_axis("argsort", x, axis)
    if ax < 0:
        return _argsort(x.reshape((1,)), axis=0, descending=bool(descending)).reshape(())
    return _argsort(x, axis=ax, descending=bool(descending))


def sort(x, axis: int = -1, descending: bool = False) -> ValuesIndices:
    """``(values, indices)``: ``x`` sorted along ``axis`` (stable; NaN largest) and where each
    value came from. The gradient of the values goes back to those entries."""
    ax = _sort_axis("sort", x, axis)
    if ax < 0:  # a 0-d tensor: its one entry
        v, i = sort(x.reshape((1,)), 0, descending)
        return ValuesIndices(v.reshape(()), i.reshape(()))
    idx = _argsort(x, axis=ax, descending=bool(descending))
    return ValuesIndices(gather(x, ax, idx), idx)


def topk(x, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) entries along
    ``axis``, in sorted order (also when ``sorted=False``); ties go to the earlier entry."""
    ax = _sort_axis("topk", x, axis)
    n = shape_of(x)[ax] if ax >= 0 else 1
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
        raise ShapeError(
            f"topk: k={k} is out of range for axis {axis} of size {n} (input shape {shape_of(x)})"
        )
    if ax < 0:  # a 0-d tensor: its one entry (k is 0 or 1)
        v, i = topk(x.reshape((1,)), k, 0, largest)
        return ValuesIndices(v.reshape(()), i.reshape(())) if k else ValuesIndices(v, i)
    idx = _topk_indices(x, k=int(k), axis=ax, largest=bool(largest))
    return ValuesIndices(gather(x, ax, idx), idx)
