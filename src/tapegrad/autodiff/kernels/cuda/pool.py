"""Max pooling on CUDA (twin of ``kernels/pool.py``, and of ReLU + max pooling in
``kernels/fused.py``), over (M, H, W) planes (1-d pooling uses H = 1).

Forward: one thread per output entry finds its window's maximum and offset (the first at ties,
the first NaN if there is one). Backward: one thread per *input* entry gathers the output
gradients whose maximum it holds, in the output's row-major order: no atomics, and the same
additions in the same order as the CPU loop, so the same bits.
"""

from __future__ import annotations

from numba import cuda

from ...backend import xp_of
from ..pool import pool_arg_dtype
from .launch import jit, launch


@jit
def _forward(x, kh, kw, sh, sw, relu, zero, out, arg):  # pragma: no cover - compiled
    M, OH, OW = out.shape
    for k in range(cuda.grid(1), M * OH * OW, cuda.gridsize(1)):
        j = k % OW
        i = (k // OW) % OH
        m = k // (OW * OH)
        h0 = i * sh
        w0 = j * sw
        best = x[m, h0, w0]
        bi = 0
        nan = best != best
        if not nan:
            for q in range(1, kh * kw):
                v = x[m, h0 + q // kw, w0 + q % kw]
                if v != v:
                    best = v
                    bi = q
                    break
                if v > best:
                    best = v
                    bi = q
        if relu and best <= zero:  # relu(x) is 0 over the window: no gradient flows
            best = zero
            bi = 0
        out[m, i, j] = best
        arg[m, i, j] = bi


@jit
def _backward(g, out, arg, kh, kw, sh, sw, relu, zero, gx):  # pragma: no cover - compiled
    M, H, W = gx.shape
    OH, OW = g.shape[1], g.shape[2]
    for k in range(cuda.grid(1), M * H * W, cuda.gridsize(1)):
        b = k % W
        a = (k // W) % H
        m = k // (W * H)
        acc = zero
        i0 = max(0, (a - kh + sh) // sh)
        j0 = max(0, (b - kw + sw) // sw)
        i1 = min(OH - 1, a // sh)
        j1 = min(OW - 1, b // sw)
        for i in range(i0, i1 + 1):
            for j in range(j0, j1 + 1):
                if arg[m, i, j] == (a - i * sh) * kw + (b - j * sw) and (
                    not relu or out[m, i, j] > 0
                ):
                    acc += g[m, i, j]
        gx[m, a, b] = acc


def _planes(a):
    a = xp_of(a).ascontiguousarray(a)
    return a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:])


def _geometry(kernel, stride):
    return ((1,) + kernel, (1,) + stride) if len(kernel) == 1 else (kernel, stride)


def max_pool_forward(x, kernel: tuple, stride: tuple, out=None, arg=None, relu: bool = False):
    """Max over windows of (N, C, L) or (N, C, H, W): ``(out, arg)`` as the CPU kernel gives
    them (``relu``: of ``relu(x)``, the fused ReLU + max pooling)."""
    xp = xp_of(x)
    out_shape = tuple((n - k) // s + 1 for n, k, s in zip(x.shape[2:], kernel, stride))
    if out is None:
        out = xp.empty(x.shape[:2] + out_shape, dtype=x.dtype)
    if arg is None:
        arg = xp.empty(out.shape, dtype=pool_arg_dtype(kernel))
    (kh, kw), (sh, sw) = _geometry(kernel, stride)
    o = _planes(out)
    launch(_forward, o.size, _planes(x), kh, kw, sh, sw, relu, x.dtype.type(0), o, _planes(arg))
    return out, arg


def max_pool_backward(g, arg, x_shape: tuple, kernel: tuple, stride: tuple, gx=None, out=None):
    """The input gradient of :func:`max_pool_forward`, of shape ``x_shape`` (into ``gx`` when
    given); with ``out`` (the fused forward's output) only where it is positive."""
    if gx is None:
        gx = xp_of(g).empty(x_shape, dtype=g.dtype)
    (kh, kw), (sh, sw) = _geometry(kernel, stride)
    planes = _planes(gx)
    relu = out is not None
    o = _planes(out) if relu else _planes(g)
    launch(
        _backward,
        planes.size,
        _planes(g),
        o,
        _planes(arg),
        kh,
        kw,
        sh,
        sw,
        relu,
        g.dtype.type(0),
        planes,
    )
    return gx
