"""Batch normalisation in training mode as one primitive with compiled kernels.

``batch_norm_train(x, w, b, eps)``: ``(x - mean) / sqrt(var + eps) * w + b`` per channel of
``x (N, C, ...)``, the statistics over N and every axis after C, ``w`` and ``b`` of shape (C,).
The forward keeps each channel's mean and rstd for ``batch_norm_backward`` (the three
gradients in two passes); ``saved=`` and ``composite=`` give the engine the same quantities
written with primitives, for gradient graphs (higher derivatives). ``batch_moments(x)``
returns each channel's mean and biased variance as the forward computes them (for the running
statistics, which need no gradient).
"""

from __future__ import annotations

import numpy as np

from ..backend import xp_of
from ..kernels import generic
from ..kernels.dispatch import kernels_for
from . import samples as S
from .elementwise import rsqrt
from .registry import Primitive, Sample, kernel_scratch, primitive, run, scratch


def _nc_s(a):
    """(N, C, ...) as (N, C, S): a view of a contiguous array."""
    return a.reshape(a.shape[0], a.shape[1], -1)


def _kernel_ok(*arrays) -> bool:
    dt = arrays[0].dtype
    return dt in (np.float32, np.float64) and all(a.dtype == dt for a in arrays)


def _contiguous(x, ws, key):
    if x.flags.c_contiguous:
        return x
    c = scratch(ws, key, x.shape, x.dtype, like=x)
    np.copyto(c, x)
    return c


def _normalise(x, w, b, eps, y, mean, rstd, var, ws, relu=False):
    """``y`` and each channel's mean, rstd and biased variance into the given arrays (``None``:
    made here); one pass of statistics serves all four. ``relu``: y <- max(y, 0), as ReLU's
    kernel writes it."""
    c = x.shape[1]
    xp = xp_of(x)
    y = xp.empty(x.shape, x.dtype) if y is None else y
    mean = scratch(ws, "mean", (c,), x.dtype, like=x) if mean is None else mean
    rstd = scratch(ws, "rstd", (c,), x.dtype, like=x) if rstd is None else rstd
    var = scratch(ws, "var", (c,), x.dtype, like=x) if var is None else var
    target = y if y.flags.c_contiguous else scratch(ws, "y", x.shape, x.dtype, like=x)
    # mixed dtypes or integers: the array-generic formula
    kernel = (
        kernels_for(x).batch_norm_forward if _kernel_ok(x, w, b) else generic.batch_norm_forward
    )
    xc = _nc_s(_contiguous(x, ws, "x"))
    kernel(xc, w, b, eps, _nc_s(target), mean, rstd, var, kernel_scratch(ws, x), relu)
    if target is not y:
        y[...] = target
    return y, mean, rstd, var


def _forward(x, w, b, eps, out=None, ws=None):
    y, mean, rstd = (None, None, None) if out is None else out
    return _normalise(x, w, b, eps, y, mean, rstd, None, ws)[:3]


def _forward_and_moments(x, w, b, eps, out=None, ws=None, relu=False):
    """``batch_norm_train``'s outputs and ``batch_moments``' of the same ``x`` from one pass of
    statistics (the fused primitive the fusion pass puts in place of the two)."""
    y, mean, rstd, moments_mean, var = (None,) * 5 if out is None else out
    y, mean, rstd, var = _normalise(x, w, b, eps, y, mean, rstd, var, ws, relu)
    if moments_mean is None:
        moments_mean = mean.copy()
    else:
        moments_mean[...] = mean
    return y, mean, rstd, moments_mean, var


def _axes_shape(x):
    return (0, *range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _saved(x, w, b, eps):
    """The channel means and rstd the forward saves, with primitives."""
    axes, shape = _axes_shape(x)
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    rstd = run(rsqrt, (d * d).mean(axis=axes, keepdims=True) + eps)
    return mean.reshape(x.shape[1]), rstd.reshape(x.shape[1])


def _composite_backward(g, x, w, mean, rstd):
    """What ``batch_norm_backward`` computes, with primitives (differentiable in every input)."""
    axes, shape = _axes_shape(x)
    xhat = (x - mean.reshape(shape)) * rstd.reshape(shape)
    gb = g.sum(axis=axes)
    gw = (g * xhat).sum(axis=axes)
    n = x.size // max(x.shape[1], 1)
    gx = (rstd * w).reshape(shape) * (g - (gb / n).reshape(shape) - xhat * (gw / n).reshape(shape))
    return gx, gw, gb


def _vjp(g, out, needs, x, w, b, eps, aux):
    grads = run(batch_norm_backward, g, x, w, *aux)
    return [gr if need else None for gr, need in zip(grads, needs)]


def _backward_forward(g, x, w, mean, rstd, out=None, ws=None, mask=None):
    gx, gw, gb = (None, None, None) if out is None else out
    if not _kernel_ok(g, x, w, mean, rstd):
        _, shape = _axes_shape(x)
        ref = [np.empty_like(x), np.empty_like(w), np.empty_like(w)]
        flat = [a.reshape(a.shape[0], a.shape[1], -1) for a in (g, x)]
        m = None if mask is None else mask.reshape(flat[0].shape)
        generic.batch_norm_backward(
            *flat, w, mean, rstd, ref[0].reshape(flat[1].shape), *ref[1:], mask=m
        )
        if out is None:
            return tuple(ref)
        for buf, v in zip(out, ref):
            buf[...] = v
        return out
    xp = xp_of(x)
    gx = xp.empty(x.shape, x.dtype) if gx is None else gx
    gw = xp.empty(w.shape, x.dtype) if gw is None else gw
    gb = xp.empty(w.shape, x.dtype) if gb is None else gb
    gc, xc = _contiguous(g, ws, "g"), _contiguous(x, ws, "x")
    target = gx if gx.flags.c_contiguous else scratch(ws, "gx", x.shape, x.dtype, like=x)
    m = None if mask is None else _nc_s(_contiguous(mask, ws, "mask"))
    kernels_for(x).batch_norm_backward(
        _nc_s(gc), _nc_s(xc), w, mean, rstd, _nc_s(target), gw, gb, kernel_scratch(ws, x), m
    )
    if target is not gx:
        np.copyto(gx, target)
    return gx, gw, gb


def _moments_forward(x, out=None, ws=None):
    c = x.shape[1]
    xp = xp_of(x)
    mean, var = (xp.empty(c, x.dtype), xp.empty(c, x.dtype)) if out is None else out
    if not _kernel_ok(x):
        generic.batch_stats(x.reshape(x.shape[0], c, -1), mean, var)
    else:
        xc = _nc_s(_contiguous(x, ws, "x"))
        kernels_for(x).batch_stats(xc, mean, var, kernel_scratch(ws, x))
    return mean, var


def _reference(x, w, b, eps):
    y = np.empty(x.shape)
    c = x.shape[1]
    xs = x.reshape(x.shape[0], c, -1)
    stats = (np.empty(c), np.empty(c), np.empty(c))
    generic.batch_norm_forward(xs, w, b, eps, y.reshape(xs.shape), *stats)
    return y


def _samples(rng):
    return [
        Sample(
            (S.values(rng, s), S.values(rng, s[1:2], 0.5, 1.5), S.values(rng, s[1:2])),
            {"eps": 1e-5},
        )
        for s in [(4, 3), (3, 2, 5), (2, 3, 2, 3), (5, 1, 2)]
    ]


def _backward_samples(rng):
    out = []
    for s in [(4, 3), (3, 2, 5), (2, 3, 2, 3)]:
        x = S.values(rng, s)
        _, mean, rstd = _forward(x, np.ones(s[1]), np.zeros(s[1]), 1e-5)
        out.append(Sample((S.values(rng, s), x, S.values(rng, s[1:2], 0.5, 1.5), mean, rstd)))
    return out


def _backward_reference(g, x, w, mean, rstd):
    gx, gw, gb = np.empty(x.shape), np.empty(w.shape), np.empty(w.shape)
    flat = [a.reshape(a.shape[0], a.shape[1], -1) for a in (g, x)]
    generic.batch_norm_backward(*flat, w, mean, rstd, gx.reshape(flat[1].shape), gw, gb)
    return gx, gw, gb


batch_norm_backward = primitive(
    "batch_norm_backward",
    _backward_forward,
    None,
    reference=_backward_reference,
    samples=_backward_samples,
    composite=_composite_backward,
    doc="batch_norm_train's VJP in two passes: the input, weight and bias gradients from the "
    "output gradient and the forward's channel means and rstd (differentiated through its "
    "composite).",
)
batch_norm_train = primitive(
    "batch_norm_train",
    _forward,
    _vjp,
    reference=_reference,
    samples=_samples,
    aux=True,
    saved=_saved,
    broadcasting=True,  # for its dtype check: float inputs of one dtype
    doc="Batch normalisation with the batch's statistics per channel of (N, C, ...), with a "
    "per-channel scale and shift, in two compiled passes each way.",
)
batch_moments = primitive(
    "batch_moments",
    _moments_forward,
    None,
    reference=lambda x: (
        np.moveaxis(x, 1, 0).reshape(x.shape[1], -1).mean(axis=1),
        np.moveaxis(x, 1, 0).reshape(x.shape[1], -1).var(axis=1),
    ),
    samples=lambda rng: [Sample((S.values(rng, s),)) for s in [(4, 3), (3, 2, 5), (2, 3, 2, 3)]],
    doc="Each channel's mean and biased variance over N and the axes after C, as "
    "batch_norm_train computes them (two outputs; not differentiable).",
)
batch_norm_train_moments = Primitive(
    "batch_norm_train_moments",
    _forward_and_moments,
    None,
    doc="batch_norm_train's three outputs and batch_moments' two for the same input from one "
    "pass of statistics. Made only by the fusion pass.",
)


def _relu_forward(x, w, b, eps, out=None, ws=None):
    y, mean, rstd = (None, None, None) if out is None else out
    return _normalise(x, w, b, eps, y, mean, rstd, None, ws, True)[:3]


def _relu_forward_and_moments(x, w, b, eps, out=None, ws=None):
    return _forward_and_moments(x, w, b, eps, out, ws, True)


def _relu_backward(g, y, x, w, mean, rstd, out=None, ws=None):
    return _backward_forward(g, x, w, mean, rstd, out, ws, mask=y)


batch_norm_relu_train = Primitive(
    "batch_norm_relu_train",
    _relu_forward,
    None,
    doc="relu(batch_norm_train(x, w, b)) and the statistics, ReLU applied as the normalised "
    "rows are written (its pass over the output saved). Made only by the fusion pass.",
)
batch_norm_relu_train_moments = Primitive(
    "batch_norm_relu_train_moments",
    _relu_forward_and_moments,
    None,
    doc="batch_norm_relu_train's three outputs and batch_moments' two from one pass of "
    "statistics. Made only by the fusion pass.",
)
batch_norm_relu_backward = Primitive(
    "batch_norm_relu_backward",
    _relu_backward,
    None,
    doc="ReLU's VJP then batch_norm_backward in its two passes: g counts where the fused "
    "output y is positive. Made only by the fusion pass.",
)
