"""2-d convolutions image by image: each of numba's threads takes whole images and multiplies
each with single-threaded BLAS calls made from the kernel (``gemm.py``), one thread pool for
the copies and the products. (``conv2d.py`` hands float32 3x3 stride-1 convolutions from 32
channels to Winograd's kernels, ``winograd.py``, and other float32 ones whose output channels
come in sixteens to the register-blocked direct sums, ``direct.py``, instead.)

* Stride 1: the image is copied once into a zero-padded buffer (C, HP, WP) and its output
  rows are computed at the buffer's width (the entries past OW, which wrap into the next row,
  are dropped). For each kernel tap (kh, kw) the windows' values are then the buffer itself,
  shifted by kh*WP + kw: a (C, OH*WP) matrix whose rows are one plane apart, which BLAS reads
  in place. The forward is one product per tap, W[:, :, kh, kw] @ shifted (accumulated); the
  input's gradient one per tap added into a zeroed buffer at the shift; the weight's gradient
  one per tap, shifted @ g^T. No columns are written (im2col's copy is nine times the input),
  and the nine products with K = C ran faster than one with K = 9C on the columns (16
  channels at 28x28: 42 against 50 us an image, plus the copy).
* Other strides: the image's columns (C*KH*KW, OH*OW) are copied into a buffer the size of one
  image, kept in the core's cache, and multiplied in one product.

Both where an entry past OW would meet an inf or NaN (the weight's gradient over an image that
holds one, the input's over a weight that does: 0 * inf is NaN) use the columns, whose entries
past OW are set to zero, so the results are the references' there too.

* ``conv_image_forward(x, w, res, stride, padding, dilation, scratch)``: ``res`` (N, O, OH, OW)
  <- the convolution of x (N, C, H, W) with w (O, C, KH, KW);
* ``conv_image_input(g, w, gx, ...)``: ``gx`` (N, C, H, W) <- its adjoint in x for the output
  gradient g;
* ``conv_image_weight(x, g, gw, ...)``: ``gw`` (O, C, KH, KW) <- the sum over images of the
  weight's gradient, the images in fixed chunks whose partial sums are added in chunk order.

``padding`` is (top, left); the bottom and right follow from the shapes. Every image's result
is computed by one thread whatever the thread count, and the weight gradient's chunks depend on
the batch size alone, so serial and parallel runs give the same bits. ``scratch(key, shape)``
(a plan's workspace) keeps the per-thread buffers between steps; without it they are allocated.
"""

from __future__ import annotations

import math

import numpy as np

from ...backend import xp_of
from . import gemm as _gemm
from .columns import col2im_reference, im2col_reference

# from how many column entries (all images together) the images are split over numba's threads
PARALLEL_MIN_SIZE = 1 << 16
# the weight gradient's images are summed in at most this many chunks (fixed per batch size)
WEIGHT_CHUNKS = 16
# from how many input channels the convolutions of a shape run image by image (as the
# whole-batch layout did; with fewer, seed-cnn's and the ResNet stem's single channel, the
# per-sample products of ``primitives/conv_layout.py`` serve)
MIN_CHANNELS = 16


def conv_by_image(dtype, channels_per_group: int, groups: int, ndim: int) -> bool:
    """Whether this CPU runs a convolution of this kind image by image: 2-d, ungrouped, float32
    or float64, at least ``MIN_CHANNELS`` input channels, NumPy's BLAS an ILP64 OpenBLAS."""
    return (
        _gemm.AVAILABLE
        and ndim == 2
        and groups == 1
        and channels_per_group >= MIN_CHANNELS
        and np.dtype(dtype) in (np.float32, np.float64)
    )


# -- references: the whole batch's columns and one product, in array operations (the tests compare
# the kernels with them; a device without these kernels binds them, ``kernels/generic.py``) -----
def _cols_reference(x, ksize, out_shape, stride, padding, dilation):
    cols = xp_of(x).empty((x.shape[1], *ksize, x.shape[0], *out_shape), x.dtype)
    im2col_reference(x, cols, stride, padding, dilation)
    return cols.reshape(-1, x.shape[0], math.prod(out_shape))  # (CK, N, P)


def conv_image_forward_reference(x, w, res, stride, padding, dilation, scratch=None) -> None:
    n, o = res.shape[:2]
    cols = _cols_reference(x, w.shape[2:], res.shape[2:], stride, padding, dilation)
    z = w.reshape(o, -1) @ cols.reshape(cols.shape[0], -1)
    res[...] = z.reshape(o, n, *res.shape[2:]).transpose(1, 0, 2, 3)


def conv_image_input_reference(g, w, gx, stride, padding, dilation, scratch=None) -> None:
    n, o = g.shape[:2]
    p = g.shape[2] * g.shape[3]
    gt = g.reshape(n, o, p).transpose(1, 0, 2).reshape(o, n * p)
    gcols = (w.reshape(o, -1).T @ gt).reshape(gx.shape[1], *w.shape[2:], n, *g.shape[2:])
    col2im_reference(gcols, gx, stride, padding, dilation)


def conv_image_weight_reference(x, g, gw, stride, padding, dilation, scratch=None) -> None:
    n, o = g.shape[:2]
    cols = _cols_reference(x, gw.shape[2:], g.shape[2:], stride, padding, dilation)
    gt = g.reshape(n, o, -1).transpose(1, 0, 2).reshape(o, -1)
    gw.reshape(o, -1)[...] = gt @ cols.reshape(cols.shape[0], -1).T


# -- compiled kernels ----------------------------------------------------------------------------
try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None and _gemm.AVAILABLE:
    from ..jit import cached_jit
    from .columns import all_finite
    from .columns import fill_padded as _fill_padded
    from .columns import finite as _finite
    from .columns import pitched as _pitched
    from .gemm import NO_TRANS, TRANS, gemm, one_blas_thread
    from .loops import thread_loops, threaded
    from .reduce import add_chunks

    _opts = dict(boundscheck=False, nogil=True)

    # Indices into arrays below are views' own (start at 0) or provably non-negative: numba
    # wraps a possibly negative index, and that select per element keeps LLVM from
    # vectorising a copy (a 840-element row copy measured 7x slower).

    @cached_jit(inline="always", **_opts)
    def _columns(
        xp, cols, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch, tap_major, back
    ):  # pragma: no cover
        """cols (C*KH*KW, OH*pitch) <- the windows of the padded image xp (im2col), a row per
        (channel, tap), channel-major or (``tap_major``) tap-major; or (``back``) the adjoint,
        xp += every entry at the element it was read from (col2im, kernel offsets in order
        (kh, kw) for every element). At stride 1 the pitch is xp's width and each row one run
        of xp from the tap's shift, its entries past OW set to zero going (the products there
        meet zeros) and zero coming back (they add nothing); else the pitch is OW."""
        c_, wp = xp.shape[0], xp.shape[2]
        wide = sh == 1 and sw == 1
        size = oh_ * pitch
        for c in range(c_):
            plane = xp[c].ravel()
            for kh in range(kh_):
                for kw in range(kw_):
                    r = (kh * kw_ + kw) * c_ + c if tap_major else (c * kh_ + kh) * kw_ + kw
                    row = cols[r, :size]
                    if wide:
                        start = kh * dh * wp + kw * dw
                        run = plane[start : start + size]
                        if back:
                            for q in range(size):
                                run[q] += row[q]
                        else:
                            for q in range(size):
                                row[q] = run[q]
                            _clear_past_width(row, oh_, ow_, pitch)
                        continue
                    # unsigned indices into the flat plane and row: no view a row, no
                    # negative-index select an element
                    for i in range(oh_):
                        start = np.uint64((i * sh + kh * dh) * wp + kw * dw)
                        at = np.uint64(i * pitch)
                        if back:
                            for j in range(np.uint64(ow_)):
                                plane[start + j * np.uint64(sw)] += row[at + j]
                        else:
                            for j in range(np.uint64(ow_)):
                                row[at + j] = plane[start + j * np.uint64(sw)]

    @cached_jit(inline="always", **_opts)
    def _clear_past_width(row, oh_, ow_, pitch):  # pragma: no cover - compiled
        """The entries past OW of each output row of ``row`` (OH*pitch) set to zero (a few per
        row: element by element, which costs less than a slice's setup)."""
        for i in range(oh_):
            for q in range(i * pitch + ow_, (i + 1) * pitch):
                row[q] = 0

    @cached_jit(inline="always", **_opts)
    def _shift(t, kw_, dh, dw, wp):  # pragma: no cover - compiled
        return (t // kw_) * dh * wp + (t % kw_) * dw

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_image(
        t, x, wc, wt, res, xps, colss, zs, kh_, kw_, sh, sw, ph, pw, dh, dw, n
    ):  # pragma: no cover
        xp = xps[t]
        wide = sh == 1 and sw == 1
        _fill_padded(x, n, xp, ph, pw, xp.shape[1] - wide)
        o, c = wt.shape[1], wt.shape[2]
        oh_, ow_ = res.shape[2], res.shape[3]
        if wide:
            wp = xp.shape[2]
            plane, size = xp.shape[1] * wp, oh_ * wp
            flat, z = xp.reshape(c, plane), zs[t]
            for k in range(kh_ * kw_):
                shifted = flat[0, _shift(k, kw_, dh, dw, wp) :]  # rows one plane apart
                beta = 0.0 if k == 0 else 1.0
                gemm(NO_TRANS, NO_TRANS, o, size, c, 1.0, wt[k], c, shifted, plane, beta, z, size)
            _pitched(res, n, z, wp, False)
            return
        cols = colss[t]
        _columns(xp, cols, kh_, kw_, sh, sw, dh, dw, oh_, ow_, ow_, False, False)
        ck, p = wc.shape[1], oh_ * ow_
        gemm(NO_TRANS, NO_TRANS, o, p, ck, 1.0, wc, ck, cols, p, 0.0, res[n], p)

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _input_image(
        t, g, wc, wt, taps, gx, gxps, gcolss, gps, kh_, kw_, sh, sw, ph, pw, dh, dw, n
    ):  # pragma: no cover
        gxp = gxps[t]
        wide = sh == 1 and sw == 1
        o, c, ck = wt.shape[1], wt.shape[2], wc.shape[1]
        oh_, ow_ = g.shape[2], g.shape[3]
        wp = gxp.shape[2]
        gxp[...] = 0
        if wide:
            gp = gps[t]
            _pitched(g, n, gp, wp, True)
            size = oh_ * wp
            if taps:  # the weight is finite: the rows past OW stay zero in every product
                plane = gxp.shape[1] * wp
                flat = gxp.reshape(c, plane)
                for k in range(kh_ * kw_):
                    shifted = flat[0, _shift(k, kw_, dh, dw, wp) :]
                    gemm(TRANS, NO_TRANS, c, size, o, 1.0, wt[k], c, gp, size, 1.0, shifted, plane)
            else:
                gcols = gcolss[t]
                gemm(TRANS, NO_TRANS, ck, size, o, 1.0, wc, ck, gp, size, 0.0, gcols, size)
                for r in range(ck):
                    _clear_past_width(gcols[r], oh_, ow_, wp)
                _columns(gxp, gcols, kh_, kw_, sh, sw, dh, dw, oh_, ow_, wp, False, True)
        else:
            gcols, p = gcolss[t], oh_ * ow_
            gemm(TRANS, NO_TRANS, ck, p, o, 1.0, wc, ck, g[n], p, 0.0, gcols, p)
            _columns(gxp, gcols, kh_, kw_, sh, sw, dh, dw, oh_, ow_, ow_, False, True)
        h_, w_ = gx.shape[2], gx.shape[3]
        for ch in range(gx.shape[1]):
            for i in range(h_):
                dst = gx[n, ch, i]
                inside = max(0, min(w_, wp - pw))  # columns past the last window: 0
                if ph + i >= gxp.shape[1] - wide:  # a row no window reads
                    inside = 0
                else:
                    src = gxp[ch, ph + i, pw : pw + inside]
                    for q in range(inside):
                        dst[q] = src[q]
                for q in range(inside, w_):
                    dst[q] = 0

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _weight_chunk(
        t, x, g, parts, xps, colss, gps, size, kh_, kw_, sh, sw, ph, pw, dh, dw, k
    ):  # pragma: no cover
        """parts[k] (KH*KW*C, O), tap-major <- the chunk's images' sum of their gradients."""
        xp, cols, gp = xps[t], colss[t], gps[t]
        wide = sh == 1 and sw == 1
        c, o, ck = x.shape[1], g.shape[1], parts.shape[1]
        oh_, ow_ = g.shape[2], g.shape[3]
        wp = xp.shape[2]
        pitch = wp if wide else ow_
        width = oh_ * pitch
        first = k * size
        for n in range(first, min(x.shape[0], first + size)):
            _fill_padded(x, n, xp, ph, pw, xp.shape[1] - wide)
            beta = 0.0 if n == first else 1.0
            if wide:
                _pitched(g, n, gp, wp, True)
                rows = gp
            else:  # the output rows are g's own
                rows = g[n].reshape(o, width)
            if wide and _finite(
                x[n].ravel()
            ):  # shifted @ rows^T per tap: (C, O) blocks of parts[k]
                plane = xp.shape[1] * wp
                flat = xp.reshape(c, plane)
                for j in range(kh_ * kw_):
                    shifted = flat[0, _shift(j, kw_, dh, dw, wp) :]
                    out = parts[k, j * c :]
                    gemm(
                        NO_TRANS, TRANS, c, o, width, 1.0, shifted, plane, rows, width, beta, out, o
                    )
                continue
            # the columns, tap-major (entries past OW zero), as cols @ rows^T: 1.2-1.8x the
            # rate of rows @ cols^T with 16-64 output channels
            _columns(xp, cols, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch, True, False)
            gemm(NO_TRANS, TRANS, ck, o, width, 1.0, cols, width, rows, width, beta, parts[k], o)

    _forward, _forward_parallel = thread_loops(_forward_image, **_opts)
    _input, _input_parallel = thread_loops(_input_image, **_opts)
    _weight, _weight_parallel = thread_loops(_weight_chunk, **_opts)

    class _Layout:
        """The per-thread buffers of one call: the padded image (C, HP, WP), and the columns
        (C*KH*KW, OH*pitch) or the output rows (O, OH*pitch) at the pitch (WP at stride 1, where
        HP has one zero row more, which the last tap's run reads into; else OW)."""

        def __init__(self, c, ksize, out_shape, stride, dilation, tasks, entries):
            (kh, kw), (oh, ow), (sh, sw), (dh, dw) = ksize, out_shape, stride, dilation
            self.wide = sh == 1 and sw == 1
            rows, width = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
            self.padded = (c, rows + self.wide, width)
            self.pitch = width if self.wide else ow
            self.cols = (c * kh * kw, oh * self.pitch)
            count = numba.get_num_threads()  # asked at every size: the same calls (tests count)
            self.threads = count if threaded(tasks, entries, PARALLEL_MIN_SIZE) else 1

        def buffer(self, scratch, key, shape, dtype, zero=False, needed=True):
            """One ``shape`` buffer per thread (kept in ``scratch`` when given); a stand-in of
            one element where the call does not use it."""
            if not needed:
                return _UNUSED[np.dtype(dtype)]
            shape = (self.threads, *shape)
            a = np.empty(shape, dtype) if scratch is None else scratch(key, shape)
            if zero:
                a.fill(0)  # read as zeros (a workspace may hold another value's bytes)
            return a

    # the stand-in for a buffer a call does not use (never written)
    _UNUSED = {np.dtype(t): np.zeros((1, 1, 1), t) for t in (np.float32, np.float64)}

    def _weights(w, scratch) -> tuple:
        """w as (O, C*KH*KW) (the columns' product: w itself) and as (KH*KW, O, C) (the taps':
        a copy, kept in ``scratch`` when given)."""
        o, c = w.shape[:2]
        wc = np.ascontiguousarray(w.reshape(o, -1))
        shape = (math.prod(w.shape[2:]), o, c)
        wt = np.empty(shape, w.dtype) if scratch is None else scratch("img_wt", shape)
        np.copyto(wt, w.reshape(o, c, -1).transpose(2, 0, 1))
        return wc, wt

    def _geometry(w, stride, padding, dilation) -> tuple:
        return (*w.shape[2:], *stride, *padding, *dilation)

    def conv_image_forward(x, w, res, stride, padding, dilation, scratch=None) -> None:
        """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w), image by image (the module)."""
        x = np.ascontiguousarray(x)
        wc, wt = _weights(w, scratch)
        n, c = x.shape[:2]
        lay = _Layout(
            c, w.shape[2:], res.shape[2:], stride, dilation, n, n * wc[0].size * res[0, 0].size
        )
        xps = lay.buffer(scratch, "img_xp", lay.padded, x.dtype, zero=True)
        colss = lay.buffer(scratch, "img_cols", lay.cols, x.dtype, needed=not lay.wide)
        zs = lay.buffer(scratch, "img_rows", (w.shape[0], lay.cols[1]), x.dtype, needed=lay.wide)
        run = _forward_parallel if lay.threads > 1 else _forward
        with one_blas_thread():
            run(n, x, wc, wt, res, xps, colss, zs, *_geometry(w, stride, padding, dilation))

    def conv_image_input(g, w, gx, stride, padding, dilation, scratch=None) -> None:
        """``gx`` (N, C, H, W, C-contiguous) <- the adjoint of conv in x applied to g."""
        g = np.ascontiguousarray(g)
        wc, wt = _weights(w, scratch)
        taps = bool(all_finite(wt))
        n, c = gx.shape[:2]
        lay = _Layout(
            c, w.shape[2:], g.shape[2:], stride, dilation, n, n * wc[0].size * g[0, 0].size
        )
        gxps = lay.buffer(scratch, "img_gxp", lay.padded, g.dtype)
        gcolss = lay.buffer(scratch, "img_gcols", lay.cols, g.dtype, needed=not (lay.wide and taps))
        gps = lay.buffer(
            scratch, "img_rows", (w.shape[0], lay.cols[1]), g.dtype, zero=True, needed=lay.wide
        )
        run = _input_parallel if lay.threads > 1 else _input
        geometry = _geometry(w, stride, padding, dilation)
        with one_blas_thread():
            run(n, g, wc, wt, taps, gx, gxps, gcolss, gps, *geometry)

    def conv_image_weight(x, g, gw, stride, padding, dilation, scratch=None) -> None:
        """``gw`` (O, C, KH, KW, C-contiguous) <- the weight's gradient of conv(x, w) for g."""
        x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
        n, c = x.shape[:2]
        o = g.shape[1]
        size = -(-n // WEIGHT_CHUNKS)  # images per chunk: fixed per batch size
        chunks = -(-n // size)
        lay = _Layout(
            c, gw.shape[2:], g.shape[2:], stride, dilation, chunks, n * gw[0].size * g[0, 0].size
        )
        xps = lay.buffer(scratch, "img_xp", lay.padded, x.dtype, zero=True)
        colss = lay.buffer(scratch, "img_cols", lay.cols, x.dtype)
        gps = lay.buffer(scratch, "img_rows", (o, lay.cols[1]), g.dtype, zero=True, needed=lay.wide)
        taps = math.prod(gw.shape[2:])
        shape = (chunks, taps * c, o)  # each chunk's sum: (tap, channel) rows, transposed
        parts = np.empty(shape, x.dtype) if scratch is None else scratch("img_parts", shape)
        run = _weight_parallel if lay.threads > 1 else _weight
        with one_blas_thread():
            run(
                chunks,
                x,
                g,
                parts,
                xps,
                colss,
                gps,
                size,
                *_geometry(gw, stride, padding, dilation),
            )
        add_chunks(parts)  # chunk order: the same bits on any thread count
        total = parts[0]
        np.copyto(gw.reshape(o, c, taps), total.reshape(taps, c, o).transpose(2, 1, 0))

else:  # pragma: no cover
    conv_image_forward = conv_image_forward_reference
    conv_image_input = conv_image_input_reference
    conv_image_weight = conv_image_weight_reference
