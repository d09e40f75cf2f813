"""2-d convolutions image by image: each of numba's threads takes whole images and, for each,
copies its windows into columns the size of one image (which stay in the core's cache) and
multiplies them with one single-threaded BLAS call (``gemm.py``).

The whole-batch layout (``columns.py``) writes every image's columns, nine times the input for
a 3x3 kernel (45 MB for a batch of 100 MNIST-sized 16-channel images), then multiplies them in
one GEMM with 16 rows that OpenBLAS's two threads run at ~85 GFLOP/s on this machine; image by
image the columns never leave the cache, no output or gradient is transposed, and one thread
pool does the copying and the products (forward 6.3 -> 3.6 ms on that shape, two threads).

* ``conv_image_forward(x, w, res, stride, padding, dilation, scratch)``: ``res`` (N, O, OH, OW)
  <- the convolution of x (N, C, H, W) with w (O, C, KH, KW);
* ``conv_image_input(g, w, gx, ...)``: ``gx`` (N, C, H, W) <- its adjoint in x for the output
  gradient g (W^T g per image, then its columns added back where they were read: col2im);
* ``conv_image_weight(x, g, gw, ...)``: ``gw`` (O, C, KH, KW) <- the sum over images of
  g[n] cols[n]^T (computed as its transpose), the images in fixed chunks whose partial sums
  are added in chunk order.

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
# small images are taken a few at a time, their columns side by side, so that each product is
# at least this many columns wide (one 7x7 image's 63 columns: 74 -> 96 GFLOP/s at 504)
MIN_PRODUCT_COLUMNS = 512
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
    from .gemm import NO_TRANS, TRANS, gemm, one_blas_thread
    from .loops import thread_loops, threaded

    _opts = dict(boundscheck=False, nogil=True)

    # Indices into arrays below are views' own (start at 0) or provably non-negative: numba
    # wraps a possibly negative index, and that select per element keeps LLVM from
    # vectorising a copy (a 840-element row copy measured 7x slower).

    @cached_jit(inline="always", **_opts)
    def _fill_padded(x, n, xp, ph, pw, rows):  # pragma: no cover - compiled
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
    def _columns(
        xp, cols, base, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch, clear
    ):  # pragma: no cover
        """cols[:, base : base + OH*pitch] <- the windows of the padded image xp (im2col). At
        stride 1 the pitch is xp's width and each row one run of xp shifted by its offset; the
        entries past OW of each output row, which no output keeps, are set to zero if
        ``clear`` (the weight's gradient: they would meet zeros there, and an inf would make
        NaN), else left holding whatever the run read."""
        wp = xp.shape[2]
        wide = sh == 1 and sw == 1
        size = oh_ * pitch
        for c in range(xp.shape[0]):
            plane = xp[c].ravel()
            for kh in range(kh_):
                for kw in range(kw_):
                    row = cols[(c * kh_ + kh) * kw_ + kw, base : base + size]
                    if wide:
                        start = kh * dh * wp + kw * dw
                        src = plane[start : start + size]
                        for q in range(size):
                            row[q] = src[q]
                        if clear:
                            _clear_past_width(row, oh_, ow_, pitch)
                        continue
                    for i in range(oh_):
                        start = (i * sh + kh * dh) * wp + kw * dw
                        src = plane[start : start + (ow_ - 1) * sw + 1 : sw]
                        dst = row[i * pitch : i * pitch + ow_]
                        for j in range(ow_):
                            dst[j] = src[j]

    @cached_jit(inline="always", **_opts)
    def _clear_past_width(row, oh_, ow_, pitch):  # pragma: no cover - compiled
        """The entries past OW of each output row of ``row`` (OH*pitch) set to zero (a few per
        row: element by element, which costs less than a slice's setup)."""
        for i in range(oh_):
            for q in range(i * pitch + ow_, (i + 1) * pitch):
                row[q] = 0

    @cached_jit(inline="always", **_opts)
    def _add_columns(
        gcols, base, gxp, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch
    ):  # pragma: no cover
        """gxp (C, HP, WP) += every entry of gcols[:, base : base + OH*pitch] at the element it
        was read from (col2im), kernel offsets in order (kh, kw) for every element (at stride
        1 the entries past OW are zero: they add nothing)."""
        wp = gxp.shape[2]
        wide = sh == 1 and sw == 1
        size = oh_ * pitch
        for c in range(gxp.shape[0]):
            plane = gxp[c].ravel()
            for kh in range(kh_):
                for kw in range(kw_):
                    row = gcols[(c * kh_ + kh) * kw_ + kw, base : base + size]
                    if wide:
                        start = kh * dh * wp + kw * dw
                        dst = plane[start : start + size]
                        for q in range(size):
                            dst[q] += row[q]
                        continue
                    for i in range(oh_):
                        start = (i * sh + kh * dh) * wp + kw * dw
                        dst = plane[start : start + (ow_ - 1) * sw + 1 : sw]
                        src = row[i * pitch : i * pitch + ow_]
                        for j in range(ow_):
                            dst[j] += src[j]

    @cached_jit(inline="always", **_opts)
    def _spread(g, n, rows, base, pitch):  # pragma: no cover - compiled
        """rows[:, base : base + OH*pitch] <- image n of g (N, O, OH, OW), each output row at
        its pitch (the entries past OW are left as they are: zero)."""
        oh_, ow_ = g.shape[2], g.shape[3]
        for o in range(g.shape[1]):
            for i in range(oh_):
                src = g[n, o, i]
                dst = rows[o, base + i * pitch : base + i * pitch + ow_]
                for j in range(ow_):
                    dst[j] = src[j]

    @cached_jit(inline="always", **_opts)
    def _gather(rows, base, pitch, res, n):  # pragma: no cover - compiled
        """Image n of res (N, O, OH, OW) <- rows[:, base : base + OH*pitch] (``_spread``'s
        inverse: the entries past OW dropped)."""
        oh_, ow_ = res.shape[2], res.shape[3]
        for o in range(res.shape[1]):
            for i in range(oh_):
                dst = res[n, o, i]
                src = rows[o, base + i * pitch : base + i * pitch + ow_]
                for j in range(ow_):
                    dst[j] = src[j]

    @cached_jit(inline="always", **_opts)
    def _direct(rows, pitch, ow_):  # pragma: no cover - compiled
        """Whether one image's output rows are the array's own (one image per group, no
        entries past OW): products then read and write them in place."""
        return rows.shape[2] == 1 and pitch == ow_

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_group(
        t, x, w2, res, xps, colss, zs, group, kh_, kw_, sh, sw, ph, pw, dh, dw, j
    ):  # pragma: no cover
        xp, cols, z = xps[t], colss[t], zs[t]
        oh_, ow_ = res.shape[2], res.shape[3]
        pitch = cols.shape[1] // (group * oh_)
        size = oh_ * pitch
        first = j * group
        last = min(x.shape[0], first + group)
        for n in range(first, last):
            _fill_padded(x, n, xp, ph, pw, xp.shape[1] - (sh == 1 and sw == 1))
            _columns(xp, cols, (n - first) * size, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch, False)
        o, ck, ld = w2.shape[0], w2.shape[1], cols.shape[1]
        if _direct(zs, pitch, ow_):
            gemm(NO_TRANS, NO_TRANS, o, size, ck, 1.0, w2, ck, cols, ld, 0.0, res[first], size)
            return
        gemm(NO_TRANS, NO_TRANS, o, (last - first) * size, ck, 1.0, w2, ck, cols, ld, 0.0, z, ld)
        for n in range(first, last):
            _gather(z, (n - first) * size, pitch, res, n)

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _input_group(
        t, g, w2, gx, gxps, gcolss, gps, group, kh_, kw_, sh, sw, ph, pw, dh, dw, j
    ):  # pragma: no cover
        gxp, gcols, gp = gxps[t], gcolss[t], gps[t]
        oh_, ow_ = g.shape[2], g.shape[3]
        o, ck, ld = w2.shape[0], w2.shape[1], gcols.shape[1]
        pitch = ld // (group * oh_)
        size = oh_ * pitch
        first = j * group
        last = min(g.shape[0], first + group)
        if _direct(gps, pitch, ow_):
            gemm(TRANS, NO_TRANS, ck, size, o, 1.0, w2, ck, g[first], size, 0.0, gcols, ld)
        else:
            for n in range(first, last):
                _spread(g, n, gp, (n - first) * size, pitch)
            gemm(TRANS, NO_TRANS, ck, (last - first) * size, o, 1.0, w2, ck, gp, ld, 0.0, gcols, ld)
        h_, w_ = gx.shape[2], gx.shape[3]
        for n in range(first, last):
            gxp[...] = 0
            base = (n - first) * size
            if pitch != ow_:  # zero unless w holds inf or NaN
                for r in range(ck):
                    _clear_past_width(gcols[r, base : base + size], oh_, ow_, pitch)
            _add_columns(gcols, base, gxp, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch)
            for c in range(gx.shape[1]):
                for i in range(h_):
                    dst = gx[n, c, i]
                    inside = max(0, min(w_, gxp.shape[2] - pw))  # columns past it: 0
                    if ph + i >= gxp.shape[1] - (sh == 1 and sw == 1):  # a row no window reads
                        inside = 0
                    else:
                        src = gxp[c, ph + i, pw : pw + inside]
                        for q in range(inside):
                            dst[q] = src[q]
                    for q in range(inside, w_):
                        dst[q] = 0

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _weight_chunk(
        t, x, g, parts, xps, colss, gps, group, per_chunk, kh_, kw_, sh, sw, ph, pw, dh, dw, k
    ):  # pragma: no cover
        xp, cols, gp = xps[t], colss[t], gps[t]
        oh_, ow_ = g.shape[2], g.shape[3]
        o, ck, ld = g.shape[1], cols.shape[0], cols.shape[1]
        pitch = ld // (group * oh_)
        size = oh_ * pitch
        for j in range(k * per_chunk, (k + 1) * per_chunk):
            first = j * group
            last = min(x.shape[0], first + group)
            if first >= last:
                break
            for n in range(first, last):
                _fill_padded(x, n, xp, ph, pw, xp.shape[1] - (sh == 1 and sw == 1))
                _columns(
                    xp, cols, (n - first) * size, kh_, kw_, sh, sw, dh, dw, oh_, ow_, pitch, True
                )
            beta = 0.0 if j == k * per_chunk else 1.0
            width = (last - first) * size
            # as its transpose cols @ g^T (CK, O): 1.2-1.8x the rate of g @ cols^T (16-64 rows)
            if _direct(gps, pitch, ow_):
                gemm(NO_TRANS, TRANS, ck, o, size, 1.0, cols, ld, g[first], size, beta, parts[k], o)
                continue
            for n in range(first, last):
                _spread(g, n, gp, (n - first) * size, pitch)
            gemm(NO_TRANS, TRANS, ck, o, width, 1.0, cols, ld, gp, ld, beta, parts[k], o)

    _forward, _forward_parallel = thread_loops(_forward_group, **_opts)
    _input, _input_parallel = thread_loops(_input_group, **_opts)
    _weight, _weight_parallel = thread_loops(_weight_chunk, **_opts)

    class _Layout:
        """How one call splits its images: groups of ``group`` images (enough that a product
        is ``MIN_PRODUCT_COLUMNS`` wide), each group's columns (C*KH*KW, group*OH*pitch) side
        by side, and per thread the padded image (C, HP, WP) they are copied from. At stride 1
        the pitch is WP (HP has one zero row more, which the last run of columns reads into);
        else OW."""

        def __init__(self, c, ksize, out_shape, stride, dilation, images):
            (kh, kw), (oh, ow), (sh, sw), (dh, dw) = ksize, out_shape, stride, dilation
            wide = sh == 1 and sw == 1
            rows, width = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
            self.padded = (c, rows + wide, width)
            self.pitch = width if wide else ow
            # (strided convolutions one image at a time: grouping them measured 7-10% slower)
            wanted = -(-MIN_PRODUCT_COLUMNS // (oh * self.pitch)) if wide else 1
            self.group = max(1, min(images, wanted))
            self.groups = -(-images // self.group)
            self.cols = (c * kh * kw, self.group * oh * self.pitch)
            self.own_rows = self.group == 1 and self.pitch == ow
            count = numba.get_num_threads()  # asked at every size: the same calls (tests count)
            self.threads = (
                count
                if threaded(
                    self.groups, images * math.prod(self.cols) // self.group, PARALLEL_MIN_SIZE
                )
                else 1
            )

        def buffer(self, scratch, key, shape, dtype, zero=False):
            """One ``shape`` buffer per thread (kept in ``scratch`` when given)."""
            shape = (self.threads, *shape)
            a = np.empty(shape, dtype) if scratch is None else scratch(key, shape)
            if zero:
                a.fill(0)  # read as zeros (a workspace may hold another value's bytes)
            return a

        def rows(self, scratch, channels, dtype):
            """Per thread, (channels, group*OH*pitch) output rows at the columns' pitch (the
            entries past OW zero); (1, 1, 1) where an image's rows are the array's own."""
            if self.own_rows:
                return np.empty((1, 1, 1), dtype)
            return self.buffer(scratch, "img_rows", (channels, self.cols[1]), dtype, zero=True)

    def _geometry(w, stride, padding, dilation) -> tuple:
        return (*w.shape[2:], *stride, *padding, *dilation)

    def conv_image_forward(x, w, res, stride, padding, dilation, scratch=None) -> None:
        """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w), image by image (the module)."""
        x = np.ascontiguousarray(x)
        w2 = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        n, c = x.shape[:2]
        lay = _Layout(c, w.shape[2:], res.shape[2:], stride, dilation, n)
        xps = lay.buffer(scratch, "img_xp", lay.padded, x.dtype, zero=True)
        colss = lay.buffer(scratch, "img_cols", lay.cols, x.dtype)
        zs = lay.rows(scratch, w2.shape[0], x.dtype)
        run = _forward_parallel if lay.threads > 1 else _forward
        geometry = _geometry(w, stride, padding, dilation)
        with one_blas_thread():
            run(lay.groups, x, w2, res, xps, colss, zs, lay.group, *geometry)

    def conv_image_input(g, w, gx, stride, padding, dilation, scratch=None) -> None:
        """``gx`` (N, C, H, W, C-contiguous) <- the adjoint of conv in x applied to g."""
        g = np.ascontiguousarray(g)
        w2 = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        n, c = gx.shape[:2]
        lay = _Layout(c, w.shape[2:], g.shape[2:], stride, dilation, n)
        gxps = lay.buffer(scratch, "img_gxp", lay.padded, g.dtype)
        gcolss = lay.buffer(scratch, "img_gcols", lay.cols, g.dtype)
        gps = lay.rows(scratch, w2.shape[0], g.dtype)
        run = _input_parallel if lay.threads > 1 else _input
        geometry = _geometry(w, stride, padding, dilation)
        with one_blas_thread():
            run(lay.groups, g, w2, gx, gxps, gcolss, gps, lay.group, *geometry)

    def conv_image_weight(x, g, gw, stride, padding, dilation, scratch=None) -> None:
        """``gw`` (O, C, KH, KW, C-contiguous) <- the weight's gradient of conv(x, w) for g."""
        x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
        n, c = x.shape[:2]
        o = g.shape[1]
        lay = _Layout(c, gw.shape[2:], g.shape[2:], stride, dilation, n)
        per_chunk = -(-lay.groups // WEIGHT_CHUNKS)  # groups per chunk: fixed per shape
        chunks = -(-lay.groups // per_chunk)
        xps = lay.buffer(scratch, "img_xp", lay.padded, x.dtype, zero=True)
        colss = lay.buffer(scratch, "img_cols", lay.cols, x.dtype)
        gps = lay.rows(scratch, o, g.dtype)
        shape = (chunks, lay.cols[0], o)  # each chunk's sum, transposed
        parts = np.empty(shape, x.dtype) if scratch is None else scratch("img_parts", shape)
        run = _weight_parallel if lay.threads > 1 and chunks > 1 else _weight
        geometry = _geometry(gw, stride, padding, dilation)
        with one_blas_thread():
            run(chunks, x, g, parts, xps, colss, gps, lay.group, per_chunk, *geometry)
        total = parts[0]
        for k in range(1, chunks):  # chunk order: the same bits on any thread count
            np.add(total, parts[k], out=total)
        np.copyto(gw.reshape(o, -1), total.T)

else:  # pragma: no cover
    conv_image_forward = conv_image_forward_reference
    conv_image_input = conv_image_input_reference
    conv_image_weight = conv_image_weight_reference
