"""The GRU's scan through time in one compiled call each way, the batch's rows split over numba's
threads, as the Elman and LSTM scans' (``elman.py``, ``lstm.py``): fixed chunks of rows, each
step's recurrent product one single-threaded OpenBLAS call from the kernel against ``whh.T``
stored by rows, the step kernels of ``recurrent.py`` on the chunk's rows. Backward fills the
gate gradients, the gradient of ``h @ whh.T + bhh`` per step and the two parts of the initial
state's gradient; the recurrent weight's and bias's gradients stay one product and one sum over
all steps afterwards (``primitives/recurrent.py``).

The NumPy references do the same a step at a time; the tests compare the kernels with them, and a
device without these kernels binds them (``kernels/generic.py``).
"""

from __future__ import annotations

import numpy as np

from . import gemm as _gemm
from .elman import _buffer, rnn_scan_rows
from .recurrent import gru_backward_step_reference, gru_forward_step_reference


def gru_scan_rows(dtype) -> bool:
    """Whether this CPU runs the GRU scan here: as the Elman scan, float32 or float64 with an
    ILP64 OpenBLAS."""
    return rnn_scan_rows(dtype)


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
    from .elman import _rows
    from .loops import split_loops, threaded
    from .recurrent import gru_backward_step, gru_forward_step

    _JIT = dict(boundscheck=False, nogil=True, error_model="numpy")
    _NO = _gemm.NO_TRANS
    _ROWS = 64  # rows at most in a chunk (as the Elman scan's)
    PARALLEL_MIN_SIZE = 1 << 12  # from how many state entries (T * N * H) chunks go parallel

    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _forward_chunk(xp, whh_t, bhh, h0, hs, act, hw, chunks, i):  # pragma: no cover
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
    def _backward_chunk(
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

    _forward_serial, _forward_parallel = split_loops(_forward_chunk, **_JIT)
    _backward_serial, _backward_parallel = split_loops(_backward_chunk, **_JIT)

    def _plan(hs):
        chunks = -(-hs.shape[1] // _ROWS)
        return chunks, threaded(chunks, hs.size, PARALLEL_MIN_SIZE)

    def gru_scan_forward(xp, whh, bhh, h0, hs, act, scratch=None) -> None:
        """The kernel of :func:`gru_scan_forward_reference` (``hs`` and ``act``
        C-contiguous)."""
        chunks, parallel = _plan(hs)
        hw = _buffer(scratch, "gru_hw", xp.shape[1:], xp)
        whh_t = _buffer(scratch, "gru_whh_t", whh.shape[::-1], xp)
        np.copyto(whh_t, whh.T)
        with _gemm.one_blas_thread():
            (_forward_parallel if parallel else _forward_serial)(
                chunks, xp, whh_t, bhh, np.ascontiguousarray(h0), hs, act, hw, chunks
            )

    def gru_scan_backward(g, hs, act, whh, h0, dxp, dhw, dh, dhd, need_h0) -> None:
        """The kernel of :func:`gru_scan_backward_reference` (``hs``, ``dhw``, ``dh`` and
        ``dhd`` C-contiguous)."""
        chunks, parallel = _plan(hs)
        with _gemm.one_blas_thread():
            (_backward_parallel if parallel else _backward_serial)(
                chunks, g, hs, act, np.ascontiguousarray(whh), np.ascontiguousarray(h0), dxp,
                dhw, dh, dhd, bool(need_h0), chunks,
            )  # fmt: skip

else:  # pragma: no cover
    gru_scan_forward = gru_scan_forward_reference
    gru_scan_backward = gru_scan_backward_reference
