"""Layer normalisation over the last axis as one primitive with compiled kernels.

``layer_norm(x, w, b, eps)``: ``(x - mean) / sqrt(var + eps) * w + b`` over the last axis of
``x`` (..., D), with ``w`` and ``b`` of shape (D,). The forward keeps each row's mean and
``rstd`` for the backward kernel (``layer_norm_backward``: the three gradients in one pass
over the rows). When a gradient graph is built (``create_graph``, higher derivatives), the
rule computes the same gradients with primitives from ``x`` instead, so they are
differentiable in turn; the first-order backward pass, eager or compiled, runs the kernel.
"""

from __future__ import annotations

import numpy as np

from ..backend import xp_of
from ..kernels.dispatch import kernels_for
from . import samples as S
from .elementwise import rsqrt
from .registry import Sample, primitive, run, scratch


def _rows(a):
    return a.reshape(-1, a.shape[-1])


def _store(out, values):
    """``values`` into a plan's buffers ``out`` when given."""
    if out is None:
        return values
    for buf, v in zip(out, values):
        buf[...] = v
    return out


def _kernel_ok(*arrays) -> bool:
    dt = arrays[0].dtype
    return dt in (np.float32, np.float64) and all(a.dtype == dt for a in arrays)


def _forward(x, w, b, eps, out=None, ws=None):
    y, mean, rstd = (None, None, None) if out is None else out
    n = int(np.prod(x.shape[:-1], dtype=np.int64))
    if not _kernel_ok(x, w, b):  # mixed dtypes or integers: the formula in array operations
        m = x.mean(axis=-1, keepdims=True)
        c = x - m
        r = 1 / (((c * c).mean(axis=-1, keepdims=True) + eps) ** 0.5)
        return _store(out, (c * r * w + b, m.reshape(n), r.reshape(n)))
    xp = xp_of(x)
    y = xp.empty(x.shape, x.dtype) if y is None else y
    mean = scratch(ws, "mean", (n,), x.dtype, like=x) if mean is None else mean
    rstd = scratch(ws, "rstd", (n,), x.dtype, like=x) if rstd is None else rstd
    xc = xp.ascontiguousarray(x)
    target = y if y.flags.c_contiguous else xp.empty(x.shape, x.dtype)
    kernels_for(x).layer_norm_forward(_rows(xc), w, b, eps, _rows(target), mean, rstd)
    if target is not y:
        np.copyto(y, target)
    return y, mean, rstd


def _saved(x, w, b, eps):
    """The row means and rstd the forward saves, with primitives (flat, as the kernel's)."""
    n = int(np.prod(x.shape[:-1], dtype=np.int64))
    mean = x.mean(axis=-1, keepdims=True)
    c = x - mean
    rstd = run(rsqrt, (c * c).mean(axis=-1, keepdims=True) + eps)
    return mean.reshape(n), rstd.reshape(n)


def _composite_backward(g, x, w, mean, rstd):
    """What ``layer_norm_backward`` computes, with primitives (differentiable in every input)."""
    lead = tuple(range(x.ndim - 1))
    shape = x.shape[:-1] + (1,)
    xhat = (x - mean.reshape(shape)) * rstd.reshape(shape)
    h = g * w
    gx = rstd.reshape(shape) * (
        h - h.mean(axis=-1, keepdims=True) - xhat * (h * xhat).mean(axis=-1, keepdims=True)
    )
    return gx, (g * xhat).sum(axis=lead), g.sum(axis=lead)


def _vjp(g, out, needs, x, w, b, eps, aux):
    grads = run(layer_norm_backward, g, x, w, *aux)
    return [gr if need else None for gr, need in zip(grads, needs)]


def _backward_forward(g, x, w, mean, rstd, out=None):
    gx, gw, gb = (None, None, None) if out is None else out
    if not _kernel_ok(g, x, w, mean, rstd):
        lead = tuple(range(x.ndim - 1))
        shape = x.shape[:-1] + (1,)
        xhat = (x - mean.reshape(shape)) * rstd.reshape(shape)
        h = g * w
        res = rstd.reshape(shape) * (
            h - h.mean(axis=-1, keepdims=True) - xhat * (h * xhat).mean(axis=-1, keepdims=True)
        )
        return _store(out, (res, (g * xhat).sum(axis=lead), g.sum(axis=lead)))
    xp = xp_of(x)
    gx = xp.empty(x.shape, x.dtype) if gx is None else gx
    gw = xp.empty(w.shape, x.dtype) if gw is None else gw
    gb = xp.empty(w.shape, x.dtype) if gb is None else gb
    target = gx if gx.flags.c_contiguous else xp.empty(x.shape, x.dtype)
    gc, xc = xp.ascontiguousarray(g), xp.ascontiguousarray(x)
    kernels_for(x).layer_norm_backward(_rows(gc), _rows(xc), w, mean, rstd, _rows(target), gw, gb)
    if target is not gx:
        np.copyto(gx, target)
    return gx, gw, gb


def _reference(x, w, b, eps):
    m = x.sum(axis=-1, keepdims=True) / x.shape[-1]
    v = ((x - m) ** 2).sum(axis=-1, keepdims=True) / x.shape[-1]
    return (x - m) / np.sqrt(v + eps) * w + b


def _samples(rng):
    return [
        Sample(
            (S.values(rng, s), S.values(rng, s[-1:], 0.5, 1.5), S.values(rng, s[-1:])),
            {"eps": 1e-5},
        )
        for s in [(3, 4), (2, 3, 5), (1, 6), (4, 1), (0, 3)]
    ]


layer_norm_backward = primitive(
    "layer_norm_backward",
    _backward_forward,
    None,
    reference=lambda g, x, w, mean, rstd: _backward_reference(g, x, w, mean, rstd),
    samples=lambda rng: [
        Sample((S.values(rng, s), x, w, *_stats(x)))
        for s in [(3, 4), (2, 3, 5), (0, 3)]
        for x, w in [(S.values(rng, s), S.values(rng, s[-1:], 0.5, 1.5))]
    ],
    composite=_composite_backward,
    doc="layer_norm's VJP in one pass: the input, weight and bias gradients from the output "
    "gradient and the forward's row means and rstd (differentiated through its composite).",
)


def _stats(x):
    n = int(np.prod(x.shape[:-1], dtype=np.int64))
    m = x.mean(axis=-1) if x.size else np.zeros(x.shape[:-1])
    r = 1 / np.sqrt(((x - m[..., None]) ** 2).mean(axis=-1) + 1e-5) if x.size else m
    return m.reshape(n), r.reshape(n)


def _backward_reference(g, x, w, mean, rstd):
    shape = x.shape[:-1] + (1,)
    xhat = (x - mean.reshape(shape)) * rstd.reshape(shape)
    h = g * w
    d = x.shape[-1]
    gx = rstd.reshape(shape) * (
        h - h.sum(axis=-1, keepdims=True) / d - xhat * (h * xhat).sum(axis=-1, keepdims=True) / d
    )
    lead = tuple(range(x.ndim - 1))
    return gx, (g * xhat).sum(axis=lead), g.sum(axis=lead)


layer_norm = primitive(
    "layer_norm",
    _forward,
    _vjp,
    reference=_reference,
    samples=_samples,
    aux=True,
    saved=_saved,
    broadcasting=True,  # for its dtype check: float inputs of one dtype
    doc="Layer normalisation over the last axis with an elementwise scale and shift, in one "
    "compiled pass each way.",
)
