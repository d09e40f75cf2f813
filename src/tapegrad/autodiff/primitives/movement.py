"""Moving values around, composed from the shape and index primitives (so each is
differentiable to any order and compiles without a primitive of its own): ``flip``, ``roll``,
``repeat``, ``tile``, ``repeat_interleave``, ``tril``, ``triu``, ``diagonal``, ``diag``, ``split``,
``chunk``, ``unbind``, ``meshgrid``, ``unfold`` (sliding windows), ``cat``, and ``pad`` with the
modes ``reflect``, ``replicate`` and ``circular`` beside ``constant``.

The index arrays these build (the windows of ``unfold``, a reflection's positions) depend only on
shapes, which a compiled plan fixes, so they are constants of the plan.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import asarray
from ..core.state import untraceable as _untraceable
from ..errors import ShapeError
from .args import axes_of, dtype_of, is_tensor, one_axis, plain, shape_of
from .indexing import _take
from .shape import broadcast_to, concatenate, permute, reshape
from .shape import pad as _constant_pad
from .subscript import ARRAY, _index_get, _index_put, getitem


def _one_axis(op: str, axis, shape: tuple) -> int:
    ax = one_axis(op, axis, shape)
    if ax is None:
        raise ShapeError(f"{op}: needs a tensor with at least one axis (input shape {shape})")
    return ax


def _along(axis: int, part) -> tuple:
    return (slice(None),) * axis + (part,)


def _ints(op: str, values, what: str) -> tuple[int, ...]:
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = tuple(values[0])
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{op}: {what} must be ints, got {v!r}")
        out.append(int(v))
    return tuple(out)


# -- flip, roll ----------------------------------------------------------------------------------
def flip(x, axis=None):
    """``x`` reversed along ``axis`` (an int or a sequence; None: every axis)."""
    shape = shape_of(x)
    axes = axes_of("flip", axis, shape)
    return getitem(
        x, tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(len(shape)))
    )


def roll(x, shifts, axis=None):
    """Entries shifted ``shifts`` places along ``axis`` (ints or sequences of them), wrapping
    around; ``axis=None``: along the flattened tensor, then reshaped back."""
    shape = shape_of(x)
    shifts_t = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    if axis is None:
        if len(shifts_t) != 1:
            raise ShapeError(f"roll: {len(shifts_t)} shifts need as many axes, got axis=None")
        return reshape(roll(reshape(x, (-1,)) if shape else reshape(x, (1,)), shifts_t, 0), shape)
    axes_t = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(axes_t) != len(shifts_t):
        raise ShapeError(f"roll: {len(shifts_t)} shifts for {len(axes_t)} axes {axes_t}")
    out = x
    for s, a in zip(shifts_t, axes_t):
        a = _one_axis("roll", a, shape)
        n = shape[a]
        k = int(s) % n if n else 0
        if k:
            out = concatenate(
                [
                    getitem(out, _along(a, slice(n - k, n))),
                    getitem(out, _along(a, slice(0, n - k))),
                ],
                a,
            )
    return out


# -- repeat, tile, repeat_interleave -------------------------------------------------------------
def _tiled(x, reps: tuple):
    """x (padded with leading size-1 axes to len(reps)) repeated reps[i] times along axis i: a
    broadcast of interleaved size-1 axes, so the gradient is one sum."""
    shape = shape_of(x)
    full = (1,) * (len(reps) - len(shape)) + shape
    if any(r < 0 for r in reps):
        raise ShapeError(f"repeat: repeat counts must be >= 0, got {reps}")
    spread = tuple(v for n in full for v in (1, n))
    wide = tuple(v for r, n in zip(reps, full) for v in (r, n))
    return reshape(broadcast_to(reshape(x, spread), wide), tuple(r * n for r, n in zip(reps, full)))


def repeat(x, *sizes):
    """PyTorch's ``Tensor.repeat``: ``x`` tiled ``sizes[i]`` times along axis i; ``sizes`` has at
    least ``x.ndim`` entries (extra leading ones add axes)."""
    reps = _ints("repeat", sizes, "repeat counts")
    if len(reps) < len(shape_of(x)):
        raise ShapeError(
            f"repeat: {len(reps)} repeat counts {reps} for a tensor of {len(shape_of(x))} axes "
            f"(shape {shape_of(x)}); give at least one per axis"
        )
    return _tiled(x, reps)


def tile(x, reps):
    """``x`` tiled ``reps[i]`` times along axis i; fewer ``reps`` than axes count from the last
    axis (missing leading ones are 1), more add leading axes."""
    reps = _ints("tile", (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps), "reps")
    ndim = len(shape_of(x))
    return _tiled(x, (1,) * (ndim - len(reps)) + reps)


def repeat_interleave(x, repeats, axis=None):
    """Each entry repeated ``repeats`` times (an int, or one count per entry along ``axis``)
    along ``axis`` (None: the flattened tensor); the gradient sums the copies."""
    if is_tensor(repeats):
        _untraceable(repeats, "repeat_interleave with a tensor of counts (the output shape)")
        repeats = repeats.data
    reps = np.asarray(repeats)
    if reps.dtype.kind not in "iu" or reps.ndim > 1:
        raise ShapeError(f"repeat_interleave: repeats must be an int or 1-d ints, got {repeats!r}")
    if (reps < 0).any():
        raise ShapeError(f"repeat_interleave: repeats must be >= 0, got {reps.tolist()}")
    if axis is None:
        x, ax = reshape(x, (-1,)), 0
    else:
        ax = _one_axis("repeat_interleave", axis, shape_of(x))
    n = shape_of(x)[ax]
    if reps.ndim == 1 and reps.size not in (1, n):
        raise ShapeError(
            f"repeat_interleave: {reps.size} repeat counts for {n} entries along axis {ax}"
        )
    index = np.repeat(np.arange(n, dtype=np.int64), reps.reshape(-1) if reps.ndim else int(reps))
    return _take(x, _beside(x, index), axis=ax)


def _beside(x, a: np.ndarray):
    """``a`` (an index or constant made on the host) on ``x``'s device."""
    return asarray(a, like=plain(x))


# -- triangles and diagonals ---------------------------------------------------------------------
def _matrix_check(op: str, shape: tuple) -> None:
    if len(shape) < 2:
        raise ShapeError(f"{op}: needs at least 2 axes (a matrix or a batch of them), got {shape}")


def tril(x, diagonal: int = 0):
    """The lower triangle of the last two axes (entries above ``diagonal`` set to 0)."""
    shape = shape_of(x)
    _matrix_check("tril", shape)
    above = ~np.tri(shape[-2], shape[-1], int(diagonal), dtype=bool)
    zero = np.zeros((), dtype_of(x))
    return _index_put(
        x, _beside(x, zero), _beside(x, above), template=(Ellipsis, ARRAY), accumulate=False
    )


def triu(x, diagonal: int = 0):
    """The upper triangle of the last two axes (entries below ``diagonal`` set to 0)."""
    shape = shape_of(x)
    _matrix_check("triu", shape)
    below = np.tri(shape[-2], shape[-1], int(diagonal) - 1, dtype=bool)
    zero = np.zeros((), dtype_of(x))
    return _index_put(
        x, _beside(x, zero), _beside(x, below), template=(Ellipsis, ARRAY), accumulate=False
    )


def _diagonal_positions(n: int, m: int, offset: int):
    rows = np.arange(max(0, -offset), min(n, m - offset) if m - offset > 0 else 0)
    return rows, rows + offset


def diagonal(x, offset: int = 0, axis1: int = 0, axis2: int = 1):
    """The entries ``[i, i + offset]`` of the plane of ``axis1`` and ``axis2``, as the last axis
    of the result (the other axes keep their order)."""
    shape = shape_of(x)
    _matrix_check("diagonal", shape)
    a1, a2 = _one_axis("diagonal", axis1, shape), _one_axis("diagonal", axis2, shape)
    if a1 == a2:
        raise ShapeError(f"diagonal: axis1 and axis2 are the same axis {a1} (shape {shape})")
    rest = [d for d in range(len(shape)) if d not in (a1, a2)]
    moved = permute(x, tuple(rest) + (a1, a2))
    rows, cols = _diagonal_positions(shape[a1], shape[a2], int(offset))
    return _index_get(moved, _beside(x, rows), _beside(x, cols), template=(Ellipsis, ARRAY, ARRAY))


_diagonal = diagonal  # diag's argument is named ``diagonal``, as in PyTorch


def diag(x, diagonal: int = 0):
    """A 1-d ``x``: the square matrix with ``x`` on its ``diagonal`` (0 elsewhere); a 2-d ``x``:
    that diagonal of it, as a vector."""
    shape, k = shape_of(x), int(diagonal)
    if len(shape) == 2:
        return _diagonal(x, k, 0, 1)
    if len(shape) != 1:
        raise ShapeError(f"diag: needs a 1-d or 2-d tensor, got shape {shape}")
    n = shape[0] + abs(k)
    rows = np.arange(shape[0]) + max(0, -k)
    return _index_put(
        _beside(x, np.zeros((n, n), dtype_of(x))),
        x,
        _beside(x, rows),
        _beside(x, rows + k),
        template=(ARRAY, ARRAY),
        accumulate=False,
    )


# -- split, chunk, unbind ------------------------------------------------------------------------
def split(x, split_size_or_sections, axis: int = 0) -> tuple:
    """PyTorch's ``split``: pieces of ``split_size_or_sections`` entries along ``axis`` (an int:
    all that size, the last one smaller if needed), or of the given sizes (summing to the axis's
    length)."""
    shape = shape_of(x)
    ax = _one_axis("split", axis, shape)
    n = shape[ax]
    if isinstance(split_size_or_sections, (int, np.integer)):
        size = int(split_size_or_sections)
        if size <= 0 and n:
            raise ShapeError(f"split: split size must be positive, got {size}")
        sizes = [min(size, n - at) for at in range(0, n, size)] if n else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ShapeError(
                f"split: sizes {sizes} must be >= 0 and sum to {n}, the length of axis {ax} "
                f"(shape {shape})"
            )
    out, at = [], 0
    for s in sizes:
        out.append(getitem(x, _along(ax, slice(at, at + s))))
        at += s
    return tuple(out)


def chunk(x, chunks: int, axis: int = 0) -> tuple:
    """PyTorch's ``chunk``: ``x`` split into pieces of ``ceil(n / chunks)`` entries along
    ``axis`` (so possibly fewer than ``chunks`` pieces)."""
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks <= 0:
        raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
    shape = shape_of(x)
    n = shape[_one_axis("chunk", axis, shape)]
    if n == 0:  # an empty axis: that many empty pieces
        return split(x, [0] * int(chunks), axis)
    return split(x, math.ceil(n / chunks), axis)


def unbind(x, axis: int = 0) -> tuple:
    """The slices of ``x`` along ``axis``, that axis removed."""
    shape = shape_of(x)
    ax = _one_axis("unbind", axis, shape)
    return tuple(getitem(x, _along(ax, i)) for i in range(shape[ax]))


# -- meshgrid, unfold, cat -----------------------------------------------------------------------
def meshgrid(*xs, indexing: str = "ij") -> tuple:
    """Coordinate grids from 1-d tensors: with ``indexing="ij"`` (PyTorch's default) output i
    varies along axis i; ``"xy"`` (NumPy's default) swaps the first two axes."""
    if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
        xs = tuple(xs[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for k, t in enumerate(xs):
        if len(shape_of(t)) > 1:
            raise ShapeError(f"meshgrid: input {k} must be 0-d or 1-d, got shape {shape_of(t)}")
    sizes = [int(np.prod(shape_of(t), dtype=np.int64)) for t in xs]
    where = list(range(len(xs)))
    if indexing == "xy" and len(xs) >= 2:
        where[0], where[1] = 1, 0
    full = [0] * len(xs)
    for k, d in enumerate(where):
        full[d] = sizes[k]
    out = []
    for k, t in enumerate(xs):
        shape = [1] * len(xs)
        shape[where[k]] = sizes[k]
        out.append(broadcast_to(reshape(t, tuple(shape)), tuple(full)))
    return tuple(out)


def unfold(x, axis: int, size: int, step: int):
    """PyTorch's ``Tensor.unfold``: the windows of ``size`` entries, ``step`` apart, along
    ``axis``; that axis becomes the window count and a last axis of ``size`` is added.
    Overlapping windows add their gradients."""
    shape = shape_of(x)
    ax = _one_axis("unfold", axis, shape)
    n = shape[ax]
    if size < 0 or size > n:
        raise ShapeError(f"unfold: size {size} does not fit axis {ax} of length {n} ({shape})")
    if step <= 0:
        raise ShapeError(f"unfold: step must be positive, got {step}")
    count = (n - size) // step + 1
    index = np.arange(count, dtype=np.int64)[:, None] * step + np.arange(size, dtype=np.int64)
    windows = _take(x, _beside(x, index), axis=ax)  # shape[:ax] + (count, size) + shape[ax + 1:]
    order = tuple(d for d in range(len(shape) + 1) if d != ax + 1) + (ax + 1,)
    return permute(windows, order)


def cat(tensors, axis: int = 0, *, dim=None):
    """Join tensors along an existing axis (PyTorch's name for :func:`concatenate`)."""
    if dim is not None:
        axis = dim
    return concatenate(list(tensors), axis)


# -- pad -----------------------------------------------------------------------------------------
_MODES = {
    "constant": "constant",
    "reflect": "reflect",
    "replicate": "replicate",
    "edge": "replicate",
    "circular": "circular",
    "wrap": "circular",
}


def _source_positions(mode: str, n: int, lo: int, hi: int, axis: int, shape: tuple):
    """For each position of the padded axis, the input entry it copies."""
    i = np.arange(-lo, n + hi, dtype=np.int64)
    if mode == "reflect":
        if lo >= n or hi >= n:
            raise ShapeError(
                f"pad: reflect padding ({lo}, {hi}) must be smaller than the length {n} of axis "
                f"{axis} (shape {shape})"
            )
        return np.where(i < 0, -i, np.where(i >= n, 2 * (n - 1) - i, i))
    if mode == "replicate":
        if n == 0:
            raise ShapeError(f"pad: replicate padding of an empty axis {axis} (shape {shape})")
        return np.clip(i, 0, n - 1)
    if lo > n or hi > n:
        raise ShapeError(
            f"pad: circular padding ({lo}, {hi}) must be at most the length {n} of axis {axis} "
            f"(shape {shape})"
        )
    return np.mod(i, n) if n else i


def pad(x, pad_width, value: float = 0.0, mode: str = "constant"):
    """Pad ``x``; ``pad_width`` is an int, a (before, after) pair, or one pair per axis
    (NumPy's form). ``mode``: ``constant`` (with ``value``), ``reflect`` (mirrored, the edge not
    repeated), ``replicate`` (the edge repeated; NumPy's ``edge``) or ``circular`` (wrapped
    around; NumPy's ``wrap``). The gradient adds the copies back."""
    if mode not in _MODES:
        raise ValueError(f"pad: mode must be one of {sorted(set(_MODES))}, got {mode!r}")
    if _MODES[mode] == "constant":
        return _constant_pad(x, pad_width, value)
    shape = shape_of(x)
    try:
        pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (len(shape), 2))
    except ValueError:
        raise ShapeError(
            f"pad: pad_width {pad_width} does not fit a tensor of {len(shape)} axes"
        ) from None
    if (pw < 0).any():
        raise ShapeError(f"pad: negative pad width {pad_width}")
    out = x
    for axis, (lo, hi) in enumerate(pw):
        if lo or hi:
            index = _source_positions(_MODES[mode], shape[axis], int(lo), int(hi), axis, shape)
            index = _beside(x, index)
            out = _take(out, index, axis=axis)
    return out
