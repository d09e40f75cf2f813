"""Softmax (forward, with an optional mask, and backward) and layer normalisation over the last
axis of an (N, D) matrix.

``softmax_forward`` (float32): per row, the max over the entries kept, ``e = exp(x - max)``
(0 where masked), their sum, and ``y = e / sum``: three passes over the row instead of NumPy's
five over the array, a masked score's ``where`` folded in, and rows over numba's threads.
``exp`` is evaluated in float64 (``_exp_nonpositive``: ``2^k exp(r)``, ``|r| <= ln 2 / 2``, a
degree-10 Taylor polynomial, relative error below 3e-13) and rounded to float32, so each ``e``
is within half a unit in the last place; the row's sum accumulates in float64 and ``y`` is the
product by its reciprocal, rounded once more. A row whose entries are all masked gives NaN
(the max is -inf), as the composed ``softmax(where(keep, x, -inf))`` does.

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
results do not depend on the thread count). LLVM keeps them scalar (``vaddsd``, about one value
a cycle; BatchNorm's sums, which run over a channel's rows, became vectorised maps instead, see
``batch_norm.py``: a row of 64-128 values is too short for that). Rows are split over numba's
threads when there are enough of them; the weight and bias gradients are summed over rows in
order in a second, serial loop.
"""

from __future__ import annotations

import numpy as np

from ...backend import xp_of


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


def softmax_forward_reference(x, keep, out) -> None:
    """``out = softmax(where(keep, x, -inf))`` over rows; ``keep`` (P, D) repeats every P rows,
    or None (array operations, evaluated in float64)."""
    xp = xp_of(x)
    z = x.astype(np.float64)
    if keep is not None:
        z = xp.where(keep[xp.arange(x.shape[0]) % keep.shape[0]], z, -np.inf)
    e = xp.exp(z - z.max(axis=1, keepdims=True))
    out[...] = e / e.sum(axis=1, keepdims=True)


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

    _LOG2E, _LN2_HI, _LN2_LO = 1.4426950408889634, 0.6931471803691238, 1.9082149292705877e-10
    _ROUND = 6755399441055744.0  # 1.5 * 2^52: adding it rounds to an integer, kept in the low bits
    _NEG_INF32 = np.float32(-np.inf)
    _contract = dict(_opts, fastmath={"contract"})  # fused multiply-adds; no reassociation

    @cached_jit(inline="always", **_contract)
    def _exp_nonpositive(s):  # pragma: no cover - compiled
        """exp(s) for float64 s <= 0 (below -110, ~1.7e-48: 0 once rounded to float32):
        2^k exp(r) with k = round(s / ln 2), r = s - k ln 2 (ln 2 in two parts), exp(r) a Taylor
        polynomial of degree 10 by Estrin's scheme, 2^k built from its exponent bits."""
        s = max(s, -110.0)
        t = s * _LOG2E + _ROUND
        k = t - _ROUND
        r = (s - k * _LN2_HI) - k * _LN2_LO
        r2 = r * r
        r4 = r2 * r2
        q0 = (1.0 + r) + r2 * (0.5 + r * (1.0 / 6.0))
        q1 = (1.0 / 24.0 + r * (1.0 / 120.0)) + r2 * (1.0 / 720.0 + r * (1.0 / 5040.0))
        q2 = (1.0 / 40320.0 + r * (1.0 / 362880.0)) + r2 * (1.0 / 3628800.0)
        two_k = np.int64((np.float64(t).view(np.int64) + np.int64(1023)) << np.int64(52))
        return ((q0 + r4 * q1) + (r4 * r4) * q2) * two_k.view(np.float64)

    @cached_jit(inline="always", **_contract)
    def _softmax_row(x, keep, period, out, r):  # pragma: no cover - compiled
        xr, o, kr = x[r], out[r], keep[r % period]
        d = xr.size
        d4 = d - d % 4
        m0 = m1 = m2 = m3 = _NEG_INF32  # four partial maxima: independent compare chains
        nan = False  # a kept NaN (which no comparison sees)
        for j in range(0, d4, 4):
            v0 = xr[j] if kr[j] else _NEG_INF32
            v1 = xr[j + 1] if kr[j + 1] else _NEG_INF32
            v2 = xr[j + 2] if kr[j + 2] else _NEG_INF32
            v3 = xr[j + 3] if kr[j + 3] else _NEG_INF32
            nan |= (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3)
            m0 = v0 if v0 > m0 else m0
            m1 = v1 if v1 > m1 else m1
            m2 = v2 if v2 > m2 else m2
            m3 = v3 if v3 > m3 else m3
        for j in range(d4, d):
            v0 = xr[j] if kr[j] else _NEG_INF32
            nan |= v0 != v0
            m0 = v0 if v0 > m0 else m0
        m = max(max(m0, m1), max(m2, m3))
        if nan or m == _NEG_INF32 or m == -_NEG_INF32:
            # as softmax(where(keep, x, -inf)) composed: a NaN, a max of +inf (inf - inf) or
            # of -inf (every entry masked or -inf) makes the whole row NaN
            for j in range(d):
                o[j] = np.nan
            return
        mm = np.float64(m)
        for j in range(d):
            e = np.float32(_exp_nonpositive(np.float64(xr[j]) - mm))
            o[j] = e if kr[j] else np.float32(0.0)
        inv = 1.0 / _row_sum(o)  # the row's e, float64, in a fixed order
        for j in range(d):
            o[j] = o[j] * inv

    @cached_jit(**_contract)
    def _softmax_serial(x, keep, period, out):  # pragma: no cover - compiled
        for r in range(x.shape[0]):
            _softmax_row(x, keep, period, out, r)

    @cached_jit(parallel=True, **_contract)
    def _softmax_parallel(x, keep, period, out):  # pragma: no cover - compiled
        for r in numba.prange(x.shape[0]):
            _softmax_row(x, keep, period, out, r)

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

    _ALL_KEPT: dict = {}  # row length -> a (1, D) mask of True

    def softmax_forward(x, keep, out) -> None:
        """``out = softmax(where(keep, x, -inf))`` per row of C-contiguous float32 (N, D) arrays;
        ``keep`` a C-contiguous boolean (P, D) applied to every P-th row, or None."""
        if keep is None:
            d = x.shape[1]
            keep = _ALL_KEPT.get(d)
            if keep is None:
                keep = _ALL_KEPT[d] = np.ones((1, d), np.bool_)
        run = _softmax_parallel if _threaded(x.shape[0]) else _softmax_serial
        run(x, keep, keep.shape[0], out)

    def softmax_backward(g, y, out) -> None:
        """``out = y * (g - sum(g * y, axis=1))`` for C-contiguous (N, D) arrays of one dtype."""
        run = _softmax_backward_parallel if _threaded(y.shape[0]) else _softmax_backward_serial
        run(g, y, out)

else:  # pragma: no cover
    softmax_forward = softmax_forward_reference
    softmax_backward = softmax_backward_reference
    layer_norm_forward = layer_norm_forward_reference
    layer_norm_backward = layer_norm_backward_reference
