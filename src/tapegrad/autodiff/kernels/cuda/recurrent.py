"""One LSTM/GRU step's gate math on CUDA (twins of ``kernels/cpu/recurrent.py``; the same layouts):
one thread per (sample, hidden unit), CUDA's own ``exp`` and ``tanh``."""

from __future__ import annotations

import math

from numba import cuda

from .launch import jit, launch


@cuda.jit(device=True)
def _sigmoid(x):  # pragma: no cover - compiled
    return 1 / (1 + math.exp(-x))


@jit
def _lstm_forward(xp_t, hw, c_prev, h, c, act, tc):  # pragma: no cover - compiled
    N, H = h.shape
    for k in range(cuda.grid(1), N * H, cuda.gridsize(1)):
        n = k // H
        j = k % H
        i = _sigmoid(xp_t[n, j] + hw[n, j])
        f = _sigmoid(xp_t[n, H + j] + hw[n, H + j])
        g = math.tanh(xp_t[n, 2 * H + j] + hw[n, 2 * H + j])
        o = _sigmoid(xp_t[n, 3 * H + j] + hw[n, 3 * H + j])
        act[n, j] = i
        act[n, H + j] = f
        act[n, 2 * H + j] = g
        act[n, 3 * H + j] = o
        cv = f * c_prev[n, j] + i * g
        c[n, j] = cv
        t = math.tanh(c[n, j])
        tc[n, j] = t
        h[n, j] = o * tc[n, j]


@jit
def _lstm_backward(gh, gc, act, tc, c_prev, dh, dc, dgates):  # pragma: no cover - compiled
    N, H = gh.shape
    for k in range(cuda.grid(1), N * H, cuda.gridsize(1)):
        n = k // H
        j = k % H
        i = act[n, j]
        f = act[n, H + j]
        g = act[n, 2 * H + j]
        o = act[n, 3 * H + j]
        t = tc[n, j]
        dht = gh[n, j] + dh[n, j]
        dct = gc[n, j] + dc[n, j] + dht * o * (1 - t * t)
        dgates[n, j] = dct * g * i * (1 - i)
        dgates[n, H + j] = dct * c_prev[n, j] * f * (1 - f)
        dgates[n, 2 * H + j] = dct * i * (1 - g * g)
        dgates[n, 3 * H + j] = dht * t * o * (1 - o)
        dc[n, j] = dct * f


@jit
def _gru_forward(xp_t, hw, bhh, h_prev, h, act):  # pragma: no cover - compiled
    N, H = h.shape
    for k in range(cuda.grid(1), N * H, cuda.gridsize(1)):
        n = k // H
        j = k % H
        r = _sigmoid(xp_t[n, j] + (hw[n, j] + bhh[j]))
        z = _sigmoid(xp_t[n, H + j] + (hw[n, H + j] + bhh[H + j]))
        hn = hw[n, 2 * H + j] + bhh[2 * H + j]
        act[n, j] = r
        act[n, H + j] = z
        act[n, 3 * H + j] = hn
        nn = math.tanh(xp_t[n, 2 * H + j] + act[n, j] * act[n, 3 * H + j])
        act[n, 2 * H + j] = nn
        nv = act[n, 2 * H + j]
        h[n, j] = nv + act[n, H + j] * (h_prev[n, j] - nv)


@jit
def _gru_backward(g_t, dhm, dhd, act, h_prev, dxp_t, dhw_t):  # pragma: no cover - compiled
    N, H = g_t.shape
    for k in range(cuda.grid(1), N * H, cuda.gridsize(1)):
        n = k // H
        j = k % H
        r = act[n, j]
        z = act[n, H + j]
        nn = act[n, 2 * H + j]
        hn = act[n, 3 * H + j]
        d = g_t[n, j] + dhm[n, j] + dhd[n, j]
        dn = d * (1 - z) * (1 - nn * nn)
        dr = dn * hn * r * (1 - r)
        dz = d * (h_prev[n, j] - nn) * z * (1 - z)
        dxp_t[n, j] = dr
        dxp_t[n, H + j] = dz
        dxp_t[n, 2 * H + j] = dn
        dhw_t[n, j] = dr
        dhw_t[n, H + j] = dz
        dhw_t[n, 2 * H + j] = dn * r
        dhd[n, j] = d * z


@jit
def _rnn_backward(g_t, dh, h_t, tanh, dpre, dxp_t):  # pragma: no cover - compiled
    N, H = dpre.shape
    for k in range(cuda.grid(1), N * H, cuda.gridsize(1)):
        n = k // H
        j = k % H
        s = g_t[n, j] + dh[n, j]
        if tanh:
            v = s * (1 - h_t[n, j] * h_t[n, j])
        else:
            v = s * (1 if h_t[n, j] > 0 else 0)
        dpre[n, j] = v
        dxp_t[n, j] = dpre[n, j]


def lstm_forward_step(xp_t, hw, c_prev, h, c, act, tc) -> None:
    """One LSTM step (see ``kernels.cpu.recurrent.lstm_forward_step_reference``)."""
    launch(_lstm_forward, h.size, xp_t, hw, c_prev, h, c, act, tc)


def lstm_backward_step(gh, gc, act, tc, c_prev, dh, dc, dgates) -> None:
    """Gradients of one LSTM step (``dc`` becomes the gradient of ``c_prev``)."""
    launch(_lstm_backward, gh.size, gh, gc, act, tc, c_prev, dh, dc, dgates)


def gru_forward_step(xp_t, hw, bhh, h_prev, h, act) -> None:
    """One GRU step (see ``kernels.cpu.recurrent.gru_forward_step_reference``)."""
    launch(_gru_forward, h.size, xp_t, hw, bhh, h_prev, h, act)


def gru_backward_step(g_t, dhm, dhd, act, h_prev, dxp_t, dhw_t) -> None:
    """Gradients of one GRU step (``dhd`` becomes the direct part for ``h_prev``)."""
    launch(_gru_backward, g_t.size, g_t, dhm, dhd, act, h_prev, dxp_t, dhw_t)


def rnn_backward_step(g_t, dh, h_t, tanh, dpre, dxp_t) -> None:
    """The Elman step's pre-activation gradient, also copied into ``dxp_t``."""
    launch(_rnn_backward, dpre.size, g_t, dh, h_t, bool(tanh), dpre, dxp_t)
