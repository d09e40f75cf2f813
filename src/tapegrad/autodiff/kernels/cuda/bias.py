"""Bias additions on CUDA (twins of ``kernels/cpu/bias.py``): one thread per element."""

from __future__ import annotations

from numba import cuda

from .launch import jit, launch


@jit
def _channel_bias(x, b, out):  # pragma: no cover - compiled
    P, Q, R = x.shape
    for k in range(cuda.grid(1), P * Q * R, cuda.gridsize(1)):
        r = k % R
        q = (k // R) % Q
        p = k // (R * Q)
        out[p, q, r] = x[p, q, r] + b[q]


def add_channel_bias(x, b, out) -> None:
    """``out = x + b[None, :, None]`` for 3-d ``x``/``out`` (P, Q, R) and ``b`` (Q,)."""
    launch(_channel_bias, x.size, x, b, out)


@jit
def _add_into(dst, src):  # pragma: no cover - compiled
    P, Q, R = dst.shape
    for k in range(cuda.grid(1), P * Q * R, cuda.gridsize(1)):
        r = k % R
        q = (k // R) % Q
        p = k // (R * Q)
        dst[p, q, r] += src[p, q, r]


def add_into(dst, src) -> None:
    """``dst += src`` for 3-d arrays of one shape (any strides)."""
    launch(_add_into, dst.size, dst, src)
