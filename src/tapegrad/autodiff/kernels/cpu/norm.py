"""Softmax's backward pass and layer normalisation over the last axis of an (N, D) matrix.

``softmax_backward``: ``gx = y * (g - sum(g * y))`` per row, one read of ``g`` and ``y`` for
the sum and one more for the result (NumPy's composition takes four passes and three
temporaries).

Layer normalisation over the last axis of an (N, D) matrix, forward and backward, in one pass
over each row (the composed form takes nine passes forward and about fifteen backward).

Forward, per row: ``mean``, ``var = mean((x - mean)^2)`` (two passes over the row, as the
composed form: no cancellation), ``rstd = 1 / sqrt(var + eps)`` and
``y = (x - mean) * rstd * w + b``; the row's mean and rstd are kept for the backward pass.
Backward, with ``xhat = (x - mean) * rstd`` and ``h = g * w``:
``gx = rstd * (h - mean(h) - xhat * mean(h * xhat))``, ``gw = sum over rows of g * xhat``,
``gb = sum over rows of g``.

Row sums accumulate in float64 in four interleaved partial sums (a fixed order, so the
results do not depend on the thread count; the independent sums let the compiler use SIMD
without ``fastmath``). Rows are split over numba's threads when there are enough of them; the
weight and bias gradients are summed over rows in order in a second, serial loop.
"""

from __future__ import annotations

import numpy as np


def layer_norm_forward_reference(x, w, b, eps, y, mean, rstd) -> None:
    m = x.mean(axis=1, dtype=np.float64)
    c = x - m[:, None]
    r = 1 / np.sqrt((c * c).mean(axis=1, dtype=np.float64) + eps)
    y[...] = c * r[:, None] * w + b
    mean[...], rstd[...] = m, r


def layer_norm_backward_reference(g, x, w, mean, rstd, gx, gw, gb) -> None:
    xhat = (x - mean[:, None]) * rstd[:, None]
    h = g * w
    d = x.shape[1]
    s1 = h.sum(axis=1, dtype=np.float64)[:, None] / d
    s2 = (h * xhat).sum(axis=1, dtype=np.float64)[:, None] / d
    gx[...] = rstd[:, None] * (h - s1 - xhat * s2)
    gw[...] = (g * xhat).sum(axis=0)
    gb[...] = g.sum(axis=0)


def softmax_backward_reference(g, y, out) -> None:
    out[...] = y * (g - (g * y).sum(axis=1, dtype=np.float64, keepdims=True))


_PARALLEL_ROWS = 256  # fewer rows than this run on one thread

try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    _opts = dict(cache=True, boundscheck=False, nogil=True, error_model="numpy")

    @cached_jit(inline="always", **_opts)
    def _row_sum(a):  # pragma: no cover - compiled
        """sum_j a[j] in float64, in four interleaved partial sums."""
        p0 = p1 = p2 = p3 = 0.0
        n4 = a.size - a.size % 4
        for j in range(0, n4, 4):
            p0 += a[j]
            p1 += a[j + 1]
            p2 += a[j + 2]
            p3 += a[j + 3]
        for j in range(n4, a.size):
            p0 += a[j]
        return (p0 + p1) + (p2 + p3)

    @cached_jit(inline="always", **_opts)
    def _sq_dev_sum(a, m):  # pragma: no cover - compiled
        """sum_j (a[j] - m)^2 in float64, in four interleaved partial sums."""
        p0 = p1 = p2 = p3 = 0.0
        n4 = a.size - a.size % 4
        for j in range(0, n4, 4):
            d0, d1, d2, d3 = a[j] - m, a[j + 1] - m, a[j + 2] - m, a[j + 3] - m
            p0 += d0 * d0
            p1 += d1 * d1
            p2 += d2 * d2
            p3 += d3 * d3
        for j in range(n4, a.size):
            d = a[j] - m
            p0 += d * d
        return (p0 + p1) + (p2 + p3)

    @cached_jit(inline="always", **_opts)
    def _forward_row(x, w, b, eps, y, mean, rstd, r):  # pragma: no cover - compiled
        xr, yr = x[r], y[r]
        d = xr.size
        m = _row_sum(xr) / d
        rs = 1.0 / np.sqrt(_sq_dev_sum(xr, m) / d + eps)
        for j in range(d):
            yr[j] = (xr[j] - m) * rs * w[j] + b[j]
        mean[r], rstd[r] = m, rs

    @cached_jit(inline="always", **_opts)
    def _backward_row(g, x, w, mean, rstd, gx, r):  # pragma: no cover - compiled
        gr, xr, out = g[r], x[r], gx[r]
        d = xr.size
        m, rs = np.float64(mean[r]), np.float64(rstd[r])
        a0 = a1 = a2 = a3 = 0.0  # sum of h, four partial sums
        c0 = c1 = c2 = c3 = 0.0  # sum of h * xhat
        n4 = d - d % 4
        for j in range(0, n4, 4):
            h0 = np.float64(gr[j]) * w[j]
            h1 = np.float64(gr[j + 1]) * w[j + 1]
            h2 = np.float64(gr[j + 2]) * w[j + 2]
            h3 = np.float64(gr[j + 3]) * w[j + 3]
            a0 += h0
            a1 += h1
            a2 += h2
            a3 += h3
            c0 += h0 * ((xr[j] - m) * rs)
            c1 += h1 * ((xr[j + 1] - m) * rs)
            c2 += h2 * ((xr[j + 2] - m) * rs)
            c3 += h3 * ((xr[j + 3] - m) * rs)
        for j in range(n4, d):
            h = np.float64(gr[j]) * w[j]
            a0 += h
            c0 += h * ((xr[j] - m) * rs)
        s1 = (a0 + a1) + (a2 + a3)
        s2 = (c0 + c1) + (c2 + c3)
        s1 /= d
        s2 /= d
        for j in range(d):
            out[j] = rs * (np.float64(gr[j]) * w[j] - s1 - (xr[j] - m) * rs * s2)

    @cached_jit(**_opts)
    def _forward_serial(x, w, b, eps, y, mean, rstd):  # pragma: no cover - compiled
        for r in range(x.shape[0]):
            _forward_row(x, w, b, eps, y, mean, rstd, r)

    @cached_jit(parallel=True, **_opts)
    def _forward_parallel(x, w, b, eps, y, mean, rstd):  # pragma: no cover - compiled
        for r in numba.prange(x.shape[0]):
            _forward_row(x, w, b, eps, y, mean, rstd, r)

    @cached_jit(**_opts)
    def _backward_serial(g, x, w, mean, rstd, gx):  # pragma: no cover - compiled
        for r in range(x.shape[0]):
            _backward_row(g, x, w, mean, rstd, gx, r)

    @cached_jit(parallel=True, **_opts)
    def _backward_parallel(g, x, w, mean, rstd, gx):  # pragma: no cover - compiled
        for r in numba.prange(x.shape[0]):
            _backward_row(g, x, w, mean, rstd, gx, r)

    @cached_jit(**_opts)
    def _param_grads(g, x, mean, rstd, gw, gb):  # pragma: no cover - compiled
        """gw = sum_r g * xhat, gb = sum_r g, rows added in order (float64 accumulators)."""
        d = x.shape[1]
        aw = np.zeros(d, np.float64)
        ab = np.zeros(d, np.float64)
        for r in range(x.shape[0]):
            m, rs = np.float64(mean[r]), np.float64(rstd[r])
            for j in range(d):
                gv = np.float64(g[r, j])
                aw[j] += gv * ((x[r, j] - m) * rs)
                ab[j] += gv
        for j in range(d):
            gw[j], gb[j] = aw[j], ab[j]

    @cached_jit(inline="always", **_opts)
    def _softmax_backward_row(g, y, out, r):  # pragma: no cover - compiled
        gr, yr, o = g[r], y[r], out[r]
        p0 = p1 = p2 = p3 = 0.0
        n4 = yr.size - yr.size % 4
        for j in range(0, n4, 4):
            p0 += np.float64(gr[j]) * yr[j]
            p1 += np.float64(gr[j + 1]) * yr[j + 1]
            p2 += np.float64(gr[j + 2]) * yr[j + 2]
            p3 += np.float64(gr[j + 3]) * yr[j + 3]
        for j in range(n4, yr.size):
            p0 += np.float64(gr[j]) * yr[j]
        s = (p0 + p1) + (p2 + p3)
        for j in range(yr.size):
            o[j] = yr[j] * (gr[j] - s)

    @cached_jit(**_opts)
    def _softmax_backward_serial(g, y, out):  # pragma: no cover - compiled
        for r in range(y.shape[0]):
            _softmax_backward_row(g, y, out, r)

    @cached_jit(parallel=True, **_opts)
    def _softmax_backward_parallel(g, y, out):  # pragma: no cover - compiled
        for r in numba.prange(y.shape[0]):
            _softmax_backward_row(g, y, out, r)

    def _threaded(rows: int) -> bool:
        # the thread count asked first: the same calls at any size (tests count them)
        return numba.get_num_threads() > 1 and rows >= _PARALLEL_ROWS

    def layer_norm_forward(x, w, b, eps, y, mean, rstd) -> None:
        """x, y (N, D) C-contiguous; w, b (D,); mean, rstd (N,): one dtype."""
        run = _forward_parallel if _threaded(x.shape[0]) else _forward_serial
        run(x, w, b, float(eps), y, mean, rstd)

    def layer_norm_backward(g, x, w, mean, rstd, gx, gw, gb) -> None:
        """gx (N, D), gw, gb (D,) from g, x (N, D) and the forward's mean, rstd (N,)."""
        run = _backward_parallel if _threaded(x.shape[0]) else _backward_serial
        run(g, x, w, mean, rstd, gx)
        _param_grads(g, x, mean, rstd, gw, gb)

    def softmax_backward(g, y, out) -> None:
        """``out = y * (g - sum(g * y, axis=1))`` for C-contiguous (N, D) arrays of one dtype."""
        run = _softmax_backward_parallel if _threaded(y.shape[0]) else _softmax_backward_serial
        run(g, y, out)

else:  # pragma: no cover
    softmax_backward = softmax_backward_reference
    layer_norm_forward = layer_norm_forward_reference
    layer_norm_backward = layer_norm_backward_reference
