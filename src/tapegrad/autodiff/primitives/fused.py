"""Fused primitives, and the table that lets compiled plans use them.

A fused primitive does the work of two neighbouring primitives in one pass each way, with the
same arithmetic, so its results are the same bits: a Linear layer's bias add then ReLU
(``bias_relu``, its VJP ``bias_relu_backward``), and ReLU then max pooling (``relu_max_pool``,
``relu_max_pool_backward``). Eager code never calls them; compiled plans do, where the fusion
pass's table (``plan/fusion.py``) finds the equations of the pair and of its VJP in a plan's
equation list and rewrites them into these.
"""

from __future__ import annotations

import numpy as np

from ..backend import xp_of
from ..kernels.common import pool_arg_dtype
from ..kernels.dispatch import kernels_for
from . import samples as S
from .conv import (
    _conv_transpose_fwd,
    _conv_weight_fwd,
    direct_backward_applies,
    direct_backward_sparse,
)
from .pool import _pool_reference, _pool_samples
from .registry import Primitive, Sample, kernel_scratch, primitive, run, scratch


# -- bias + ReLU -------------------------------------------------------------------------------
def _bias_relu_fwd(x, b, out=None):
    out = xp_of(x).empty(x.shape, x.dtype) if out is None else out
    kernels_for(x).bias_relu_forward(x, b, out)
    return out


def _bias_relu_vjp(g, out, needs, x, b):
    gx, gb = run(bias_relu_backward_kernel, g, out)
    return [gx if needs[0] else None, gb if needs[1] else None]


def _bias_relu_backward_fwd(g, y, out=None):
    xp = xp_of(g)
    gx, gb = (xp.empty(g.shape, g.dtype), xp.empty(g.shape[1], g.dtype)) if out is None else out
    kernels_for(g).bias_relu_backward(g, y, gx, gb)
    return gx, gb


def _bias_relu_samples(rng):
    return [
        Sample((S.values(rng, (n, f), gap=0.1), S.values(rng, (f,), -0.05, 0.05)))
        for n, f in [(4, 3), (1, 5), (6, 1)]
    ]


bias_relu = primitive(
    "bias_relu",
    _bias_relu_fwd,
    _bias_relu_vjp,
    reference=lambda x, b: np.where(x + b > 0, x + b, 0.0),
    samples=_bias_relu_samples,
    higher_order=False,
    doc="max(x + b, 0) for x (N, F) and b (F,) in one pass (a Linear layer's bias then ReLU).",
)
bias_relu_backward_kernel = primitive(
    "bias_relu_backward",
    _bias_relu_backward_fwd,
    None,
    reference=lambda g, y: (g * (y > 0), (g * (y > 0)).sum(axis=0)),
    samples=lambda rng: [
        Sample((S.values(rng, (n, f)), np.maximum(S.values(rng, (n, f)), 0)))
        for n, f in [(4, 3), (1, 5), (0, 2)]
    ],
    doc="bias_relu's VJP in one pass: g where the output is positive, and its rows summed in "
    "order (the bias gradient). Not differentiable.",
)


# -- ReLU + max pooling ------------------------------------------------------------------------
def _relu_max_pool_fwd(x, kernel, stride, out=None, ws=None):
    if out is None:
        shape = x.shape[:2] + tuple(
            (n - k) // s + 1 for n, k, s in zip(x.shape[2:], kernel, stride)
        )
        xp = xp_of(x)
        out = (xp.empty(shape, x.dtype), xp.empty(shape, pool_arg_dtype(kernel)))
    res, arg = out
    kernels_for(x).relu_max_pool_forward(x, kernel, stride, res, arg, kernel_scratch(ws, x))
    return res, arg


def _relu_max_pool_vjp(g, out, x, kernel, stride, aux):
    return run(
        relu_max_pool_backward_kernel, g, out, aux[0], x_shape=x.shape, kernel=kernel, stride=stride
    )


def _relu_max_pool_backward_fwd(g, y, arg, x_shape, kernel, stride, out=None, ws=None):
    gx = xp_of(g).empty(x_shape, g.dtype) if out is None else out
    if not g.flags.c_contiguous:
        gc = scratch(ws, "g", g.shape, g.dtype, like=g)
        np.copyto(gc, g)
        g = gc
    scr = kernel_scratch(ws, g)
    kernels_for(g).relu_max_pool_backward(g, y, arg, x_shape, kernel, stride, gx, scr)
    return gx


def _relu_max_pool_samples(rng):
    return [
        Sample((s.args[0] - 0.0125,), {"kernel": s.attrs["kernel"], "stride": s.attrs["stride"]})
        for d in (1, 2)
        for s in _pool_samples(d)(rng)  # no value at relu's kink
        if _plain_windows(s.attrs)
    ]


def _plain_windows(attrs) -> bool:
    """Windows without padding or dilation: what the fused kernels take."""
    return not any(lo or hi for lo, hi in attrs["padding"]) and all(
        d == 1 for d in attrs["dilation"]
    )


def _relu_max_pool_backward_samples(rng):
    out = []
    for s in _relu_max_pool_samples(rng):
        y, arg = _relu_max_pool_fwd(s.args[0], **s.attrs)
        out.append(
            Sample((S.values(rng, y.shape), y, arg), {"x_shape": s.args[0].shape, **s.attrs})
        )
    return out


def _relu_max_pool_backward_reference(g, y, arg, x_shape, kernel, stride):
    from .pool import _pool_backward_reference

    plain = {"padding": ((0, 0),) * len(kernel), "dilation": (1,) * len(kernel)}
    return _pool_backward_reference(np.where(y > 0, g, 0.0), arg, x_shape, kernel, stride, **plain)


relu_max_pool = primitive(
    "relu_max_pool",
    _relu_max_pool_fwd,
    (_relu_max_pool_vjp,),
    reference=lambda x, kernel, stride: _pool_reference(
        np.maximum(x, 0), kernel, stride, ((0, 0),) * len(kernel), (1,) * len(kernel)
    ),
    samples=_relu_max_pool_samples,
    aux=True,
    higher_order=False,
    doc="max_pool(relu(x)) in one pass over (N, C, L) or (N, C, H, W): each window's maximum "
    "of relu(x) and where it sits (see kernels/cpu/fused.py).",
)
relu_max_pool_backward_kernel = primitive(
    "relu_max_pool_backward",
    _relu_max_pool_backward_fwd,
    None,
    reference=_relu_max_pool_backward_reference,
    samples=_relu_max_pool_backward_samples,
    doc="relu_max_pool's VJP: each output gradient added at its window's maximum where the "
    "output is positive, in a zero array of the input's shape. Not differentiable.",
)


# -- a convolution's two gradients from one sparse output gradient -------------------------------
def _conv_grads_fwd(
    g, x, w, *saved, size, ksize, stride, padding, dilation, groups, out=None, ws=None
):
    """(conv_transpose(g, w), conv_weight(x, g)) of a channels-last convolution (the text CNN's):
    where both would take the direct kernel (a sparse g: ReLU and max pooling leave 1/K of it),
    one pass of it computes both, each entry accumulated in the order either pass alone would;
    otherwise the two primitives' own forwards."""
    gx, gw = (None, None) if out is None else out
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if gx is None:
        gx = _conv_transpose_fwd(g, w, size=size, channels_last=True, ws=ws, **geometry)
        return gx, _conv_weight_fwd(x, g, *saved, ksize=ksize, ws=ws, **geometry)
    if (
        direct_backward_applies(gx, w, stride, padding, dilation, groups)
        and direct_backward_applies(x, gw, stride, padding, dilation, groups)
        and direct_backward_sparse(g)
    ):
        kernels_for(g).conv_backward(
            xp_of(g).ascontiguousarray(g), x, w, gw, None, gx, kernel_scratch(ws, g)
        )
        return gx, gw
    _conv_transpose_fwd(g, w, size=size, channels_last=True, out=gx, ws=ws, **geometry)
    _conv_weight_fwd(x, g, *saved, ksize=ksize, out=gw, ws=ws, **geometry)
    return gx, gw


conv_grads = Primitive(
    "conv_grads",
    _conv_grads_fwd,
    None,
    doc="A channels-last convolution's input and weight gradients from one output gradient "
    "(what conv_transpose and conv_weight compute), in one pass of the direct kernel where "
    "both would take it. Made only by the fusion pass.",
)
