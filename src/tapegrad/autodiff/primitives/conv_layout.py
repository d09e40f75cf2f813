"""The im2col columns of a convolution and the products over them, in one of two layouts
chosen per shape (``whole_batch``):

* **per sample**: columns (N, C*prod(K), prod(out)) copied from a strided view of the padded
  input; the forward and both gradients are batched matmuls, one small product per sample
  (the weight gradient summed over the batch afterwards); col2im adds strided slices.
* **whole batch**: columns (C*prod(K), N, prod(out)) written by the compiled kernels
  (``kernels/cpu/columns.py``, which read the padding as zeros); the forward and both gradients are
  one GEMM per group over the whole batch, and the weight gradient is computed as its
  transpose (cols @ g^T), which OpenBLAS splits over its threads. It costs a transposing copy
  of the output (forward) and of the output gradient (backward): only wide products repay it.

Both layouts give the same values; a conv's forward, ``conv_transpose`` and ``conv_weight``
choose by the same rule, so columns saved by the forward are read in the layout they were
written in. The 1-d stride-1 convolution (per-tap products, ``conv.py``) uses neither.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..backend import as_strided, xp_of
from ..kernels.dispatch import kernels_for
from .linalg import matmul_into
from .registry import scratch


def by_image(a, w, groups: int) -> bool:
    """Whether a convolution with weight ``w`` (O, C/G, *K) over ``a``'s device runs image by
    image in the device's compiled kernels (``conv_image_*``, ``kernels/cpu/conv2d.py``: on
    the CPU 2-d, ungrouped, float, from 16 input channels; float32 3x3 stride-1 ones from 32
    channels by Winograd's transform), instead of the two layouts here."""
    return kernels_for(a).conv_by_image(a.dtype, w.shape[1], groups, w.ndim - 2)


def few_channels(a, w, groups: int, stride: tuple, dilation: tuple) -> bool:
    """Whether a convolution's forward and weight gradient with weight ``w`` over ``a``'s
    device run in the device's few-channel loops (``conv_few_forward``, ``conv_few_weight``,
    ``kernels/cpu/few_channels.py``: on the CPU 2-d, ungrouped, float, stride 1, up to 15
    input channels); its input gradient keeps the layouts here."""
    return kernels_for(a).conv_few_channels(
        a.dtype, w.shape[1], groups, w.ndim - 2, stride, dilation
    )


def tops(padding: tuple) -> tuple:
    """The leading padding of each spatial axis (the compiled kernels' convention: the
    trailing padding follows from the shapes)."""
    return tuple(lo for lo, _ in padding)


def whole_batch(a, channels_per_group: int, ndim: int) -> bool:
    """Whether the columns of a conv over ``a``'s device with this many input channels per
    group take the whole-batch layout: where the device's namespace says its im2col kernels
    serve the shape (``im2col_whole_batch``; on the CPU 1-d or 2-d convolutions with at least
    16 input channels per group, ``kernels/cpu/columns.py``: with fewer, seed-cnn's and the
    ResNet stem's single channel, the products are too narrow to repay the layout's copies)."""
    return kernels_for(a).im2col_whole_batch(channels_per_group, ndim)


# -- geometry ----------------------------------------------------------------------------------
def padded_shape(shape: tuple, padding: tuple) -> tuple:
    return shape[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(shape[2:], padding))


def interior(padding: tuple, shape: tuple) -> tuple:
    return (slice(None), slice(None)) + tuple(
        slice(lo, lo + n) for (lo, _), n in zip(padding, shape[2:])
    )


def padded(x: np.ndarray, padding: tuple, buf: np.ndarray | None) -> np.ndarray:
    """x with zero padding (x itself when there is none), written into ``buf`` when given."""
    if not any(lo or hi for lo, hi in padding):
        return x
    xp = xp_of(x).zeros(padded_shape(x.shape, padding), x.dtype) if buf is None else buf
    if buf is not None:
        xp.fill(0)  # a plan's buffer may hold another value's bytes
    np.copyto(xp[interior(padding, x.shape)], x)
    return xp


def _windows(xp: np.ndarray, ksize, stride, dilation, out_shape) -> np.ndarray:
    """The (N, C, *K, *out) strided view of every window of the padded input."""
    sp = xp.strides[2:]
    return as_strided(
        xp,
        shape=xp.shape[:2] + tuple(ksize) + tuple(out_shape),
        strides=xp.strides[:2]
        + tuple(a * d for a, d in zip(sp, dilation))
        + tuple(a * s for a, s in zip(sp, stride)),
    )


def _offset_slices(offsets, stride, dilation, out_shape) -> tuple:
    """Index of the elements that kernel offset ``offsets`` meets at every output position."""
    return (slice(None), slice(None)) + tuple(
        slice(o * d, o * d + s * (n - 1) + 1, s)
        for o, s, d, n in zip(offsets, stride, dilation, out_shape)
    )


def grouped(a: np.ndarray, groups: int, axis: int) -> np.ndarray:
    """``a`` with its axis ``axis`` split into (groups, rest): a view."""
    return a.reshape(a.shape[:axis] + (groups, a.shape[axis] // groups) + a.shape[axis + 1 :])


# -- the whole-batch layout's 2-d view of a 1-d convolution ------------------------------------
def _as4(a: np.ndarray) -> np.ndarray:
    return a[:, :, None, :] if a.ndim == 3 else a


def _pairs2(stride, padding, dilation) -> tuple:
    """The geometry as the 2-d kernels take it (a 1-d convolution is one of height 1)."""
    if len(stride) == 1:
        return (1, stride[0]), (0, padding[0][0]), (1, dilation[0])
    return tuple(stride), (padding[0][0], padding[1][0]), tuple(dilation)


def _cols6(cols, ksize, n, out_shape) -> np.ndarray:
    k2 = (1, *ksize) if len(ksize) == 1 else tuple(ksize)
    o2 = (1, *out_shape) if len(out_shape) == 1 else tuple(out_shape)
    return cols.reshape((cols.shape[0] // math.prod(k2), *k2, n, *o2))


def _by_channel(g, ws) -> np.ndarray:
    """The output gradient (N, O, *out) as (O, N*prod(out)): the GEMM operand of both
    gradients in the whole-batch layout (a copy, kept in ``ws``)."""
    n, o, p = g.shape[0], g.shape[1], math.prod(g.shape[2:])
    gt = scratch(ws, "gT", (o, n, p), g.dtype, like=g)
    np.copyto(gt, g.reshape(n, o, p).transpose(1, 0, 2))
    return gt.reshape(o, n * p)


# -- the columns and the three products --------------------------------------------------------
def cols_shape(batch: bool, x_shape, ksize, out_shape) -> tuple:
    ck, n, p = x_shape[1] * math.prod(ksize), x_shape[0], math.prod(out_shape)
    return (ck, n, p) if batch else (n, ck, p)


def fill_cols(batch, x, ksize, stride, padding, dilation, out_shape, cols, ws) -> np.ndarray:
    """``cols`` <- the windows of x (im2col) in the layout ``batch`` names."""
    if batch:
        kernels_for(x).im2col(
            _as4(x), _cols6(cols, ksize, x.shape[0], out_shape), *_pairs2(stride, padding, dilation)
        )
        return cols
    buf = None
    if ws is not None and any(lo or hi for lo, hi in padding):
        buf = ws.array("xp", padded_shape(x.shape, padding), x.dtype, like=x)
    window = _windows(padded(x, padding, buf), ksize, stride, dilation, out_shape)
    np.copyto(cols.reshape(window.shape), window)
    return cols


def forward_product(batch, w, cols, res, groups, ws) -> None:
    """``res`` (N, O, *out) <- W @ cols, per group."""
    n, o = res.shape[:2]
    w2 = grouped(w.reshape(o, -1), groups, 0)  # (G, O/G, C/G*K)
    if batch:  # one GEMM over the batch, then (O, N, P) laid out as (N, O, P)
        p = cols.shape[2]
        z = scratch(ws, "z", (o, n * p), res.dtype, like=res)
        matmul_into(w2, cols.reshape(groups, -1, n * p), z.reshape(groups, o // groups, n * p))
        np.copyto(res.reshape(n, o, p), z.reshape(o, n, p).transpose(1, 0, 2))
    elif groups == 1:
        matmul_into(w.reshape(o, -1), cols, res.reshape(n, o, -1))
    else:
        matmul_into(w2, grouped(cols, groups, 1), grouped(res.reshape(n, o, -1), groups, 1))


def input_product(batch, g, w, gx, stride, padding, dilation, groups, ws) -> None:
    """``gx`` (the input's shape) <- col2im(W^T g): the adjoint of the forward in x."""
    n, o = g.shape[:2]
    ksize = w.shape[2:]
    gcols = scratch(ws, "gcols", cols_shape(batch, gx.shape, ksize, g.shape[2:]), g.dtype, like=g)
    wt = np.swapaxes(grouped(w.reshape(o, -1), groups, 0), 1, 2)  # (G, C/G*K, O/G)
    if batch:
        gt = _by_channel(g, ws)
        matmul_into(wt, grouped(gt, groups, 0), gcols.reshape(groups, -1, gt.shape[1]))
        kernels_for(g).col2im(
            _cols6(gcols, ksize, n, g.shape[2:]), _as4(gx), *_pairs2(stride, padding, dilation)
        )
        return
    g2 = g.reshape(n, o, -1)
    if groups == 1:
        matmul_into(w.reshape(o, -1).T, g2, gcols)
    else:
        matmul_into(wt, grouped(g2, groups, 1), grouped(gcols, groups, 1))
    pads = any(lo or hi for lo, hi in padding)
    target = scratch(ws, "gxp", padded_shape(gx.shape, padding), g.dtype, like=g) if pads else gx
    target.fill(0)
    c = target.shape[1]
    gc = gcols.reshape((n, c) + tuple(ksize) + tuple(g.shape[2:]))
    for offs in itertools.product(*(range(k) for k in ksize)):  # col2im: one slice per offset
        view = target[_offset_slices(offs, stride, dilation, g.shape[2:])]
        np.add(view, gc[(slice(None), slice(None)) + offs], out=view)
    if target is not gx:
        np.copyto(gx, target[interior(padding, gx.shape)])


def weight_product(batch, g, cols, gw, groups, ws) -> None:
    """``gw`` <- g @ cols^T summed over the batch, per group: the adjoint in w."""
    n, o = g.shape[:2]
    if batch:
        # as its transpose cols @ g^T: with the batch as the inner dimension, BLAS splits that
        # product over its threads and the other way round it does not (8x on MNIST's shapes)
        gt = _by_channel(g, ws)
        m, ck = gt.shape[1], cols.shape[0] // groups
        tmp = scratch(ws, "gwT", (groups, ck, o // groups), g.dtype, like=g)
        matmul_into(cols.reshape(groups, ck, m), grouped(gt, groups, 0).transpose(0, 2, 1), tmp)
        np.copyto(gw.reshape(groups, o // groups, ck), tmp.transpose(0, 2, 1))
        return
    g2 = g.reshape(n, o, -1)
    tmp = scratch(ws, "gwtmp", (n, o, cols.shape[1] // groups), g.dtype, like=g)
    if groups == 1:
        matmul_into(g2, cols.transpose(0, 2, 1), tmp)
    else:
        matmul_into(
            grouped(g2, groups, 1),
            np.swapaxes(grouped(cols, groups, 1), 2, 3),
            grouped(tmp, groups, 1),
        )
    np.sum(tmp, axis=0, out=gw.reshape(o, -1))
