"""Reductions along axes, and the softmax family (reductions that keep the shape).

The public wrappers normalise ``axis`` (None, int, negative, tuple) to a sorted tuple of
non-negative ints before recording, so every rule sees one form.
"""

from __future__ import annotations

import builtins

import numpy as np

from ..backend import expand_reduced, normalize_axis
from . import samples as S
from .elementwise import exp
from .registry import Sample, primitive, run
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
    lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims),
    (lambda g, out, x, axis, keepdims: _grad_back(g, x, axis, keepdims),),
    reference=lambda x, axis, keepdims: np.add.reduce(x, axis=axis, keepdims=keepdims),
    samples=_reduce_samples(),
    doc="Sum over axes.",
)


def _count(x, axis):
    return int(np.prod([x.shape[a] for a in axis], dtype=np.int64))


_mean = primitive(
    "mean",
    lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
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
    count = run(_sum, mask, axis=axis, keepdims=True)
    return expand_reduced(g, x.ndim, axis, keepdims) * mask / count


_max = primitive(
    "max",
    lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
    (_extreme_vjp,),
    reference=lambda x, axis, keepdims: -np.min(-x, axis=axis, keepdims=keepdims),
    samples=_reduce_samples(S.distinct, allow_empty=False),
    doc="Maximum over axes; tied maxima share the gradient equally.",
)
_min = primitive(
    "min",
    lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims),
    (_extreme_vjp,),
    reference=lambda x, axis, keepdims: -np.max(-x, axis=axis, keepdims=keepdims),
    samples=_reduce_samples(S.distinct, allow_empty=False),
    doc="Minimum over axes; tied minima share the gradient equally.",
)


def _logsumexp_fwd(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True) if x.size else np.zeros((1,) * x.ndim, x.dtype)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


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


def _softmax_fwd(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _softmax_vjp(g, out, x, axis):
    gs = g * out
    return gs - out * run(_sum, gs, axis=axis, keepdims=True)


def _log_softmax_fwd(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _log_softmax_vjp(g, out, x, axis):
    return g - run(exp, out) * run(_sum, g, axis=axis, keepdims=True)


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
    return np.ndim(x.data if hasattr(x, "data") else x)


def _reducer(prim, what):
    def reduce(x, axis=None, keepdims: bool = False):
        return prim(x, axis=normalize_axis(axis, _ndim(x)), keepdims=bool(keepdims))

    reduce.__name__ = prim.name
    reduce.__doc__ = (
        f"{what} of ``x`` over ``axis`` (None: all axes), keeping reduced dims "
        f"as size 1 if ``keepdims``."
    )
    return reduce


sum = _reducer(_sum, "Sum")  # noqa: A001
mean = _reducer(_mean, "Mean")
max = _reducer(_max, "Maximum")  # noqa: A001
min = _reducer(_min, "Minimum")  # noqa: A001
logsumexp = _reducer(_logsumexp, "log(sum(exp(x))) (stable)")


def _one_axis(axis, x):
    axes = normalize_axis(axis, _ndim(x))
    if len(axes) > 1:
        raise ValueError(f"expected one axis, got {axis}")
    return axes[0] if axes else ()  # a 0-d x: nothing to normalise over


def softmax(x, axis: int = -1):
    """Softmax along ``axis``, stable for large inputs."""
    return _softmax(x, axis=_one_axis(axis, x))


def log_softmax(x, axis: int = -1):
    """Log-softmax along ``axis``, stable for large inputs."""
    return _log_softmax(x, axis=_one_axis(axis, x))
