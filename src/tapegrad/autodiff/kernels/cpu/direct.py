"""Float32 2-d convolutions as register-blocked direct sums, 16 (or, for the last ones, 8)
output channels a block.

With 16 channels a 3x3 convolution's products are short (K = 16 a tap, 144 in all): OpenBLAS
runs them at about half its rate, and Winograd's transforms (``winograd.py``) cost more than
they save. Here the inner loops are ``microkernels.py``'s, written in LLVM's IR so that their
accumulators stay in vector registers (numba's own loops keep them in memory):

* **Forward** (``direct_forward``): an image is copied once into a zero-padded buffer, its
  columns split by their phase at stride SW (C, HP, SW, PW: column m*SW + r at [r, m], so a
  strided row's windows are contiguous runs); the window of tap j (an input channel and a
  kernel offset, in that order) at output (i, s) starts at the buffer's entry ``offs[j] +
  i*SH*SW*PW + s``. A block is 16 output channels by 16 consecutive positions of an output
  row: each tap one vector load of the positions' inputs and 16 fused multiply-adds with the
  channels' weights broadcast from memory, at the FMA units' rate. A row's last block masks
  its lanes past the end (neither read nor written), so the blocks write the output in place.
* **Input gradient** (``direct_input``, stride 1): the forward of g with the kernel flipped and
  its channels swapped, padded by (KH - 1) * dilation - padding.
* **Weight gradient** (``direct_weight``): a block is 16 taps by 16 output channels, ``acc[j]
  += x[offs[j] + i*SH*SW*PW + s] * g[i, s, 0:16]`` over the image's outputs in order, g laid
  out channels last (16 x 16 blocks turned in registers); each image adds onto its chunk's
  sums (chunks fixed by the batch size, added in chunk order: the same bits on any thread
  count). For output channels not in sixteens and up to ``DOTS_MAX_CHANNELS`` input channels
  (seed-cnn's one), the dot products of ``window_dots`` instead: 6 channels' gradients times 3
  taps' windows in 16-lane sums over an image's rows, reduced in a fixed order.
* **1-d rows of a channels-last input** (``direct_rows``: the text CNN's permuted embedding
  output): each image's (L, C) rows turned into a (C, L) copy by 16 x 16 blocks in registers,
  then the forward's blocks along its one row.

Every product is one the definition has (no position past a row's end is computed), so an
inf or NaN gives what the references give, except in the input gradient, where the flipped
kernel meets the padding's zeros: that one returns False (``conv2d.py`` then runs
``by_image.py``'s kernels) when the kernel is not finite.

Where these take a call (``applies``, ``rows_pay``, ``used``): numba compiles for AVX-512
(``WIDE``), float32, ungrouped; the forward where the blocks' channel lanes are 3/4 used and
the rows long enough to fill them; the input gradient where the input channels come in
sixteens. Float64 keeps the image-by-image kernels.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .microkernels import AVAILABLE, LANES, WIDE

# from how many output positions (all images and blocks together) the images are split over
# numba's threads
PARALLEL_MIN_SIZE = 1 << 14
# from how many outputs a row the forward's blocks pay (measured: 7 is slower than the
# image-by-image products, 14 and 28 faster)
MIN_WIDTH = 12
# the weight gradient's images are summed in at most this many chunks (fixed per batch size)
WEIGHT_CHUNKS = 16
# the least share of the forward's channel lanes that must hold an output channel (a block of 16
# or, for the last channels, of 8: seed-cnn's 6 channels fill 6 of 8)
MIN_USED = 0.75
# up to how many input channels the weight gradient of O not a multiple of 16 runs as dot
# products (seed-cnn's one channel: 97 us against 140 for few_channels.py's loops; 16 channels
# by 8: 2.2 ms against 1.5 for the image-by-image products, so those keep theirs)
DOTS_MAX_CHANNELS = 15


def applies(x_dtype, groups: int) -> bool:
    """Whether convolutions of this kind are offered to these kernels: numba compiles for
    512-bit vectors, float32, ungrouped. Each kernel then takes or refuses (returns False) the
    call's shapes (the forward's channel lanes, ``used``; the input gradient's channels in
    sixteens and stride 1; the dots' input channels). Where the forward's blocks pay is the
    dispatcher's rule, ``rows_pay`` (the kernels compute any row length)."""
    return WIDE and np.dtype(x_dtype) == np.float32 and groups == 1


def rows_pay(width: int, w_shape, stride) -> bool:
    """Whether the forward's blocks (16 positions of an output row) pay for an output of this
    ``width``: rows of at least ``MIN_WIDTH`` (a row's last block leaves its lanes past the end
    idle: a row of 7 fills 7 of 16), and a kernel larger than 1x1 where strided (a strided 1x1
    layer reads a fraction of the padded copy made of each image)."""
    return width >= MIN_WIDTH and (tuple(stride) == (1, 1) or tuple(w_shape[2:]) != (1, 1))


if AVAILABLE:
    import numba

    from ..jit import cached_jit
    from .columns import all_finite, fill_padded
    from .loops import thread_loops, threaded
    from .microkernels import (
        DOT_CHANNELS,
        DOT_TAPS,
        product_block,
        transposed,
        window_block,
        window_block8,
        window_dots,
    )
    from .reduce import add_chunks

    _opts = dict(boundscheck=False, nogil=True)

    @cached_jit(inline="always", **_opts)
    def _fill(x, n, xp, ph, pw):  # pragma: no cover - compiled
        """xp (C, HP, SW, PW), whose border stays zero, <- image n of x at offset (ph, pw) of
        the padded image, its columns split by their phase: padded column m*SW + r at [r, m]
        (what falls past the buffer no window reads)."""
        c_, rows, sw, width = xp.shape
        if sw == 1:
            fill_padded(x, n, xp.reshape(c_, rows, width), ph, pw, rows)
            return
        hh = min(x.shape[2], rows - ph)
        ww = min(x.shape[3], sw * width - pw)
        step = np.uint64(sw)
        for r in range(sw):
            first = (r - pw) % sw  # the first source column of phase r
            at = np.uint64((first + pw) // sw)  # where it goes in the phase's row
            count = np.uint64(max(0, -(-(ww - first) // sw)))
            start = np.uint64(first)
            for c in range(c_):
                for i in range(hh):
                    src, dst = x[n, c, i], xp[c, ph + i, r]
                    # unsigned indices: no negative-index select an element
                    for k in range(count):
                        dst[at + k] = src[start + k * step]

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_image(t, x, wpk, w8, offs, res, xps, sh, ph, pw, n):  # pragma: no cover
        """Image n: xps[t] <- its padded columns by phase; res[n] <- the blocks, row by row
        (wpk's blocks of 16 channels, then w8's block of 8 where it has one)."""
        xp = xps[t]
        _fill(x, n, xp, ph, pw)
        flat, out = xp.ravel(), res[n].ravel()
        o, oh_, ow_ = res.shape[1], res.shape[2], res.shape[3]
        step = sh * xp.shape[2] * xp.shape[3]  # an output row's input rows apart
        plane = oh_ * ow_
        for ob in range(wpk.shape[0]):
            w = wpk[ob].ravel()
            at = ob * LANES * plane
            stored = min(LANES, o - ob * LANES)
            for i in range(oh_):
                for s in range(0, ow_, LANES):
                    count = min(LANES, ow_ - s)
                    window_block(
                        flat, i * step + s, offs, w, out, at + i * ow_ + s, plane, count, stored
                    )
        if w8.size:
            w = w8.ravel()
            at = wpk.shape[0] * LANES * plane
            stored = o - wpk.shape[0] * LANES
            for i in range(oh_):
                for s in range(0, ow_, LANES):
                    count = min(LANES, ow_ - s)
                    window_block8(
                        flat, i * step + s, offs, w, out, at + i * ow_ + s, plane, count, stored
                    )

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _weight_chunk(t, x, g, parts, offs, xps, gts, size, sh, ph, pw, k):  # pragma: no cover
        """parts[k] (J, O) <- the sum over chunk k's images of their weight gradients."""
        xp, gt = xps[t], gts[t]
        o, oh_, ow_ = g.shape[1], g.shape[2], g.shape[3]
        step = sh * xp.shape[2] * xp.shape[3]
        plane = oh_ * ow_
        flat, gflat, out = xp.ravel(), gt.ravel(), parts[k].ravel()
        first = k * size
        for n in range(first, min(x.shape[0], first + size)):
            _fill(x, n, xp, ph, pw)
            image = g[n].ravel()
            for ob in range(0, o, LANES):  # gt (OH*OW + 16, O) <- g[n] channels last
                for q in range(0, plane, LANES):
                    count = min(LANES, plane - q)
                    transposed(image, ob * plane + q, plane, count, gflat, q * o + ob, o, LANES)
            for ob in range(0, o, LANES):
                for jb in range(0, offs.size, LANES):
                    product_block(
                        flat,
                        offs,
                        jb,
                        oh_,
                        ow_,
                        step,
                        gflat,
                        o,
                        ob,
                        out,
                        o,
                        ob,
                        n != first,
                        LANES,
                        LANES,
                    )

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _dots_chunk(t, x, g, parts, offs, xps, size, sh, ph, pw, k):  # pragma: no cover
        """parts[k] (channel groups, tap groups, DOT_CHANNELS * DOT_TAPS * 16) <- the lanes of
        the sums over chunk k's images of their weight gradients' dot products."""
        xp = xps[t]
        o, oh_, ow_ = g.shape[1], g.shape[2], g.shape[3]
        step = sh * xp.shape[2] * xp.shape[3]
        plane = oh_ * ow_
        taps = offs.size
        flat, part = xp.ravel(), parts[k]
        part[...] = 0
        first = k * size
        for n in range(first, min(x.shape[0], first + size)):
            _fill(x, n, xp, ph, pw)
            image = g[n].ravel()
            for cg in range(part.shape[0]):
                c0 = cg * DOT_CHANNELS
                stored = min(DOT_CHANNELS, o - c0)
                for tg in range(part.shape[1]):
                    t0 = tg * DOT_TAPS
                    count = min(DOT_TAPS, taps - t0)
                    acc = part[cg, tg]
                    window_dots(
                        flat, 0, step, offs, t0, count, image, c0 * plane, ow_, plane, stored,
                        oh_, ow_, acc, 0,
                    )  # fmt: skip

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _rows_image(t, xb, wpk, w8, offs, res, xps, n):  # pragma: no cover - compiled
        """Image n of xb (N, L, C): xps[t] (C rounded up to 16, L rounded up to 16) <- its
        channels as rows (16 x 16 blocks turned in registers; the rounding's entries zeros);
        res[n] (O, L') <- the blocks along that one row."""
        xp = xps[t]
        length, c_ = xb.shape[1], xb.shape[2]
        pitch = xp.shape[1]
        src, flat, out = xb[n].ravel(), xp.ravel(), res[n].ravel()
        for l0 in range(0, length, LANES):
            for c0 in range(0, c_, LANES):
                turn = min(LANES, c_ - c0)
                transposed(src, l0 * c_ + c0, c_, turn, flat, c0 * pitch + l0, pitch,
                           min(LANES, length - l0))  # fmt: skip
        o, ow_ = res.shape[1], res.shape[2]
        for ob in range(wpk.shape[0]):
            w = wpk[ob].ravel()
            stored = min(LANES, o - ob * LANES)
            for s in range(0, ow_, LANES):
                count = min(LANES, ow_ - s)
                window_block(flat, s, offs, w, out, ob * LANES * ow_ + s, ow_, count, stored)
        if w8.size:
            w = w8.ravel()
            stored = o - wpk.shape[0] * LANES
            for s in range(0, ow_, LANES):
                count = min(LANES, ow_ - s)
                at = wpk.shape[0] * LANES * ow_ + s
                window_block8(flat, s, offs, w, out, at, ow_, count, stored)

    _forward, _forward_parallel = thread_loops(_forward_image, **_opts)
    _rows, _rows_parallel = thread_loops(_rows_image, **_opts)
    _dots, _dots_parallel = thread_loops(_dots_chunk, **_opts)
    _weight, _weight_parallel = thread_loops(_weight_chunk, **_opts)

    def _buffer(scratch, key, shape, dtype=np.float32, zero=False):
        a = np.empty(shape, dtype) if scratch is None else scratch(key, shape, dtype)
        if zero:
            a.fill(0)  # read as zeros (a workspace may hold another value's bytes)
        return a

    def _padded(c, ksize, out_shape, stride, dilation):
        """(C, HP, SW, PW): the rows and columns the windows read, the columns by phase."""
        (kh, kw), (oh, ow), (sh, sw), (dh, dw) = ksize, out_shape, stride, dilation
        columns = (ow - 1) * sw + (kw - 1) * dw + 1
        return (c, (oh - 1) * sh + (kh - 1) * dh + 1, sw, -(-columns // sw))

    @functools.lru_cache(maxsize=256)
    def _offsets(c, ksize, padded, dilation, taps_padded_to=1):
        """offs[j] for taps j = (channel, kernel row, kernel column) in that order: where the
        window of output (0, 0) starts in the buffer (repeats of the first up to a multiple of
        ``taps_padded_to``)."""
        (kh, kw), (dh, dw) = ksize, dilation
        _, rows, sw, width = padded
        ci, a, b = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
        col = b * dw
        offs = ci * rows * sw * width + a * dh * sw * width + (col % sw) * width + col // sw
        offs = offs.ravel().astype(np.int64)
        extra = -offs.size % taps_padded_to
        offs = np.concatenate([offs, np.zeros(extra, np.int64)]) if extra else offs
        offs.flags.writeable = False  # kept (a step allocates nothing), shared by the calls
        return offs

    def _threads(tasks: int, entries: int) -> int:
        count = numba.get_num_threads()
        return count if threaded(tasks, entries, PARALLEL_MIN_SIZE) else 1

    def _run_forward(x, w, res, stride, padding, dilation, scratch, key) -> None:
        n, c = x.shape[:2]
        o, ksize = res.shape[1], w.shape[2:]
        wpk, w8 = _packed(w, scratch, key + "_w")
        padded = _padded(c, ksize, res.shape[2:], stride, dilation)
        offs = _offsets(c, tuple(ksize), padded, tuple(dilation))
        threads = _threads(n, n * o * res[0, 0].size)
        xps = _buffer(scratch, key + "_xp", (threads, *padded), zero=True)
        run = _forward_parallel if threads > 1 else _forward
        run(n, np.ascontiguousarray(x), wpk, w8, offs, res, xps, stride[0], *padding)

    def _blocks(o: int) -> tuple:
        """(blocks of 16, channels of a last block of 8) for o output channels: o's last
        channels past a multiple of 16 take a block of 8 where they fit one."""
        tail = o % LANES
        return (o // LANES, tail) if 0 < tail <= LANES // 2 else (-(-o // LANES), 0)

    def used(o: int) -> float:
        """The share of the forward's block lanes that hold one of o channels."""
        full, tail = _blocks(o)
        return o / (full * LANES + (LANES // 2 if tail else 0))

    def _packed(w, scratch, key):
        """w (O, C, KH, KW) as (blocks, C*KH*KW, 16) and (C*KH*KW, 8): a block's weights of a
        tap contiguous, the channels past O zero (the second empty where O's last channels take
        a block of 16)."""
        o, taps = w.shape[0], math.prod(w.shape[1:])
        full, tail = _blocks(o)
        wpk = _buffer(scratch, key, (full, taps, LANES), zero=o % LANES > 0 and not tail)
        w8 = _buffer(scratch, key + "8", (taps, LANES // 2 if tail else 0), zero=True)
        flat, whole = w.reshape(o, taps), o // LANES  # the blocks O fills
        np.copyto(wpk[:whole], flat[: whole * LANES].reshape(whole, LANES, taps).transpose(0, 2, 1))
        if o % LANES:  # the last channels: a block of 8, or a last block of 16 not filled
            np.copyto((w8 if tail else wpk[whole])[:, : o % LANES], flat[whole * LANES :].T)
        return wpk, w8

    def direct_forward(x, w, res, stride, padding, dilation, scratch=None) -> bool:
        """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w); False (``res`` untouched) where
        fewer than ``MIN_USED`` of the blocks' channel lanes would hold one of O's."""
        if used(w.shape[0]) < MIN_USED:
            return False
        _run_forward(x, w, res, stride, padding, dilation, scratch, "direct")
        return True

    def direct_rows(x, w, res, scratch=None) -> bool:
        """``res`` (N, O, L', C-contiguous) <- the 1-d stride-1 unpadded convolution of x (N, C,
        L) with w (O, C, K), x a view of a contiguous (N, L, C) array (the text CNN's permuted
        embedding output): each image's channels turned into rows, 16 x 16 blocks in registers,
        as its copy is made (the batch is never copied whole). False (``res`` untouched) where
        these kernels do not take the call."""
        n, c, length = x.shape
        base = x.transpose(0, 2, 1)
        if not (applies(x.dtype, 1) and base.flags.c_contiguous and res.flags.c_contiguous):
            return False
        w4 = w[:, :, None, :]  # an image one row high
        if used(w.shape[0]) < MIN_USED or not rows_pay(res.shape[2], w4.shape, (1, 1)):
            return False
        wpk, w8 = _packed(w4, scratch, "direct_rows_w")
        pitch = -(-length // LANES) * LANES  # a channel's row, the turned blocks' columns whole
        offs = _offsets(c, (1, w.shape[2]), (c, 1, 1, pitch), (1, 1))
        threads = _threads(n, res.size)
        xps = _buffer(scratch, "direct_rows_xp", (threads, -(-c // LANES) * LANES, pitch))
        run = _rows_parallel if threads > 1 else _rows
        run(n, base, wpk, w8, offs, res, xps)
        return True

    def direct_input(g, w, gx, stride, padding, dilation, scratch=None) -> bool:
        """``gx`` (N, C, H, W, C-contiguous) <- the adjoint of conv in x applied to g (stride
        1); False (``gx`` untouched) where C is not a multiple of ``LANES``, w holds an inf or
        NaN, or the padding exceeds the kernel's reach."""
        (kh, kw), (dh, dw) = w.shape[2:], dilation
        flipped = ((kh - 1) * dh - padding[0], (kw - 1) * dw - padding[1])
        if tuple(stride) != (1, 1) or w.shape[1] % LANES or min(flipped) < 0:
            return False
        if not all_finite(np.ascontiguousarray(w)):
            return False
        wf = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
        _run_forward(g, wf, gx, stride, flipped, dilation, scratch, "direct_flipped")
        return True

    def direct_weight(x, g, gw, stride, padding, dilation, scratch=None) -> bool:
        """``gw`` (O, C, KH, KW, C-contiguous) <- the weight's gradient of conv(x, w) for g:
        blocks of 16 taps by 16 channels where O is a multiple of ``LANES``, else, for up to
        ``DOTS_MAX_CHANNELS`` input channels, the dot products of ``window_dots``; False
        (``gw`` untouched) for the others."""
        n, c = x.shape[:2]
        o = g.shape[1]
        if o % LANES and c > DOTS_MAX_CHANNELS:
            return False
        padded = _padded(c, gw.shape[2:], g.shape[2:], stride, dilation)
        blocks = o % LANES == 0
        offs = _offsets(c, gw.shape[2:], padded, tuple(dilation), LANES if blocks else 1)
        size = -(-n // WEIGHT_CHUNKS)  # images per chunk: fixed per batch size
        chunks = -(-n // size)
        threads = _threads(chunks, n * g[0].size)
        xps = _buffer(scratch, "direct_xp", (threads, *padded), zero=True)
        x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
        taps = math.prod(gw.shape[1:])
        if blocks:
            gts = _buffer(scratch, "direct_gt", (threads, g[0, 0].size + LANES, o))
            parts = _buffer(scratch, "direct_parts", (chunks, offs.size, o))
            run = _weight_parallel if threads > 1 else _weight
            run(chunks, x, g, parts, offs, xps, gts, size, stride[0], *padding)
        else:
            cg, tg = -(-o // DOT_CHANNELS), -(-taps // DOT_TAPS)
            lanes = DOT_CHANNELS * DOT_TAPS * LANES
            parts = _buffer(scratch, "direct_dots", (chunks, cg, tg, lanes))
            run = _dots_parallel if threads > 1 else _dots
            run(chunks, x, g, parts, offs, xps, size, stride[0], *padding)
        add_chunks(parts)  # chunk order: the same bits on any thread count
        total = parts[0]
        if blocks:
            np.copyto(gw.reshape(o, taps), total[:taps].T)
            return True
        sums = _buffer(scratch, "direct_sums", (cg, DOT_CHANNELS, tg, DOT_TAPS))
        np.sum(total.reshape(cg, tg, DOT_CHANNELS, DOT_TAPS, LANES), axis=-1,
               out=sums.transpose(0, 2, 1, 3))  # fmt: skip
        flat = sums.reshape(cg * DOT_CHANNELS, tg * DOT_TAPS)
        np.copyto(gw.reshape(o, taps), flat[:o, :taps])
        return True
