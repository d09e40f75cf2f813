"""Max pooling over (M, H, W) planes (M = batch * channels; 1-d pooling uses H = 1).

The forward returns, per window, the maximum and its offset ``a * KW + b`` inside the window
(the first one at ties, NaN counting as the maximum); the backward adds each output gradient
at that offset. A window's entries are ``dilation`` apart (1: adjacent). The compiled loops are
specialised per window geometry (:func:`window_kernels`); ReLU then max pooling
(``kernels/cpu/fused.py``) runs through the same loops (:func:`pool_planes_forward`,
:func:`pool_planes_backward`).

2x2 windows at stride 2 over planes of even width (the pooling of nearly every CNN, the
seeds' included) take their own loops, in two passes over a few planes at a time (the
*pairs*): each row pair's larger entry and which row held it, along whole rows; then each
window's maximum from two neighbours of that, along the planes' flattened outputs. Both
passes are long loops of the same operations that vectorise, where a window at a time (13
windows a row on seed-cnn's planes) ran scalar. The planes go in chunks, split over the
threads. On seed-cnn's (600, 26, 26) float32 planes with ReLU (``python
benchmarks/seed_cnn_kernels.py``, AVX2, 2026-12-07): two threads, forward 148 us against 332,
backward 116 against 313; one thread 243 against 337 and 184 against 313. The window loops'
arithmetic is kept (ties to the first offset, row-major; a chunk holding a NaN is redone by
them), so both paths give the same bits.

Float32 planes on a CPU numba compiles 512-bit vectors for (``microkernels.WIDE``) take the
pairs in one pass instead: a row pair at a time, 16 windows a step in vector registers
(``microkernels.pool_pairs``: each column's larger row, then even and odd columns split by two
shuffles; ``unpool_pairs`` interleaves the gradients back), the same selects as the two
passes, so the same bits. Seed-cnn's planes with ReLU, two threads (Zen 4, 2026-12-07):
forward 77 -> 60 us, backward 63 -> 46.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from ..common import pool_arg_dtype


def _slices(offs, stride, out_shape, dilation) -> tuple:
    return (slice(None),) + tuple(
        slice(o * d, o * d + s * (n - 1) + 1, s)
        for o, s, n, d in zip(offs, stride, out_shape, dilation)
    )


def max_pool_forward_reference(x, kernel, stride, out, arg, dilation=(1, 1)) -> None:
    """NumPy reference for :func:`max_pool_forward`: one masked update per kernel offset."""
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    out[...] = x[_slices(offsets[0], stride, out.shape[1:], dilation)]
    arg[...] = 0
    for j, offs in enumerate(offsets[1:], 1):
        v = x[_slices(offs, stride, out.shape[1:], dilation)]
        m = (v > out) | (np.isnan(v) & ~np.isnan(out))
        out[m] = v[m]
        arg[m] = j


def max_pool_backward_reference(g, arg, kernel, stride, gx, dilation=(1, 1)) -> None:
    """NumPy reference for :func:`max_pool_backward`: one masked add per kernel offset."""
    for j, offs in enumerate(itertools.product(*(range(k) for k in kernel))):
        view = gx[_slices(offs, stride, g.shape[1:], dilation)]
        np.add(view, g, out=view, where=arg == j)


try:
    import numba

    from ..jit import cached_jit
except ImportError:  # pragma: no cover
    numba = None


# Windows of one geometry (each direction) that the generic loops pool, their geometry an
# argument (compiled once for every geometry; 8-17x slower than a geometry's own), before the
# geometry's own loops are compiled (1-2 s each, cold; loaded from numba's disk cache after):
# a geometry a program pools a few small arrays with (a test, a one-off evaluation) costs no
# compilation of its own; a training loop's gets its own after about a millisecond of the
# generic loops (the text CNN's 8,192 windows a step: its own loops from step 9).
SPECIALISE_AFTER = 1 << 16
_window_work: dict[tuple, int] = {}


def window_loops(geometry: tuple, backward: bool, windows: int):
    """The window loops for ``geometry`` (kh, kw, sh, sw, dh, dw) pooling ``windows`` windows
    now, as ``(loops, extra)``: call ``loops(*args, *extra)``. The generic loops (``extra`` the
    geometry) until the geometry has pooled :data:`SPECIALISE_AFTER` windows in this process,
    then :func:`window_kernels`' (``extra`` empty). Both run the same plane loops, so they give
    the same bits."""
    key = (geometry, backward)
    done = _window_work.get(key, 0)
    if done >= SPECIALISE_AFTER:
        return window_kernels(*geometry)[backward], ()
    _window_work[key] = done + windows
    return (_backward_any if backward else _forward_any), geometry


if numba is not None:

    @cached_jit(inline="always", boundscheck=False, nogil=True)
    def _forward_plane(p, o, a, relu, kh, kw, sh, sw, dh, dw):  # pragma: no cover - compiled
        """One plane's windows: each maximum (of ``relu(p)`` with ``relu``) and its offset."""
        k = kh * kw
        oh, ow = o.shape
        zero = o.dtype.type(0)
        flat = p.reshape(p.size)
        nan = False
        for e in range(flat.size):
            nan |= flat[e] != flat[e]
        for i in range(oh):
            for j in range(ow):
                h0, w0 = i * sh, j * sw
                best = p[h0, w0]
                bi = 0
                for q in range(1, k):
                    v = p[h0 + (q // kw) * dh, w0 + (q % kw) * dw]
                    gt = v > best
                    best = v if gt else best
                    bi = q if gt else bi
                keep = best > 0 or not relu
                o[i, j] = best if keep else zero  # relu's 0, also where the maximum is -inf
                a[i, j] = bi if keep else 0
        if nan:  # rare: each window's first NaN is its maximum
            for i in range(oh):
                for j in range(ow):
                    for q in range(k):
                        v = p[i * sh + (q // kw) * dh, j * sw + (q % kw) * dw]
                        if v != v:
                            o[i, j] = v
                            a[i, j] = q
                            break

    @cached_jit(inline="always", boundscheck=False, nogil=True)
    def _backward_plane(g, a, o, p, relu, kw, sh, sw, dh, dw):  # pragma: no cover - compiled
        """One plane's input gradient ``p`` whole: each ``g`` at its window's offset."""
        oh, ow = g.shape
        flat = p.reshape(p.size)
        for e in range(flat.size):
            flat[e] = 0
        for i in range(oh):
            for j in range(ow):
                if relu and not o[i, j] > 0:
                    continue
                q = a[i, j]
                p[i * sh + (q // kw) * dh, j * sw + (q % kw) * dw] += g[i, j]

    @cached_jit(boundscheck=False, nogil=True)
    def _forward_any(x, out, arg, relu, kh, kw, sh, sw, dh, dw):  # pragma: no cover - compiled
        for m in range(x.shape[0]):
            _forward_plane(x[m], out[m], arg[m], relu, kh, kw, sh, sw, dh, dw)

    @cached_jit(boundscheck=False, nogil=True)
    def _backward_any(g, arg, out, gx, relu, kh, kw, sh, sw, dh, dw):  # pragma: no cover
        for m in range(g.shape[0]):
            _backward_plane(g[m], arg[m], out[m], gx[m], relu, kw, sh, sw, dh, dw)


@functools.cache
def window_kernels(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int):
    """``(forward, backward)`` compiled for one window geometry: (kh, kw) windows, strides
    (sh, sw), entries (dh, dw) apart, over contiguous (M, H, W) planes.

    The geometry is compiled in as constants (each geometry is compiled once, then loaded from
    numba's disk cache): the window loop unrolls and constant strides let the output loop use
    vector loads, where runtime strides made every window a scalar loop. On (600, 26, 26) float32
    planes with 2x2 windows, stride 2, ReLU fused: 0.50 ms -> 0.08 ms forward, 0.21 -> 0.09 ms
    backward (their rows in ``python benchmarks/profile_step.py seed-cnn``). A geometry's first
    65,536 windows take the generic loops instead (:func:`window_loops`).

    ``forward(x, out, arg, relu)`` writes each window's maximum and its offset ``a * kw + b``
    (the first at ties; NaN is the maximum, its first occurrence). With ``relu`` the maximum
    of ``relu(x)``: ``max(x)`` where positive (or NaN), else 0 with offset 0. The selects are
    branch-free (where a maximum sits is unpredictable); a plane holding a NaN, checked first,
    takes a second pass that finds each window's first NaN.

    ``backward(g, arg, out, gx, relu)`` writes ``gx`` whole: zeros, plus each ``g`` at its
    window's offset, only where ``out > 0`` when ``relu`` (``out`` is read only then).

    Both split the planes over numba's threads (each plane whole on one: the same bits at any
    thread count): the text CNN's (512, 1, 128) planes, windows of 8, ReLU fused, two threads
    (Zen 4, 2026-12-08): forward 28 -> 14 us, backward 20 -> 13.
    """

    @cached_jit(boundscheck=False, nogil=True, parallel=True)
    def forward(x, out, arg, relu):  # pragma: no cover - compiled
        for m in numba.prange(x.shape[0]):
            _forward_plane(x[m], out[m], arg[m], relu, kh, kw, sh, sw, dh, dw)

    @cached_jit(boundscheck=False, nogil=True, parallel=True)
    def backward(g, arg, out, gx, relu):  # pragma: no cover - compiled
        for m in numba.prange(g.shape[0]):
            _backward_plane(g[m], arg[m], out[m], gx[m], relu, kw, sh, sw, dh, dw)

    return forward, backward


# -- 2x2 windows at stride 2: the pairs ---------------------------------------------------------
# entries of the row pass one chunk of planes holds (32 KiB of float32, read back from the
# cache by the window pass; seed-cnn's planes measured fastest from 5 to 11 thousand)
PAIRS_CHUNK = 8192
# from how many input entries the chunks are split over numba's threads
PARALLEL_MIN_SIZE = 1 << 16


def pairs_apply(kernel: tuple, stride: tuple, dilation: tuple, width: int) -> bool:
    """Whether (M, H, W) planes pool through the pairs: 2x2 windows, stride 2, adjacent entries,
    an even width (the windows tile each row pair whole)."""
    return (
        numba is not None
        and tuple(kernel) == (2, 2)
        and tuple(stride) == (2, 2)
        and tuple(dilation) == (1, 1)
        and width % 2 == 0
    )


if numba is not None:
    from .loops import thread_loops, threaded

    _opts = dict(boundscheck=False, nogil=True)

    # Loops run over views that start at 0: numba wraps a possibly negative index, and that
    # select per entry keeps LLVM from vectorising (see few_channels.py).
    @cached_jit(inline="always", **_opts)
    def _row_pairs(x, oh, v, low):  # pragma: no cover - compiled
        """``v[(m*oh + i)*W + c]`` <- the larger of rows 2i and 2i+1 of plane m at column c (the
        first at ties), ``low`` whether it is the second row's. Returns whether any entry read
        is NaN (which the comparisons lose)."""
        w = x.shape[2]
        nan = False
        for m in range(x.shape[0]):
            for i in range(oh):
                r0 = x[m, 2 * i]
                r1 = x[m, 2 * i + 1]
                base = (m * oh + i) * w
                for c in range(w):
                    a = r0[c]
                    b = r1[c]
                    second = b > a
                    nan |= (a != a) | (b != b)
                    v[base + c] = b if second else a
                    low[base + c] = second
        return nan

    @cached_jit(inline="always", **_opts)
    def _pair_windows(v, low, o, ar, relu):  # pragma: no cover - compiled
        """Window f's maximum from entries 2f and 2f+1 of the row pass, its offset ``2*row +
        column`` (the smaller at ties) into ``o``, ``ar``; with ``relu`` 0 and offset 0 where the
        maximum is not positive."""
        keep_all = not relu
        zero = o.dtype.type(0)
        for f in range(o.size):
            a = v[2 * f]
            b = v[2 * f + 1]
            qa = low[2 * f] * 2
            qb = low[2 * f + 1] * 2 + 1
            right = (b > a) | ((b == a) & (qb < qa))
            best = b if right else a
            q = qb if right else qa
            keep = (best > 0) | keep_all
            o[f] = best if keep else zero  # relu's 0, also where the maximum is -inf
            ar[f] = q if keep else 0

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _pairs_forward_chunk(t, x, out, arg, relu, vs, lows, nans, per, k):  # pragma: no cover
        lo = k * per
        hi = min(x.shape[0], lo + per)
        n = out.shape[1] * out.shape[2]
        v, low = vs[t], lows[t]
        nans[k] = _row_pairs(x[lo:hi], out.shape[1], v, low)
        o = out.reshape(out.size)[lo * n : hi * n]
        _pair_windows(v, low, o, arg.reshape(arg.size)[lo * n : hi * n], relu)

    @cached_jit(inline="always", **_opts)
    def _spread_windows(g, arg, out, relu, v, low):  # pragma: no cover - compiled
        """The forward's second pass undone: window f's gradient (``g`` where ``out > 0`` with
        ``relu``) at entry 2f or 2f+1 of ``v`` by its column, 0 at the other; ``low`` its row."""
        zero = v.dtype.type(0)
        keep_all = not relu
        for f in range(g.size):
            q = arg[f]
            gv = g[f] + zero  # as zeros plus g: -0.0 becomes +0.0
            gv = gv if (out[f] > 0) | keep_all else zero
            right = (q & 1) != 0
            v[2 * f] = zero if right else gv
            v[2 * f + 1] = gv if right else zero
            second = (q & 2) != 0
            low[2 * f] = second
            low[2 * f + 1] = second

    @cached_jit(inline="always", **_opts)
    def _spread_rows(v, low, gx, oh):  # pragma: no cover - compiled
        """The first pass undone: rows 2i and 2i+1 of each plane of ``gx`` from ``v``, ``low``;
        rows past 2*oh (no window reads them) zeros."""
        zero = gx.dtype.type(0)
        w = gx.shape[2]
        for m in range(gx.shape[0]):
            for i in range(oh):
                r0, r1 = gx[m, 2 * i], gx[m, 2 * i + 1]
                base = (m * oh + i) * w
                for c in range(w):
                    e, second = v[base + c], low[base + c]
                    r0[c] = zero if second else e
                    r1[c] = e if second else zero
            for h in range(2 * oh, gx.shape[1]):
                r = gx[m, h]
                for c in range(w):
                    r[c] = zero

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _pairs_backward_chunk(t, g, arg, out, gx, relu, vs, lows, per, k):  # pragma: no cover
        lo = k * per
        hi = min(gx.shape[0], lo + per)
        n = g.shape[1] * g.shape[2]
        v, low = vs[t], lows[t]
        gf = g.reshape(g.size)[lo * n : hi * n]
        of = out.reshape(out.size)[lo * n : hi * n]
        _spread_windows(gf, arg.reshape(arg.size)[lo * n : hi * n], of, relu, v, low)
        _spread_rows(v, low, gx[lo:hi], g.shape[1])

    _pairs_forward, _pairs_forward_parallel = thread_loops(_pairs_forward_chunk, **_opts)
    _pairs_backward, _pairs_backward_parallel = thread_loops(_pairs_backward_chunk, **_opts)

    from .microkernels import WIDE, pool_pairs, unpool_pairs

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _wide_forward_chunk(t, x, out, arg, relu, nans, per, k):  # pragma: no cover
        """The pairs' forward of chunk k's planes, a row pair at a time in 512-bit vectors
        (``microkernels.pool_pairs``)."""
        lo = k * per
        hi = min(x.shape[0], lo + per)
        h, w = x.shape[1], x.shape[2]
        oh, ow = out.shape[1], out.shape[2]
        xf, of, af = x.reshape(x.size), out.reshape(out.size), arg.reshape(arg.size)
        nan = False
        for m in range(lo, hi):
            for i in range(oh):
                r0 = (m * h + 2 * i) * w
                nan |= pool_pairs(xf, r0, r0 + w, of, af, (m * oh + i) * ow, ow, relu)
        nans[k] = nan

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _wide_backward_chunk(t, g, arg, out, gx, relu, per, k):  # pragma: no cover
        """The pairs' backward of chunk k's planes, a row pair at a time (``unpool_pairs``);
        rows past the windows zeros."""
        lo = k * per
        hi = min(gx.shape[0], lo + per)
        h, w = gx.shape[1], gx.shape[2]
        oh, ow = g.shape[1], g.shape[2]
        gf, af, of = g.reshape(g.size), arg.reshape(arg.size), out.reshape(out.size)
        xf = gx.reshape(gx.size)
        zero = gx.dtype.type(0)
        for m in range(lo, hi):
            for i in range(oh):
                r0 = (m * h + 2 * i) * w
                unpool_pairs(gf, af, of, (m * oh + i) * ow, ow, xf, r0, r0 + w, relu)
            for e in range((m * h + 2 * oh) * w, (m + 1) * h * w):
                xf[e] = zero

    _wide_forward, _wide_forward_parallel = thread_loops(_wide_forward_chunk, **_opts)
    _wide_backward, _wide_backward_parallel = thread_loops(_wide_backward_chunk, **_opts)

    def _wide(x, arg) -> bool:
        """Whether the pairs run in 512-bit vectors: numba compiles for AVX-512, float32,
        one-byte offsets."""
        return WIDE and x.dtype == np.float32 and arg.dtype == np.uint8


def _chunks(shape: tuple, rows: int) -> tuple:
    """For (M, H, W) planes pooled into ``rows`` rows: (planes a chunk, chunks, whether they
    are split over the threads)."""
    planes, _, width = shape
    per = max(1, PAIRS_CHUNK // max(1, rows * width))
    chunks = -(-planes // per)
    return per, chunks, threaded(chunks, int(np.prod(shape)), PARALLEL_MIN_SIZE)


def _row_buffers(entries: int, parallel: bool, scratch, dtype) -> tuple:
    """The two passes' per-thread buffers ``v`` and ``low`` of ``entries`` each."""
    shape = (numba.get_num_threads() if parallel else 1, entries)
    return _buffer(scratch, "pairs_v", shape, dtype), _buffer(scratch, "pairs_low", shape, np.bool_)


def _buffer(scratch, key: str, shape: tuple, dtype) -> np.ndarray:
    return np.empty(shape, dtype) if scratch is None else scratch(key, shape, dtype)


def pool_planes_forward(x, out, arg, kernel, stride, dilation, relu, scratch=None) -> None:
    """Each window's maximum (of ``relu(x)`` with ``relu``) and its offset, over contiguous
    (M, H, W) planes, into contiguous ``out`` and ``arg``: the pairs where they apply, else
    the window loops. ``scratch(key, shape, dtype)`` (a plan's workspace) keeps the pairs'
    buffers, which are otherwise allocated."""
    if not pairs_apply(kernel, stride, dilation, x.shape[2]):
        windows, extra = window_loops((*kernel, *stride, *dilation), False, out.size)
        windows(x, out, arg, relu, *extra)
        return
    per, chunks, parallel = _chunks(x.shape, out.shape[1])
    nans = _buffer(scratch, "pairs_nan", (chunks,), np.bool_)
    if _wide(x, arg):
        run = _wide_forward_parallel if parallel else _wide_forward
        run(chunks, x, out, arg, relu, nans, per)
    else:
        v, low = _row_buffers(per * out.shape[1] * x.shape[2], parallel, scratch, x.dtype)
        run = _pairs_forward_parallel if parallel else _pairs_forward
        run(chunks, x, out, arg, relu, v, low, nans, per)
    if nans.any():  # rare: the window loops find each window's first NaN
        windows, extra = window_loops((*kernel, *stride, *dilation), False, 0)
        for k in np.flatnonzero(nans):
            part = slice(k * per, (k + 1) * per)
            windows(x[part], out[part], arg[part], relu, *extra)


def pool_planes_backward(g, arg, out, gx, kernel, stride, dilation, relu, scratch=None) -> None:
    """``gx`` (contiguous (M, H, W) planes) whole: each ``g`` at its window's offset (only where
    ``out > 0`` with ``relu``; ``out`` is read only then), zeros elsewhere."""
    if not pairs_apply(kernel, stride, dilation, gx.shape[2]):
        windows, extra = window_loops((*kernel, *stride, *dilation), True, g.size)
        windows(g, arg, out, gx, relu, *extra)
        return
    per, chunks, parallel = _chunks(gx.shape, g.shape[1])
    if _wide(gx, arg):
        run = _wide_backward_parallel if parallel else _wide_backward
        run(chunks, g, arg, out, gx, relu, per)
    else:
        v, low = _row_buffers(per * g.shape[1] * gx.shape[2], parallel, scratch, gx.dtype)
        run = _pairs_backward_parallel if parallel else _pairs_backward
        run(chunks, g, arg, out, gx, relu, v, low, per)


def _planes(a: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) as contiguous (N*C, H, W) planes (H = 1 for 1-d)."""
    a = np.ascontiguousarray(a)
    return a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:])


def _two_d(kernel: tuple, stride: tuple, dilation: tuple) -> tuple:
    if len(kernel) == 1:
        return (1,) + kernel, (1,) + stride, (1,) + dilation
    return kernel, stride, dilation


def max_pool_forward(
    x: np.ndarray,
    kernel: tuple,
    stride: tuple,
    out=None,
    arg=None,
    dilation: tuple | None = None,
    scratch=None,
):
    """Max over windows of (N, C, L) or (N, C, H, W): returns ``(out, arg)``.

    ``arg`` (uint8 when windows have at most 256 entries) holds each maximum's offset in its
    window, row-major, the first one at ties. ``out`` and ``arg`` may be given (contiguous
    buffers of the right shape and dtype) to be filled instead of allocated. A window's
    entries are ``dilation`` apart. ``scratch(key, shape, dtype)`` keeps the temporaries (see
    :func:`pool_planes_forward`).
    """
    dilation = dilation or (1,) * len(kernel)
    out_shape = tuple(
        (n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[2:], kernel, stride, dilation)
    )
    if out is None:
        out = np.empty(x.shape[:2] + out_shape, dtype=x.dtype)
    if arg is None:
        arg = np.empty(out.shape, dtype=pool_arg_dtype(kernel))
    k2, s2, d2 = _two_d(kernel, stride, dilation)
    if numba is None:  # pragma: no cover
        max_pool_forward_reference(_planes(x), k2, s2, _planes(out), _planes(arg), d2)
        return out, arg
    pool_planes_forward(_planes(x), _planes(out), _planes(arg), k2, s2, d2, False, scratch)
    return out, arg


def max_pool_backward(
    g: np.ndarray,
    arg: np.ndarray,
    x_shape: tuple,
    kernel: tuple,
    stride: tuple,
    gx=None,
    dilation: tuple | None = None,
    scratch=None,
):
    """Gradient of :func:`max_pool_forward` w.r.t. its input, of shape ``x_shape`` (written into
    ``gx`` when given, a contiguous buffer; ``scratch`` as the forward's)."""
    dilation = dilation or (1,) * len(kernel)
    if gx is None:
        gx = np.empty(x_shape, dtype=g.dtype)
    k2, s2, d2 = _two_d(kernel, stride, dilation)
    if numba is None:  # pragma: no cover
        gx.fill(0)
        max_pool_backward_reference(_planes(g), _planes(arg), k2, s2, _planes(gx), d2)
        return gx
    planes = _planes(g)
    pool_planes_backward(planes, _planes(arg), planes, _planes(gx), k2, s2, d2, False, scratch)
    return gx
