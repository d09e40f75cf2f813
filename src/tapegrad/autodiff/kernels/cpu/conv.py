"""The direct convolution backward kernel (numba): the gradients of a stride-1, unpadded
convolution (cross-correlation) of x (N, C, H, W) with w (O, C, KH, KW) (+ bias (O,)),
1-d convolution being the H = 1 case, that visit only the nonzero entries of the output
gradient. ReLU and max pooling after a convolution leave about 1/KW of them nonzero, so for the
text CNN's channels-last input this beats BLAS for the weight gradient, which the
``conv_weight`` primitive computes with it (see ``primitives.conv.direct_backward_applies``).

A window of x is a set of runs contiguous in memory (for channels-last input each of its KH
rows' KW * C values). Each output row's nonzero offsets are gathered first, with no branch on
the values (a zero output gradient contributes nothing, not even where x is inf or NaN), and
visited in order; each adds ``g`` to the bias gradient, ``g * x`` to the weight gradient and
``g * w`` to the input gradient. Two kernels do this:

* float32 with channels-last input (the text CNN's): ``microkernels.py``'s run kernels, one
  run of every window a call (in pieces of at most ``PIECE`` floats): the weight gradient's
  run summed in vector registers over the row's nonzeros, the input gradient's windows
  updated with the run's weights held in registers, one fused multiply-add each, the runs
  (KH of them) in turn for the whole row;
* otherwise loops over each nonzero's runs (a multiply and an add each), which numba
  vectorises.

The batch goes in chunks (at most ``CHUNKS``, fixed by the batch size) split over numba's
threads: each chunk sums its images' weight and bias gradients apart, the chunks' sums are
added in chunk order, and each image's input gradient is its chunk's alone, so any thread count
gives the same bits, and a call asking for one gradient computes it as a call asking for all.
The text CNN's (64, 50, 130) channels-last input, (8, 50, 3) kernel, 1/8 of g nonzero, two
threads (Zen 4, 2026-12-08): the run kernels ~130 us against ~250 for the loops (which took 490
in one loop over the batch, 2026-12-07).

(A forward kernel and conv + ReLU + max-pool kernels fused both ways lived here too; measured
against the plan's path, ``python benchmarks/conv_backward.py``: 1.8x slower on the seed CNN's
shape and 3.8x on the text CNN's, so they were removed.)
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError

# the batch's images are summed in at most this many chunks (fixed per batch size)
CHUNKS = 16
# from how many output positions (the whole batch's) the chunks are split over numba's threads
PARALLEL_MIN_SIZE = 1 << 14

__all__ = ["conv_backward", "conv_backward_reference", "direct_layout_ok"]


def _as2d(a: np.ndarray | None) -> np.ndarray | None:
    """(N, C, L) as an (N, C, 1, L) view; 4-d arrays unchanged."""
    return a[:, :, None, :] if a is not None and a.ndim == 3 else a


# -- plain-NumPy references --------------------------------------------------------------------
def _windows(x: np.ndarray, ksize: tuple) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) read-only view of the stride-1 windows of x (N, C, H, W)."""
    return np.lib.stride_tricks.sliding_window_view(x, ksize, axis=(2, 3))


def conv_backward_reference(g, x, w, gw, gb, gx) -> None:
    """Reference for :func:`conv_backward` (dense: zeros are multiplied, not skipped)."""
    g4, x4, w4 = _as2d(g), _as2d(x), _as2d(w)
    kh, kw = w4.shape[2:]
    oh, ow = g4.shape[2:]
    if gw is not None:
        _as2d(gw)[...] = np.einsum("noij,ncijab->ocab", g4, _windows(x4, (kh, kw)))
    if gb is not None:
        gb[...] = g4.sum(axis=(0, 2, 3))
    if gx is not None:
        gx4 = _as2d(gx)
        gx4[...] = 0
        for a in range(kh):
            for b in range(kw):
                gx4[:, :, a : a + oh, b : b + ow] += np.einsum("noij,oc->ncij", g4, w4[:, :, a, b])


# -- compiled kernels ----------------------------------------------------------------------------
try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    _jit = cached_jit(boundscheck=False, nogil=True)
    _inline = cached_jit(boundscheck=False, nogil=True, inline="always")

    @_inline
    def _scatter(gv, base, o, rx, rw, run, xf, ws, gws, gxf, need_w, need_x):  # pragma: no cover
        """Add output position ``base``'s gradient ``gv`` (filter o) to the weight and input
        gradients: one contiguous axpy per run of the window (slices keep the loops free of
        negative-index checks, so they vectorise)."""
        # the order of the runs does not matter: each target entry gets one term here
        if need_w:
            for r in range(rx.shape[0]):
                dst, src = gws[o, rw[r] : rw[r] + run], xf[base + rx[r] : base + rx[r] + run]
                for t in range(run):
                    dst[t] += gv * src[t]
        if need_x:
            for r in range(rx.shape[0]):
                dst, src = gxf[base + rx[r] : base + rx[r] + run], ws[o, rw[r] : rw[r] + run]
                for t in range(run):
                    dst[t] += gv * src[t]

    @_inline
    def _chunk_start(g, xs, gwp, gbp, gxf, need_w, need_b, need_x, size, k):  # pragma: no cover
        """Chunk k's images [lo, hi) and its weight and bias sums (gwp[k], gbp[k]), zeroed with
        its images' part of the input gradient."""
        # (a gradient not asked for has one empty part; min() with the parallel loop's unsigned
        # index would give a float)
        gws = gwp[k] if k < gwp.shape[0] else gwp[0]
        gb = gbp[k] if k < gbp.shape[0] else gbp[0]
        if need_w:
            gws[:] = 0
        if need_b:
            gb[:] = 0
        lo = k * size
        hi = min(g.shape[0], lo + size)
        if need_x:
            gxf[lo * xs[0] : hi * xs[0]] = 0
        return gws, gb, lo, hi

    @_jit  # called through thread_loops: not inlined
    def _conv_bwd_chunk(
        t, g, xf, xs, rx, rw, run, ws, need_w, need_b, need_x, gwp, gbp, gxf, size, k
    ):  # pragma: no cover - compiled
        """Chunk k's images: its weight and bias gradients into gwp[k], gbp[k], each image's
        input gradient into its part of gxf (zeros first). Each output row's nonzero offsets
        are gathered first (no branch on the values), then visited in order."""
        gws, gb, lo, hi = _chunk_start(g, xs, gwp, gbp, gxf, need_w, need_b, need_x, size, k)
        idx = np.empty(g.shape[3], np.intp)
        for n in range(lo, hi):
            for o in range(g.shape[1]):
                for i in range(g.shape[2]):
                    row = g[n, o, i]
                    count = 0
                    for j in range(row.shape[0]):
                        idx[count] = j
                        count += row[j] != 0
                    for q in range(count):
                        j = idx[q]
                        gv = row[j]
                        if need_b:
                            gb[o] += gv
                        base = n * xs[0] + i * xs[2] + j * xs[3]
                        _scatter(gv, base, o, rx, rw, run, xf, ws, gws, gxf, need_w, need_x)

    from .loops import thread_loops, threaded
    from .microkernels import LANES, RUN_VECTORS, WIDE, nonzeros, runs_input, runs_weight
    from .reduce import add_chunks

    _conv_bwd, _conv_bwd_parallel = thread_loops(_conv_bwd_chunk, boundscheck=False, nogil=True)

    # the longest piece of a run one call of the run kernels takes
    PIECE = RUN_VECTORS * LANES

    @_jit  # called through thread_loops: not inlined
    def _conv_runs_chunk(
        t, g, gf, xf, xs, rx, rw, run, ws, need_w, need_b, need_x, gwp, gbp, gxf, size, k
    ):  # pragma: no cover - compiled
        """``_conv_bwd_chunk`` for float32 (g also as the flat ``gf``): each
        output row's nonzero offsets compressed 16 entries a step (``nonzeros``), then
        each run of the windows (in pieces of at most ``PIECE``) through every one of them:
        the weight gradient's piece summed in registers (``runs_weight``), the input
        gradient's windows updated with the piece of weights held in registers
        (``runs_input``)."""
        gws, gb, lo, hi = _chunk_start(g, xs, gwp, gbp, gxf, need_w, need_b, need_x, size, k)
        width = g.shape[3]
        idx = np.empty(width + LANES, np.int32)
        for n in range(lo, hi):
            for o in range(g.shape[1]):
                for i in range(g.shape[2]):
                    g0 = ((n * g.shape[1] + o) * g.shape[2] + i) * width
                    count = nonzeros(gf, g0, width, idx)
                    if need_b:
                        for q in range(count):
                            gb[o] += gf[g0 + idx[q]]
                    for r in range(rx.shape[0]):
                        x0 = n * xs[0] + i * xs[2] + rx[r]
                        w0 = o * ws.shape[1] + rw[r]
                        for p in range(0, run, PIECE):
                            piece = min(PIECE, run - p)
                            if need_w:
                                runs_weight(
                                    gf, g0, idx, count, xf, x0 + p, gws, w0 + p, xs[3], piece
                                )
                            if need_x:
                                runs_input(
                                    gf, g0, idx, count, ws, w0 + p, gxf, x0 + p, xs[3], piece
                                )

    _conv_runs, _conv_runs_parallel = thread_loops(_conv_runs_chunk, boundscheck=False, nogil=True)


def _channels_last(x4: np.ndarray) -> bool:
    """Whether x (N, C, H, W) is a view of a contiguous (N, H, W, C) array (the text CNN's
    permuted embedding output)."""
    return x4.shape[1] > 1 and x4.transpose(0, 2, 3, 1).flags.c_contiguous


def direct_layout_ok(x: np.ndarray, w: np.ndarray) -> bool:
    """x is channels-last with windows of at least 16 contiguous values (see
    ``primitives.conv.direct_backward_applies``)."""
    x4, w4 = _as2d(x), _as2d(w)
    return x4.ndim == 4 and _channels_last(x4) and w4.shape[1] * w4.shape[3] >= 16


def runs_apply(g4, xf, ws, gxf, cl: bool) -> bool:
    """Whether the backward takes the run kernels (``_conv_runs_chunk``): AVX-512, float32,
    channels-last input (its windows' runs long: the loops' kernel otherwise)."""
    return (
        numba is not None
        and WIDE
        and cl
        and all(a.dtype == np.float32 for a in (g4, xf, ws, gxf))
        and g4.flags.c_contiguous
    )


def _flat(a4: np.ndarray, cl: bool) -> np.ndarray:
    """The memory of a contiguous NCHW (or, if ``cl``, NHWC) array as a 1-d view."""
    return (a4.transpose(0, 2, 3, 1) if cl else a4).reshape(-1)


def _backward_call(g, x, w, gw, gb, gx, scratch=None) -> None:
    """Lay x, w and the gradients out as runs of contiguous memory and call the kernel.

    A window of x is a set of runs that are contiguous in memory: for NCHW input each (c, a)
    row piece of length KW, for channels-last input each row a of KW * C values. The weight
    (and its gradient) is laid out the same way, so every run is one contiguous axpy.
    """
    x4, w4 = _as2d(x), _as2d(w)
    cl = _channels_last(x4)
    if not cl and not x4.flags.c_contiguous:
        x4 = np.ascontiguousarray(x4)
    o, c, kh, kw = w4.shape
    xs = np.array(x4.strides, np.intp) // x4.itemsize
    new = scratch or (lambda key, shape: np.empty(shape, g.dtype))
    ws = new("conv_w", (o, c * kh * kw))  # the weight laid out as the runs
    if cl:
        run = kw * c
        rx = np.arange(kh, dtype=np.intp) * xs[2]
        rw = np.arange(kh, dtype=np.intp) * run
        np.copyto(ws.reshape(o, kh, kw, c), w4.transpose(0, 2, 3, 1))
    else:
        run = kw
        ca = np.arange(c * kh, dtype=np.intp)
        rx = (ca // kh) * xs[1] + (ca % kh) * xs[2]
        rw = ca * kw
        np.copyto(ws.reshape(w4.shape), w4)
    n = x4.shape[0]
    size = max(1, -(-n // CHUNKS))  # images per chunk: fixed per batch size
    chunks = max(1, -(-n // size))  # one, empty, for no images: the gradients' zeros
    gwp = new("conv_gw", (chunks, *ws.shape)) if gw is not None else np.empty((1, 0, 0), g.dtype)
    gbp = new("conv_gb", (chunks, o)) if gb is not None else np.empty((1, 0), g.dtype)
    gx4 = _as2d(gx) if gx is not None else None
    direct = gx4 is not None and gx4.strides == x4.strides and gx4.shape == x4.shape
    gxs = gx4 if direct else (np.empty_like(x4) if gx is not None else None)
    gxf = _flat(gxs, cl) if gxs is not None else np.empty(0, g.dtype)
    parallel = threaded(chunks, g.size, PARALLEL_MIN_SIZE)
    g4, xf = _as2d(g), _flat(x4, cl)
    if runs_apply(g4, xf, ws, gxf, cl):
        run_chunks = _conv_runs_parallel if parallel else _conv_runs
        first = (g4, g4.reshape(-1), xf)
    else:
        run_chunks = _conv_bwd_parallel if parallel else _conv_bwd
        first = (g4, xf)
    run_chunks(
        chunks,
        *first,
        xs,
        rx,
        rw,
        run,
        ws,
        gw is not None,
        gb is not None,
        gx is not None,
        gwp,
        gbp,
        gxf,
        size,
    )
    if gb is not None:
        add_chunks(gbp)
        np.copyto(gb, gbp[0])
    if gw is not None:
        add_chunks(gwp)
        gws = gwp[0]
        shaped = gws.reshape(o, kh, kw, c).transpose(0, 3, 1, 2) if cl else gws.reshape(w4.shape)
        np.copyto(_as2d(gw), shaped)
    if gx is not None and not direct:
        np.copyto(gx4, gxs)


def conv_backward(
    g: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    gw: np.ndarray | None,
    gb: np.ndarray | None,
    gx: np.ndarray | None,
    scratch=None,
) -> None:
    """Gradients of a stride-1 unpadded convolution for its output gradient g: the weight's
    into ``gw``, the bias's into ``gb``, the input's into ``gx`` (each skipped when None). Zero
    entries of g are skipped, so a gradient that ReLU and pooling made sparse costs only its
    nonzeros. ``scratch(key, shape)``, when given, supplies the kernel's two weight-shaped
    temporaries (a compiled plan's workspace), which are otherwise allocated."""
    _check_shapes("conv_backward", x, w, conv_out=g, grads=(gw, gb, gx))
    if numba is None:  # pragma: no cover
        conv_backward_reference(g, x, w, gw, gb, gx)
        return
    _backward_call(g, x, w, gw, gb, gx, scratch)


def _check_shapes(op: str, x, w, *, conv_out, grads) -> None:
    """The kernel runs without bounds checks: every array's shape is checked first.
    ``conv_out``: an array shaped like the convolution's output; ``grads``: (gw, gb, gx)."""
    x4, w4 = _as2d(x), _as2d(w)
    if x.ndim != w.ndim or x.ndim not in (3, 4) or x4.shape[1] != w4.shape[1]:
        raise ShapeError(f"{op}: input {x.shape} and weight {w.shape} do not fit")
    conv = (x4.shape[0], w4.shape[0], x4.shape[2] - w4.shape[2] + 1, x4.shape[3] - w4.shape[3] + 1)
    if conv[2] < 1 or conv[3] < 1:
        raise ShapeError(f"{op}: weight {w.shape} is larger than input {x.shape}")
    if _as2d(conv_out).shape != conv:
        raise ShapeError(f"{op}: output/gradient {conv_out.shape} should be {conv[: x.ndim]}")
    gw, gb, gx = grads
    for name, a, shape in (("gw", gw, w.shape), ("gb", gb, (w4.shape[0],)), ("gx", gx, x.shape)):
        if a is not None and a.shape != shape:
            raise ShapeError(f"{op}: {name} must have shape {shape}, got {a.shape}")
