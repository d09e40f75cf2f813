"""The fused losses on CUDA (twins of ``kernels/cpu/loss.py``).

Softmax cross-entropy: one thread per row (max, exp, sum in float64, the softmax ``p`` and the
row's loss); its backward and both BCE kernels: one thread per element. The forwards return the
losses' total as a 0-d float64 device array (summed by the array module), not a Python float:
reading a number back would synchronise the GPU on every step. A class id out of range cannot
raise inside a kernel; it gives a NaN loss (the public ``softmax_cross_entropy`` checks the
range before calling).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ...backend import xp_of
from .launch import jit, launch


@jit
def _ce_forward(x, target, p, loss):  # pragma: no cover - compiled
    n, c = x.shape
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        t = target[i]
        if t < 0 or t >= c:
            loss[i] = math.nan
            continue
        m = x[i, 0]
        for j in range(1, c):
            if x[i, j] > m:
                m = x[i, j]
        s = 0.0
        for j in range(c):
            e = math.exp(x[i, j] - m)
            p[i, j] = e
            s += e
        inv = 1.0 / s
        for j in range(c):
            p[i, j] = p[i, j] * inv
        loss[i] = math.log(s) - (x[i, t] - m)


@jit
def _ce_backward(p, target, k, gx):  # pragma: no cover - compiled
    n, c = p.shape
    per_row = k.shape[0] > 1
    for q in range(cuda.grid(1), n * c, cuda.gridsize(1)):
        i = q // c
        j = q % c
        ki = k[i] if per_row else k[0]
        gx[i, j] = (p[i, j] - 1) * ki if j == target[i] else p[i, j] * ki


@jit
def _bce_forward(x, t, sig, loss):  # pragma: no cover - compiled
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        xi = x[i]
        e = math.exp(-abs(xi))
        loss[i] = max(xi, 0) - xi * t[i] + math.log1p(e)
        sig[i] = (1 if xi >= 0 else e) / (1 + e)


@jit
def _bce_backward(sig, t, k, gx):  # pragma: no cover - compiled
    per_elem = k.shape[0] > 1
    for i in range(cuda.grid(1), sig.shape[0], cuda.gridsize(1)):
        gx[i] = (sig[i] - t[i]) * (k[i] if per_elem else k[0])


def _total(loss):
    return xp_of(loss).sum(loss, dtype=np.float64)


def softmax_ce_forward(x, target, p, loss):
    """``x`` (N, C) logits, ``target`` (N,) class ids; fills ``p`` (N, C) and ``loss`` (N,);
    returns the losses' total (a 0-d float64 device array)."""
    launch(_ce_forward, x.shape[0], x, target, p, loss)
    return _total(loss)


def softmax_ce_backward(p, target, k, gx) -> None:
    """``gx = (p - onehot(target)) * k``."""
    launch(_ce_backward, p.size, p, target, k, gx)


def bce_forward(x, t, sig, loss):
    """Logits and targets of one shape; fills ``sig`` and ``loss`` (C-contiguous) and returns
    the losses' total (a 0-d float64 device array)."""
    launch(_bce_forward, x.size, x.reshape(-1), t.reshape(-1), sig.reshape(-1), loss.reshape(-1))
    return _total(loss)


def bce_backward(sig, t, k, gx) -> None:
    launch(_bce_backward, sig.size, sig.reshape(-1), t.reshape(-1), k.reshape(-1), gx.reshape(-1))
