"""Index operations along one axis: ``gather`` / ``scatter`` / ``scatter_add`` (PyTorch's
dim-based forms), ``index_select`` / ``take`` / ``index_add``, and ``one_hot``.
(``scatter_reduce`` is in ``scatter_reduce.py``; ``x[idx]``, ``x[idx] = v``, ``masked_fill``,
``masked_select`` and ``nonzero`` in ``subscript.py``.)

Indices are *inputs* of these primitives, never attributes, so a compiled plan reads the
indices of every call (passed in, or computed in the step by ``argsort``) instead of freezing
those it traced. Index values are checked on every call, replays included: an index out of range
raises :class:`IndexOutOfRange` naming the operation and the shapes.

Every gather's VJP is a scatter-add and every scatter's VJP a gather, so all of them are
differentiable to any order. Writes with repeated indices are deterministic: the last write (in
the index's C order) wins, and only the winning value receives a gradient.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, is_array, sparse_indices, ufunc_at, xp_of
from ..errors import DTypeError, IndexOutOfRange, ShapeError
from ..kernels.dispatch import kernels_for
from . import samples as S
from .args import _into, dtype_of, is_tensor, one_axis, plain, shape_of
from .registry import Sample, primitive, run
from .shape import _pad

# -- helpers -------------------------------------------------------------------------------------


def _check_range(op: str, index: np.ndarray, n: int, axis: int, shape: tuple) -> None:
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise IndexOutOfRange(
                f"{op}: index {bad} is out of range for axis {axis} of size {n} (input shape "
                f"{shape}, index shape {index.shape})"
            )


def _dim_index(index: np.ndarray, axis: int) -> tuple:
    """The index tuple that addresses, for each entry of ``index``, the entry of the same
    position with ``index``'s value along ``axis``."""
    parts = list(sparse_indices(index.shape, like=index))
    parts[axis] = index
    return tuple(parts)


def _head(src: np.ndarray, shape: tuple) -> np.ndarray:
    """The leading ``shape`` block of ``src`` (a 0-d src: itself, broadcast by the caller)."""
    if src.ndim == 0:
        return src
    return src[tuple(slice(0, n) for n in shape)]


def _src_grad(r, src_shape: tuple, index_shape: tuple):
    """A gradient computed on the index's positions, as the gradient of ``src``: zero beyond
    the index's block, or summed when ``src`` was one number broadcast."""
    if len(src_shape) == 0:
        return r.sum()
    if tuple(src_shape) == tuple(index_shape):
        return r
    width = tuple((0, s - i) for s, i in zip(src_shape, index_shape))
    return run(_pad, r, pad_width=width, value=0.0)


def _last_writes(pos: np.ndarray) -> np.ndarray:
    """For each distinct value of the 1-d ``pos``, the position of its last occurrence."""
    if pos.size == 0:
        return xp_of(pos).zeros(0, np.intp)
    _, first = np.unique(pos[::-1], return_index=True)
    return pos.size - 1 - first


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


# -- gather / scatter_add ------------------------------------------------------------------------
def _gather_fwd(x, index, axis, out=None):
    _check_range("gather", index, x.shape[axis], axis, x.shape)
    xs = x[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))]
    return _into(out, np.take_along_axis(xs, index, axis=axis))


def _gather_vjp(g, out, x, index, axis):
    return run(_scatter_add, xp_of(g).zeros(x.shape, g.dtype), index, g, axis=axis)


def _gather_reference(x, index, axis):
    out = np.zeros(index.shape)
    for k in np.ndindex(*index.shape):
        at = list(k)
        at[axis] = index[k]
        out[k] = x[tuple(at)]
    return out


def _gather_samples(rng):
    x = S.values(rng, (3, 4, 2))
    return [
        Sample((x, rng.integers(0, 4, (3, 5, 2))), {"axis": 1}),
        Sample((x, rng.integers(0, 3, (2, 4, 1))), {"axis": 0}),  # a smaller index block
        Sample((x, np.array([[[1, 1], [0, 1]], [[1, 0], [0, 0]]])), {"axis": 2}),
        Sample((S.values(rng, (5,)), np.array([4, 0, 4, 2])), {"axis": 0}),
        Sample((S.values(rng, (2, 3)), np.zeros((2, 0), np.int64)), {"axis": 1}),
    ]


_gather = primitive(
    "gather",
    _gather_fwd,
    (_gather_vjp, None),
    reference=_gather_reference,
    samples=_gather_samples,
    doc="out[i][j][k] = x[i][index[i][j][k]][k] (axis 1): index has x's rank, each other axis no "
    "longer than x's; the VJP scatter-adds (repeats accumulate).",
)


def _scatter_add_fwd(x, index, src, axis, out=None):
    _check_range("scatter_add", index, x.shape[axis], axis, x.shape)
    res = xp_of(x).array(x, copy=True)
    ufunc_at(np.add, res, _dim_index(index, axis), _head(src, index.shape))
    return _into(out, res)


def _scatter_add_vjp(g, out, needs, x, index, src, axis):
    gsrc = None
    if needs[2]:
        gsrc = _src_grad(run(_gather, g, index, axis=axis), src.shape, index.shape)
    return [g if needs[0] else None, None, gsrc]


def _scatter_reference(x, index, src, axis, how):
    out = np.array(x, dtype=np.float64)
    for k in np.ndindex(*index.shape):
        at = list(k)
        at[axis] = index[k]
        v = src[k] if np.ndim(src) else src
        out[tuple(at)] = out[tuple(at)] + v if how == "add" else v
    return out


def _scatter_samples(rng):
    x = S.values(rng, (3, 4, 2))
    rep = np.array([[[1, 1], [0, 1]], [[1, 0], [0, 0]], [[3, 3], [3, 3]]])  # repeats
    return [
        Sample(
            (
                x,
                rng.permutation(4)[None, :, None].repeat(3, 0).repeat(2, 2),
                S.values(rng, (3, 4, 2)),
            ),
            {"axis": 1},
        ),
        Sample((x, rep, S.values(rng, (3, 2, 2))), {"axis": 1}),
        Sample((x, rng.integers(0, 2, (2, 2, 1)), S.values(rng, (3, 3, 2))), {"axis": 2}),
        Sample((S.values(rng, (5,)), np.array([4, 0, 4, 1]), S.values(rng, (4,))), {"axis": 0}),
        Sample(
            (S.values(rng, (2, 3)), np.zeros((2, 0), np.int64), S.values(rng, (2, 2))), {"axis": 1}
        ),
    ]


_scatter_add = primitive(
    "scatter_add_dim",
    _scatter_add_fwd,
    _scatter_add_vjp,
    reference=lambda x, index, src, axis: _scatter_reference(x, index, src, axis, "add"),
    samples=_scatter_samples,
    doc="x with src[i][j][k] added at [i][index[i][j][k]][k] (axis 1), repeats accumulating; "
    "src may be larger than index (its leading block is used). VJPs: g, and gather(g).",
)


# -- scatter (assignment, the last write wins) ---------------------------------------------------
def _scatter_fwd(x, index, src, axis, out=None):
    _check_range("scatter", index, x.shape[axis], axis, x.shape)
    res = xp_of(x).array(x, order="C", copy=True)
    if index.size:
        vals = np.broadcast_to(_head(src, index.shape), index.shape).reshape(-1)
        pos = np.ravel_multi_index(np.broadcast_arrays(*_dim_index(index, axis)), x.shape)
        pos = pos.reshape(-1)
        last = _last_writes(pos)
        res.reshape(-1)[pos[last]] = vals[last]
    return _into(out, res)


def _scatter_vjp(g, out, needs, x, index, src, axis):
    gx = gsrc = None
    if needs[0]:  # the written entries no longer depend on x
        gx = run(_scatter, g, index, xp_of(g).zeros((), g.dtype), axis=axis)
    if needs[2]:  # only the value that won each entry
        xp = xp_of(g)
        ids = xp.arange(_size(index.shape), dtype=np.int64).reshape(index.shape)
        writer = run(_scatter, xp.full(x.shape, -1, np.int64), index, ids, axis=axis)
        won = run(_gather, writer, index, axis=axis) == ids
        gsrc = _src_grad(run(_gather, g, index, axis=axis) * won, src.shape, index.shape)
    return [gx, None, gsrc]


def _scatter_set_samples(rng):
    base = _scatter_samples(rng)
    x = S.values(rng, (3, 4))
    return base + [Sample((x, np.array([[0, 2, 0], [1, 1, 1]]), np.float64(0.75)), {"axis": 1})]


_scatter = primitive(
    "scatter_dim",
    _scatter_fwd,
    _scatter_vjp,
    reference=lambda x, index, src, axis: _scatter_reference(x, index, src, axis, "set"),
    samples=_scatter_set_samples,
    doc="x with src[i][j][k] written at [i][index[i][j][k]][k] (axis 1); with repeated indices "
    "the last write in C order wins and only it gets a gradient. src may be one number.",
)


# -- index_select / index_add --------------------------------------------------------------------
def _take_fwd(x, index, axis, out=None):
    _check_range("index_select", index, x.shape[axis], axis, x.shape)
    return _into(out, np.take(x, index, axis=axis))


def _take_vjp(g, out, x, index, axis):
    return run(_index_add, xp_of(g).zeros(x.shape, g.dtype), index, g, axis=axis)


def _take_reference(x, index, axis):
    xm = np.moveaxis(x, axis, 0)
    picked = np.array([xm[i] for i in index.ravel()]).reshape(index.shape + xm.shape[1:])
    return np.moveaxis(picked, list(range(index.ndim)), list(range(axis, axis + index.ndim)))


def _take_samples(rng):
    x = S.values(rng, (4, 3))
    return [
        Sample((x, np.array([3, 0, 3])), {"axis": 0}),
        Sample((x, np.array([[2, 2], [0, 1]])), {"axis": 1}),
        Sample((S.values(rng, (2, 5, 3)), np.array([4, 4, 1, 0])), {"axis": 1}),
        Sample((x, np.zeros(0, np.int64)), {"axis": 0}),
    ]


_take = primitive(
    "take",
    _take_fwd,
    (_take_vjp, None),
    reference=lambda x, index, axis: _take_reference(x, index, axis),
    samples=_take_samples,
    doc="Entries index along axis (out.shape = x.shape[:axis] + index.shape + "
    "x.shape[axis+1:]); the VJP adds back into the taken entries (repeats accumulate).",
)


def _index_add_fwd(x, index, src, axis, out=None):
    _check_range("index_add", index, x.shape[axis], axis, x.shape)
    # the indexed axis first, the rest flattened into rows: a compiled loop adds each src row in
    # index order, as np.add.at does (the same bits), 10-50x faster than np.add.at
    xp = xp_of(x)
    res = xp.array(np.moveaxis(x, axis, 0), order="C", copy=True)
    n = res.shape[0]
    width = res.size // n if n else 0
    if index.size and width:
        rows = np.moveaxis(xp.asarray(src, res.dtype), range(axis, axis + index.ndim),
                           range(index.ndim))  # fmt: skip
        kernels_for(res).scatter_add_rows(
            res.reshape(n, width), index.reshape(-1), rows.reshape(-1, width)
        )
    return _into(out, np.moveaxis(res, 0, axis))


def _index_add_reference(x, index, src, axis):
    out = np.array(x, dtype=np.float64)
    xm, sm = (
        np.moveaxis(out, axis, 0),
        np.moveaxis(src, list(range(axis, axis + index.ndim)), list(range(index.ndim))),
    )
    for k in np.ndindex(*index.shape):
        xm[index[k]] += sm[k]
    return out


_index_add = primitive(
    "index_add",
    _index_add_fwd,
    lambda g, out, needs, x, index, src, axis: [
        g if needs[0] else None,
        None,
        run(_take, g, index, axis=axis) if needs[2] else None,
    ],
    reference=_index_add_reference,
    samples=lambda rng: [
        Sample((S.values(rng, (4, 3)), np.array([3, 0, 3]), S.values(rng, (3, 3))), {"axis": 0}),
        Sample(
            (S.values(rng, (2, 4)), np.array([[1, 1], [0, 3]]), S.values(rng, (2, 2, 2))),
            {"axis": 1},
        ),
        Sample((S.values(rng, (3,)), np.zeros(0, np.int64), S.values(rng, (0,))), {"axis": 0}),
    ],
    doc="x with src added at index along axis (src.shape = x.shape[:axis] + index.shape + "
    "x.shape[axis+1:]); repeats accumulate. VJPs: g, and take(g).",
)


# -- public functions ----------------------------------------------------------------------------
def _index_arg(op: str, index, what: str = "index"):
    """An index given as a Tensor stays one (a compiled plan then reads it on every call)."""
    if not is_tensor(index) and not is_array(index):
        index = np.asarray(index)
    if dtype_of(index).kind not in "iu":
        raise DTypeError(f"{op}: {what} must hold integers, got dtype {dtype_of(index)}")
    return index


def _axis(op: str, axis, shape: tuple) -> int:
    ax = one_axis(op, axis, shape)
    return 0 if ax is None else ax  # a 0-d tensor: its one entry


def _dim_check(op: str, x_shape: tuple, index_shape: tuple, axis: int, src_shape=None) -> None:
    if len(index_shape) != len(x_shape):
        raise ShapeError(
            f"{op}: index has {len(index_shape)} axes and the input {len(x_shape)} (shapes "
            f"{index_shape} and {x_shape}); they must have the same number"
        )
    for d, (i, n) in enumerate(zip(index_shape, x_shape)):
        if d != axis and i > n:
            raise ShapeError(
                f"{op}: index shape {index_shape} is larger than the input shape {x_shape} at "
                f"axis {d} (only the gathered axis {axis} may differ)"
            )
    if src_shape is not None and src_shape != ():
        if len(src_shape) != len(index_shape) or any(s < i for s, i in zip(src_shape, index_shape)):
            raise ShapeError(
                f"{op}: src shape {src_shape} must have index's rank and be at least index "
                f"shape {index_shape} along every axis"
            )


def _as_0d(fn, x, index, *rest):
    """A 0-d input: the op on one-entry vectors, reshaped back."""
    return fn(x.reshape((1,)), index.reshape((1,)), *rest).reshape(())


def gather(x, axis: int, index):
    """``out[i][j] = x[i][index[i][j]]`` along ``axis`` (PyTorch's ``gather(input, dim,
    index)``): ``index`` has ``x``'s rank, no longer than ``x`` on the other axes. The gradient
    adds back into the gathered entries (repeats accumulate)."""
    index = _index_arg("gather", index)
    xs, ishape = shape_of(x), shape_of(index)
    ax = _axis("gather", axis, xs)
    _dim_check("gather", xs, ishape, ax)
    if not xs:
        return _as_0d(lambda a, i: _gather(a, i, axis=0), x, index)
    return _gather(x, index, axis=ax)


def _src_arg(op: str, x, src):
    if is_tensor(src) or isinstance(src, np.ndarray):
        return src
    return asarray(src, dtype_of(x), like=plain(x))  # a number: one value written everywhere


def scatter(x, axis: int, index, src):
    """``x`` with ``src[i][j]`` written at ``[i][index[i][j]]`` along ``axis`` (out of place;
    PyTorch's ``scatter(input, dim, index, src)``; ``src`` may be a number). With repeated
    indices the last write (C order of index) wins, and only it gets a gradient."""
    index, src = _index_arg("scatter", index), _src_arg("scatter", x, src)
    xs = shape_of(x)
    ax = _axis("scatter", axis, xs)
    _dim_check("scatter", xs, shape_of(index), ax, shape_of(src))
    return _scatter(x, index, src, axis=ax)


def scatter_add(x, axis: int, index, src):
    """``x`` with ``src[i][j]`` added at ``[i][index[i][j]]`` along ``axis`` (repeats
    accumulate; out of place)."""
    index, src = _index_arg("scatter_add", index), _src_arg("scatter_add", x, src)
    xs = shape_of(x)
    ax = _axis("scatter_add", axis, xs)
    _dim_check("scatter_add", xs, shape_of(index), ax, shape_of(src))
    return _scatter_add(x, index, src, axis=ax)


def index_select(x, axis: int, index):
    """The entries ``index`` (a 1-d int tensor) along ``axis``; the gradient adds back."""
    index = _index_arg("index_select", index)
    if len(shape_of(index)) > 1:
        raise ShapeError(f"index_select: index must be 1-d, got shape {shape_of(index)}")
    xs = shape_of(x)
    ax = _axis("index_select", axis, xs)
    if not xs:
        return _as_0d(lambda a, i: _take(a, i, axis=0), x, index)
    if not shape_of(index):
        index = index.reshape((1,))
    return _take(x, index, axis=ax)


def take(x, index, axis=None):
    """The entries ``index`` (any shape) along ``axis`` (None: of the flattened tensor):
    ``out.shape = x.shape[:axis] + index.shape + x.shape[axis + 1:]``; the gradient adds back
    (repeats accumulate)."""
    index = _index_arg("take", index)
    if axis is None:
        x = x.reshape((-1,))
    xs = shape_of(x)
    if not xs:
        raise ShapeError("take: the input must have at least one axis")
    return _take(x, index, axis=_axis("take", axis if axis is not None else 0, xs))


def index_add(x, axis: int, index, src, alpha: float = 1.0):
    """``x`` with ``alpha * src`` added at the entries ``index`` (1-d) along ``axis``;
    ``src.shape`` is ``x.shape`` with that axis of ``len(index)`` entries. Out of place."""
    index = _index_arg("index_add", index)
    xs, ss, ishape = shape_of(x), shape_of(src), shape_of(index)
    ax = _axis("index_add", axis, xs)
    if len(ishape) != 1:
        raise ShapeError(f"index_add: index must be 1-d, got shape {ishape}")
    want = xs[:ax] + ishape + xs[ax + 1 :]
    if ss != want:
        raise ShapeError(
            f"index_add: src has shape {ss}; for input shape {xs} and {ishape[0]} indices "
            f"along axis {ax} it must be {want}"
        )
    if alpha != 1:
        src = src * alpha
    return _index_add(x, index, src, axis=ax)


# -- one_hot --------------------------------------------------------------------------------------
def _one_hot_fwd(indices, num_classes, dtype, out=None):
    if indices.size and (indices.min() < 0 or indices.max() >= num_classes):
        bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
        raise IndexOutOfRange(f"one_hot: index {bad} is out of range for {num_classes} classes")
    if out is None:
        out = xp_of(indices).empty(indices.shape + (num_classes,), dtype)
    np.equal(indices[..., None], xp_of(indices).arange(num_classes), out=out, casting="unsafe")
    return out


one_hot = primitive(
    "one_hot",
    _one_hot_fwd,
    None,
    reference=lambda indices, num_classes, dtype: np.eye(num_classes, dtype=dtype)[indices],
    samples=lambda rng: [
        Sample((np.array([1, 0, 3, 3]),), {"num_classes": 4, "dtype": np.dtype(np.int64)}),
        Sample((np.array([[2], [0]]),), {"num_classes": 3, "dtype": np.dtype(np.float32)}),
        Sample((np.zeros(0, np.int64),), {"num_classes": 2, "dtype": np.dtype(np.float64)}),
    ],
    doc="indices.shape + (num_classes,): 1 at each index, 0 elsewhere, in ``dtype`` (the range "
    "is checked on every call, compiled ones too). Not differentiable.",
)
