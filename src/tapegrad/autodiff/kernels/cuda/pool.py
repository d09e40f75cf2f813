"""Max pooling on CUDA (twin of ``kernels/cpu/pool.py``, and of ReLU + max pooling in
``kernels/cpu/fused.py``), over (M, H, W) planes (1-d pooling uses H = 1).

Forward: one thread per output entry finds its window's maximum and offset (the first at ties,
the first NaN if there is one). Backward: one thread per *input* entry gathers the output
gradients whose maximum it holds, in the output's row-major order: no atomics, and the same
additions in the same order as the CPU loop, so the same bits.
"""

from __future__ import annotations

from numba import cuda

from ...backend import xp_of
from ..common import pool_arg_dtype
from .launch import jit, launch


@jit
def _forward(x, kh, kw, sh, sw, dh, dw, relu, zero, out, arg):  # pragma: no cover - compiled
    M, OH, OW = out.shape
    for k in range(cuda.grid(1), M * OH * OW, cuda.gridsize(1)):
        j = k % OW
        i = (k // OW) % OH
        m = k // (OW * OH)
        h0 = i * sh
        w0 = j * sw
        best = x[m, h0, w0]
        bi = 0
        if best == best:
            for q in range(1, kh * kw):
                v = x[m, h0 + (q // kw) * dh, w0 + (q % kw) * dw]
                if v != v:  # the first NaN is the window's maximum
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
def _backward(g, out, arg, kh, kw, sh, sw, dh, dw, relu, zero, gx):  # pragma: no cover
    M, H, W = gx.shape
    OH, OW = g.shape[1], g.shape[2]
    for k in range(cuda.grid(1), M * H * W, cuda.gridsize(1)):
        b = k % W
        a = (k // W) % H
        m = k // (W * H)
        acc = zero
        for p in range(kh - 1, -1, -1):  # output rows in increasing order
            ra = a - p * dh
            if ra < 0 or ra % sh != 0 or ra // sh >= OH:
                continue
            i = ra // sh
            for q in range(kw - 1, -1, -1):  # output columns in increasing order
                rb = b - q * dw
                if rb < 0 or rb % sw != 0 or rb // sw >= OW:
                    continue
                j = rb // sw
                if arg[m, i, j] == p * kw + q and (not relu or out[m, i, j] > 0):
                    acc += g[m, i, j]
        gx[m, a, b] = acc


def _planes(a):
    a = xp_of(a).ascontiguousarray(a)
    return a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:])


def _geometry(kernel, stride, dilation):
    dilation = dilation or (1,) * len(kernel)
    if len(kernel) == 1:
        return (1,) + tuple(kernel), (1,) + tuple(stride), (1,) + tuple(dilation)
    return tuple(kernel), tuple(stride), tuple(dilation)


def window_max_forward(
    x, kernel: tuple, stride: tuple, out=None, arg=None, dilation=None, relu: bool = False
):
    """Max over windows of (N, C, L) or (N, C, H, W), entries ``dilation`` apart: ``(out,
    arg)`` as the CPU kernel gives them (``relu``: of ``relu(x)``, the fused ReLU + max
    pooling)."""
    xp = xp_of(x)
    (kh, kw), (sh, sw), (dh, dw) = _geometry(kernel, stride, dilation)
    d2 = (dh, dw)[-len(kernel) :]
    out_shape = tuple(
        (n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[2:], kernel, stride, d2)
    )
    if out is None:
        out = xp.empty(x.shape[:2] + out_shape, dtype=x.dtype)
    if arg is None:
        arg = xp.empty(out.shape, dtype=pool_arg_dtype(kernel))
    o = _planes(out)
    zero = x.dtype.type(0)
    launch(_forward, o.size, _planes(x), kh, kw, sh, sw, dh, dw, relu, zero, o, _planes(arg))
    return out, arg


def window_max_backward(
    g, arg, x_shape: tuple, kernel: tuple, stride: tuple, gx=None, dilation=None, out=None
):
    """The input gradient of :func:`window_max_forward`, of shape ``x_shape`` (into ``gx`` when
    given); with ``out`` (the fused forward's output) only where it is positive. Each input
    entry gathers the gradients of the windows whose maximum it holds, in the outputs'
    row-major order (the CPU loop's order of additions)."""
    if gx is None:
        gx = xp_of(g).empty(x_shape, dtype=g.dtype)
    (kh, kw), (sh, sw), (dh, dw) = _geometry(kernel, stride, dilation)
    planes = _planes(gx)
    relu = out is not None
    o = _planes(out) if relu else _planes(g)
    zero = g.dtype.type(0)
    launch(
        _backward, planes.size, _planes(g), o, _planes(arg), kh, kw, sh, sw, dh, dw, relu, zero,
        planes,
    )  # fmt: skip
    return gx


def max_pool_forward(
    x, kernel: tuple, stride: tuple, out=None, arg=None, dilation=None, scratch=None
):
    """Max pooling's ``(out, arg)`` (the CPU namespace's signature; ``scratch`` unused):
    :func:`window_max_forward`."""
    return window_max_forward(x, kernel, stride, out, arg, dilation)


def max_pool_backward(
    g, arg, x_shape: tuple, kernel: tuple, stride: tuple, gx=None, dilation=None, scratch=None
):
    """Max pooling's input gradient: :func:`window_max_backward` without the ReLU mask
    (``scratch`` unused)."""
    return window_max_backward(g, arg, x_shape, kernel, stride, gx, dilation)
