"""2-d convolutions of few input channels at stride 1, image by image in plain loops (no BLAS).

With one to fifteen input channels (seed-cnn's and a ResNet stem's single channel) a
convolution's products are too thin for BLAS: the forward's is (O, C*KH*KW) @ (C*KH*KW, OH*OW)
with K = 9 for one channel, the weight gradient's as thin the other way, and a batch of such
products cost ~10x their multiply-adds. Here every multiply-add is a vectorised loop over a
contiguous run of the image:

* forward: the image is copied into a zero-padded buffer (C, HP, WP) and each output plane is
  computed at the buffer's width, ``z[o] += w[o, c, kh, kw] * xp[c].flat[kh*WP + kw:][:OH*WP]``
  over the taps in (c, kh, kw) order (the entries past OW, which wrap into the next row, are
  dropped when the plane is copied out);
* input gradient: the adjoint, each output row added into the padded gradient at its tap,
  ``gxp[c, i + kh, kw:kw + OW] += w[o, c, kh, kw] * g[n, o, i]``, taps in (o, kh, kw) order;
* weight gradient: a row of partial sums per weight entry, ``acc[o, c, kh, kw] +=
  g[n, o, i] * xp[c, i + kh, kw:kw + OW]`` over a chunk's images and rows, each row then added
  up in order, the chunks' sums added in chunk order (``WEIGHT_CHUNKS``, fixed per batch size).

Only positions a window reads are multiplied in the gradients, so an inf or NaN reaches exactly
the entries it does in the references. Every image (forward, input gradient) and every chunk
(weight gradient) is computed by one thread, so serial and parallel runs give the same bits.
``scratch(key, shape)`` keeps the per-thread buffers between steps, as in ``by_image.py``.
"""

from __future__ import annotations

import numpy as np

# below this many input channels a 2-d stride-1 convolution runs here (by_image.MIN_CHANNELS)
MAX_CHANNELS = 15
# from how many multiply-adds (all images together) the images are split over numba's threads
PARALLEL_MIN_FLOPS = 1 << 18
# the weight gradient's images are summed in this many chunks at most (fixed per batch size)
WEIGHT_CHUNKS = 16

try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .loops import thread_loops

    _opts = dict(boundscheck=False, nogil=True)

    # Loops index views that start at 0 (and offsets that are provably non-negative): numba
    # wraps a possibly negative index, and that select per element keeps LLVM from vectorising.

    @cached_jit(inline="always", **_opts)
    def _fill(x, n, xp, ph, pw):  # pragma: no cover - compiled
        """xp (C, HP, WP) <- image n of x at offset (ph, pw), zeros elsewhere."""
        xp[...] = 0
        hh = min(x.shape[2], xp.shape[1] - ph)
        ww = min(x.shape[3], xp.shape[2] - pw)
        for c in range(x.shape[1]):
            for i in range(hh):
                src = x[n, c, i]
                dst = xp[c, ph + i, pw : pw + ww]
                for j in range(ww):
                    dst[j] = src[j]

    @cached_jit(inline="always", **_opts)
    def _taps_into(zr, flat, shifts, w, o, size, add):  # pragma: no cover - compiled
        """zr[:size] (+)= the sum over taps t of w[o, t] * flat[shifts[t]:][:size], the taps
        taken three at a time (one store per entry for three multiply-adds: the loop is bound
        by its loads and stores), in order, each group's sum added to the entry."""
        taps = shifts.shape[0]
        t = 0
        while t < taps:
            left = taps - t
            if left >= 3:
                w0, w1, w2 = w[o, t], w[o, t + 1], w[o, t + 2]
                r0 = flat[shifts[t] : shifts[t] + size]
                r1 = flat[shifts[t + 1] : shifts[t + 1] + size]
                r2 = flat[shifts[t + 2] : shifts[t + 2] + size]
                if add:
                    for q in range(size):
                        zr[q] += (w0 * r0[q] + w1 * r1[q]) + w2 * r2[q]
                else:
                    for q in range(size):
                        zr[q] = (w0 * r0[q] + w1 * r1[q]) + w2 * r2[q]
                t += 3
            else:
                w0 = w[o, t]
                r0 = flat[shifts[t] : shifts[t] + size]
                if add:
                    for q in range(size):
                        zr[q] += w0 * r0[q]
                else:
                    for q in range(size):
                        zr[q] = w0 * r0[q]
                t += 1
            add = True

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_image(t, x, wt, shifts, res, xps, zs, ph, pw, n):  # pragma: no cover
        xp, z = xps[t], zs[t]
        _fill(x, n, xp, ph, pw)
        oh, ow = res.shape[2], res.shape[3]
        wp = xp.shape[2]
        size = oh * wp
        flat = xp.ravel()
        zr = z[:size]
        for o in range(wt.shape[0]):
            _taps_into(zr, flat, shifts, wt, o, size, False)
            for i in range(oh):
                src = zr[i * wp : i * wp + ow]
                dst = res[n, o, i]
                for j in range(ow):
                    dst[j] = src[j]

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _input_image(t, g, w, gx, gxps, ph, pw, n):  # pragma: no cover - compiled
        gxp = gxps[t]
        gxp[...] = 0
        o_, c_, kh_, kw_ = w.shape
        oh, ow = g.shape[2], g.shape[3]
        for c in range(c_):
            for o in range(o_):
                for kh in range(kh_):
                    for kw in range(kw_):
                        wv = w[o, c, kh, kw]
                        for i in range(oh):
                            src = g[n, o, i]
                            dst = gxp[c, i + kh, kw : kw + ow]
                            for j in range(ow):
                                dst[j] += wv * src[j]
        h_, w_ = gx.shape[2], gx.shape[3]
        inside = max(0, min(w_, gxp.shape[2] - pw))  # columns past the last window: 0
        for c in range(c_):
            for i in range(h_):
                dst = gx[n, c, i]
                if ph + i < gxp.shape[1]:
                    src = gxp[c, ph + i, pw : pw + inside]
                    for j in range(inside):
                        dst[j] = src[j]
                    for j in range(inside, w_):
                        dst[j] = 0
                else:  # a row no window reads
                    for j in range(w_):
                        dst[j] = 0

    @cached_jit(inline="always", **_opts)
    def _finite(a):  # pragma: no cover - compiled
        """Whether the contiguous 1-d float array a holds no inf or NaN, read from its bits."""
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

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _weight_chunk(t, x, g, shifts, parts, xps, gps, accs, ph, pw, size, k):  # pragma: no cover
        """parts[k] (O, C*KH*KW) <- the sum over chunk k's images of their gradients."""
        xs, gp, acc = xps[t], gps[t], accs[t]  # acc: (taps, OH*WP) partial sums of one o
        o_, taps = parts.shape[1], parts.shape[2]
        oh, ow = g.shape[2], g.shape[3]
        wp = xs.shape[3]
        length = oh * wp
        first = k * size
        count = min(x.shape[0], first + size) - first
        finite = np.empty(count, np.bool_)
        for m in range(count):  # the chunk's padded images, read by every o below
            _fill(x, first + m, xs[m], ph, pw)
            finite[m] = _finite(x[first + m].ravel())
        gr = gp[:length]
        gr[...] = 0  # the entries past OW stay zero
        for o in range(o_):
            acc[...] = 0
            for m in range(count):
                flat = xs[m].ravel()
                if finite[m]:  # at the padded width: the entries past OW multiply zeros
                    for i in range(oh):
                        src = g[first + m, o, i]
                        dst = gr[i * wp : i * wp + ow]
                        for j in range(ow):
                            dst[j] = src[j]
                    for tap in range(taps):
                        row = acc[tap, :length]
                        run = flat[shifts[tap] : shifts[tap] + length]
                        for q in range(length):
                            row[q] += gr[q] * run[q]
                else:  # only the positions a window reads: inf and NaN reach what they should
                    for tap in range(taps):
                        for i in range(oh):
                            src = g[first + m, o, i]
                            row = acc[tap, i * wp : i * wp + ow]
                            run = flat[shifts[tap] + i * wp : shifts[tap] + i * wp + ow]
                            for j in range(ow):
                                row[j] += src[j] * run[j]
            # each row's sum, by halving (vectorised adds, in a fixed order)
            n_ = length
            while n_ > 1:
                half = n_ // 2
                for tap in range(taps):
                    lo, hi = acc[tap, :half], acc[tap, n_ - half : n_]
                    for q in range(half):
                        lo[q] += hi[q]
                n_ -= half
            for tap in range(taps):
                parts[k, o, tap] = acc[tap, 0]

    _forward, _forward_parallel = thread_loops(_forward_image, **_opts)
    _input, _input_parallel = thread_loops(_input_image, **_opts)
    _weight, _weight_parallel = thread_loops(_weight_chunk, **_opts)


def applies(dtype, channels: int, stride: tuple, dilation: tuple) -> bool:
    """Whether a 2-d convolution of this kind runs here: numba, float32/float64, at most
    ``MAX_CHANNELS`` input channels, stride 1, no dilation."""
    return (
        numba is not None
        and channels <= MAX_CHANNELS
        and tuple(stride) == (1, 1)
        and tuple(dilation) == (1, 1)
        and np.dtype(dtype) in (np.float32, np.float64)
    )


def _threads(tasks: int, flops: int) -> int:
    count = numba.get_num_threads()  # asked at every size: the same calls (tests count)
    return count if count > 1 and tasks > 1 and flops >= PARALLEL_MIN_FLOPS else 1


def _buffers(scratch, key: str, threads: int, shape: tuple, dtype) -> np.ndarray:
    shape = (threads, *shape)
    return np.empty(shape, dtype) if scratch is None else scratch(key, shape)


def _padded(x_shape: tuple, w_shape: tuple, out_shape: tuple) -> tuple:
    """The padded image every window reads: (C, OH + KH - 1, OW + KW - 1), plus one zero row
    (the forward's last tap reads its run up to OH*WP entries past its start)."""
    return (x_shape[1], out_shape[0] + w_shape[2], out_shape[1] + w_shape[3] - 1)


def _shifts(shape: tuple, ksize: tuple) -> np.ndarray:
    """Where each tap's run starts in the flattened padded image (C, HP, WP), taps in
    (c, kh, kw) order."""
    c, hp, wp = shape
    kh, kw = ksize
    grid = np.arange(c)[:, None, None] * hp * wp + np.arange(kh)[:, None] * wp + np.arange(kw)
    return grid.reshape(-1).astype(np.int64)


def forward(x, w, res, padding, scratch=None) -> None:
    """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w) at stride 1, ``padding`` (top, left)."""
    x = np.ascontiguousarray(x)
    n = x.shape[0]
    threads = _threads(n, res.size * w[0].size)
    shape = _padded(x.shape, w.shape, res.shape[2:])
    xps = _buffers(scratch, "few_xp", threads, shape, x.dtype)
    zs = _buffers(scratch, "few_z", threads, (res.shape[2] * shape[2],), x.dtype)
    wt = np.ascontiguousarray(w.reshape(w.shape[0], -1))
    run = _forward_parallel if threads > 1 else _forward
    run(n, x, wt, _shifts(shape, w.shape[2:]), res, xps, zs, *padding)


def input_grad(g, w, gx, padding, scratch=None) -> None:
    """``gx`` (N, C, H, W, C-contiguous) <- the adjoint in x of conv at stride 1 applied to g."""
    g, w = np.ascontiguousarray(g), np.ascontiguousarray(w)
    n = g.shape[0]
    threads = _threads(n, g.size * w[0].size)
    shape = _padded(gx.shape, w.shape, g.shape[2:])
    gxps = _buffers(scratch, "few_gxp", threads, shape, g.dtype)
    run = _input_parallel if threads > 1 else _input
    run(n, g, w, gx, gxps, *padding)


def weight_grad(x, g, gw, padding, scratch=None) -> None:
    """``gw`` (O, C, KH, KW, C-contiguous) <- the weight's gradient of conv at stride 1 for g."""
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
    n, o = x.shape[0], gw.shape[0]
    size = -(-n // WEIGHT_CHUNKS) if n else 1  # images per chunk: fixed per batch size
    chunks = -(-n // size)
    if chunks == 0:
        gw[...] = 0
        return
    threads = _threads(chunks, g.size * gw[0].size)
    shape = _padded(x.shape, gw.shape, g.shape[2:])
    length = g.shape[2] * shape[2]
    taps = gw[0].size
    xps = _buffers(scratch, "few_xps", threads, (size, *shape), x.dtype)
    gps = _buffers(scratch, "few_gp", threads, (length,), x.dtype)
    accs = _buffers(scratch, "few_acc", threads, (taps, length), x.dtype)
    parts_shape = (chunks, o, taps)
    parts = np.empty(parts_shape, x.dtype) if scratch is None else scratch("few_parts", parts_shape)
    run = _weight_parallel if threads > 1 else _weight
    run(chunks, x, g, _shifts(shape, gw.shape[2:]), parts, xps, gps, accs, *padding, size)
    out = gw.reshape(o, taps)
    np.copyto(out, parts[0])
    for k in range(1, chunks):  # chunk order: the same bits on any thread count
        np.add(out, parts[k], out=out)
