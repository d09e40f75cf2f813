"""Array-generic kernels: what a device's namespace binds where it has no dedicated kernel.

Each function has the signature of the CPU namespace's function of the same name and writes
its outputs into the arrays it is given, computing with NumPy's functions, ufuncs and array
methods on them, so a device's arrays run it (CuPy takes NumPy's functions through
``__array_function__``/``__array_ufunc__``). Where a CPU kernel's NumPy reference is already
written so, it is reused. The formulas are the ones the primitives ran on devices before the
kernels had one namespace per device, so a device's results keep their bits.
"""

from __future__ import annotations

import numpy as np

from .cpu.batch_norm import (
    batch_norm_backward_reference as batch_norm_backward,
)
from .cpu.batch_norm import (
    batch_norm_forward_reference as batch_norm_forward,
)
from .cpu.batch_norm import (
    batch_stats_reference as batch_stats,
)
from .cpu.bias import add_taps_reference as add_taps
from .cpu.by_image import conv_image_forward_reference as conv_image_forward
from .cpu.by_image import conv_image_input_reference as conv_image_input
from .cpu.by_image import conv_image_weight_reference as conv_image_weight
from .cpu.columns import col2im_reference as col2im
from .cpu.columns import im2col_reference as im2col
from .cpu.elman import rnn_scan_backward_reference as rnn_scan_backward
from .cpu.elman import rnn_scan_forward_reference as rnn_scan_forward
from .cpu.gated import gru_scan_backward_reference as gru_scan_backward
from .cpu.gated import gru_scan_forward_reference as gru_scan_forward
from .cpu.gated import lstm_scan_backward_reference as lstm_scan_backward
from .cpu.gated import lstm_scan_forward_reference as lstm_scan_forward
from .cpu.norm import softmax_forward_reference as softmax_forward
from .cpu.products import bind_matmul_reference as bind_matmul
from .cpu.products import matmul_reference as matmul
from .cpu.random import dropout_mask_reference as dropout_mask
from .cpu.scatter import gather_rows_reference as gather_rows
from .cpu.special import add_arrays_reference as add_arrays
from .cpu.special import relu_backward_reference as relu_backward
from .cpu.special import relu_forward_reference as relu_forward

__all__ = [
    "add_arrays",
    "add_taps",
    "batch_norm_backward",
    "batch_norm_forward",
    "batch_stats",
    "bind_matmul",
    "col2im",
    "conv_backward",
    "conv_by_image",
    "conv_few_channels",
    "conv_few_forward",
    "conv_few_weight",
    "conv_image_forward",
    "conv_image_input",
    "conv_image_weight",
    "conv_rows_forward",
    "direct_layout_ok",
    "dropout_mask",
    "gather_rows",
    "gru_scan_backward",
    "gru_scan_forward",
    "im2col",
    "im2col_whole_batch",
    "layer_norm_backward",
    "layer_norm_forward",
    "lstm_scan_backward",
    "lstm_scan_forward",
    "matmul",
    "relu_backward",
    "relu_forward",
    "rnn_scan_backward",
    "rnn_scan_forward",
    "scan_rows",
    "select",
    "softmax_backward",
    "softmax_forward",
]


def select(c, a, s, keep: bool, out) -> None:
    """``out = where(c, a, s)`` (``keep``) or ``where(c, s, a)``, for a scalar ``s``."""
    x, y = (a, s) if keep else (s, a)
    np.copyto(out, y)
    np.copyto(out, x, where=c)


def softmax_backward(g, y, out) -> None:
    """``out = y * (g - sum(g * y))`` per row of (N, D) arrays."""
    out[...] = y * (g - (g * y).sum(axis=1, keepdims=True))


def layer_norm_forward(x, w, b, eps, y, mean, rstd) -> None:
    """Layer normalisation of the rows of ``x`` (N, D) into ``y``, with each row's mean and
    reciprocal standard deviation into ``mean`` and ``rstd`` (N,)."""
    m = x.mean(axis=-1, keepdims=True)
    c = x - m
    r = 1 / (((c * c).mean(axis=-1, keepdims=True) + eps) ** 0.5)
    y[...] = c * r * w + b
    mean[...] = m.reshape(mean.shape)
    rstd[...] = r.reshape(rstd.shape)


def layer_norm_backward(g, x, w, mean, rstd, gx, gw, gb) -> None:
    """The gradients of :func:`layer_norm_forward` for the output gradient ``g`` (N, D)."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    h = g * w
    gx[...] = rstd[:, None] * (
        h - h.mean(axis=-1, keepdims=True) - xhat * (h * xhat).mean(axis=-1, keepdims=True)
    )
    gw[...] = (g * xhat).sum(axis=0)
    gb[...] = g.sum(axis=0)


def direct_layout_ok(x, w) -> bool:
    """No direct convolution-gradient kernel here: the matmul path serves every convolution."""
    return False


def conv_backward(g, x, w, gw, gb, gx, scratch=None) -> None:
    """The gradients of a stride-1 unpadded convolution (N, C, L) or (N, C, H, W) for its output
    gradient ``g``, dense, one kernel tap at a time (each skipped when its output is None)."""
    g4, x4, w4 = (a if a.ndim == 4 else a[:, :, None] for a in (g, x, w))
    oh, ow = g4.shape[2:]
    if gb is not None:
        gb[...] = g4.sum(axis=(0, 2, 3))
    gw4 = None if gw is None else (gw if gw.ndim == 4 else gw[:, :, None])
    gx4 = None if gx is None else (gx if gx.ndim == 4 else gx[:, :, None])
    if gx4 is not None:
        gx4[...] = 0
    for a in range(w4.shape[2]):
        for b in range(w4.shape[3]):
            if gw4 is not None:
                window = x4[:, :, a : a + oh, b : b + ow]
                gw4[:, :, a, b] = np.einsum("noij,ncij->oc", g4, window)
            if gx4 is not None:
                gx4[:, :, a : a + oh, b : b + ow] += np.einsum("noij,oc->ncij", g4, w4[:, :, a, b])


def conv_by_image(dtype, channels_per_group: int, groups: int, ndim: int) -> bool:
    """No image-by-image convolutions here (their kernels call the CPU's BLAS from numba's
    threads); ``conv_image_*`` are the whole-batch array operations, for a direct call."""
    return False


def scan_rows(dtype) -> bool:
    """No recurrent scan kernels here (they call the CPU's BLAS from numba's threads): the
    primitives run their steps one by one; ``rnn_scan_*``, ``lstm_scan_*`` and ``gru_scan_*``
    are those steps, for a direct call."""
    return False


def conv_few_channels(dtype, channels_per_group, groups, ndim, stride, dilation) -> bool:
    """No few-channel forward loops here (``conv_few_forward`` is the whole-batch array
    operations, for a direct call)."""
    return False


def conv_rows_forward(x, w, res, scratch=None) -> bool:
    """No direct 1-d blocks here: False (the caller's products serve the call)."""
    return False


def conv_few_forward(x, w, res, padding, scratch=None) -> None:
    """conv(x, w) at stride 1 into ``res`` (the columns and one product)."""
    conv_image_forward(x, w, res, (1, 1), padding, (1, 1))


def conv_few_weight(x, g, gw, padding, scratch=None) -> None:
    """The weight's gradient of conv(x, w) at stride 1 into ``gw`` (the columns and one
    product)."""
    conv_image_weight(x, g, gw, (1, 1), padding, (1, 1))


def im2col_whole_batch(channels_per_group: int, ndim: int) -> bool:
    """No whole-batch im2col here: convolutions take the per-sample columns (array operations
    and batched products)."""
    return False
