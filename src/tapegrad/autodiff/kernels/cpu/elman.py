"""The Elman recurrence's whole scan, forward and backward through time, in one compiled call
each, the batch's rows split over numba's threads.

    hs[t] = act(xp[t] + hs[t-1] @ whh.T),  hs[-1] = h0,  act in {tanh, relu}

A row of the hidden state depends only on the same row a step earlier (and the gradient of the
state likewise), so the rows fall into chunks that run every time step without meeting: each
chunk's recurrent product is one single-threaded BLAS call from the kernel (``gemm.py``, with
``whh.T`` copied once a call: OpenBLAS took 7.3 us for (100, 64) @ (64, 64) stored by rows
against 10.6 for the transposed view) and the add and the activation one pass over its rows. Run
a step at a time from Python, the scan paid a NumPy call for each of the copy, the product, the
add and the activation of every step, all on one thread. The chunks depend on the batch size
alone (``scan_chunks.ROWS`` rows or fewer each), so serial and parallel runs give the same bits.

``tanh`` is the recurrent kernels' own (``recurrent.py``: ``1 - 2 / (1 + e^{2x})`` with a
vectorised exponential, a few ulp of 1 from NumPy's), as the LSTM and GRU steps compute it.

Backward, per chunk from the last step: ``dpre = (g[t] + dh) * act'(hs[t])`` (copied into
``dxp[t]``, the input projection's gradient), the chunk's share of the recurrent weight's
gradient ``dpre^T hs[t-1]`` added up, then ``dh = dpre @ whh``; the chunks' shares are added in
chunk order at the end.

The NumPy references (``*_reference``) do the same a step at a time; the tests compare the
kernels with them, and a device without these kernels binds them (``kernels/generic.py``).
"""

from __future__ import annotations

import numpy as np

from . import gemm as _gemm
from .scan_chunks import buffer as _buffer
from .scan_chunks import chunks_of


def rnn_scan_forward_reference(xp, whh, h0, tanh, zero_h0, hs, scratch=None) -> None:
    """``hs`` (T, N, H) <- the hidden states. With ``zero_h0`` the state starts at zeros (``h0``
    unread). ``scratch(key, shape)`` (a plan's workspace, or None) gives the temporaries."""
    hw = _buffer(scratch, "rnn_hw", h0.shape, hs)
    h = h0
    for t in range(xp.shape[0]):
        out = hs[t]
        out[...] = xp[t]
        if t > 0 or not zero_h0:
            np.matmul(h, whh.T, out=hw)
            out += hw
        if tanh:
            np.tanh(out, out=out)
        else:
            np.maximum(out, 0, out=out)
        h = out


def rnn_scan_backward_reference(g, hs, whh, h0, tanh, zero_h0, needs, dxp, dwhh, dh, scratch=None):
    """Backward through time from ``g``, the gradient of ``hs``: ``dxp`` (T, N, H, any layout),
    ``dwhh`` (H, H) when ``needs[1]``, ``dh`` (N, H): the gradient of ``h0`` when ``needs[2]``
    (zeros with ``zero_h0``), else zeros. ``scratch(key, shape)`` (a plan's workspace, or None)
    gives the temporaries."""
    dpre = _buffer(scratch, "rnn_dpre", hs.shape, hs)  # each step's pre-activation gradient
    dh[...] = 0
    for t in range(hs.shape[0] - 1, -1, -1):
        d = dpre[t]
        np.add(g[t], dh, out=d)
        d *= 1 - hs[t] * hs[t] if tanh else hs[t] > 0
        dxp[t] = d
        if t > 0 or (needs[2] and not zero_h0):
            np.matmul(d, whh, out=dh)
    if zero_h0 or not needs[2]:
        dh[...] = 0
    if needs[1]:  # the sum over t of dpre[t]^T hs[t-1] (hs[-1] = h0 unless zero_h0)
        dwhh[...] = 0
        for t in range(hs.shape[0] - 1, 0 if zero_h0 else -1, -1):
            dwhh += dpre[t].T @ (hs[t - 1] if t > 0 else h0)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None and _gemm.AVAILABLE:
    from ..jit import cached_jit
    from .loops import split_loops
    from .recurrent import _tanh
    from .reduce import add_chunks
    from .scan_chunks import JIT as _JIT
    from .scan_chunks import rows as _rows
    from .scan_chunks import rows_of_transpose, run_chunks

    _NO, _TR = _gemm.NO_TRANS, _gemm.TRANS

    @cached_jit(fastmath={"contract"}, **_JIT)  # called through split_loops: not inlined
    def _forward_chunk(xp, whh_t, h0, tanh, zero_h0, hs, hw, chunks, i):  # pragma: no cover
        T, H = hs.shape[0], hs.shape[2]
        r0, r1 = _rows(hs.shape[1], chunks, i)
        m = r1 - r0
        one, zero = hs.dtype.type(1), hs.dtype.type(0)
        w = hw[r0:r1]
        for t in range(T):
            out, x = hs[t, r0:r1], xp[t, r0:r1]
            if t > 0 or not zero_h0:
                prev = hs[t - 1, r0:r1] if t > 0 else h0[r0:r1]
                _gemm.gemm(_NO, _NO, m, H, H, one, prev, H, whh_t, H, zero, w, H)
                for n in range(m):
                    for j in range(H):
                        out[n, j] = x[n, j] + w[n, j]
            else:
                for n in range(m):
                    for j in range(H):
                        out[n, j] = x[n, j]
            for n in range(m):
                if tanh:
                    for j in range(H):
                        out[n, j] = _tanh(out[n, j], one)
                else:
                    for j in range(H):
                        v = out[n, j]
                        out[n, j] = zero if v < zero else v  # NaN stays NaN

    # no fused multiply-add: the gradient's products in NumPy's order, as ``rnn_backward_step``
    @cached_jit(**_JIT)  # called through split_loops: not inlined
    def _backward_chunk(
        g, hs, whh, h0, tanh, last, weight, zero_h0, dxp, dpre, dh, parts, chunks, i
    ):  # pragma: no cover - compiled
        T, H = hs.shape[0], hs.shape[2]
        r0, r1 = _rows(hs.shape[1], chunks, i)
        m = r1 - r0
        one, zero = hs.dtype.type(1), hs.dtype.type(0)
        d, part = dh[r0:r1], parts[i]
        beta = zero  # the chunk's share of the weight's gradient: its first product, then added
        for n in range(m):
            for j in range(H):
                d[n, j] = zero
        for t in range(T - 1, -1, -1):
            p, gt, ht, dx = dpre[t, r0:r1], g[t, r0:r1], hs[t, r0:r1], dxp[t, r0:r1]
            for n in range(m):
                if tanh:
                    for j in range(H):
                        p[n, j] = (gt[n, j] + d[n, j]) * (one - ht[n, j] * ht[n, j])
                else:
                    for j in range(H):
                        p[n, j] = (gt[n, j] + d[n, j]) * (one if ht[n, j] > zero else zero)
                for j in range(H):
                    dx[n, j] = p[n, j]
            if weight and (t > 0 or not zero_h0):
                prev = hs[t - 1, r0:r1] if t > 0 else h0[r0:r1]
                _gemm.gemm(_TR, _NO, H, H, m, one, p, H, prev, H, beta, part, H)
                beta = one
            if t > 0 or last:
                _gemm.gemm(_NO, _NO, m, H, H, one, p, H, whh, H, zero, d, H)
        if weight and beta == zero:  # one step from a zero state: no product
            for a in range(H):
                for b in range(H):
                    part[a, b] = zero
        if not last:
            for n in range(m):
                for j in range(H):
                    d[n, j] = zero

    _FORWARD = split_loops(_forward_chunk, fastmath={"contract"}, **_JIT)
    _BACKWARD = split_loops(_backward_chunk, **_JIT)

    def rnn_scan_forward(xp, whh, h0, tanh, zero_h0, hs, scratch=None) -> None:
        """The kernel of :func:`rnn_scan_forward_reference` (``hs`` C-contiguous)."""
        hw = _buffer(scratch, "rnn_hw", h0.shape, hs)
        whh_t = rows_of_transpose(scratch, "rnn_whh_t", whh, hs)
        h0 = np.ascontiguousarray(h0)
        run_chunks(_FORWARD, hs, xp, whh_t, h0, bool(tanh), bool(zero_h0), hs, hw)

    def rnn_scan_backward(g, hs, whh, h0, tanh, zero_h0, needs, dxp, dwhh, dh, scratch=None):
        """The kernel of :func:`rnn_scan_backward_reference` (``hs`` and ``dh`` C-contiguous).
        Each chunk sums its rows' share of the recurrent weight's gradient over the steps (a
        product a step, in the reference's order of steps), and the shares are added in chunk
        order."""
        chunks, H = chunks_of(hs.shape[1]), hs.shape[2]
        dpre = _buffer(scratch, "rnn_dpre", hs.shape, hs)
        parts = _buffer(scratch, "rnn_parts", (chunks, H, H), hs)
        last, weight = bool(needs[2]) and not zero_h0, bool(needs[1])
        whh, h0 = np.ascontiguousarray(whh), np.ascontiguousarray(h0)
        run_chunks(
            _BACKWARD, hs, g, hs, whh, h0, bool(tanh), last, weight, bool(zero_h0), dxp, dpre, dh,
            parts,
        )  # fmt: skip
        if weight:
            add_chunks(parts)  # in chunk order: the same bits on any thread count
            np.copyto(dwhh, parts[0])

else:  # pragma: no cover
    rnn_scan_forward = rnn_scan_forward_reference
    rnn_scan_backward = rnn_scan_backward_reference
