"""One time step of the LSTM and GRU gate math, fused into one loop each way (and the Elman
RNN's backward step).

The recurrent matrix product of a step stays with BLAS (``np.matmul(h, whh.T, out=hw)``); these
kernels do everything elementwise around it in one pass over the (N, H) grid: add the input
projection, apply the gate activations, update the states, and save what the backward step
reads. The backward kernels turn the incoming state gradients into every gate's
pre-activation gradient in one pass as well.

Layouts (PyTorch's gate order), for a batch of N and hidden size H:

* LSTM: pre-activations ``[i; f; g; o]`` (N, 4H); ``act`` saves ``[i, f, g, o]`` (N, 4H)
  and ``tc`` saves ``tanh(c)`` (N, H).
* GRU: pre-activations ``[r; z; n]`` (N, 3H) with the recurrent bias ``bhh`` (3H,) inside the
  step (``r`` multiplies the ``n`` part of ``h @ W_hn^T + b_hn``); ``act`` saves
  ``[r, z, n, h @ W_hn^T + b_hn]`` (N, 4H).

Why exp is written out here: numba calls libm for ``math.exp``/``math.tanh`` one element at a
time (about 13 ns per tanh on this machine, 35x slower than NumPy's SIMD ``np.tanh``). The
``_exp`` below is range reduction ``x = k ln2 + r`` and a Taylor polynomial for ``e^r``
(degree 7 for float32, 13 for float64) scaled by ``2^k`` built from its bits; LLVM vectorises
it, and it is accurate to about 1 ulp (float32: max relative error 9e-8; float64: 2.3e-16,
measured against ``np.exp``). ``tanh(x) = 1 - 2 / (1 + e^{2x})`` and
``sigmoid(x) = 1 / (1 + e^{-x})`` follow, with an absolute error of a few ulp of 1.
``fastmath`` is limited to ``contract`` (fused multiply-add): no flag that assumes away NaN or
infinity, so NaN inputs still give NaN outputs. Eager primitives and compiled plans call these
very kernels, so both round identically.
"""

from __future__ import annotations

import math

import numpy as np


def _sigmoid_ref(x):
    return 1 / (1 + np.exp(-x))


# -- plain-NumPy references ----------------------------------------------------------------------
def lstm_forward_step_reference(xp_t, hw, c_prev, h, c, act, tc) -> None:
    """One LSTM step: ``pre = xp_t + hw`` (N, 4H) -> ``c``, ``h`` (N, H), the gate
    activations ``act`` (N, 4H) and ``tc = tanh(c)`` (N, H)."""
    H = h.shape[1]
    pre = xp_t + hw
    i, f, o = (_sigmoid_ref(pre[:, k * H : (k + 1) * H]) for k in (0, 1, 3))
    g = np.tanh(pre[:, 2 * H : 3 * H])
    c[...] = f * c_prev + i * g
    tc[...] = np.tanh(c)
    h[...] = o * tc
    act[...] = np.concatenate([i, f, g, o], axis=1)


def lstm_backward_step_reference(gh, gc, act, tc, c_prev, dh, dc, dgates) -> None:
    """Gradients of one LSTM step (``act``, ``tc`` as its forward saved them). In: ``gh``/``gc``
    (the outputs' gradients at this step), ``dh``/``dc`` (the gradients flowing back from the
    next step). Out: ``dgates`` (N, 4H), the pre-activation gradients, and ``dc`` overwritten
    with the gradient of ``c_prev``."""
    H = gh.shape[1]
    i, f, g, o = (act[:, k * H : (k + 1) * H] for k in range(4))
    dht = gh + dh
    dct = gc + dc + dht * o * (1 - tc**2)
    dgates[...] = np.concatenate(
        [
            dct * g * i * (1 - i),
            dct * c_prev * f * (1 - f),
            dct * i * (1 - g**2),
            dht * tc * o * (1 - o),
        ],
        axis=1,
    )
    dc[...] = dct * f


def gru_forward_step_reference(xp_t, hw, bhh, h_prev, h, act) -> None:
    """One GRU step: ``hw = h_prev @ whh.T`` (N, 3H) -> ``h`` (N, H) and ``act`` (N, 4H)."""
    H = h.shape[1]
    hb = hw + bhh
    r = _sigmoid_ref(xp_t[:, :H] + hb[:, :H])
    z = _sigmoid_ref(xp_t[:, H : 2 * H] + hb[:, H : 2 * H])
    hn = hb[:, 2 * H :]
    n = np.tanh(xp_t[:, 2 * H :] + r * hn)
    h[...] = (1 - z) * n + z * h_prev
    act[...] = np.concatenate([r, z, n, hn], axis=1)


def gru_backward_step_reference(g_t, dhm, dhd, act, h_prev, dxp_t, dhw_t) -> None:
    """Gradients of one GRU step. The gradient of ``h`` at this step is ``g_t + dhm + dhd``
    (output gradient, the recurrent product's part and the direct ``z * h`` part from the
    next step). Out: ``dxp_t`` (N, 3H, the input projection's), ``dhw_t`` (N, 3H, that of
    ``h_prev @ whh.T + bhh``), and ``dhd`` overwritten with the direct part for ``h_prev``."""
    H = g_t.shape[1]
    r, z, n, hn = (act[:, k * H : (k + 1) * H] for k in range(4))
    d = g_t + dhm + dhd
    dn = d * (1 - z) * (1 - n**2)
    dr = dn * hn * r * (1 - r)
    dz = d * (h_prev - n) * z * (1 - z)
    dxp_t[...] = np.concatenate([dr, dz, dn], axis=1)
    dhw_t[...] = np.concatenate([dr, dz, dn * r], axis=1)
    dhd[...] = d * z


def rnn_backward_step_reference(g_t, dh, h_t, tanh, dpre, dxp_t) -> None:
    """The Elman step's pre-activation gradient ``dpre = (g_t + dh) * act'(h_t)`` (N, H), with
    ``act' = 1 - h^2`` (tanh) or ``h > 0`` (relu), also copied into ``dxp_t`` (any layout)."""
    np.add(g_t, dh, out=dpre)
    if tanh:
        np.multiply(dpre, 1 - h_t * h_t, out=dpre)
    else:
        np.multiply(dpre, h_t > 0, out=dpre)
    np.copyto(dxp_t, dpre)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from numba import types
    from numba.extending import intrinsic, overload

    from ..jit import cached_jit

    _JIT = dict(cache=True, boundscheck=False, nogil=True, error_model="numpy")
    _FAST = {"contract"}

    @intrinsic
    def _bits_as_float(typingctx, bits):
        """Reinterpret an int32 (int64) as a float32 (float64)."""
        if bits == types.int32:
            sig = types.float32(bits)
        elif bits == types.int64:
            sig = types.float64(bits)
        else:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(signature.return_type))

        return sig, codegen

    def _exp(x):  # pragma: no cover - replaced by the overload inside compiled code
        raise NotImplementedError

    @overload(_exp)
    def _exp_impl(x):
        if x == types.float32:
            F, I = np.float32, np.int32
            lo, hi, bias, shift, degree = -87.0, 88.0, 127, 23, 7
            ln2_hi, ln2_lo = 0.693145751953125, 1.428606765330187e-06
        elif x == types.float64:
            F, I = np.float64, np.int64
            lo, hi, bias, shift, degree = -708.0, 709.0, 1023, 52, 13
            ln2_hi, ln2_lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
        else:
            return None
        coeffs = tuple(F(1 / math.factorial(k)) for k in range(degree, -1, -1))
        lo, hi, log2e, half = F(lo), F(hi), F(1.4426950408889634), F(0.5)
        ln2_hi, ln2_lo, bias, shift = F(ln2_hi), F(ln2_lo), I(bias), I(shift)

        def impl(x):  # pragma: no cover - compiled
            # clamp with comparisons that are false for NaN, so NaN passes through
            x = lo if x < lo else x
            x = hi if x > hi else x
            k = F(math.floor(x * log2e + half))
            r = (x - k * ln2_hi) - k * ln2_lo
            p = coeffs[0]
            for m in range(1, len(coeffs)):
                p = p * r + coeffs[m]
            return p * _bits_as_float(I(I(I(k) + bias) << shift))

        return impl

    @numba.njit
    def _sigmoid(x, one):  # pragma: no cover - compiled
        return one / (one + _exp(-x))

    @numba.njit
    def _tanh(x, one):  # pragma: no cover - compiled
        return one - (one + one) / (one + _exp(x + x))

    # How these loops are written, for LLVM to vectorise them (each measured, N=100, H=64):
    # * the hidden size is read as a quotient of a shape, not from ``h.shape``, and loops run
    #   over ``range(H)`` indexing ``a[n, k * H + j]`` (not ``range(k * H, (k + 1) * H)``):
    #   LLVM then proves the indices non-negative, drops numba's negative-index wraparound
    #   and vectorises (a sigmoid block ran 10x faster);
    # * per row, one loop per output block, each storing into one array while reading others:
    #   a loop that stores into ``act`` at several offsets, or stores into an array it reads at
    #   another offset, stays scalar (a single fused LSTM loop took 264 us, these 30 us).
    #   A row is at most a few KiB, so the later loops read it from L1.

    @cached_jit(fastmath=_FAST, **_JIT)
    def lstm_forward_step(xp_t, hw, c_prev, h, c, act, tc):  # pragma: no cover - compiled
        """One LSTM step (see :func:`lstm_forward_step_reference`)."""
        one = h.dtype.type(1)
        N, H = xp_t.shape[0], xp_t.shape[1] // 4
        for n in range(N):
            for j in range(2 * H):
                act[n, j] = _sigmoid(xp_t[n, j] + hw[n, j], one)
            for j in range(H):
                act[n, 2 * H + j] = _tanh(xp_t[n, 2 * H + j] + hw[n, 2 * H + j], one)
            for j in range(H):
                act[n, 3 * H + j] = _sigmoid(xp_t[n, 3 * H + j] + hw[n, 3 * H + j], one)
            for j in range(H):
                c[n, j] = act[n, H + j] * c_prev[n, j] + act[n, j] * act[n, 2 * H + j]
            for j in range(H):
                tc[n, j] = _tanh(c[n, j], one)
            for j in range(H):
                h[n, j] = act[n, 3 * H + j] * tc[n, j]

    @cached_jit(fastmath=_FAST, **_JIT)
    def lstm_backward_step(gh, gc, act, tc, c_prev, dh, dc, dgates):  # pragma: no cover
        """Gradients of one LSTM step (see :func:`lstm_backward_step_reference`)."""
        one = dc.dtype.type(1)
        N, H = dgates.shape[0], dgates.shape[1] // 4
        for n in range(N):
            for j in range(H):  # dc <- the gradient of c at this step
                t = tc[n, j]
                dc[n, j] = (
                    gc[n, j] + dc[n, j] + (gh[n, j] + dh[n, j]) * act[n, 3 * H + j] * (one - t * t)
                )
            for j in range(H):
                i = act[n, j]
                dgates[n, j] = dc[n, j] * act[n, 2 * H + j] * i * (one - i)
            for j in range(H):
                f = act[n, H + j]
                dgates[n, H + j] = dc[n, j] * c_prev[n, j] * f * (one - f)
            for j in range(H):
                g = act[n, 2 * H + j]
                dgates[n, 2 * H + j] = dc[n, j] * act[n, j] * (one - g * g)
            for j in range(H):
                o = act[n, 3 * H + j]
                dgates[n, 3 * H + j] = (gh[n, j] + dh[n, j]) * tc[n, j] * o * (one - o)
            for j in range(H):
                dc[n, j] = dc[n, j] * act[n, H + j]

    @cached_jit(fastmath=_FAST, **_JIT)
    def gru_forward_step(xp_t, hw, bhh, h_prev, h, act):  # pragma: no cover - compiled
        """One GRU step (see :func:`gru_forward_step_reference`)."""
        one = h.dtype.type(1)
        N, H = xp_t.shape[0], xp_t.shape[1] // 3
        for n in range(N):
            for j in range(2 * H):
                act[n, j] = _sigmoid(xp_t[n, j] + (hw[n, j] + bhh[j]), one)
            for j in range(H):
                act[n, 3 * H + j] = hw[n, 2 * H + j] + bhh[2 * H + j]
            for j in range(H):  # n, in h for now (act is read here)
                h[n, j] = _tanh(xp_t[n, 2 * H + j] + act[n, j] * act[n, 3 * H + j], one)
            for j in range(H):
                act[n, 2 * H + j] = h[n, j]
            for j in range(H):
                h[n, j] = h[n, j] + act[n, H + j] * (h_prev[n, j] - h[n, j])

    @cached_jit(fastmath=_FAST, **_JIT)
    def gru_backward_step(g_t, dhm, dhd, act, h_prev, dxp_t, dhw_t):  # pragma: no cover
        """Gradients of one GRU step (see :func:`gru_backward_step_reference`)."""
        one = dhd.dtype.type(1)
        N, H = dxp_t.shape[0], dxp_t.shape[1] // 3
        for n in range(N):
            for j in range(H):  # dhd <- the gradient of h at this step
                dhd[n, j] = g_t[n, j] + dhm[n, j] + dhd[n, j]
            for j in range(H):
                nn = act[n, 2 * H + j]
                dxp_t[n, 2 * H + j] = dhd[n, j] * (one - act[n, H + j]) * (one - nn * nn)
            for j in range(H):
                r = act[n, j]
                dxp_t[n, j] = dxp_t[n, 2 * H + j] * act[n, 3 * H + j] * r * (one - r)
            for j in range(H):
                z = act[n, H + j]
                dxp_t[n, H + j] = dhd[n, j] * (h_prev[n, j] - act[n, 2 * H + j]) * z * (one - z)
            for j in range(2 * H):
                dhw_t[n, j] = dxp_t[n, j]
            for j in range(H):
                dhw_t[n, 2 * H + j] = dxp_t[n, 2 * H + j] * act[n, j]
            for j in range(H):
                dhd[n, j] = dhd[n, j] * act[n, H + j]

    @cached_jit(**_JIT)
    def rnn_backward_step(g_t, dh, h_t, tanh, dpre, dxp_t):  # pragma: no cover - compiled
        # float32 arithmetic in NumPy's order (no fused multiply-add): the same bits as the
        # four ufunc calls it replaces
        one, zero = dpre.dtype.type(1), dpre.dtype.type(0)
        for n in range(dpre.shape[0]):
            if tanh:
                for j in range(dpre.shape[1]):
                    dpre[n, j] = (g_t[n, j] + dh[n, j]) * (one - h_t[n, j] * h_t[n, j])
            else:
                for j in range(dpre.shape[1]):
                    dpre[n, j] = (g_t[n, j] + dh[n, j]) * (one if h_t[n, j] > zero else zero)
            for j in range(dpre.shape[1]):
                dxp_t[n, j] = dpre[n, j]

else:  # pragma: no cover
    rnn_backward_step = rnn_backward_step_reference
    lstm_forward_step = lstm_forward_step_reference
    lstm_backward_step = lstm_backward_step_reference
    gru_forward_step = gru_forward_step_reference
    gru_backward_step = gru_backward_step_reference
