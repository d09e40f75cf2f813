"""Shape primitives: reshape, permute, broadcast_to (and its adjoint sum_to), getitem (and its
adjoint scatter), concatenate, stack, pad.

Each moves values without arithmetic, so each VJP moves the gradient back the same way. Most
forwards return views (a compiled plan takes them once and never runs them again); where NumPy
must copy, the forward writes into the plan's buffer.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, empty, is_array, ufunc_at, xp_of
from ..core.state import _TRACING
from ..errors import ShapeError
from ..kernels.dispatch import kernels_for
from ..promotion import result_type
from . import samples as S
from .args import is_tensor, normalize_axis, plain
from .elementwise import astype
from .registry import Sample, primitive, run


def _data(x):
    return plain(x)


def unbroadcast(g, shape: tuple[int, ...], out: np.ndarray | None = None):
    """Sum ``g`` down to ``shape``: the adjoint of broadcasting ``shape`` up to ``g.shape``
    (written into ``out`` when given). The forward of the ``sum_to`` primitive, which every rule
    of a broadcasting primitive ends with: the one place broadcasting is undone."""
    shape = tuple(shape)
    if g.shape == shape:
        if out is None:
            return g
        np.copyto(out, g)
        return out
    if g.ndim == 2 and shape in ((g.shape[1],), (1, g.shape[1])):
        # a bias's gradient: the rows summed in order by a compiled loop (3x NumPy's speed on
        # the CPU; on CUDA one thread per column), the same bits eager and compiled
        rows = empty(g.shape[1], g.dtype, like=g) if out is None else out.reshape(-1)
        kernels_for(g).sum_rows(g, rows)
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


# -- reshape -----------------------------------------------------------------------------------
def _reshape_fwd(x, shape, out=None):
    if -1 not in shape and int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ShapeError(f"reshape: cannot reshape shape {x.shape} ({x.size} values) to {shape}")
    if out is None:
        return x.reshape(shape)
    np.copyto(out.reshape(x.shape), x)  # x is not contiguous: copy it in row-major order
    return out


_reshape = primitive(
    "reshape",
    _reshape_fwd,
    (lambda g, out, x, shape: g.reshape(x.shape),),
    reference=lambda x, shape: np.array(x.ravel().tolist()).reshape(shape),
    samples=lambda rng: [
        Sample((S.values(rng, a),), {"shape": b})
        for a, b in [
            ((2, 3), (3, 2)),
            ((2, 3), (6,)),
            ((6,), (1, 2, 3)),
            ((2, 3, 4), (-1, 4)),
            ((), (1, 1)),
            ((0, 3), (3, 0)),
        ]
    ],
    doc="Same values in a new shape (one -1 is inferred).",
)


def reshape(x, shape):
    """``x`` with a new shape of the same size; one entry may be -1."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    return _reshape(x, shape=shape)


def flatten(x, start_axis: int = 0, end_axis: int = -1, *, start_dim=None, end_dim=None):
    """Merge the axes from ``start_axis`` to ``end_axis`` (both included; PyTorch's
    ``start_dim``, ``end_dim``) into one."""
    start_axis = start_axis if start_dim is None else start_dim
    end_axis = end_axis if end_dim is None else end_dim
    shape = np.shape(_data(x))
    if not shape:
        return reshape(x, (1,))
    start = normalize_axis(start_axis, len(shape), "flatten")[0]
    end = normalize_axis(end_axis, len(shape), "flatten")[0]
    if end < start:
        raise ShapeError(f"flatten: start_dim {start_axis} comes after end_dim {end_axis}")
    merged = int(np.prod(shape[start : end + 1], dtype=np.int64))
    return reshape(x, shape[:start] + (merged,) + shape[end + 1 :])


def squeeze(x, axis=None):
    """Drop size-1 axes (all of them, or those in ``axis``); as in PyTorch, an axis of
    ``axis`` whose size is not 1 stays (no error)."""
    shape = np.shape(_data(x))
    axes = range(len(shape)) if axis is None else normalize_axis(axis, len(shape), "squeeze")
    axes = tuple(a for a in axes if shape[a] == 1)
    return reshape(x, tuple(n for i, n in enumerate(shape) if i not in axes))


def expand_dims(x, axis):
    """Insert a size-1 axis at ``axis``."""
    shape = np.shape(_data(x))
    return reshape(x, np.expand_dims(np.empty(shape, dtype=np.bool_), axis).shape)


# -- permute -----------------------------------------------------------------------------------
def _inverse(axes: tuple) -> tuple:
    """The permutation that undoes ``axes``."""
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return tuple(inv)


_permute = primitive(
    "permute",
    lambda x, axes: x.transpose(axes),  # always a view (the method: np.transpose's dispatch
    # is a microsecond a call)
    (lambda g, out, x, axes: run(_permute, g, axes=_inverse(axes)),),
    reference=lambda x, axes: np.einsum(x, list(range(x.ndim)), list(axes)),
    samples=lambda rng: [
        Sample((S.values(rng, s),), {"axes": a})
        for s, a in [
            ((2, 3), (1, 0)),
            ((2, 3, 4), (2, 0, 1)),
            ((2, 3, 4), (0, 2, 1)),
            ((1, 0, 2), (2, 1, 0)),
        ]
    ],
    doc="Reorder axes: out.shape[i] == x.shape[axes[i]].",
)


def permute(x, axes):
    """Reorder the axes of ``x`` (like ``np.transpose(x, axes)``)."""
    ndim = np.ndim(_data(x))
    axes = tuple(int(a) % ndim if ndim else 0 for a in axes)
    if sorted(axes) != list(range(ndim)):
        raise ShapeError(f"permute: {axes} is not a permutation of the {ndim} axes of the input")
    return _permute(x, axes=axes)


def transpose(x, axes=None):
    """Reverse the axes, or reorder them as ``axes``."""
    ndim = np.ndim(_data(x))
    return permute(x, tuple(range(ndim))[::-1] if axes is None else axes)


# -- broadcast_to ------------------------------------------------------------------------------
_broadcast_to = primitive(
    "broadcast_to",
    lambda x, shape: np.broadcast_to(x, shape),  # always a view
    (lambda g, out, x, shape: run(sum_to, g, shape=x.shape),),
    reference=lambda x, shape: x + np.zeros(shape),
    samples=lambda rng: [
        Sample((S.values(rng, a),), {"shape": b})
        for a, b in [((3,), (2, 3)), ((2, 1), (2, 4)), ((), (3,)), ((1, 1), (2, 1, 3))]
    ],
    doc="A broadcast view of x; its gradient sums over the broadcast axes.",
)


def broadcast_to(x, shape):
    """Broadcast ``x`` to ``shape`` (NumPy's rules)."""
    return _broadcast_to(x, shape=tuple(int(s) for s in shape))


sum_to = primitive(
    "sum_to",
    unbroadcast,
    (lambda h, out, g, shape: run(_broadcast_to, h, shape=g.shape),),
    reference=lambda g, shape: _sum_to_reference(g, shape),
    samples=lambda rng: [
        Sample((S.values(rng, a),), {"shape": b})
        for a, b in [
            ((2, 3), (3,)),
            ((2, 3), (1, 3)),
            ((4, 2, 3), (2, 1)),
            ((3,), ()),
            ((2, 2), (2, 2)),
        ]
    ],
    doc="The adjoint of broadcasting to g's shape: g summed down to ``shape`` (every rule of a "
    "broadcasting primitive ends with it).",
)


def _sum_to_reference(g, shape):
    out = np.zeros(shape)
    for idx in np.ndindex(*g.shape):
        tail = idx[len(idx) - len(shape) :]
        out[tuple(0 if n == 1 else i for i, n in zip(tail, shape))] += g[idx]
    return out


# -- getitem -----------------------------------------------------------------------------------
def _getitem_fwd(x, index, out=None):
    if out is None:
        return x[index]
    parts = index if isinstance(index, tuple) else (index,)
    if len(parts) == 1 and is_array(parts[0]) and parts[0].dtype.kind in "iu":
        np.take(x, parts[0], axis=0, out=out)  # rows by integer ids: no temporary
        return out
    picked = x[index]
    if picked.shape != out.shape:  # a boolean mask that selects another number of entries
        raise ShapeError(
            f"getitem: the index selects shape {picked.shape} where the compiled plan was "
            f"traced with {out.shape}; a compiled step needs fixed shapes (use tg.where to "
            f"mask instead of boolean indexing)"
        )
    np.copyto(out, picked)
    return out


def _scatter_fwd(g, shape, index, out=None):
    if out is None:
        gx = xp_of(g).zeros(shape, dtype=g.dtype)
    else:
        gx = out
        gx.fill(0)
    parts = index if isinstance(index, tuple) else (index,)
    if any(is_array(p) and p.dtype.kind in "iu" for p in parts):
        ufunc_at(np.add, gx, index, g)  # integer arrays may repeat: scatter-add
    else:
        gx[index] = g  # basic slices and boolean masks never repeat
    return gx


def _getitem_vjp(g, out, x, index):
    return run(_scatter, g, shape=x.shape, index=index)


def _getitem_samples(rng):
    x = S.values(rng, (4, 3))
    return [
        Sample((x,), {"index": idx})
        for idx in [
            (1,),
            (slice(1, 3),),
            (slice(None), -1),
            (Ellipsis, slice(None, None, 2)),
            (None, slice(0, 2)),
            (np.array([0, 2, 2, 3]),),
            (slice(None), np.array([[1, 1], [0, 2]])),
            (np.array([3, 0]), np.array([1, 1])),
            (x[:, 0] > 0,),
            (x > 0,),
            (slice(4, 4),),
        ]
    ]


_getitem = primitive(
    "getitem",
    _getitem_fwd,
    (_getitem_vjp,),
    reference=lambda x, index: np.array(x.tolist())[index],
    samples=_getitem_samples,
    doc="x[index] for slices, ints, None, Ellipsis, integer arrays and boolean masks; the VJP "
    "scatter-adds, so repeated integer indices accumulate.",
)


_scatter = primitive(
    "scatter",
    _scatter_fwd,
    (lambda g, out, x, shape, index: run(_getitem, g, index=index),),
    reference=lambda x, shape, index: _scatter_reference(x, shape, index),
    samples=lambda rng: [
        Sample((S.values(rng, (4,)),), {"shape": (3, 2), "index": (np.array([0, 2, 2, 1]), 1)}),
        Sample((S.values(rng, (2, 2)),), {"shape": (3, 2), "index": (slice(0, 2),)}),
    ],
    doc="The adjoint of getitem: a zero array of ``shape`` with x added at ``index`` (repeated "
    "integer indices accumulate); its VJP is getitem.",
)


def _scatter_reference(x, shape, index):
    out = np.zeros(shape)
    flat = np.arange(int(np.prod(shape))).reshape(shape)[index]
    for k, v in zip(np.ravel(flat), np.ravel(x)):
        out.flat[k] += v
    return out


def _index_part(p):
    p = _data(p)
    if isinstance(p, (list, tuple)):
        p = np.asarray(p)  # a sequence inside an index tuple is an integer (or bool) array
    if is_array(p) and p.dtype.kind not in "iub":
        raise IndexError(f"getitem: index arrays must be integer or bool, got dtype {p.dtype}")
    return p


def _read_each_call(p) -> bool:
    """Whether an index part is a value a compiled plan must read on every call: a Tensor, or
    the array of a value the step being traced computed."""
    if is_tensor(p):
        return True
    if is_array(p):
        trace = _TRACING.active
        return trace is not None and id(p) in trace.var_of_data
    return False


def basic_getitem(x, index):
    """``x[index]`` whose index parts are attributes (ints, slices, None, Ellipsis and arrays of
    values fixed at trace time): basic slicing, integer arrays (repeats accumulate) and boolean
    masks. ``subscript.getitem`` is the front end of ``x[index]`` that sends index Tensors to
    ``index_get`` instead."""
    index = (
        tuple(_index_part(p) for p in index) if isinstance(index, tuple) else (_index_part(index),)
    )
    data = _data(x)
    if type(data) is not np.ndarray and is_array(data):  # index arrays go where x lives
        index = tuple(asarray(p, like=data) if is_array(p) else p for p in index)
    return _getitem(x, index=index)


# -- concatenate, stack ------------------------------------------------------------------------
def _concat_vjp(g, out, needs, *xs, axis):
    grads, at = [], 0
    for x, need in zip(xs, needs):
        n = x.shape[axis]
        grads.append(g[(slice(None),) * axis + (slice(at, at + n),)] if need else None)
        at += n
    return grads


def _concat_samples(rng):
    return [
        Sample((S.values(rng, (2, 3)), S.values(rng, (1, 3)), S.values(rng, (4, 3))), {"axis": 0}),
        Sample((S.values(rng, (2, 1)), S.values(rng, (2, 3))), {"axis": 1}),
        Sample((S.values(rng, (3,)),), {"axis": 0}),
        Sample((S.values(rng, (2, 0)), S.values(rng, (2, 2))), {"axis": 1}),
    ]


_concatenate = primitive(
    "concatenate",
    lambda *xs, axis, out=None: np.concatenate(xs, axis=axis, out=out),
    _concat_vjp,
    reference=lambda *xs, axis: _concat_reference(xs, axis),
    samples=_concat_samples,
    doc="Join tensors along an existing axis.",
)


def _concat_reference(xs, axis):
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out, at = np.empty(shape), 0
    for x in xs:
        out[(slice(None),) * axis + (slice(at, at + x.shape[axis]),)] = x
        at += x.shape[axis]
    return out


def _promoted(xs: list) -> list:
    """Tensors of different dtypes in the one they promote to (PyTorch's cat and stack)."""
    data = [_data(x) for x in xs]
    first = getattr(data[0], "dtype", None)
    if all(getattr(d, "dtype", None) == first for d in data):
        return xs
    dtype = result_type([d if is_array(d) else np.asarray(d) for d in data])
    return [x if getattr(d, "dtype", None) == dtype else astype(x, dtype) for x, d in zip(xs, data)]


def concatenate(xs, axis: int = 0):
    """Join a sequence of tensors along an existing axis."""
    xs = list(xs)
    if not xs:
        raise ShapeError("concatenate: needs at least one tensor")
    return _concatenate(*_promoted(xs), axis=normalize_axis(axis, np.ndim(_data(xs[0])), "cat")[0])


def _stack_vjp(g, out, needs, *xs, axis):
    return [g[(slice(None),) * axis + (i,)] if need else None for i, need in enumerate(needs)]


_stack = primitive(
    "stack",
    lambda *xs, axis, out=None: np.stack(xs, axis=axis, out=out),
    _stack_vjp,
    reference=lambda *xs, axis: np.moveaxis(np.array([x.tolist() for x in xs]), 0, axis),
    samples=lambda rng: [
        Sample((S.values(rng, (2, 3)), S.values(rng, (2, 3))), {"axis": 0}),
        Sample((S.values(rng, (2, 3)), S.values(rng, (2, 3)), S.values(rng, (2, 3))), {"axis": 2}),
        Sample((S.values(rng, ()),), {"axis": 0}),
    ],
    doc="Join tensors of one shape along a new axis.",
)


def stack(xs, axis: int = 0, *, dim=None):
    """Join a sequence of same-shape tensors along a new axis (``axis`` or ``dim``)."""
    if dim is not None:
        axis = dim
    xs = list(xs)
    if not xs:
        raise ShapeError("stack: needs at least one tensor")
    return _stack(*_promoted(xs), axis=normalize_axis(axis, np.ndim(_data(xs[0])) + 1, "stack")[0])


# -- pad ---------------------------------------------------------------------------------------
def _pad_fwd(x, pad_width, value, out=None):
    if out is None:
        return np.pad(x, pad_width, constant_values=value)
    out.fill(value)
    out[tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))] = x
    return out


def _pad_vjp(g, out, x, pad_width, value):
    return g[tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))]


_pad = primitive(
    "pad",
    _pad_fwd,
    (_pad_vjp,),
    reference=lambda x, pad_width, value: _pad_reference(x, pad_width, value),
    samples=lambda rng: [
        Sample((S.values(rng, s),), {"pad_width": p, "value": v})
        for s, p, v in [
            ((3,), ((1, 2),), 0.0),
            ((2, 3), ((0, 1), (2, 0)), 1.5),
            ((1, 2, 2), ((0, 0), (1, 1), (1, 1)), 0.0),
        ]
    ],
    doc="Pad with a constant value.",
)


def _pad_reference(x, pad_width, value):
    out = np.full(tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, pad_width)), value)
    out[tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))] = x
    return out


def pad(x, pad_width, value: float = 0.0):
    """Pad with ``value``; ``pad_width`` is an int, a (before, after) pair, or one pair per axis."""
    ndim = np.ndim(_data(x))
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (ndim, 2))
    if (pw < 0).any():
        raise ShapeError(f"pad: negative pad width {pad_width}")
    return _pad(x, pad_width=tuple((int(a), int(b)) for a, b in pw), value=float(value))
