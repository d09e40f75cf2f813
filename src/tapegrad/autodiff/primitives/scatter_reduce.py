"""``scatter_reduce`` (PyTorch's ``scatter_reduce(input, dim, index, src, reduce)``): ``prod``,
``amax`` and ``amin`` as a primitive, ``sum`` and ``mean`` composed of ``scatter_add``.

The product's gradient is exact with zeros: each entry gets the product of the other members of
its group, from segmented exclusive products (a sort by destination and two linear scans),
never a division.
"""

from __future__ import annotations

import numpy as np

from ..backend import ufunc_at, xp_of
from ..errors import DTypeError, ShapeError
from . import samples as S
from .args import _into, dtype_of, plain, shape_of
from .elementwise import where
from .indexing import (
    _axis,
    _check_range,
    _dim_check,
    _dim_index,
    _gather,
    _head,
    _index_arg,
    _scatter,
    _scatter_add,
    _size,
    _src_arg,
    _src_grad,
    _take,
)
from .registry import Sample, primitive, run
from .scan import _linear_scan, shift
from .sort import _argsort


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
    ufunc_at(_UFUNCS[reduce], res, at, _head(src, index.shape))
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
