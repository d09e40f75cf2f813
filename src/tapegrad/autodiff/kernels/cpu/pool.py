"""Max pooling over (M, H, W) planes (M = batch * channels; 1-d pooling uses H = 1).

The forward returns, per window, the maximum and its offset ``a * KW + b`` inside the window
(the first one at ties, NaN counting as the maximum); the backward adds each output gradient
at that offset. A window's entries are ``dilation`` apart (1: adjacent). The compiled loops are
specialised per window geometry (:func:`window_kernels`); ReLU then max pooling
(``kernels/cpu/fused.py``) runs through the same loops.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from ..common import pool_arg_dtype


def _slices(offs, stride, out_shape, dilation) -> tuple:
    return (slice(None),) + tuple(
        slice(o * d, o * d + s * (n - 1) + 1, s)
        for o, s, n, d in zip(offs, stride, out_shape, dilation)
    )


def max_pool_forward_reference(x, kernel, stride, out, arg, dilation=(1, 1)) -> None:
    """NumPy reference for :func:`max_pool_forward`: one masked update per kernel offset."""
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    out[...] = x[_slices(offsets[0], stride, out.shape[1:], dilation)]
    arg[...] = 0
    for j, offs in enumerate(offsets[1:], 1):
        v = x[_slices(offs, stride, out.shape[1:], dilation)]
        m = (v > out) | (np.isnan(v) & ~np.isnan(out))
        out[m] = v[m]
        arg[m] = j


def max_pool_backward_reference(g, arg, kernel, stride, gx, dilation=(1, 1)) -> None:
    """NumPy reference for :func:`max_pool_backward`: one masked add per kernel offset."""
    for j, offs in enumerate(itertools.product(*(range(k) for k in kernel))):
        view = gx[_slices(offs, stride, g.shape[1:], dilation)]
        np.add(view, g, out=view, where=arg == j)


try:
    import numba

    from ..jit import cached_jit
except ImportError:  # pragma: no cover
    numba = None


@functools.cache
def window_kernels(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int):
    """``(forward, backward)`` compiled for one window geometry: (kh, kw) windows, strides
    (sh, sw), entries (dh, dw) apart, over contiguous (M, H, W) planes.

    The geometry is compiled in as constants (each geometry is compiled once, then loaded from
    numba's disk cache): the window loop unrolls and constant strides let the output loop use
    vector loads, where runtime strides made every window a scalar loop. On (600, 26, 26) float32
    planes with 2x2 windows, stride 2, ReLU fused: 0.50 ms -> 0.08 ms forward, 0.21 -> 0.09 ms
    backward (their rows in ``python benchmarks/profile_step.py seed-cnn``).

    ``forward(x, out, arg, relu)`` writes each window's maximum and its offset ``a * kw + b``
    (the first at ties; NaN is the maximum, its first occurrence). With ``relu`` the maximum
    of ``relu(x)``: ``max(x)`` where positive (or NaN), else 0 with offset 0. The selects are
    branch-free (where a maximum sits is unpredictable); a plane holding a NaN, checked first,
    takes a second pass that finds each window's first NaN.

    ``backward(g, arg, out, gx, relu)`` writes ``gx`` whole: zeros, plus each ``g`` at its
    window's offset, only where ``out > 0`` when ``relu`` (``out`` is read only then).
    """
    k = kh * kw

    @cached_jit(boundscheck=False, nogil=True)
    def forward(x, out, arg, relu):  # pragma: no cover - compiled
        oh, ow = out.shape[1], out.shape[2]
        for m in range(x.shape[0]):
            p = x[m]
            flat = p.reshape(p.size)
            nan = False
            for e in range(flat.size):
                nan |= flat[e] != flat[e]
            o, a = out[m], arg[m]
            for i in range(oh):
                for j in range(ow):
                    h0, w0 = i * sh, j * sw
                    best = p[h0, w0]
                    bi = 0
                    for q in range(1, k):
                        v = p[h0 + (q // kw) * dh, w0 + (q % kw) * dw]
                        gt = v > best
                        best = v if gt else best
                        bi = q if gt else bi
                    keep = best > 0 or not relu
                    o[i, j] = best if keep else best - best  # +0.0 in x's type, as relu gives
                    a[i, j] = bi if keep else 0
            if nan:  # rare: each window's first NaN is its maximum
                for i in range(oh):
                    for j in range(ow):
                        for q in range(k):
                            v = p[i * sh + (q // kw) * dh, j * sw + (q % kw) * dw]
                            if v != v:
                                o[i, j] = v
                                a[i, j] = q
                                break

    @cached_jit(boundscheck=False, nogil=True)
    def backward(g, arg, out, gx, relu):  # pragma: no cover - compiled
        oh, ow = g.shape[1], g.shape[2]
        for m in range(g.shape[0]):
            p = gx[m]
            flat = p.reshape(p.size)
            for e in range(flat.size):
                flat[e] = 0
            for i in range(oh):
                for j in range(ow):
                    if relu and not out[m, i, j] > 0:
                        continue
                    q = arg[m, i, j]
                    p[i * sh + (q // kw) * dh, j * sw + (q % kw) * dw] += g[m, i, j]

    return forward, backward


def _planes(a: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) as contiguous (N*C, H, W) planes (H = 1 for 1-d)."""
    a = np.ascontiguousarray(a)
    return a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:])


def _two_d(kernel: tuple, stride: tuple, dilation: tuple) -> tuple:
    if len(kernel) == 1:
        return (1,) + kernel, (1,) + stride, (1,) + dilation
    return kernel, stride, dilation


def max_pool_forward(
    x: np.ndarray, kernel: tuple, stride: tuple, out=None, arg=None, dilation: tuple | None = None
):
    """Max over windows of (N, C, L) or (N, C, H, W): returns ``(out, arg)``.

    ``arg`` (uint8 when windows have at most 256 entries) holds each maximum's offset in its
    window, row-major, the first one at ties. ``out`` and ``arg`` may be given (contiguous
    buffers of the right shape and dtype) to be filled instead of allocated. A window's
    entries are ``dilation`` apart.
    """
    dilation = dilation or (1,) * len(kernel)
    out_shape = tuple(
        (n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[2:], kernel, stride, dilation)
    )
    if out is None:
        out = np.empty(x.shape[:2] + out_shape, dtype=x.dtype)
    if arg is None:
        arg = np.empty(out.shape, dtype=pool_arg_dtype(kernel))
    k2, s2, d2 = _two_d(kernel, stride, dilation)
    if numba is None:  # pragma: no cover
        max_pool_forward_reference(_planes(x), k2, s2, _planes(out), _planes(arg), d2)
        return out, arg
    forward, _ = window_kernels(*k2, *s2, *d2)
    forward(_planes(x), _planes(out), _planes(arg), False)
    return out, arg


def max_pool_backward(
    g: np.ndarray,
    arg: np.ndarray,
    x_shape: tuple,
    kernel: tuple,
    stride: tuple,
    gx=None,
    dilation: tuple | None = None,
):
    """Gradient of :func:`max_pool_forward` w.r.t. its input, of shape ``x_shape`` (written into
    ``gx`` when given, a contiguous buffer)."""
    dilation = dilation or (1,) * len(kernel)
    if gx is None:
        gx = np.empty(x_shape, dtype=g.dtype)
    k2, s2, d2 = _two_d(kernel, stride, dilation)
    if numba is None:  # pragma: no cover
        gx.fill(0)
        max_pool_backward_reference(_planes(g), _planes(arg), k2, s2, _planes(gx), d2)
        return gx
    _, backward = window_kernels(*k2, *s2, *d2)
    planes = _planes(g)
    backward(planes, _planes(arg), planes, _planes(gx), False)
    return gx
