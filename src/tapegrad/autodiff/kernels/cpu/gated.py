"""The gated recurrences' scans through time, the LSTM's and the GRU's, in one compiled call each
way, the batch's rows in fixed chunks over numba's threads (``scan_chunks.py``; the Elman scan's is
``elman.py``): per chunk and step, the recurrent product ``h[t-1] @ whh.T`` is one single-threaded
OpenBLAS call from the kernel against ``whh.T`` stored by rows, and the gate math is the step
kernel of ``recurrent.py`` on the chunk's rows. Backward: the step kernel's gate gradients, then
``dh = dgates @ whh`` per chunk. The recurrent weight's (and the GRU's recurrent bias's)
gradients stay one product (and one sum) over all steps afterwards (``primitives/recurrent.py``):
large enough to be split over the threads on their own. Step by step from Python, every step was
a product cut in pieces (a parallel region) and a serial step kernel; T = 28, N = 100, H = 128,
float32, two threads: the LSTM's forward 7.06 -> 3.75 ms and backward 8.27 -> 4.87 ms, the GRU's
forward 3.25 -> 2.08 ms and its backward's steps 2.94 -> 1.94 ms (BENCHMARKS.md, *Eager
per-operation cost; the Elman scan in one call*).

The NumPy references do the same a step at a time; the tests compare the kernels with them, and a
device without these kernels binds them (``kernels/generic.py``).
"""

from __future__ import annotations

import numpy as np

from . import gemm as _gemm
from .recurrent import (
    gru_backward_step_reference,
    gru_forward_step_reference,
    lstm_backward_step_reference,
    lstm_forward_step_reference,
)
from .scan_chunks import buffer as _buffer


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


def gru_scan_forward_reference(xp, whh, bhh, h0, hs, act, scratch=None) -> None:
    """``hs`` (T, N, H) <- the hidden states from ``xp`` (T, N, 3H, any layout), ``act`` (T, N,
    4H) <- what the backward pass reads. ``scratch(key, shape)`` (a plan's workspace, or None)
    gives the temporaries."""
    hw = _buffer(scratch, "gru_hw", xp.shape[1:], xp)
    h = h0
    for t in range(xp.shape[0]):
        np.matmul(h, whh.T, out=hw)
        gru_forward_step_reference(xp[t], hw, bhh, h, hs[t], act[t])
        h = hs[t]


def gru_scan_backward_reference(g, hs, act, whh, h0, dxp, dhw, dh, dhd, need_h0) -> None:
    """Backward through time from ``g`` (T, N, H): ``dxp`` (T, N, 3H, any layout), ``dhw`` (T,
    N, 3H), and the initial state's gradient in two parts, ``dh`` (through the recurrent
    product; when ``need_h0``, else the last step's, unused) and ``dhd`` (the direct part)."""
    dh[...] = 0
    dhd[...] = 0
    for t in range(g.shape[0] - 1, -1, -1):
        gru_backward_step_reference(g[t], dh, dhd, act[t], hs[t - 1] if t else h0, dxp[t], dhw[t])
        if t or need_h0:
            np.matmul(dhw[t], whh, out=dh)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None and _gemm.AVAILABLE:
    from ..jit import cached_jit
    from .loops import split_loops
    from .recurrent import (
        gru_backward_step,
        gru_forward_step,
        lstm_backward_step,
        lstm_forward_step,
    )
    from .scan_chunks import JIT as _JIT
    from .scan_chunks import rows as _rows
    from .scan_chunks import rows_of_transpose, run_chunks

    _NO = _gemm.NO_TRANS

    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _lstm_forward_chunk(xp, whh_t, h0, c0, hs, cs, act, tc, hw, chunks, i):  # pragma: no cover
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
    def _lstm_backward_chunk(
        g, cs, act, tc, whh, c0, dxp, dh, dc, last, chunks, i
    ):  # pragma: no cover
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

    _LSTM_FORWARD = split_loops(_lstm_forward_chunk, **_JIT)
    _LSTM_BACKWARD = split_loops(_lstm_backward_chunk, **_JIT)

    def lstm_scan_forward(xp, whh, h0, c0, out, act, tc, scratch=None) -> None:
        """The kernel of :func:`lstm_scan_forward_reference` (``out``, ``act``, ``tc``
        C-contiguous). T = 28, N = 100, H = 128, float32, two threads: 3.75 ms against 7.06 a
        step at a time (BENCHMARKS.md, *Eager per-operation cost; the Elman scan in one
        call*)."""
        hw = _buffer(scratch, "lstm_hw", xp.shape[1:], xp)
        whh_t = rows_of_transpose(scratch, "lstm_whh_t", whh, xp)
        h0, c0 = np.ascontiguousarray(h0), np.ascontiguousarray(c0)
        run_chunks(_LSTM_FORWARD, out[0], xp, whh_t, h0, c0, out[0], out[1], act, tc, hw)

    def lstm_scan_backward(g, out, act, tc, whh, c0, dxp, dh, dc, need_h0) -> None:
        """The kernel of :func:`lstm_scan_backward_reference` (``dxp``, ``dh``, ``dc``
        C-contiguous)."""
        whh, c0 = np.ascontiguousarray(whh), np.ascontiguousarray(c0)
        run_chunks(_LSTM_BACKWARD, out[0], g, out[1], act, tc, whh, c0, dxp, dh, dc, bool(need_h0))

    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _gru_forward_chunk(xp, whh_t, bhh, h0, hs, act, hw, chunks, i):  # pragma: no cover
        T, H = hs.shape[0], hs.shape[2]
        G = 3 * H
        r0, r1 = _rows(hs.shape[1], chunks, i)
        one, zero = hs.dtype.type(1), hs.dtype.type(0)
        w = hw[r0:r1]
        for t in range(T):
            h_prev = hs[t - 1, r0:r1] if t > 0 else h0[r0:r1]
            _gemm.gemm(_NO, _NO, r1 - r0, G, H, one, h_prev, H, whh_t, G, zero, w, G)
            gru_forward_step(xp[t, r0:r1], w, bhh, h_prev, hs[t, r0:r1], act[t, r0:r1])

    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _gru_backward_chunk(
        g, hs, act, whh, h0, dxp, dhw, dh, dhd, last, chunks, i
    ):  # pragma: no cover
        T, H = hs.shape[0], hs.shape[2]
        G = 3 * H
        r0, r1 = _rows(hs.shape[1], chunks, i)
        one, zero = hs.dtype.type(1), hs.dtype.type(0)
        d, dd = dh[r0:r1], dhd[r0:r1]
        for n in range(r1 - r0):
            for j in range(H):
                d[n, j] = zero
                dd[n, j] = zero
        for t in range(T - 1, -1, -1):
            h_prev = hs[t - 1, r0:r1] if t > 0 else h0[r0:r1]
            dw = dhw[t, r0:r1]
            gru_backward_step(g[t, r0:r1], d, dd, act[t, r0:r1], h_prev, dxp[t, r0:r1], dw)
            if t > 0 or last:
                _gemm.gemm(_NO, _NO, r1 - r0, H, G, one, dw, G, whh, H, zero, d, H)

    _GRU_FORWARD = split_loops(_gru_forward_chunk, **_JIT)
    _GRU_BACKWARD = split_loops(_gru_backward_chunk, **_JIT)

    def gru_scan_forward(xp, whh, bhh, h0, hs, act, scratch=None) -> None:
        """The kernel of :func:`gru_scan_forward_reference` (``hs`` and ``act``
        C-contiguous)."""
        hw = _buffer(scratch, "gru_hw", xp.shape[1:], xp)
        whh_t = rows_of_transpose(scratch, "gru_whh_t", whh, xp)
        run_chunks(_GRU_FORWARD, hs, xp, whh_t, bhh, np.ascontiguousarray(h0), hs, act, hw)

    def gru_scan_backward(g, hs, act, whh, h0, dxp, dhw, dh, dhd, need_h0) -> None:
        """The kernel of :func:`gru_scan_backward_reference` (``hs``, ``dhw``, ``dh`` and
        ``dhd`` C-contiguous)."""
        whh, h0 = np.ascontiguousarray(whh), np.ascontiguousarray(h0)
        run_chunks(_GRU_BACKWARD, hs, g, hs, act, whh, h0, dxp, dhw, dh, dhd, bool(need_h0))

else:  # pragma: no cover
    lstm_scan_forward = lstm_scan_forward_reference
    lstm_scan_backward = lstm_scan_backward_reference
    gru_scan_forward = gru_scan_forward_reference
    gru_scan_backward = gru_scan_backward_reference
