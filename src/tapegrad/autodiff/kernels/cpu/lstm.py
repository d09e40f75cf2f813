"""The LSTM's scan through time in one compiled call each way, the batch's rows split over numba's
threads, as the Elman scan's (``elman.py``: the rows of the state never meet, so fixed chunks of
them run every step apart, and the bits do not depend on the thread count).

Per chunk and step, forward: the recurrent product ``h[t-1] @ whh.T`` (N rows, 4H) is one
single-threaded OpenBLAS call from the kernel against ``whh.T`` stored by rows (copied once a
call), then the gate math is the step kernel of ``recurrent.py`` on the chunk's rows. Backward:
the step kernel's gate gradients, then ``dh = dgates @ whh``. The recurrent weight's gradient
stays one product over all steps afterwards (``primitives/recurrent.py``): it is large enough to
be split over the threads on its own. Step by step from Python, every step was a product cut in
pieces (a parallel region) and a serial step kernel; T = 28, N = 100, H = 128 on two threads: see
:func:`lstm_scan_forward`.

The NumPy references do the same a step at a time; the tests compare the kernels with them, and a
device without these kernels binds them (``kernels/generic.py``).
"""

from __future__ import annotations

import numpy as np

from . import gemm as _gemm
from .elman import _buffer, rnn_scan_rows
from .recurrent import lstm_backward_step_reference, lstm_forward_step_reference


def lstm_scan_rows(dtype) -> bool:
    """Whether this CPU runs the LSTM scan here: as the Elman scan, float32 or float64 with an
    ILP64 OpenBLAS."""
    return rnn_scan_rows(dtype)


def lstm_scan_forward_reference(xp, whh, h0, c0, out, act, tc, scratch=None) -> None:
    """``out`` (2, T, N, H) <- the hidden and cell states from ``xp`` (T, N, 4H, any layout),
    ``act`` (T, N, 4H) and ``tc`` (T, N, H) <- what the backward pass reads. ``scratch(key,
    shape)`` (a plan's workspace, or None) gives the temporaries."""
    hw = _buffer(scratch, "lstm_hw", xp.shape[1:], xp)
    h, c = h0, c0
    for t in range(xp.shape[0]):
        np.matmul(h, whh.T, out=hw)
        lstm_forward_step_reference(xp[t], hw, c, out[0, t], out[1, t], act[t], tc[t])
        h, c = out[0, t], out[1, t]


def lstm_scan_backward_reference(g, out, act, tc, whh, c0, dxp, dh, dc, need_h0) -> None:
    """Backward through time from ``g`` (2, T, N, H), the gradient of ``out``: ``dxp`` (T, N,
    4H, the gate pre-activations' gradients), ``dc`` (N, H) the gradient of ``c0``, ``dh`` that
    of ``h0`` when ``need_h0`` (else the last step's, unused)."""
    dh[...] = 0
    dc[...] = 0
    for t in range(dxp.shape[0] - 1, -1, -1):
        c_prev = out[1, t - 1] if t else c0
        lstm_backward_step_reference(g[0, t], g[1, t], act[t], tc[t], c_prev, dh, dc, dxp[t])
        if t or need_h0:
            np.matmul(dxp[t], whh, out=dh)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None and _gemm.AVAILABLE:
    from ..jit import cached_jit
    from .elman import _rows
    from .loops import split_loops, threaded
    from .recurrent import lstm_backward_step, lstm_forward_step

    _JIT = dict(boundscheck=False, nogil=True, error_model="numpy")
    _NO = _gemm.NO_TRANS
    _ROWS = 64  # rows at most in a chunk (as the Elman scan's)
    PARALLEL_MIN_SIZE = 1 << 12  # from how many state entries (T * N * H) chunks go parallel

    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _forward_chunk(xp, whh_t, h0, c0, hs, cs, act, tc, hw, chunks, i):  # pragma: no cover
        T, H = hs.shape[0], hs.shape[2]
        G = 4 * H
        r0, r1 = _rows(hs.shape[1], chunks, i)
        one, zero = hs.dtype.type(1), hs.dtype.type(0)
        w = hw[r0:r1]
        for t in range(T):
            h_prev = hs[t - 1, r0:r1] if t > 0 else h0[r0:r1]
            c_prev = cs[t - 1, r0:r1] if t > 0 else c0[r0:r1]
            _gemm.gemm(_NO, _NO, r1 - r0, G, H, one, h_prev, H, whh_t, G, zero, w, G)
            lstm_forward_step(
                xp[t, r0:r1], w, c_prev, hs[t, r0:r1], cs[t, r0:r1], act[t, r0:r1], tc[t, r0:r1]
            )

    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _backward_chunk(g, cs, act, tc, whh, c0, dxp, dh, dc, last, chunks, i):  # pragma: no cover
        T, H = cs.shape[0], cs.shape[2]
        G = 4 * H
        r0, r1 = _rows(cs.shape[1], chunks, i)
        one, zero = cs.dtype.type(1), cs.dtype.type(0)
        d, dcc = dh[r0:r1], dc[r0:r1]
        for n in range(r1 - r0):
            for j in range(H):
                d[n, j] = zero
                dcc[n, j] = zero
        for t in range(T - 1, -1, -1):
            c_prev = cs[t - 1, r0:r1] if t > 0 else c0[r0:r1]
            dg = dxp[t, r0:r1]
            lstm_backward_step(
                g[0, t, r0:r1], g[1, t, r0:r1], act[t, r0:r1], tc[t, r0:r1], c_prev, d, dcc, dg
            )
            if t > 0 or last:
                _gemm.gemm(_NO, _NO, r1 - r0, H, G, one, dg, G, whh, H, zero, d, H)

    _forward_serial, _forward_parallel = split_loops(_forward_chunk, **_JIT)
    _backward_serial, _backward_parallel = split_loops(_backward_chunk, **_JIT)

    def _plan(states):
        chunks = -(-states.shape[1] // _ROWS)
        return chunks, threaded(chunks, states.size, PARALLEL_MIN_SIZE)

    def lstm_scan_forward(xp, whh, h0, c0, out, act, tc, scratch=None) -> None:
        """The kernel of :func:`lstm_scan_forward_reference` (``out``, ``act``, ``tc``
        C-contiguous). T = 28, N = 100, H = 128, float32, two threads: 3.75 ms against 7.06 a
        step at a time (BENCHMARKS.md, *Eager per-operation cost; the Elman scan in one
        call*)."""
        chunks, parallel = _plan(out[0])
        hw = _buffer(scratch, "lstm_hw", xp.shape[1:], xp)
        whh_t = _buffer(scratch, "lstm_whh_t", whh.shape[::-1], xp)
        np.copyto(whh_t, whh.T)
        h0, c0 = np.ascontiguousarray(h0), np.ascontiguousarray(c0)
        with _gemm.one_blas_thread():
            (_forward_parallel if parallel else _forward_serial)(
                chunks, xp, whh_t, h0, c0, out[0], out[1], act, tc, hw, chunks
            )

    def lstm_scan_backward(g, out, act, tc, whh, c0, dxp, dh, dc, need_h0) -> None:
        """The kernel of :func:`lstm_scan_backward_reference` (``dxp``, ``dh``, ``dc``
        C-contiguous)."""
        chunks, parallel = _plan(out[0])
        with _gemm.one_blas_thread():
            (_backward_parallel if parallel else _backward_serial)(
                chunks, g, out[1], act, tc, np.ascontiguousarray(whh), np.ascontiguousarray(c0),
                dxp, dh, dc, bool(need_h0), chunks,
            )  # fmt: skip

else:  # pragma: no cover
    lstm_scan_forward = lstm_scan_forward_reference
    lstm_scan_backward = lstm_scan_backward_reference
