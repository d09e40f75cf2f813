"""Index operations: ``gather`` / ``scatter`` / ``scatter_add`` / ``scatter_reduce`` along one
axis (PyTorch's dim-based forms), ``index_select`` / ``index_add``, ``x[idx]`` and ``x[idx] = v``
as operations whose index arrays are inputs (``index_get``, ``index_put``), ``masked_fill``,
``masked_select`` and ``nonzero``.

Indices are *inputs* of these primitives, never attributes, so a compiled plan reads the
indices of every call (passed in, or computed in the step by ``argsort``) instead of freezing
those it traced. Index values are checked on every call, replays included: an index out of range
raises :class:`IndexOutOfRange` naming the operation and the shapes.

Every gather's VJP is a scatter-add and every scatter's VJP a gather, so all of them are
differentiable to any order. Writes with repeated indices are deterministic: the last write (in
the index's C order) wins, and only the winning value receives a gradient. The product scatter's
gradient is exact with zeros: each entry gets the product of the other members of its group,
from segmented exclusive products (a sort by destination and two linear scans), never a
division.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, cuda_kernels, is_array, to_host, xp_of
from ..core.state import _TRACING
from ..errors import DTypeError, IndexOutOfRange, ShapeError
from ..kernels.scatter import scatter_add_rows
from . import samples as S
from .args import dtype_of, one_axis, plain, shape_of
from .elementwise import where
from .registry import Sample, primitive, run
from .scan import _into, _linear_scan, shift
from .shape import _pad, broadcast_to, sum_to
from .sort import _argsort

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
    parts = list(xp_of(index).indices(index.shape, sparse=True))
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
    np.add.at(res, _dim_index(index, axis), _head(src, index.shape))
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


# -- scatter_reduce: prod, amax, amin (sum and mean compose scatter_add) ------------------------
def _identity(reduce: str, dtype):
    """What an entry starts from when its own value is left out (``include_self=False``)."""
    if reduce == "prod":
        return 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if reduce == "amax" else info.max
    return -np.inf if reduce == "amax" else np.inf


_UFUNCS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _scatter_reduce_fwd(x, index, src, axis, reduce, include_self, out=None):
    _check_range("scatter_reduce", index, x.shape[axis], axis, x.shape)
    res = xp_of(x).array(x, copy=True)
    at = _dim_index(index, axis)
    if not include_self:
        res[at] = _identity(reduce, res.dtype)
    _UFUNCS[reduce].at(res, at, _head(src, index.shape))
    return _into(out, res)


def _scatter_reduce_vjp(g, out, needs, x, index, src, axis, reduce, include_self):
    if reduce == "prod":
        return _scatter_prod_vjp(g, needs, x, index, src, axis, include_self)
    # amax / amin: the gradient is shared equally by every member equal to the result
    dtype = g.dtype
    vals = _head(src, index.shape)
    src_hit = (vals == run(_gather, out, index, axis=axis)).astype(dtype)
    self_hit = (x == out).astype(dtype)
    if not include_self:
        self_hit = self_hit * (_touched(index, x.shape, axis, dtype) == 0)
    count = self_hit + run(_scatter_add, xp_of(g).zeros(x.shape, dtype), index, src_hit, axis=axis)
    share = g / run(where, count == 0, 1.0, count)
    gx = share * self_hit if needs[0] else None
    gsrc = None
    if needs[2]:
        gsrc = _src_grad(run(_gather, share, index, axis=axis) * src_hit, src.shape, index.shape)
    return [gx, None, gsrc]


def _touched(index, shape, axis, dtype):
    """How many index entries point at each entry of a ``shape`` array (recorded on Tensors)."""
    xp = xp_of(index)
    ones = xp.ones(index.shape, dtype)
    return run(_scatter_add, xp.zeros(shape, dtype), index, ones, axis=axis)


def _scatter_prod_vjp(g, needs, x, index, src, axis, include_self):
    gx = gsrc = None
    if needs[0]:
        if include_self:  # the product of the src values sent to each entry (1 where none)
            group = run(
                _scatter_reduce,
                xp_of(g).ones(x.shape, g.dtype),
                index,
                src,
                axis=axis,
                reduce="prod",
                include_self=True,
            )
            gx = g * group
        else:
            gx = g * (_touched(index, x.shape, axis, g.dtype) == 0)
    if needs[2]:
        others = _others_in_group(x, index, _head(src, index.shape), axis, include_self)
        flat_g = g.reshape((-1,))
        pos = run(_flat_positions, index, axis=axis, shape=tuple(x.shape)).reshape((-1,))
        r = run(_take, flat_g, pos, axis=0).reshape(tuple(index.shape)) * others
        gsrc = _src_grad(r, src.shape, index.shape)
    return [gx, None, gsrc]


def _others_in_group(x, index, vals, axis, include_self):
    """For each src value, the product of the other members of the group it is multiplied
    into (x's entry too when ``include_self``): sorted by destination, an exclusive product
    from the left times one from the right within each run of equal destinations (two linear
    scans that restart at each run), so zeros need no special case and no division."""
    dtype = vals.dtype
    pos = run(_flat_positions, index, axis=axis, shape=tuple(x.shape)).reshape((-1,))
    order = run(_argsort, pos, axis=0, descending=False)
    p = run(_take, pos, order, axis=0)
    s = run(_take, vals.reshape((-1,)), order, axis=0)
    start = (p != shift(p, 0, down=True, fill=-1)).astype(dtype)
    end = (p != shift(p, 0, down=False, fill=-1)).astype(dtype)
    left = run(_linear_scan, s * start, s * (1 - start), axis=0, reverse=False)
    right = run(_linear_scan, s * end, s * (1 - end), axis=0, reverse=True)
    left = run(where, start > 0, 1.0, shift(left, 0, down=True, fill=1.0))
    right = run(where, end > 0, 1.0, shift(right, 0, down=False, fill=1.0))
    others = left * right
    if include_self:
        others = others * run(_take, x.reshape((-1,)), p, axis=0)
    back = run(_argsort, order, axis=0, descending=False)
    return run(_take, others, back, axis=0).reshape(tuple(index.shape))


def _scatter_reduce_reference(x, index, src, axis, reduce, include_self):
    out = np.array(x, dtype=np.float64)
    groups: dict = {}
    for k in np.ndindex(*index.shape):
        at = list(k)
        at[axis] = index[k]
        groups.setdefault(tuple(at), []).append(src[k])
    fn = {"prod": np.prod, "amax": np.max, "amin": np.min}[reduce]
    for at, members in groups.items():
        out[at] = fn(members + ([x[at]] if include_self else []))
    return out


def _scatter_reduce_samples(rng):
    out = []
    rep = np.array([[0, 2, 0, 0], [1, 1, 3, 1]])
    for reduce in ("prod", "amax", "amin"):
        for include_self in (True, False):
            if reduce == "prod":
                x, src = S.values(rng, (2, 4)), S.values(rng, (2, 5)) * 1.3
            else:  # no ties anywhere, between src and x either: away from the kinks
                both = S.distinct(rng, (18,))
                x, src = both[:8].reshape(2, 4), both[8:].reshape(2, 5)
            out.append(
                Sample((x, rep, src), {"axis": 1, "reduce": reduce, "include_self": include_self})
            )
    x = S.values(rng, (3, 4))
    src = S.values(rng, (2, 4))
    src[0, 1] = src[1, 1] = src[1, 3] = 0.0  # a group with one zero, a group with two
    for include_self in (True, False):
        out.append(
            Sample(
                (x, np.array([[1, 0, 2, 0], [1, 0, 1, 0]]), src),
                {"axis": 0, "reduce": "prod", "include_self": include_self},
            )
        )
    return out


_scatter_reduce = primitive(
    "scatter_reduce",
    _scatter_reduce_fwd,
    _scatter_reduce_vjp,
    reference=_scatter_reduce_reference,
    samples=_scatter_reduce_samples,
    doc="x with src combined into [i][index[i][j]] (axis 1) by prod, amax or amin, x's own entry "
    "included if include_self. amax/amin share the gradient equally among the members equal to "
    "the result; prod's gradient is the product of the other members (exact with zeros).",
)


def _flat_positions_fwd(index, axis, shape):
    _check_range("scatter", index, shape[axis], axis, shape)
    if index.size == 0:
        return xp_of(index).zeros(index.shape, np.int64)
    parts = np.broadcast_arrays(*_dim_index(index, axis))
    return np.ravel_multi_index(parts, shape).astype(np.int64)


def _flat_positions_reference(index, axis, shape):
    out = np.zeros(index.shape, np.int64)
    strides = [_size(shape[d + 1 :]) for d in range(len(shape))]
    for k in np.ndindex(*index.shape):
        at = list(k)
        at[axis] = index[k]
        out[k] = sum(a * s for a, s in zip(at, strides))
    return out


_flat_positions = primitive(
    "flat_positions",
    _flat_positions_fwd,
    None,
    reference=_flat_positions_reference,
    samples=lambda rng: [
        Sample((np.array([[0, 2, 0], [1, 1, 3]]),), {"axis": 1, "shape": (2, 4)}),
        Sample((rng.integers(0, 3, (2, 2, 2)),), {"axis": 0, "shape": (3, 2, 5)}),
    ],
    doc="The C-order flat position, in an array of ``shape``, that a dim-based scatter along "
    "axis sends each index entry to (int64, not differentiable).",
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
        kernels = cuda_kernels(res)
        (kernels.scatter_add_rows if kernels else scatter_add_rows)(
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


# -- x[idx] and x[idx] = v with index arrays as inputs -------------------------------------------
ARRAY = "array"
"""The place of an index array (an input of the primitive) in an index template."""


def build_index(template: tuple, arrays) -> tuple:
    it = iter(arrays)
    return tuple(next(it) if isinstance(p, str) else p for p in template)


def _dims_of_parts(template: tuple, arrays, ndim: int) -> list[int]:
    it = iter(arrays)
    sizes: list = []
    for p in template:
        if isinstance(p, str):
            a = next(it)
            sizes.append(a.ndim if a.dtype.kind == "b" else 1)
        elif p is None:
            sizes.append(0)
        elif p is Ellipsis:
            sizes.append(None)
        else:
            sizes.append(1)
    fixed = sum(s for s in sizes if s)
    return [ndim - fixed if s is None else s for s in sizes]


def _may_repeat(shape: tuple, template: tuple, arrays) -> bool:
    """Whether the index arrays address some entry twice (then writes need an order)."""
    if not any(a.dtype.kind in "iu" for a in arrays):
        return False  # masks and slices never repeat
    comps, dims, d = [], [], 0
    it = iter(arrays)
    for p, k in zip(template, _dims_of_parts(template, arrays, len(shape))):
        if isinstance(p, str):
            a = next(it)
            if a.dtype.kind == "b":
                comps += list(np.nonzero(a))
                dims += list(shape[d : d + k])
            else:
                if shape[d] == 0:
                    return False  # nothing to address: indexing raises
                comps.append(np.mod(a, shape[d]))
                dims.append(shape[d])
        d += k
    flat = np.ravel_multi_index(np.broadcast_arrays(*comps), dims).reshape(-1)
    return np.unique(flat).size < flat.size


def write_at(res: np.ndarray, v, template: tuple, arrays, accumulate: bool) -> None:
    """``res[index] = v`` (or ``+=`` with repeats accumulating), in place; with repeated
    integer indices the last write in C order wins."""
    idx = build_index(template, arrays)
    v = v if is_array(v) else asarray(v, like=res)
    if v.dtype != res.dtype:
        v = v.astype(res.dtype)
    if accumulate:
        np.add.at(res, idx, v)
    elif _may_repeat(res.shape, template, arrays):
        pos = xp_of(res).arange(res.size).reshape(res.shape)[idx]
        flat = pos.reshape(-1)
        last = _last_writes(flat)
        res.reshape(-1)[flat[last]] = np.broadcast_to(v, pos.shape).reshape(-1)[last]
    else:
        res[idx] = v


def _index_get_fwd(x, *arrays, template, fixed_shape=None):
    out = x[build_index(template, arrays)]
    if fixed_shape is not None and out.shape != fixed_shape:
        raise ShapeError(
            f"index_get: the mask selects {out.size} entries now and selected "
            f"{_size(fixed_shape)} when the compiled function was traced; a plan has fixed "
            f"shapes, so compute data-dependent selections outside compiled functions"
        )
    return out


def _index_get_vjp(g, out, needs, x, *arrays, template, fixed_shape=None):
    gx = run(
        _index_put, xp_of(g).zeros(x.shape, g.dtype), g, *arrays, template=template, accumulate=True
    )
    return [gx] + [None] * len(arrays)


def _index_samples(rng, with_value: bool):
    x = S.values(rng, (4, 3))
    cases = [
        ((ARRAY,), [np.array([0, 2, 2, 3])]),
        ((slice(None), ARRAY), [np.array([[1, 1], [0, 2]])]),
        ((ARRAY, ARRAY), [np.array([3, 0, 3]), np.array([1, 1, 1])]),
        ((ARRAY,), [x[:, 0] > 0]),
        ((ARRAY,), [x > 0]),
        ((1, ARRAY), [np.array([2, 0])]),
        ((ARRAY, None, slice(0, 2)), [np.array([-1, 0])]),
    ]
    out = []
    for template, arrays in cases:
        if with_value:
            sel = x[build_index(template, arrays)]
            v = S.values(rng, sel.shape[-1:] if sel.ndim else ())
            out.append(Sample((x, v, *arrays), {"template": template, "accumulate": False}))
            out.append(Sample((x, v, *arrays), {"template": template, "accumulate": True}))
        else:
            out.append(Sample((x, *arrays), {"template": template}))
    return out


_index_get = primitive(
    "index_get",
    _index_get_fwd,
    _index_get_vjp,
    reference=lambda x, *arrays, template, fixed_shape=None: np.array(x.tolist())[
        build_index(template, arrays)
    ],
    samples=lambda rng: _index_samples(rng, False),
    doc="x[index] where the index's integer or bool arrays are inputs (ARRAY in the template "
    "marks each); the VJP adds back into the selected entries (repeats accumulate).",
)


def _index_put_fwd(x, v, *arrays, template, accumulate):
    res = xp_of(x).array(x, order="C", copy=True)
    write_at(res, v, template, arrays, accumulate)
    return res


def _index_put_vjp(g, out, needs, x, v, *arrays, template, accumulate):
    gx = gv = None
    if needs[0]:  # overwritten entries no longer depend on x
        gx = (
            g
            if accumulate
            else run(
                _index_put,
                g,
                xp_of(g).zeros((), g.dtype),
                *arrays,
                template=template,
                accumulate=False,
            )
        )
    if needs[1]:
        r = run(_index_get, g, *arrays, template=template)
        if not accumulate and any(a.dtype.kind in "iu" for a in arrays):
            # repeated indices: only the value written last at an entry gets its gradient
            ids = xp_of(g).arange(_size(r.shape), dtype=np.int64).reshape(r.shape)
            writer = run(
                _index_put,
                xp_of(g).full(x.shape, -1, np.int64),
                ids,
                *arrays,
                template=template,
                accumulate=False,
            )
            r = r * (run(_index_get, writer, *arrays, template=template) == ids)
        gv = r if r.shape == tuple(v.shape) else run(sum_to, r, shape=tuple(v.shape))
    return [gx, gv] + [None] * len(arrays)


def _index_put_reference(x, v, *arrays, template, accumulate):
    out = np.array(x, dtype=np.float64)
    pos = np.arange(out.size).reshape(out.shape)[build_index(template, arrays)]
    vals = np.broadcast_to(v, pos.shape)
    for k in np.ndindex(*pos.shape):
        out.flat[pos[k]] = (out.flat[pos[k]] if accumulate else 0.0) + vals[k]
    return out


_index_put = primitive(
    "index_put",
    _index_put_fwd,
    _index_put_vjp,
    reference=_index_put_reference,
    samples=lambda rng: _index_samples(rng, True),
    doc="x with v (broadcast) written at index (accumulate: added, repeats accumulating); the "
    "index's arrays are inputs. With repeated indices the last write in C order wins and only "
    "it gets a gradient.",
)


def _index_put_inplace_fwd(target, v, *arrays, template):
    write_at(target, v, template, arrays, accumulate=False)
    return target


_index_put_inplace = primitive(
    "index_put_",
    _index_put_inplace_fwd,
    None,
    reference=lambda target, v, *arrays, template: _index_put_reference(
        target, v, *arrays, template=template, accumulate=False
    ),
    samples=lambda rng: [
        Sample(s.args, {"template": s.attrs["template"]})
        for s in _index_samples(rng, True)
        if not s.attrs["accumulate"]
    ],
    effect=True,
    doc="target[index] = v written into target's array in place (x[idx] = v under no_grad, on a "
    "leaf); compiled plans replay it. Not differentiable.",
)


# -- nonzero -------------------------------------------------------------------------------------
def _nonzero_fwd(x, fixed_shape=None):
    out = np.argwhere(x).astype(np.int64, copy=False)
    if fixed_shape is not None and out.shape != fixed_shape:
        raise ShapeError(
            f"nonzero: found {out.shape[0]} nonzero entries now and {fixed_shape[0]} when the "
            f"compiled function was traced; a plan has fixed shapes, so compute data-dependent "
            f"selections outside compiled functions"
        )
    return out


_nonzero = primitive(
    "nonzero",
    _nonzero_fwd,
    None,
    reference=lambda x, fixed_shape=None: np.array(
        [k for k in np.ndindex(*x.shape) if x[k] != 0], dtype=np.int64
    ).reshape(-1, x.ndim),
    samples=lambda rng: [
        Sample((np.where(S.values(rng, s) > 0.5, S.values(rng, s), 0.0),))
        for s in [(5,), (3, 4), (2, 2, 3), (0, 2)]
    ],
    doc="The indices of the nonzero entries, one row each in C order ((n, ndim) int64).",
)


# -- public functions ----------------------------------------------------------------------------
def _index_arg(op: str, index, what: str = "index"):
    """An index given as a Tensor stays one (a compiled plan then reads it on every call)."""
    if not hasattr(index, "requires_grad") and not is_array(index):
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
    if hasattr(src, "requires_grad") or isinstance(src, np.ndarray):
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


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(x, axis: int, index, src, reduce: str, include_self: bool = True):
    """``x`` with the ``src`` values sent to each entry (``[i][index[i][j]]`` along ``axis``)
    combined by ``reduce`` (sum, prod, mean, amax, amin), ``x``'s own entry included if
    ``include_self``; entries no index points at keep ``x``'s value. Gradients: amax/amin share
    equally among the members equal to the result; prod's is exact with zeros."""
    if reduce not in _REDUCES:
        raise ValueError(f"scatter_reduce: reduce must be one of {_REDUCES}, got {reduce!r}")
    index, src = _index_arg("scatter_reduce", index), _src_arg("scatter_reduce", x, src)
    xs = shape_of(x)
    ax = _axis("scatter_reduce", axis, xs)
    _dim_check("scatter_reduce", xs, shape_of(index), ax, shape_of(src))
    if shape_of(src) == ():
        raise ShapeError("scatter_reduce: src must be a tensor with index's rank, not a number")
    if reduce in ("prod", "amax", "amin"):
        return _scatter_reduce(
            x, index, src, axis=ax, reduce=reduce, include_self=bool(include_self)
        )
    zero = xp_of(plain(x)).zeros((), dtype_of(x))
    base = x if include_self else _scatter(x, index, zero, axis=ax)
    total = _scatter_add(base, index, src, axis=ax)
    if reduce == "sum":
        return total
    if dtype_of(x).kind != "f":
        raise DTypeError(f"scatter_reduce: mean needs a float tensor, got dtype {dtype_of(x)}")
    count = _touched(index, xs, ax, dtype_of(x)) + (1.0 if include_self else 0.0)
    return total / where(count == 0, 1.0, count)


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


def split_index(op: str, index) -> tuple[tuple, list]:
    """An index (anything ``x[index]`` takes) as (template, arrays): integer and bool arrays
    become inputs (Tensors stay Tensors, so compiled plans read them), the rest the template."""
    parts = index if isinstance(index, tuple) else (index,)
    template, arrays = [], []
    for p in parts:
        if (
            hasattr(p, "requires_grad")
            or isinstance(p, list)
            or is_array(p)
            or (isinstance(p, (bool, np.bool_)))
        ):
            a = p if hasattr(p, "requires_grad") or is_array(p) else np.asarray(p)
            if dtype_of(a).kind not in "iub":
                raise IndexError(f"{op}: index arrays must be integer or bool, got {dtype_of(a)}")
            template.append(ARRAY)
            arrays.append(a)
        elif isinstance(p, (int, np.integer)):
            template.append(int(p))
        elif p is None or p is Ellipsis or isinstance(p, slice):
            template.append(p)
        else:
            raise IndexError(f"{op}: cannot index with a {type(p).__name__}")
    return tuple(template), arrays


def _fixed(out_shape: tuple):
    return tuple(out_shape) if _TRACING.active is not None else None


def index_get(x, index):
    """``x[index]`` with the index's integer and bool arrays as inputs of the operation (a
    compiled plan reads their values on every call)."""
    template, arrays = split_index("index_get", index)
    if not arrays:
        from .shape import getitem

        return getitem(x, index)
    out_shape = np.empty(shape_of(x), np.bool_)[
        build_index(template, [to_host(plain(a)) for a in arrays])
    ].shape
    fixed = _fixed(out_shape) if any(dtype_of(a).kind == "b" for a in arrays) else None
    return _index_get(x, *arrays, template=template, fixed_shape=fixed)


def index_put(x, index, values, accumulate: bool = False):
    """``x`` with ``values`` (broadcast) written at ``index`` (out of place; ``accumulate``:
    added, repeats accumulating). With repeated indices the last write wins."""
    template, arrays = split_index("index_put", index)
    return _index_put(x, values, *arrays, template=template, accumulate=bool(accumulate))


def masked_fill(x, mask, value):
    """``x`` with ``value`` where the bool ``mask`` (broadcastable to ``x``'s shape) is true;
    ``value`` is a number or a 0-d tensor (then differentiable)."""
    xs, ms = shape_of(x), shape_of(mask)
    if dtype_of(mask).kind != "b":
        raise DTypeError(f"masked_fill: the mask must be bool, got dtype {dtype_of(mask)}")
    try:
        full = np.broadcast_shapes(xs, ms)
    except ValueError:
        full = None
    if full != xs:
        raise ShapeError(f"masked_fill: mask shape {ms} does not broadcast to input shape {xs}")
    if shape_of(value) != ():
        raise ShapeError(f"masked_fill: value must be a number or 0-d, got shape {shape_of(value)}")
    return where(mask, value, x)


def masked_select(x, mask):
    """The entries of ``x`` where the bool ``mask`` is true, as a 1-d tensor (both broadcast
    to one shape). Its length depends on the mask: inside a compiled function a call whose
    mask selects a different number of entries than the traced one raises."""
    if dtype_of(mask).kind != "b":
        raise DTypeError(f"masked_select: the mask must be bool, got dtype {dtype_of(mask)}")
    try:
        full = np.broadcast_shapes(shape_of(x), shape_of(mask))
    except ValueError:
        raise ShapeError(
            f"masked_select: mask shape {shape_of(mask)} and input shape {shape_of(x)} do not "
            f"broadcast"
        ) from None
    if shape_of(x) != full:
        x = broadcast_to(x, full)
    if shape_of(mask) != full:
        mask = broadcast_to(mask, full)
    n = int(np.count_nonzero(plain(mask)))
    return _index_get(x, mask, template=(ARRAY,), fixed_shape=_fixed((n,)))


def nonzero(x, as_tuple: bool = False):
    """The indices of the nonzero entries: an ``(n, ndim)`` int64 tensor, or with
    ``as_tuple`` one 1-d tensor per axis (what ``x[...]`` takes). Its length depends on the
    values: inside a compiled function a call with another count than the traced one raises."""
    a = plain(x)
    a = a if is_array(a) else np.asarray(a)
    n = int(np.count_nonzero(a))
    out = _nonzero(x, fixed_shape=_fixed((n, a.ndim)))
    if not as_tuple:
        return out
    return tuple(out[:, d] for d in range(a.ndim))


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
