"""Batch normalisation in training mode over ``x`` viewed as (N, C, S): per channel C, the
statistics of its N * S values, forward and backward in two passes each.

Forward, per channel: ``mean``, ``var = mean((x - mean)^2)`` (two passes, no cancellation),
``rstd = 1 / sqrt(var + eps)`` and ``y = (x - mean) * rstd * w + b``; the channel's mean and
rstd are kept for the backward pass (and its biased variance written out, the running
statistics' input). Backward, with ``xhat = (x - mean) * rstd``:
``gb = sum(g)``, ``gw = sum(g * xhat)``, ``gx = rstd * w * (g - gb / n - xhat * gw / n)``.
Sums accumulate in float64, position by position over the N rows into a row of S, which is
then summed in a fixed order (vectorised maps, about twice as fast as a running sum), so the results
do not depend on anything but the input (channels are split over numba's threads from
``PARALLEL_MIN_SIZE`` elements, each channel computed whole by one thread); the composed form
takes about nine passes each way and allocates a temporary per step.
"""

from __future__ import annotations

import numpy as np

# from how many elements of x a kernel splits its channels over numba's threads
PARALLEL_MIN_SIZE = 1 << 16


def batch_stats_reference(x, mean, var, scratch=None) -> None:
    axes = (0, 2)
    m = x.mean(axis=axes, dtype=np.float64)
    c = x - m[None, :, None]
    mean[...] = m
    var[...] = (c * c).mean(axis=axes, dtype=np.float64)


def batch_norm_forward_reference(x, w, b, eps, y, mean, rstd, var, scratch=None, relu=False):
    m = x.mean(axis=(0, 2), dtype=np.float64)
    c = x - m[None, :, None]
    v = (c * c).mean(axis=(0, 2), dtype=np.float64)
    r = 1 / np.sqrt(v + eps)
    y[...] = c * (r * w)[None, :, None] + b[None, :, None]
    if relu:  # ReLU's kernel: NaN kept, -0 to +0
        y[...] = np.where((y > 0) | (y != y), y, 0)
    mean[...], rstd[...], var[...] = m, r, v


def batch_norm_backward_reference(g, x, w, mean, rstd, gx, gw, gb, scratch=None, mask=None):
    if mask is not None:  # ReLU's VJP first: g where the fused output is positive
        g = np.where(mask > 0, g, 0).astype(g.dtype)
    n = x.shape[0] * x.shape[2]
    xhat = (x - mean[None, :, None]) * rstd[None, :, None]
    sb = g.sum(axis=(0, 2), dtype=np.float64)
    sw = (g * xhat).sum(axis=(0, 2), dtype=np.float64)
    scale = (rstd * w)[None, :, None]
    gx[...] = scale * (g - (sb / n)[None, :, None] - xhat * (sw / n)[None, :, None])
    gw[...], gb[...] = sw, sb


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .loops import thread_loops, threaded
    from .norm import _row_sum
    from .special import relu_value

    _opts = dict(boundscheck=False, nogil=True, error_model="numpy")

    # The sums over a channel's N * S values accumulate position by position over the N rows
    # into a float64 row (a map over the row, which LLVM vectorises; a running scalar sum is a
    # chain of dependent additions, about one value a cycle), then the row is summed as
    # LayerNorm's rows are (``norm._row_sum``): a fixed order that depends on the shape alone.
    @cached_jit(inline="always", **_opts)
    def _moments(x, c, acc):  # pragma: no cover - compiled
        """(mean, biased variance) of channel ``c`` of ``x`` (N, C, S), in float64; ``acc`` a
        float64 row of S."""
        count = x.shape[0] * x.shape[2]
        acc[:] = 0.0
        for i in range(x.shape[0]):
            xr = x[i, c]
            for j in range(xr.size):
                acc[j] += xr[j]
        m = _row_sum(acc) / count
        acc[:] = 0.0
        for i in range(x.shape[0]):
            xr = x[i, c]
            for j in range(xr.size):
                d = xr[j] - m
                acc[j] += d * d
        return m, _row_sum(acc) / count

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _stats_channel(t, x, mean, var, accs, c):  # pragma: no cover - compiled
        mean[c], var[c] = _moments(x, c, accs[t, 0])

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_channel(t, x, w, b, eps, y, mean, rstd, var, accs, relu, c):  # pragma: no cover
        m, v = _moments(x, c, accs[t, 0])
        rs = 1.0 / np.sqrt(v + eps)
        scale = rs * w[c]
        shift = b[c] - m * scale  # y = (x - m) * scale + b, as x * scale + shift
        for i in range(x.shape[0]):
            xr, yr = x[i, c], y[i, c]
            for j in range(xr.size):
                yr[j] = xr[j] * scale + shift
            if relu:  # ReLU's kernel on the rounded row
                for j in range(yr.size):
                    yr[j] = relu_value(yr[j])
        mean[c], rstd[c], var[c] = m, rs, v

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _backward_channel(
        t, g, x, w, mean, rstd, gx, gw, gb, accs, mask, masked, c
    ):  # pragma: no cover - compiled
        """``masked``: g counts only where ``mask`` (the fused ReLU's output) is positive, as
        ReLU's VJP writes it (0 elsewhere)."""
        count = x.shape[0] * x.shape[2]
        m, rs = np.float64(mean[c]), np.float64(rstd[c])
        ab, aw = accs[t, 0], accs[t, 1]
        ab[:] = 0.0
        aw[:] = 0.0
        for i in range(x.shape[0]):
            gr, xr = g[i, c], x[i, c]
            mr = mask[i, c] if masked else gr
            for j in range(xr.size):
                g0 = np.float64(gr[j]) if not masked or mr[j] > 0 else 0.0
                ab[j] += g0
                aw[j] += g0 * ((xr[j] - m) * rs)
        sb, sw = _row_sum(ab), _row_sum(aw)
        # gx = rs * w * (g - sb / n - xhat * sw / n), as a * g + (b * x + d)
        scale = rs * w[c]
        a, b = scale, -scale * rs * (sw / count)
        d = -scale * (sb / count) - b * m
        for i in range(x.shape[0]):
            gr, xr, out = g[i, c], x[i, c], gx[i, c]
            mr = mask[i, c] if masked else gr
            for j in range(xr.size):
                g0 = np.float64(gr[j]) if not masked or mr[j] > 0 else 0.0
                out[j] = a * g0 + (b * xr[j] + d)
        gw[c], gb[c] = sw, sb

    # each channel whole on one thread (loops.py): the bits do not depend on the split
    _stats_serial, _stats_parallel = thread_loops(_stats_channel, **_opts)
    _forward_serial, _forward_parallel = thread_loops(_forward_channel, **_opts)
    _backward_serial, _backward_parallel = thread_loops(_backward_channel, **_opts)

    def _threaded(x) -> bool:
        return threaded(x.shape[1], x.size, PARALLEL_MIN_SIZE)

    def _plan(x, scratch) -> tuple:
        """(parallel?, each thread's two float64 rows of S to accumulate in, kept in
        ``scratch`` when given)."""
        parallel = _threaded(x)
        shape = (numba.get_num_threads() if parallel else 1, 2, x.shape[2])
        accs = np.empty(shape) if scratch is None else scratch("bn_rows", shape, np.float64)
        return parallel, accs

    def batch_stats(x, mean, var, scratch=None) -> None:
        """Each channel's mean and biased variance (the forward's statistics)."""
        parallel, accs = _plan(x, scratch)
        (_stats_parallel if parallel else _stats_serial)(x.shape[1], x, mean, var, accs)

    def batch_norm_forward(x, w, b, eps, y, mean, rstd, var, scratch=None, relu=False) -> None:
        """``y``, and each channel's mean, rstd and biased variance (``var``: what
        :func:`batch_stats` gives, for a plan that fuses the two); ``relu``: y <- max(y, 0)
        as ReLU's kernel writes it (a plan's fused BatchNorm + ReLU)."""
        parallel, accs = _plan(x, scratch)
        run = _forward_parallel if parallel else _forward_serial
        run(x.shape[1], x, w, b, float(eps), y, mean, rstd, var, accs, bool(relu))

    def batch_norm_backward(g, x, w, mean, rstd, gx, gw, gb, scratch=None, mask=None) -> None:
        """gx (N, C, S), gw, gb (C,) from g, x and the forward's mean, rstd (C,); ``mask``
        (N, C, S): the fused ReLU's output, g counting only where it is positive."""
        parallel, accs = _plan(x, scratch)
        run = _backward_parallel if parallel else _backward_serial
        masked = mask is not None
        run(x.shape[1], g, x, w, mean, rstd, gx, gw, gb, accs, g if mask is None else mask, masked)

else:  # pragma: no cover
    batch_stats = batch_stats_reference
    batch_norm_forward = batch_norm_forward_reference
    batch_norm_backward = batch_norm_backward_reference
