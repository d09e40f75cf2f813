"""im2col and col2im for 2-d convolutions (1-d as height 1), compiled.

``im2col(x, cols, stride, padding, dilation)``: ``cols[c, kh, kw, n, oh, ow] =
x[n, c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]``, zero where that falls in the padding: the
convolution's columns laid out (C*KH*KW, N, OH*OW) so that one GEMM covers the batch (see
``primitives/conv.py``), without a padded copy of the input.

``col2im(gcols, gx, stride, padding, dilation)``: the adjoint, into the unpadded ``gx``
(zeroed here): every column entry is added to the input element it was read from, kernel
offsets in order (kh, kw) = (0, 0), (0, 1), ... for every element, the order of the NumPy
reference, so results are the same bits.

From ``PARALLEL_MIN_SIZE`` column entries the channels are split over numba's threads, each
channel copied (or added back) whole by one thread. Beside OpenBLAS's threads such parallel
regions used to wait for a core its idle workers kept busy (~8 ms each on this 2-core machine,
2-8x slower than serial): ``tapegrad/blas.py`` now has those workers sleep when idle.
"""

from __future__ import annotations

import numpy as np

from ...backend import xp_of

# from how many column entries the channels are split over numba's threads
PARALLEL_MIN_SIZE = 1 << 16

# From how many input channels per group the whole-batch layout is used. Measured with
# ``python benchmarks/conv_shapes.py`` (3x3, batch 128, forward + backward, per sample ->
# whole batch, loaded machine; all figures in CHANGELOG.md): 1 channel (seed-cnn, the ResNet
# stem) 0.47 -> 1.64 and 1.76 -> 12.7 ms at 1 thread; 4 and 8 channels 26 -> 28 and 51 -> 57
# ms at 1 thread, 37 -> 96 and 62 -> 97 ms at 2; from 16 channels the whole batch wins:
# 133 -> 123 and 58 -> 42 ms at 1 thread, 1.6-6x at 2 (quiet machine, 2 threads: backward
# halved, forward unchanged).
WHOLE_BATCH_MIN_CHANNELS = 16


def im2col_whole_batch(channels_per_group: int, ndim: int) -> bool:
    """Whether a convolution's columns take the whole-batch layout these kernels write: 1-d or
    2-d convolutions with at least ``WHOLE_BATCH_MIN_CHANNELS`` input channels per group."""
    return ndim in (1, 2) and channels_per_group >= WHOLE_BATCH_MIN_CHANNELS


def _padded_zeros(a, cols_shape, stride, padding, dilation):
    """Zeros shaped like ``a`` (N, C, H, W) padded far enough for every window of the columns
    (C, KH, KW, N, OH, OW), on ``a``'s device."""
    n, c, h, w = a.shape
    _, kh, kw, _, oh, ow = cols_shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    shape = (n, c, h + 2 * ph + sh * oh + dh * kh, w + 2 * pw + sw * ow + dw * kw)
    return xp_of(a).zeros(shape, a.dtype)


def _window(padded, i, j, cols_shape, stride, dilation):
    """The (N, C, OH, OW) elements of ``padded`` that kernel offset (i, j) meets."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, cols_shape[4:]
    return padded[:, :, i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]


def im2col_reference(x, cols, stride, padding, dilation) -> None:
    """In array operations (any device's arrays: ``kernels/generic.py`` binds it)."""
    (ph, pw), (h, w) = padding, x.shape[2:]
    xp = _padded_zeros(x, cols.shape, stride, padding, dilation)
    xp[:, :, ph : ph + h, pw : pw + w] = x
    for i in range(cols.shape[1]):
        for j in range(cols.shape[2]):
            cols[:, i, j] = _window(xp, i, j, cols.shape, stride, dilation).transpose(1, 0, 2, 3)


def col2im_reference(gcols, gx, stride, padding, dilation) -> None:
    """In array operations (any device's arrays: ``kernels/generic.py`` binds it)."""
    (ph, pw), (h, w) = padding, gx.shape[2:]
    gp = _padded_zeros(gx, gcols.shape, stride, padding, dilation)
    for i in range(gcols.shape[1]):
        for j in range(gcols.shape[2]):
            view = _window(gp, i, j, gcols.shape, stride, dilation)
            view += gcols[:, i, j].transpose(1, 0, 2, 3)
    gx[...] = gp[:, :, ph : ph + h, pw : pw + w]


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .loops import split_loops, threaded

    _opts = dict(boundscheck=False, nogil=True)

    @cached_jit(inline="always", **_opts)
    def fill_padded(x, n, xp, ph, pw, rows):  # pragma: no cover - compiled
        """The first ``rows`` rows of xp (C, HP, WP), whose border stays zero, <- image n of x
        at offset (ph, pw) (what falls past them no window reads)."""
        hh = min(x.shape[2], rows - ph)
        ww = min(x.shape[3], xp.shape[2] - pw)
        for c in range(x.shape[1]):
            for i in range(hh):
                src = x[n, c, i]
                dst = xp[c, ph + i, pw : pw + ww]
                for j in range(ww):
                    dst[j] = src[j]

    @cached_jit(inline="always", **_opts)
    def finite(a):  # pragma: no cover - compiled
        """Whether the contiguous 1-d float array a holds no inf or NaN, read from its bits (an
        OR of integers vectorises; a float sum, kept in order, does not)."""
        bad = 0
        if a.itemsize == 4:
            b32 = a.view(np.uint32)
            for i in range(b32.size):
                bad |= (b32[i] & 0x7F800000) == 0x7F800000
        else:
            b64 = a.view(np.uint64)
            for i in range(b64.size):
                bad |= (b64[i] & 0x7FF0000000000000) == 0x7FF0000000000000
        return bad == 0

    @cached_jit(**_opts)
    def all_finite(a):  # pragma: no cover - compiled
        """Whether the contiguous array a holds no inf or NaN."""
        return finite(a.ravel())

    @cached_jit(inline="always", **_opts)
    def pitched(a, n, rows, pitch, into_rows):  # pragma: no cover - compiled
        """rows (O, OH*pitch) <- image n of a (N, O, OH, OW), each output row at its pitch (the
        entries past OW left as they are: zero), or (not ``into_rows``) the other way round
        (those entries dropped)."""
        oh_, ow_ = a.shape[2], a.shape[3]
        for o in range(a.shape[1]):
            for i in range(oh_):
                image = a[n, o, i]
                run = rows[o, i * pitch : i * pitch + ow_]
                if into_rows:
                    for j in range(ow_):
                        run[j] = image[j]
                else:
                    for j in range(ow_):
                        image[j] = run[j]

    @cached_jit(**_opts)  # called through split_loops: not inlined
    def _im2col_channel(x, cols, sh, sw, ph, pw, dh, dw, c):  # pragma: no cover - compiled
        n_, _, h_, w_ = x.shape
        kh_, kw_, oh_, ow_ = cols.shape[1], cols.shape[2], cols.shape[4], cols.shape[5]
        for kh in range(kh_):
            for kw in range(kw_):
                for n in range(n_):
                    for oh in range(oh_):
                        ih = oh * sh + kh * dh - ph
                        dst = cols[c, kh, kw, n, oh]
                        if ih < 0 or ih >= h_:
                            for ow in range(ow_):
                                dst[ow] = 0
                            continue
                        src = x[n, c, ih]
                        for ow in range(ow_):
                            iw = ow * sw + kw * dw - pw
                            dst[ow] = src[iw] if 0 <= iw < w_ else 0

    @cached_jit(**_opts)  # called through split_loops: not inlined
    def _col2im_channel(gcols, gx, sh, sw, ph, pw, dh, dw, c):  # pragma: no cover - compiled
        n_, _, h_, w_ = gx.shape
        kh_, kw_, oh_, ow_ = gcols.shape[1], gcols.shape[2], gcols.shape[4], gcols.shape[5]
        for n in range(n_):
            gx[n, c] = 0
        for kh in range(kh_):
            for kw in range(kw_):
                for n in range(n_):
                    for oh in range(oh_):
                        ih = oh * sh + kh * dh - ph
                        if ih < 0 or ih >= h_:
                            continue
                        src = gcols[c, kh, kw, n, oh]
                        dst = gx[n, c, ih]
                        for ow in range(ow_):
                            iw = ow * sw + kw * dw - pw
                            if 0 <= iw < w_:
                                dst[iw] += src[ow]

    # each channel copied (added back) whole by one thread (loops.py): the same bits on any
    # thread count
    _im2col, _im2col_parallel = split_loops(_im2col_channel, **_opts)
    _col2im, _col2im_parallel = split_loops(_col2im_channel, **_opts)

    def _threaded(cols) -> bool:
        return threaded(cols.shape[0], cols.size, PARALLEL_MIN_SIZE)

    def im2col(x, cols, stride, padding, dilation) -> None:
        """Fill ``cols`` (C, KH, KW, N, OH, OW) with the windows of ``x`` (N, C, H, W);
        ``padding``: (top, left) zeros (the bottom and right follow from the shapes)."""
        run = _im2col_parallel if _threaded(cols) else _im2col
        run(x.shape[1], x, cols, *stride, *padding, *dilation)

    def col2im(gcols, gx, stride, padding, dilation) -> None:
        """``gx`` (N, C, H, W) <- the sum of ``gcols``' entries at the elements they came from."""
        run = _col2im_parallel if _threaded(gcols) else _col2im
        run(gx.shape[1], gcols, gx, *stride, *padding, *dilation)

else:  # pragma: no cover
    im2col, col2im = im2col_reference, col2im_reference
