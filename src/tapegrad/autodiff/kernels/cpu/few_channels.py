"""The forward of a 2-d convolution of few input channels at stride 1, image by image in plain
loops (no BLAS). On a CPU numba compiles AVX-512 for, float32 layers go to ``direct.py``'s
register blocks first (``conv2d.conv_few_forward``, ``conv_few_weight``: seed-cnn's and a
ResNet stem's); these loops serve float64 and the calls those refuse.

With one to fifteen input channels (seed-cnn's and a ResNet stem's single channel) the
forward's product, (O, C*KH*KW) @ (C*KH*KW, OH*OW), is too thin for BLAS (K = 9 for one
channel): the per-sample products cost ~10x their multiply-adds. Here the image is copied into
a zero-padded buffer (C, HP, WP) and each output plane computed at the buffer's width, its
entries the taps' runs of the buffer (tap (c, kh, kw) starts at ``c*HP*WP + kh*WP + kw``)
weighted and summed three taps at a time, taps in (c, kh, kw) order, two output channels a
pass (they share the runs' loads); the entries past OW, which wrap into the next row, are
dropped when the plane is copied out (an inf or NaN there reaches nothing). Measured on
seed-cnn's (100, 1, 28, 28) * (6, 1, 3, 3), two threads, AVX2 (2026-12-07): ~330 us against
~680 us for the per-sample columns and products with one channel a pass; two a pass (the same
bits) then 242-273 against 272-317 us on two threads, 254-280 against 310-520 on one, and a
ResNet stem's 16 channels 407-556 against 651-665 on two threads (the two versions' processes
alternating, two rounds, medians of 300 calls). Each image is computed by one thread: serial
and parallel runs give the same bits.

The weight's gradient, image by image: each image's padded columns copied once per kernel
column kw at the output's width, (KW, C, HP, OW), so that tap (c, kh, kw)'s window over the
whole output plane is one run of it (from row kh) and each weight entry one dot product of
OH*OW entries with the output gradient's plane; three taps a pass share the gradient's loads.
The dots are the one place tapegrad's CPU kernels let LLVM reassociate (``fastmath``
``reassoc``, no other flag: NaN and inf propagate as ever): a dot in vector lanes, whose order
is fixed by the machine's vector width as BLAS's own blocking is (README's sample pins numba's
target for it); without it the dot runs one product at a time (6x slower), and written-out
lanes in a fixed order measured 6-8x slower too (LLVM vectorises neither). Each image's
gradient is kept apart and the images summed in order, so serial and parallel runs give the
same bits. Measured on seed-cnn's (100, 1, 28, 28) and (100, 6, 26, 26), AVX2, 2026-12-07: see
:func:`conv_few_weight`.

The input's gradient keeps the columns' products (``primitives/conv_layout.py``): the adjoint
runs measured 0.9-1.7x the products' time on seed-cnn's and a ResNet stem's shapes, and 2-4x
on eight channels (a first layer's input, seed-cnn's, needs none).
"""

from __future__ import annotations

import functools

import numpy as np

# up to this many input channels a 2-d stride-1 forward runs here (from by_image.MIN_CHANNELS
# the image-by-image products serve)
MAX_CHANNELS = 15
# from how many multiply-adds (all images together) the images are split over numba's threads
PARALLEL_MIN_FLOPS = 1 << 18

try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .columns import fill_padded
    from .loops import thread_loops, threaded

    _opts = dict(boundscheck=False, nogil=True)

    # Loops index views that start at 0 (and offsets that are provably non-negative): numba
    # wraps a possibly negative index, and that select per element keeps LLVM from vectorising.

    @cached_jit(inline="always", **_opts)
    def _fill(x, n, xp, ph, pw):  # pragma: no cover - compiled
        """xp (C, HP, WP) <- image n of x at offset (ph, pw), zeros elsewhere."""
        xp[...] = 0
        fill_padded(x, n, xp, ph, pw, xp.shape[1])

    @cached_jit(inline="always", **_opts)
    def _taps_into(z0, z1, flat, shifts, w, o0, o1, size):  # pragma: no cover - compiled
        """z0[:size], z1[:size] <- the sums over taps t of w[o0, t] (w[o1, t]) * the run
        flat[shifts[t]:][:size]: two output channels a pass, sharing the runs' loads, the taps
        taken three at a time (for three multiply-adds per output entry, one load and one store
        of it: the loop is bound by its loads and stores), each group's sum added in order."""
        taps = shifts.shape[0]
        t = 0
        while t < taps:
            r0 = flat[shifts[t] : shifts[t] + size]
            if taps - t >= 3:
                a0, a1, a2 = w[o0, t], w[o0, t + 1], w[o0, t + 2]
                b0, b1, b2 = w[o1, t], w[o1, t + 1], w[o1, t + 2]
                r1 = flat[shifts[t + 1] : shifts[t + 1] + size]
                r2 = flat[shifts[t + 2] : shifts[t + 2] + size]
                if t > 0:
                    for q in range(size):
                        x0, x1, x2 = r0[q], r1[q], r2[q]
                        z0[q] += (a0 * x0 + a1 * x1) + a2 * x2
                        z1[q] += (b0 * x0 + b1 * x1) + b2 * x2
                else:
                    for q in range(size):
                        x0, x1, x2 = r0[q], r1[q], r2[q]
                        z0[q] = (a0 * x0 + a1 * x1) + a2 * x2
                        z1[q] = (b0 * x0 + b1 * x1) + b2 * x2
                t += 3
            else:
                a0, b0 = w[o0, t], w[o1, t]
                if t > 0:
                    for q in range(size):
                        z0[q] += a0 * r0[q]
                        z1[q] += b0 * r0[q]
                else:
                    for q in range(size):
                        z0[q] = a0 * r0[q]
                        z1[q] = b0 * r0[q]
                t += 1

    @cached_jit(inline="always", **_opts)
    def _plane_out(z, res, n, o, wp):  # pragma: no cover - compiled
        """res[n, o] <- z's rows at the padded width wp, the entries past OW dropped."""
        oh, ow = res.shape[2], res.shape[3]
        for i in range(oh):
            src = z[i * wp : i * wp + ow]
            dst = res[n, o, i]
            for j in range(ow):
                dst[j] = src[j]

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_image(t, x, wt, shifts, res, xps, zs, ph, pw, n):  # pragma: no cover
        xp = xps[t]
        _fill(x, n, xp, ph, pw)
        wp = xp.shape[2]
        size = res.shape[2] * wp
        flat = xp.ravel()
        z0, z1 = zs[t, 0, :size], zs[t, 1, :size]
        channels = wt.shape[0]
        for o in range(0, channels, 2):  # an odd count's last channel paired with itself
            o1 = min(o + 1, channels - 1)
            _taps_into(z0, z1, flat, shifts, wt, o, o1, size)
            _plane_out(z0, res, n, o, wp)
            if o1 != o:
                _plane_out(z1, res, n, o1, wp)

    _forward, _forward_parallel = thread_loops(_forward_image, **_opts)

    @cached_jit(inline="always", **_opts)
    def _fill_shifted(x, n, xs, ph, pw):  # pragma: no cover - compiled
        """xs[kw, c, h, :] <- the padded image n's row h of channel c from column kw, OW
        entries (zeros outside the image): tap (c, kh, kw)'s window is xs[kw, c, kh:kh+OH]."""
        xs[...] = 0
        h_in, w_in = x.shape[2], x.shape[3]
        rows, ow = xs.shape[2], xs.shape[3]
        for kw in range(xs.shape[0]):
            j0 = max(0, pw - kw)  # the first output column whose source column is in the image
            j1 = min(ow, w_in + pw - kw)
            if j1 <= j0:
                continue
            for c in range(xs.shape[1]):
                for h in range(min(h_in, rows - ph)):
                    src = x[n, c, h, j0 + kw - pw : j1 + kw - pw]
                    dst = xs[kw, c, h + ph, j0:j1]
                    for j in range(dst.shape[0]):
                        dst[j] = src[j]

    @cached_jit(fastmath={"reassoc"}, **_opts)  # called through thread_loops: not inlined
    def _weight_image(t, x, g, parts, xss, ph, pw, n):  # pragma: no cover - compiled
        """parts[n] (O, C, KH, KW) <- image n's share of the weight's gradient."""
        xs = xss[t]
        _fill_shifted(x, n, xs, ph, pw)
        size = g.shape[2] * g.shape[3]
        ow = g.shape[3]
        taps = parts.shape[3]
        part = parts[n]
        for o in range(g.shape[1]):
            gr = g[n, o].reshape(size)
            for c in range(xs.shape[1]):
                for kw in range(xs.shape[0]):
                    flat = xs[kw, c].reshape(xs.shape[2] * ow)
                    kh = 0
                    while kh < taps:
                        if taps - kh >= 3:
                            r0 = flat[kh * ow : kh * ow + size]
                            r1 = flat[(kh + 1) * ow : (kh + 1) * ow + size]
                            r2 = flat[(kh + 2) * ow : (kh + 2) * ow + size]
                            a0 = a1 = a2 = g.dtype.type(0)
                            for q in range(size):
                                v = gr[q]
                                a0 += v * r0[q]
                                a1 += v * r1[q]
                                a2 += v * r2[q]
                            part[o, c, kh, kw] = a0
                            part[o, c, kh + 1, kw] = a1
                            part[o, c, kh + 2, kw] = a2
                            kh += 3
                        else:
                            r0 = flat[kh * ow : kh * ow + size]
                            a0 = g.dtype.type(0)
                            for q in range(size):
                                a0 += gr[q] * r0[q]
                            part[o, c, kh, kw] = a0
                            kh += 1

    _weight, _weight_parallel = thread_loops(_weight_image, fastmath={"reassoc"}, **_opts)


def conv_few_channels(dtype, channels_per_group, groups, ndim, stride, dilation) -> bool:
    """Whether this CPU runs a convolution's forward and weight gradient of this kind here:
    2-d, ungrouped, float32 or float64, at most ``MAX_CHANNELS`` input channels, stride 1, no
    dilation."""
    return (
        numba is not None
        and ndim == 2
        and groups == 1
        and channels_per_group <= MAX_CHANNELS
        and tuple(stride) == (1, 1)
        and tuple(dilation) == (1, 1)
        and np.dtype(dtype) in (np.float32, np.float64)
    )


def _buffers(scratch, key: str, threads: int, shape: tuple, dtype) -> np.ndarray:
    return _buffer(scratch, key, (threads, *shape), dtype)


def _buffer(scratch, key: str, shape: tuple, dtype) -> np.ndarray:
    return np.empty(shape, dtype) if scratch is None else scratch(key, shape)


def _padded(x_shape: tuple, w_shape: tuple, out_shape: tuple) -> tuple:
    """The padded image every window reads, (C, OH + KH - 1, OW + KW - 1), and one row more:
    the last tap's run reads into it (entries past OW only, which are dropped)."""
    return (x_shape[1], out_shape[0] + w_shape[2], out_shape[1] + w_shape[3] - 1)


@functools.lru_cache(maxsize=64)
def _shifts(shape: tuple, ksize: tuple) -> np.ndarray:
    """Where each tap's run starts in the flattened padded image (C, HP, WP), taps in
    (c, kh, kw) order (kept per geometry: a step allocates none)."""
    c, hp, wp = shape
    kh, kw = ksize
    grid = np.arange(c)[:, None, None] * hp * wp + np.arange(kh)[:, None] * wp + np.arange(kw)
    return grid.reshape(-1).astype(np.int64)


def conv_few_forward(x, w, res, padding, scratch=None) -> None:
    """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w) at stride 1, ``padding`` (top, left;
    the bottom and right follow from the shapes), without bias."""
    x = np.ascontiguousarray(x)
    n = x.shape[0]
    flops = res.size * w[0].size
    threads = numba.get_num_threads() if threaded(n, flops, PARALLEL_MIN_FLOPS) else 1
    shape = _padded(x.shape, w.shape, res.shape[2:])
    xps = _buffers(scratch, "few_xp", threads, shape, x.dtype)
    zs = _buffers(scratch, "few_z", threads, (2, res.shape[2] * shape[2]), x.dtype)
    wt = np.ascontiguousarray(w.reshape(w.shape[0], -1))
    run = _forward_parallel if threads > 1 else _forward
    run(n, x, wt, _shifts(shape, tuple(w.shape[2:])), res, xps, zs, *padding)


def conv_few_weight(x, g, gw, padding, scratch=None) -> None:
    """``gw`` (O, C, KH, KW) <- the weight's gradient of conv(x, w) at stride 1, ``padding``
    (top, left), for the output gradient ``g`` (N, O, OH, OW).

    On seed-cnn's (100, 1, 28, 28) and (100, 6, 26, 26) float32 (``python
    benchmarks/seed_cnn_kernels.py``, AVX2, 2026-12-07): 264 us against 675 for the batch's
    columns and their product on two threads, 432 against 940 on one."""
    x = np.ascontiguousarray(x)
    g = np.ascontiguousarray(g)
    n, ksize = x.shape[0], gw.shape[2:]
    flops = g.size * gw[0].size
    threads = numba.get_num_threads() if threaded(n, flops, PARALLEL_MIN_FLOPS) else 1
    rows = g.shape[2] + ksize[0] - 1
    xss = _buffers(scratch, "few_xs", threads, (ksize[1], x.shape[1], rows, g.shape[3]), x.dtype)
    parts = _buffer(scratch, "few_parts", (n,) + gw.shape, g.dtype)
    run = _weight_parallel if threads > 1 else _weight
    run(n, x, g, parts, xss, *padding)
    np.sum(parts, axis=0, out=gw)
