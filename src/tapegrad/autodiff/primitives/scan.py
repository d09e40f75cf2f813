"""Cumulative operations along one axis: ``cumsum``, ``cumprod``, ``logcumsumexp``, the running
maximum/minimum with where it was reached (``cummax``, ``cummin``), and the product ``prod``.

Their gradients are exact with zeros in the input and never divide by it: they are built from
``linear_scan``, the first-order linear recurrence ``y[i] = b[i] + a[i] * y[i - 1]``, whose own
VJP is the same recurrence run the other way. Since every rule here is written with primitives,
each operation is differentiable to any order:

* ``cumprod``: d out[j] / d x[i] = (x[0] ... x[i-1]) * (x[i+1] ... x[j]), so the gradient of
  entry i is ``out[i-1] * r[i]`` with ``r[i] = g[i] + x[i+1] * r[i+1]``, a reversed scan;
* ``prod``: the product of the other entries, ``(x[0] ... x[i-1]) * (x[i+1] ... x[n-1])``, from
  two exclusive cumulative products;
* ``logcumsumexp``: ``exp(x[i] - out[i]) * u[i]`` with ``u[i] = g[i] + exp(out[i] - out[i+1]) *
  u[i+1]``, where every factor lies in [0, 1], so large or very negative inputs cannot overflow.
"""

from __future__ import annotations

import numpy as np

from ..backend import expand_reduced, ufunc_accumulate, xp_of
from ..errors import DTypeError, ShapeError
from ..kernels.dispatch import kernels_for
from . import samples as S
from .args import _into, axes_of, dtype_of, normalize_axis, one_axis, shape_of
from .elementwise import exp
from .indexing import gather
from .registry import Sample, primitive, run
from .shape import _concatenate, _getitem, _pad, _permute


class ValuesIndices(tuple):
    """What ``sort``, ``topk``, ``cummax`` and ``cummin`` return: ``(values, indices)``, also
    as ``.values`` and ``.indices``. Built from two items or from one iterable of two (as
    compiled functions rebuild the tuples they return)."""

    __slots__ = ()

    def __new__(cls, *items):
        if len(items) == 1:
            items = tuple(items[0])
        if len(items) != 2:
            raise TypeError(f"ValuesIndices holds values and indices, got {len(items)} items")
        return super().__new__(cls, items)

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __repr__(self) -> str:
        return f"ValuesIndices(values={self[0]!r}, indices={self[1]!r})"


def _along(axis: int, ndim: int, part) -> tuple:
    return (slice(None),) * axis + (part,) + (slice(None),) * (ndim - axis - 1)


def shift(v, axis: int, down: bool, fill: float):
    """``v`` moved one place along ``axis``: ``down`` gives ``v'[i] = v[i - 1]`` (``fill`` at 0),
    otherwise ``v'[i] = v[i + 1]`` (``fill`` at the end). Recorded when ``v`` is a Tensor."""
    ndim, n = len(v.shape), v.shape[axis]
    width = tuple(
        (1, 0) if (d == axis and down) else (0, 1) if d == axis else (0, 0) for d in range(ndim)
    )
    padded = run(_pad, v, pad_width=width, value=float(fill))
    part = slice(0, n) if down else slice(1, n + 1)
    return run(_getitem, padded, index=_along(axis, ndim, part))


def _flip(x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    return np.flip(x, axis) if reverse else x


# -- linear_scan ---------------------------------------------------------------------------------
def _linear_scan_fwd(b, a, axis, reverse, out=None):
    if b.shape != a.shape:
        raise ShapeError(f"linear_scan: b has shape {b.shape} and a {a.shape}; they must match")
    bm, am = np.moveaxis(b, axis, 0), np.moveaxis(a, axis, 0)
    rows, cols = bm.shape[0], int(np.prod(bm.shape[1:], dtype=np.int64))
    xp = xp_of(b)
    b2 = xp.ascontiguousarray(bm.reshape(rows, cols))
    a2 = xp.ascontiguousarray(am.reshape(rows, cols).astype(b2.dtype, copy=False))
    y2 = np.empty_like(b2)
    if b2.size:
        kernels_for(b2).linear_recurrence(b2, a2, y2, reverse)
    return _into(out, np.moveaxis(y2.reshape(bm.shape), 0, axis))


def _linear_scan_vjp(g, out, needs, b, a, axis, reverse):
    # y[i] = b[i] + a[i] y[i-1]: the adjoint z[i] = g[i] + a[i+1] z[i+1] runs the other way;
    # db = z and da[i] = z[i] y[i-1] (a's first entry is never read: its gradient is 0)
    z = run(_linear_scan, g, shift(a, axis, down=reverse, fill=0.0), axis=axis, reverse=not reverse)
    da = z * shift(out, axis, down=not reverse, fill=0.0) if needs[1] else None
    return [z if needs[0] else None, da]


def _linear_scan_reference(b, a, axis, reverse):
    bm, am = np.moveaxis(b, axis, 0), np.moveaxis(a, axis, 0)
    y = np.zeros(bm.shape)
    order = list(range(bm.shape[0]))[:: -1 if reverse else 1]
    for k, i in enumerate(order):
        y[i] = bm[i] + (am[i] * y[order[k - 1]] if k else 0.0)
    return np.moveaxis(y, 0, axis)


def _linear_scan_samples(rng):
    return [
        Sample((S.values(rng, s), S.values(rng, s, -1.2, 1.2)), {"axis": ax, "reverse": r})
        for s, ax, r in [
            ((6,), 0, False),
            ((6,), 0, True),
            ((3, 4, 2), 1, False),
            ((3, 4, 2), 0, True),
            ((2, 5), 1, True),
            ((1, 3), 0, False),
            ((0, 3), 0, False),
        ]
    ]


_linear_scan = primitive(
    "linear_scan",
    _linear_scan_fwd,
    _linear_scan_vjp,
    reference=_linear_scan_reference,
    samples=_linear_scan_samples,
    doc="y[i] = b[i] + a[i] * y[i-1] along axis (reverse: y[i] = b[i] + a[i] * y[i+1]); a's "
    "first (last) entry is unused. The building block of the scans' exact gradients.",
)


def linear_scan(b, a, axis: int = 0, reverse: bool = False):
    """The linear recurrence ``y[i] = b[i] + a[i] * y[i - 1]`` along ``axis`` (``reverse``:
    ``y[i] = b[i] + a[i] * y[i + 1]``), differentiable in ``b`` and ``a``."""
    ndim = len(b.shape)
    if tuple(b.shape) != tuple(a.shape):
        raise ShapeError(f"linear_scan: b has shape {b.shape} and a {a.shape}; they must match")
    if ndim == 0:
        raise ShapeError("linear_scan: needs at least one axis")
    return _linear_scan(b, a, axis=normalize_axis(axis, ndim)[0], reverse=bool(reverse))


# -- cumsum --------------------------------------------------------------------------------------
def _cumsum_fwd(x, axis, reverse, out=None):
    return _into(out, _flip(np.cumsum(_flip(x, axis, reverse), axis=axis), axis, reverse))


def _cumsum_reference(x, axis, reverse):
    n = x.shape[axis]
    parts = [
        np.sum(np.take(x, range(i, n) if reverse else range(i + 1), axis=axis), axis=axis)
        for i in range(n)
    ]
    return np.stack(parts, axis=axis) if parts else np.zeros(x.shape)


_SCAN_CASES = [
    ((5,), 0, False),
    ((5,), 0, True),
    ((2, 3, 4), 1, False),
    ((2, 3, 4), 2, True),
    ((2, 3, 4), 0, False),
    ((1, 4), 0, False),
    ((0, 3), 1, False),
    ((3, 0), 1, True),
]


def _scan_samples(lo=-2.0, hi=2.0, zeros=False):
    def make(rng):
        out = []
        for s, ax, r in _SCAN_CASES:
            x = S.values(rng, s, lo, hi)
            out.append(Sample((x,), {"axis": ax, "reverse": r}))
        if zeros:  # exact zeros: the gradient must not divide by them
            x = S.values(rng, (3, 5), lo, hi)
            x[0, 1] = x[1, 0] = x[1, 3] = x[2, 2] = x[2, 4] = 0.0
            out += [Sample((x,), {"axis": 1, "reverse": False})]
            out += [Sample((x,), {"axis": 1, "reverse": True})]
        return out

    return make


_cumsum = primitive(
    "cumsum",
    _cumsum_fwd,
    (lambda g, out, x, axis, reverse: run(_cumsum, g, axis=axis, reverse=not reverse),),
    reference=_cumsum_reference,
    samples=_scan_samples(),
    doc="Cumulative sum along axis (reverse: from the end); its VJP is the cumulative sum the "
    "other way.",
)


# -- cumprod -------------------------------------------------------------------------------------
def _cumprod_fwd(x, axis, reverse, out=None):
    return _into(out, _flip(np.cumprod(_flip(x, axis, reverse), axis=axis), axis, reverse))


def _cumprod_vjp(g, out, x, axis, reverse):
    # entry i: (product of the entries before it) * sum_{j >= i} g[j] x[i+1] ... x[j]
    before = shift(out, axis, down=not reverse, fill=1.0)
    after = run(
        _linear_scan, g, shift(x, axis, down=reverse, fill=0.0), axis=axis, reverse=not reverse
    )
    return before * after


def _cumprod_reference(x, axis, reverse):
    n = x.shape[axis]
    parts = [
        np.multiply.reduce(np.take(x, range(i, n) if reverse else range(i + 1), axis=axis), axis)
        for i in range(n)
    ]
    return np.stack(parts, axis=axis) if parts else np.zeros(x.shape)


_cumprod = primitive(
    "cumprod",
    _cumprod_fwd,
    (_cumprod_vjp,),
    reference=_cumprod_reference,
    samples=_scan_samples(-1.5, 1.5, zeros=True),
    doc="Cumulative product along axis (reverse: from the end). The gradient is exact with zeros "
    "in x (no division): exclusive products times a reversed linear scan.",
)


# -- logcumsumexp --------------------------------------------------------------------------------
def _logcumsumexp_fwd(x, axis, out=None):
    return _into(out, ufunc_accumulate(np.logaddexp, x, axis))


def _logcumsumexp_vjp(g, out, x, axis):
    n, ndim = out.shape[axis], len(out.shape)
    following = run(  # out[i + 1], and out[n - 1] itself at the end (a ratio of 1, never read)
        _concatenate,
        out[_along(axis, ndim, slice(1, n))],
        out[_along(axis, ndim, slice(n - 1, n))],
        axis=axis,
    )
    u = run(_linear_scan, g, run(exp, out - following), axis=axis, reverse=True)
    return run(exp, x - out) * u


def _logcumsumexp_samples(rng):
    out = [Sample((S.values(rng, s),), {"axis": ax}) for s, ax, _ in _SCAN_CASES]
    wide = np.array([[-30.0, 2.0, 1.5, 40.0, -5.0], [0.3, 0.3, -1.0, 0.2, 0.1]])
    return out + [Sample((wide,), {"axis": 1})]


_logcumsumexp = primitive(
    "logcumsumexp",
    _logcumsumexp_fwd,
    (_logcumsumexp_vjp,),
    reference=lambda x, axis: np.log(np.cumsum(np.exp(x), axis=axis)),
    samples=_logcumsumexp_samples,
    doc="log(cumsum(exp(x))) along axis, by pairwise logaddexp (no overflow, no underflow of "
    "the early terms); the VJP only forms exponentials of non-positive numbers.",
)


# -- running maximum / minimum: where it was reached ---------------------------------------------
def _cum_extreme_index_fwd(x, axis, largest):
    run_ = ufunc_accumulate(np.maximum if largest else np.minimum, x, axis)
    hit = x == run_  # the running extreme was (re)reached here: a tie moves it to the later entry
    if x.dtype.kind == "f":
        hit |= np.isnan(x)  # a NaN is the extreme from there on, and each later NaN takes over
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    pos = xp_of(x).arange(x.shape[axis], dtype=np.int64).reshape(shape)
    return ufunc_accumulate(np.maximum, np.where(hit, pos, 0), axis)


def _cum_extreme_index_reference(x, axis, largest):
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros(xm.shape, dtype=np.int64)
    for k in np.ndindex(*xm.shape[:-1]):
        best, at = None, 0
        for i, v in enumerate(xm[k]):
            if best is None or np.isnan(v):
                best, at = v, i
            elif not np.isnan(best) and (v >= best if largest else v <= best):
                best, at = v, i
            out[k + (i,)] = at
    return np.moveaxis(out, -1, axis)


def _cum_extreme_samples(rng):
    ties = np.array([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0], [4.0, np.nan, 5.0, np.nan, 1.0, 7.0]])
    return [
        Sample((S.distinct(rng, (2, 3, 4)),), {"axis": 1, "largest": True}),
        Sample((S.distinct(rng, (2, 3, 4)),), {"axis": 2, "largest": False}),
        Sample((ties,), {"axis": 1, "largest": True}),
        Sample((ties,), {"axis": 1, "largest": False}),
        Sample((np.zeros((0, 2)),), {"axis": 0, "largest": True}),
    ]


_cum_extreme_index = primitive(
    "cum_extreme_index",
    _cum_extreme_index_fwd,
    None,
    reference=_cum_extreme_index_reference,
    samples=_cum_extreme_samples,
    doc="Where the running maximum (largest) or minimum was last reached along axis: ties go to "
    "the later entry, a NaN is the extreme from where it appears (int64, not differentiable).",
)


# -- prod ----------------------------------------------------------------------------------------
def _prod_vjp(g, out, x, axis, keepdims):
    if not axis:
        return g
    # the product of the other entries of each reduced group: move the reduced axes last, merge
    # them into one, and multiply the exclusive cumulative products from either side
    keep = [d for d in range(x.ndim) if d not in axis]
    perm = tuple(keep + list(axis))
    xp = run(_permute, x, axes=perm)
    lead = xp.shape[: len(keep)]
    flat = xp.reshape(lead + (int(np.prod(xp.shape[len(keep) :], dtype=np.int64)),))
    last = len(keep)
    left = shift(run(_cumprod, flat, axis=last, reverse=False), last, down=True, fill=1.0)
    right = shift(run(_cumprod, flat, axis=last, reverse=True), last, down=False, fill=1.0)
    others = run(
        _permute, (left * right).reshape(xp.shape), axes=tuple(int(i) for i in np.argsort(perm))
    )
    return expand_reduced(g, x.ndim, axis, keepdims) * others


def _prod_samples(rng):
    out = [
        Sample((S.values(rng, s, -1.5, 1.5),), {"axis": ax, "keepdims": kd})
        for s, ax, kd in [
            ((5,), (0,), False),
            ((2, 3, 4), (1,), False),
            ((2, 3, 4), (0, 2), True),
            ((2, 3, 4), (0, 1, 2), False),
            ((3,), (), False),
            ((), (), False),
            ((0, 3), (0,), False),
        ]
    ]
    x = S.values(rng, (3, 4), -1.5, 1.5)
    x[0, 2] = x[1, 1] = x[1, 3] = 0.0  # one zero in a row, two in another
    return out + [
        Sample((x,), {"axis": (1,), "keepdims": False}),
        Sample((x,), {"axis": (0, 1), "keepdims": True}),
    ]


_prod = primitive(
    "prod",
    lambda x, axis, keepdims, out=None: _into(out, np.prod(x, axis=axis, keepdims=keepdims)),
    (_prod_vjp,),
    reference=lambda x, axis, keepdims: np.multiply.reduce(
        np.asarray(x, np.float64), axis=axis, keepdims=keepdims
    ),
    samples=_prod_samples,
    doc="Product over axes; the gradient of each entry is the product of the others (exact "
    "with zeros, from exclusive cumulative products: no division).",
)


# -- public functions ----------------------------------------------------------------------------


def _scan_axis(op: str, x, axis):
    """(x, axis, shape to restore or None): ``axis=None`` scans the flattened tensor (NumPy's
    default); a 0-d tensor is scanned as its one entry and keeps its shape."""
    shape = shape_of(x)
    ax = None if axis is None else one_axis(op, axis, shape)
    if ax is None:
        return x.reshape((-1,)), 0, (shape if not shape else None)
    return x, ax, None


def _restore(y, restore):
    return y if restore is None else y.reshape(restore)


def cumsum(x, axis=None):
    """Cumulative sum along ``axis`` (None: over the flattened tensor, NumPy's default)."""
    x, ax, restore = _scan_axis("cumsum", x, axis)
    return _restore(_cumsum(x, axis=ax, reverse=False), restore)


def cumprod(x, axis=None):
    """Cumulative product along ``axis`` (None: flattened); the gradient is exact with zeros."""
    x, ax, restore = _scan_axis("cumprod", x, axis)
    return _restore(_cumprod(x, axis=ax, reverse=False), restore)


def logcumsumexp(x, axis=None):
    """``log(cumsum(exp(x)))`` along ``axis``, stable for any magnitudes (float input)."""
    if dtype_of(x).kind != "f":
        raise DTypeError(f"logcumsumexp: needs a float tensor, got dtype {dtype_of(x)}")
    x, ax, restore = _scan_axis("logcumsumexp", x, axis)
    return _restore(_logcumsumexp(x, axis=ax), restore)


def _cum_extreme(op, largest, x, axis):
    if dtype_of(x).kind not in "fiub":
        raise DTypeError(f"{op}: needs a numeric tensor, got dtype {dtype_of(x)}")
    x, ax, restore = _scan_axis(op, x, axis)
    idx = _cum_extreme_index(x, axis=ax, largest=largest)
    return ValuesIndices(_restore(gather(x, ax, idx), restore), _restore(idx, restore))


def cummax(x, axis):
    """``(values, indices)``: the running maximum along ``axis`` and where it was reached (a tie
    moves the index to the later entry; NaN counts as the largest). The gradient goes to the
    entries the values come from."""
    return _cum_extreme("cummax", True, x, axis)


def cummin(x, axis):
    """``(values, indices)``: the running minimum along ``axis``; see :func:`cummax`."""
    return _cum_extreme("cummin", False, x, axis)


def prod(x, axis=None, keepdims: bool = False):
    """The product over ``axis`` (None: every entry); the gradient is exact with zeros."""
    return _prod(x, axis=axes_of("prod", axis, shape_of(x)), keepdims=bool(keepdims))
