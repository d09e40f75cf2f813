"""Reductions along axes, and the softmax family (reductions that keep the shape).

The public wrappers normalise ``axis`` (None, int, negative, tuple) to a sorted tuple of
non-negative ints before recording, so every rule sees one form.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from ..backend import expand_reduced, is_array, xp_of
from ..kernels.dispatch import kernels_for
from . import samples as S
from .args import normalize_axis, pick_axis, plain
from .elementwise import absolute, exp, power, sqrt
from .registry import Sample, primitive, run, scratch
from .shape import _broadcast_to

_AXES_CASES = [
    ((2, 3, 4), None, False),
    ((2, 3, 4), (1,), False),
    ((2, 3, 4), (0, 2), True),
    ((2, 3, 4), (2,), True),
    ((5,), (0,), False),
    ((), (), False),
    ((1, 3), (0,), False),
    ((0, 3), (1,), False),
]


def _reduce_samples(make=S.values, cases=_AXES_CASES, allow_empty=True):
    def build(rng):
        return [
            Sample(
                (make(rng, shape),),
                {"axis": axes if axes is not None else tuple(range(len(shape))), "keepdims": kd},
            )
            for shape, axes, kd in cases
            if allow_empty or 0 not in shape
        ]

    return build


def _grad_back(g, x, axis, keepdims):
    return run(_broadcast_to, expand_reduced(g, x.ndim, axis, keepdims), shape=x.shape)


_sum = primitive(
    "sum",
    # the array method: np.sum adds ~0.9 us of Python dispatch to every call
    lambda x, axis, keepdims, out=None: x.sum(axis=axis, keepdims=keepdims, out=out),
    (lambda g, out, x, axis, keepdims: _grad_back(g, x, axis, keepdims),),
    reference=lambda x, axis, keepdims: np.add.reduce(x, axis=axis, keepdims=keepdims),
    samples=_reduce_samples(),
    doc="Sum over axes.",
)


def _count(x, axis) -> int:
    shape = x.shape
    return math.prod([shape[a] for a in axis])  # np.prod's Python dispatch is ~2 us a call


def _mean_fwd(x, axis, keepdims, out=None):
    if (
        type(x) is not np.ndarray
        or x.dtype.kind != "f"
        or (out is not None and out.dtype != x.dtype)
    ):
        return np.mean(x, axis=axis, keepdims=keepdims, out=out)  # a device's arrays; integers
    # np.mean divides by an integer count, which for float32 runs float64's loop through
    # NumPy's buffered iterator (a temporary each call); the same sum divided by the count in
    # the array's dtype gives the same bits (a float64 quotient rounded to float32 is the
    # correctly rounded float32 quotient) and allocates nothing. Eager and compiled calls both
    # take this path.
    total = np.asarray(x.sum(axis=axis, keepdims=keepdims, out=out))  # the method: no dispatch
    return np.divide(total, x.dtype.type(_count(x, axis)), out=total)


_mean = primitive(
    "mean",
    _mean_fwd,
    (
        lambda g, out, x, axis, keepdims: _grad_back(
            g / builtins.max(_count(x, axis), 1), x, axis, keepdims
        ),
    ),
    reference=lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims) / _count(x, axis),
    samples=_reduce_samples(allow_empty=False),
    doc="Mean over axes.",
)


def _extreme_vjp(g, out, x, axis, keepdims):
    # The gradient goes to the entries equal to the extreme, shared equally between ties.
    o = expand_reduced(out, x.ndim, axis, keepdims)
    mask = x == o
    count = run(_sum, mask, axis=axis, keepdims=True).astype(x.dtype)
    return expand_reduced(g, x.ndim, axis, keepdims) * mask / count


_max = primitive(
    "max",
    lambda x, axis, keepdims, out=None: np.max(x, axis=axis, keepdims=keepdims, out=out),
    (_extreme_vjp,),
    reference=lambda x, axis, keepdims: -np.min(-x, axis=axis, keepdims=keepdims),
    samples=_reduce_samples(S.distinct, allow_empty=False),
    doc="Maximum over axes; tied maxima share the gradient equally.",
)


def _min_fwd(x, axis, keepdims, out=None):
    if out is None or type(x) is np.ndarray:
        return np.min(x, axis=axis, keepdims=keepdims, out=out)
    # CuPy 14.2's min(out=...) hands ``out`` to its CUB reduction as the dtype (a TypeError on
    # an H200 with NumPy 2.5): reduce, then copy into the plan's buffer
    np.copyto(out, np.min(x, axis=axis, keepdims=keepdims))
    return out


_min = primitive(
    "min",
    _min_fwd,
    (_extreme_vjp,),
    reference=lambda x, axis, keepdims: -np.max(-x, axis=axis, keepdims=keepdims),
    samples=_reduce_samples(S.distinct, allow_empty=False),
    doc="Minimum over axes; tied minima share the gradient equally.",
)


def _logsumexp_fwd(x, axis, keepdims, out=None, ws=None):
    kept = tuple(1 if i in axis else n for i, n in enumerate(x.shape))
    m = scratch(ws, "max", kept, x.dtype, like=x)
    if x.size:
        np.max(x, axis=axis, keepdims=True, out=m)
        np.copyto(m, 0, where=~np.isfinite(m))
    else:
        m.fill(0)
    e = np.subtract(x, m, out=scratch(ws, "e", x.shape, x.dtype, like=x))
    np.exp(e, out=e)
    s = np.sum(e, axis=axis, keepdims=True, out=scratch(ws, "sum", kept, x.dtype, like=x))
    np.log(s, out=s)
    res = np.add(s, m, out=None if out is None else out.reshape(kept))
    if out is not None:
        return out
    return res if keepdims else np.squeeze(res, axis=axis)


def _logsumexp_vjp(g, out, x, axis, keepdims):
    o = expand_reduced(out, x.ndim, axis, keepdims)
    return expand_reduced(g, x.ndim, axis, keepdims) * run(exp, x - o)


_logsumexp = primitive(
    "logsumexp",
    _logsumexp_fwd,
    (_logsumexp_vjp,),
    reference=lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
    samples=_reduce_samples(allow_empty=False),
    doc="log(sum(exp(x))) over axes, computed stably (the maximum is subtracted first).",
)


def _kept(x, axis):
    return tuple(1 if i == axis else n for i, n in enumerate(x.shape))


def _max_kept(x, axis, ws):
    m = scratch(ws, "m", _kept(x, axis), x.dtype, like=x)
    if x.ndim == 0:  # nothing to reduce (NumPy's max refuses an out= here)
        np.copyto(m, x)
        return m
    return np.max(x, axis=axis, keepdims=True, out=m)


def _softmax_fwd(x, axis, out=None, ws=None):
    if x.dtype == np.float32 and x.ndim and axis == x.ndim - 1:
        return _softmax_rows(x, None, out)
    m = _max_kept(x, axis, ws)
    e = np.subtract(x, m, out=np.empty_like(x) if out is None else out)
    np.exp(e, out=e)
    e /= np.sum(e, axis=axis, keepdims=True, out=m)
    return e


def _softmax_vjp(g, out, x, axis):
    return run(softmax_backward, g, out, axis=axis)


def _softmax_backward_fwd(g, y, axis, out=None):
    """``y * (g - sum(g * y, axis))``: one pass of the device's kernel per row over the last
    axis of float arrays of one shape and dtype, array operations otherwise."""
    if (
        axis == y.ndim - 1
        and g.shape == y.shape
        and g.dtype == y.dtype
        and y.dtype in (np.float32, np.float64)
        and y.ndim
    ):
        xp = xp_of(y)
        res = xp.empty(y.shape, y.dtype) if out is None or not out.flags.c_contiguous else out
        gc, yc = xp.ascontiguousarray(g), xp.ascontiguousarray(y)
        d = y.shape[-1]
        kernels_for(y).softmax_backward(gc.reshape(-1, d), yc.reshape(-1, d), res.reshape(-1, d))
        if out is not None and res is not out:
            np.copyto(out, res)
            return out
        return res
    res = y * (g - (g * y).sum(axis=axis, keepdims=True))
    if out is None:
        return res
    out[...] = res
    return out


softmax_backward = primitive(
    "softmax_backward",
    _softmax_backward_fwd,
    (
        lambda gg, out, g, y, axis: run(softmax_backward, gg, y, axis=axis),
        lambda gg, out, g, y, axis: (
            gg * (g - run(_sum, g * y, axis=axis, keepdims=True))
            - g * run(_sum, gg * y, axis=axis, keepdims=True)
        ),
    ),
    reference=lambda g, y, axis: y * g - y * np.sum(g * y, axis=axis, keepdims=True),
    samples=lambda rng: [
        Sample((S.values(rng, s), S.values(rng, s, 0.1, 1.0)), {"axis": a})
        for s, a in [((5,), 0), ((2, 3), 1), ((2, 3), 0), ((2, 3, 4), 1), ((3, 4), 1)]
    ],
    doc="softmax's VJP ``y * (g - sum(g * y))`` along one axis (one compiled pass per row "
    "over the last axis); differentiable in both inputs.",
)


def _log_softmax_fwd(x, axis, out=None, ws=None):
    m = _max_kept(x, axis, ws)
    z = np.subtract(x, m, out=np.empty_like(x) if out is None else out)
    e = np.exp(z, out=scratch(ws, "e", x.shape, x.dtype, like=x))
    s = np.sum(e, axis=axis, keepdims=True, out=m)
    z -= np.log(s, out=s)
    return z


def _log_softmax_vjp(g, out, x, axis):
    return g - run(exp, out) * run(_sum, g, axis=axis, keepdims=True)


def _softmax_rows(x, keep, out):
    """Softmax over the last axis of a float32 array, entries where ``keep`` (a boolean array
    broadcasting to ``x``, or None) is False left out, by the device's kernel (one pass per row
    over numba's threads on the CPU)."""
    xp = xp_of(x)
    d = x.shape[-1]
    res = out if out is not None and out.flags.c_contiguous else xp.empty(x.shape, x.dtype)
    rows = xp.ascontiguousarray(x).reshape(-1, d)
    if keep is not None:
        while keep.ndim > 1 and keep.shape[0] == 1:  # leading axes it broadcasts along
            keep = keep[0]
        if keep.ndim and keep.shape == x.shape[x.ndim - keep.ndim :]:
            keep = xp.ascontiguousarray(keep).reshape(-1, d)  # repeats every len(keep) rows
        else:
            keep = xp.ascontiguousarray(xp.broadcast_to(keep, x.shape)).reshape(-1, d)
    if rows.shape[0] and d:
        kernels_for(x).softmax_forward(rows, keep, res.reshape(-1, d))
    if out is not None and res is not out:
        np.copyto(out, res)
        return out
    return res


def _masked_softmax_fwd(x, keep, out=None):
    if x.dtype == np.float32 and x.ndim:
        return _softmax_rows(x, keep, out)
    return _softmax_fwd(np.where(keep, x, -np.inf), x.ndim - 1, out)


def _masked_softmax_samples(rng):
    causal = np.tril(np.ones((4, 4), bool))
    return [
        Sample((S.values(rng, (2, 4, 4)), causal)),
        Sample((S.values(rng, (3, 5)), S.values(rng, (3, 5)) > -0.5)),
        Sample((S.values(rng, (2, 3, 4)), S.values(rng, (3, 1)) > -2)),
    ]


masked_softmax = primitive(
    "masked_softmax",
    _masked_softmax_fwd,
    (lambda g, out, x, keep: run(softmax_backward, g, out, axis=out.ndim - 1), None),
    reference=lambda x, keep: _reference_masked_softmax(x, keep),
    samples=_masked_softmax_samples,
    doc="softmax(where(keep, x, -inf)) over the last axis, ``keep`` a boolean array "
    "broadcasting to x: attention's causal or padding mask folded into the softmax (one pass "
    "per row for float32). A row with every entry left out is NaN, as the composed form.",
)


def _reference_masked_softmax(x, keep):
    z = np.where(keep, np.asarray(x, np.float64), -np.inf)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_samples(rng):
    return [
        Sample((S.values(rng, s),), {"axis": a})
        for s, a in [((5,), 0), ((2, 3), 1), ((2, 3), 0), ((2, 3, 4), 1), ((3, 1), 1)]
    ]


_softmax = primitive(
    "softmax",
    _softmax_fwd,
    (_softmax_vjp,),
    reference=lambda x, axis: np.exp(x) / np.sum(np.exp(x), axis=axis, keepdims=True),
    samples=_softmax_samples,
    doc="exp(x) / sum(exp(x)) along one axis, stable.",
)
_log_softmax = primitive(
    "log_softmax",
    _log_softmax_fwd,
    (_log_softmax_vjp,),
    reference=lambda x, axis: x - np.log(np.sum(np.exp(x), axis=axis, keepdims=True)),
    samples=_softmax_samples,
    doc="x - logsumexp(x) along one axis, stable.",
)


def _ndim(x) -> int:
    return np.ndim(plain(x))


def _reducer(prim, what):
    def reduce(x, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        axis, keepdims = pick_axis(prim.name, axis, keepdims, dim, keepdim)
        return prim(x, axis=normalize_axis(axis, _ndim(x), prim.name), keepdims=keepdims)

    reduce.__name__ = prim.name
    reduce.__doc__ = (
        f"{what} of ``x`` over ``axis`` (None: all axes), keeping reduced dims "
        f"as size 1 if ``keepdims`` (PyTorch's ``dim=``, ``keepdim=`` too)."
    )
    return reduce


sum = _reducer(_sum, "Sum")  # noqa: A001
mean = _reducer(_mean, "Mean")
max = _reducer(_max, "Maximum")  # noqa: A001
min = _reducer(_min, "Minimum")  # noqa: A001
logsumexp = _reducer(_logsumexp, "log(sum(exp(x))) (stable)")


# -- composites: statistics and norms from the primitives above (so differentiable twice) ------
def var(
    x,
    axis=None,
    correction: int = 1,
    keepdims: bool = False,
    *,
    dim=None,
    keepdim=None,
    unbiased=None,
):
    """Variance over ``axis`` (or ``dim``): the sum of squared deviations over
    ``n - correction`` (1: unbiased, PyTorch's default; 0: the population variance).
    PyTorch's older ``unbiased=`` (True: correction 1, False: 0) works too."""
    axis, keepdims = pick_axis("var", axis, keepdims, dim, keepdim)
    if unbiased is not None:
        correction = int(bool(unbiased))
    axes = normalize_axis(axis, _ndim(x), "var")
    n = int(np.prod([np.shape(_plain(x))[a] for a in axes], dtype=np.int64))
    d = x - mean(x, axes, keepdims=True)
    return sum(d * d, axes, keepdims) / builtins.max(n - correction, 0)


def std(
    x,
    axis=None,
    correction: int = 1,
    keepdims: bool = False,
    *,
    dim=None,
    keepdim=None,
    unbiased=None,
):
    """Standard deviation: the square root of :func:`var` (``unbiased=`` as there)."""
    axis, keepdims = pick_axis("std", axis, keepdims, dim, keepdim)
    return sqrt(var(x, axis, correction, keepdims, unbiased=unbiased))


def std_mean(
    x,
    axis=None,
    correction: int = 1,
    keepdims: bool = False,
    *,
    dim=None,
    keepdim=None,
    unbiased=None,
):
    """``(std, mean)`` over ``axis`` (PyTorch's ``dim``, ``keepdim``, ``unbiased`` too)."""
    axis, keepdims = pick_axis("std_mean", axis, keepdims, dim, keepdim)
    if unbiased is not None:
        correction = int(bool(unbiased))
    return std(x, axis, correction, keepdims), mean(x, axis, keepdims)


def norm(x, ord=2, axis=None, keepdims: bool = False):  # noqa: A002 - NumPy's name
    """The vector ``ord``-norm over ``axis`` (all entries by default): 2, 1, inf, -inf or any
    p > 0. At the zero vector the gradient is 0, as PyTorch's (the formula's is 0/0)."""
    axes = normalize_axis(axis, _ndim(x), "norm")
    a = absolute(x)
    if ord == 2:
        return _root_at_zero(sum(x * x, axes, keepdims), sqrt)
    if ord == 1:
        return sum(a, axes, keepdims)
    if ord == np.inf:
        return max(a, axes, keepdims)
    if ord == -np.inf:
        return min(a, axes, keepdims)
    if not ord > 0:
        raise ValueError(f"norm: ord must be positive or +-inf, got {ord}")
    return _root_at_zero(sum(power(a, float(ord)), axes, keepdims), lambda t: power(t, 1.0 / ord))


def _root_at_zero(total, root):
    """``root(total)`` whose gradient is 0 where ``total`` is 0 (PyTorch's subgradient of a
    norm at the zero vector) instead of 0 * inf = NaN: the root reads 1 there, and the result
    is 0; a double ``where``, so higher-order gradients (gradient penalties) stay finite."""
    from .elementwise import where  # here, not in the import block (being reorganised)

    zero = total == 0
    return where(zero, 0.0, root(where(zero, 1.0, total)))


def _arg_extreme_fwd(x, axis, keepdims, largest, out=None):
    """The flat position (``axis`` None) or the index along one axis of the first extreme."""
    fn = np.argmax if largest else np.argmin
    xp = xp_of(x)
    if axis is None:
        res = xp.asarray(fn(x.reshape(-1))).reshape((1,) * x.ndim if keepdims else ())
    elif x.ndim == 0:  # a 0-d x: its one entry is at index 0
        res = xp.zeros((), np.int64)
    else:
        res = xp.asarray(fn(x, axis=axis, keepdims=keepdims))
    if out is None:
        return res.astype(np.int64, copy=False)
    np.copyto(out, res)
    return out


def _arg_extreme_reference(x, axis, keepdims, largest):
    y = x if largest else -x
    if axis is None:
        flat = y.reshape(-1)
        i = int(np.flatnonzero(flat == flat.max())[0])
        return np.full((1,) * x.ndim if keepdims else (), i)
    if x.ndim == 0:
        return np.zeros((), np.int64)
    m = np.moveaxis(y, axis, -1)
    idx = (m == m.max(axis=-1, keepdims=True)).argmax(axis=-1)  # the first maximum
    return np.expand_dims(idx, axis) if keepdims else idx


_arg_extreme = primitive(
    "arg_extreme",
    _arg_extreme_fwd,
    None,
    reference=_arg_extreme_reference,
    samples=lambda rng: [
        Sample((S.distinct(rng, shape),), {"axis": axis, "keepdims": kd, "largest": largest})
        for shape, axis, kd in [
            ((2, 3, 4), None, False),
            ((2, 3, 4), 1, True),
            ((5,), 0, False),
            ((), None, True),
            ((), 0, False),
            ((2, 3), None, True),
        ]
        for largest in (True, False)
    ],
    doc="argmax (largest) or argmin: the index of the first extreme along one axis, or the "
    "flat position over all (int64, not differentiable; a compiled plan computes it on every "
    "call).",
)


def _index_reduction(largest: bool, name: str):
    def reduce(x, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        axis, keepdims = pick_axis(name, axis, keepdims, dim, keepdim)
        if axis is not None:
            axes = normalize_axis(axis, _ndim(x), name)
            axis = axes[0] if axes else 0
        return _arg_extreme(x, axis=axis, keepdims=bool(keepdims), largest=largest)

    reduce.__name__ = name
    reduce.__doc__ = f"{name} over ``axis`` (None: all entries); int64, not differentiable."
    return reduce


argmax = _index_reduction(True, "argmax")
argmin = _index_reduction(False, "argmin")


def _truth_fwd(x, axis, keepdims, every, out=None):
    return (np.all if every else np.any)(x, axis=axis, keepdims=keepdims, out=out)


_truth = primitive(
    "all_any",
    _truth_fwd,
    None,
    reference=lambda x, axis, keepdims, every: (
        np.logical_not(np.logical_not(x).sum(axis=axis, keepdims=keepdims) > 0)
        if every
        else x.astype(bool).sum(axis=axis, keepdims=keepdims) > 0
    ),
    samples=lambda rng: [
        Sample((rng.uniform(size=shape) > 0.3,), {"axis": axis, "keepdims": kd, "every": every})
        for shape, axis, kd in [((2, 3), (0, 1), False), ((2, 3), (1,), True), ((4,), (0,), False)]
        for every in (True, False)
    ],
    doc="all (every) or any over axes: bool, not differentiable.",
)


def all(x, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):  # noqa: A001
    """Whether every entry over ``axis`` (or ``dim``) is nonzero (bool, not differentiable)."""
    axis, keepdims = pick_axis("all", axis, keepdims, dim, keepdim)
    return _truth(x, axis=normalize_axis(axis, _ndim(x), "all"), keepdims=keepdims, every=True)


def any(x, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):  # noqa: A001
    """Whether some entry over ``axis`` (or ``dim``) is nonzero (bool, not differentiable)."""
    axis, keepdims = pick_axis("any", axis, keepdims, dim, keepdim)
    return _truth(x, axis=normalize_axis(axis, _ndim(x), "any"), keepdims=keepdims, every=False)


def _plain(x):
    x = plain(x)
    return x if is_array(x) else np.asarray(x)


def _one_axis(axis, x, op=""):
    axes = normalize_axis(axis, _ndim(x), op)
    if len(axes) > 1:
        raise ValueError(f"expected one axis, got {axis}")
    return axes[0] if axes else ()  # a 0-d x: nothing to normalise over


def softmax(x, axis: int = -1, *, dim=None):
    """Softmax along ``axis`` (or ``dim``), stable for large inputs."""
    return _softmax(
        x, axis=_one_axis(pick_axis("softmax", axis, 0, dim, None, -1)[0], x, "softmax")
    )


def log_softmax(x, axis: int = -1, *, dim=None):
    """Log-softmax along ``axis`` (or ``dim``), stable for large inputs."""
    axis = pick_axis("log_softmax", axis, 0, dim, None, -1)[0]
    return _log_softmax(x, axis=_one_axis(axis, x, "log_softmax"))
