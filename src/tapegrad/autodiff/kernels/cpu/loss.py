"""The two fused losses as single compiled loops: softmax cross-entropy against class ids, and
sigmoid binary cross-entropy.

Written with NumPy, softmax cross-entropy over a (100, 10) batch is ten array calls (max,
subtract, exp, sum, divide, log, a gather, ...), each a few microseconds of call overhead
around a thousand floats of work: about 45 us a step. One loop over the rows does it in about
5 us. The eager primitives and the compiled plans call these same kernels, so both give the
same bits.

Forward kernels write what the backward needs (the softmax ``p``, the sigmoid ``sig``) and the
per-sample losses, and return the losses' sum, accumulated in float64 whatever the input
precision. Backward kernels take ``k``, the incoming gradient already divided by the count for
a mean: one value (``k.shape == (1,)``) or one per sample (reduction "none").

    softmax_ce:  loss[i] = logsumexp(x[i]) - x[i, t[i]],   dx[i] = (softmax(x[i]) - onehot(t[i])) k
    bce:         loss = max(x, 0) - x t + log1p(exp(-|x|)),  dx = (sigmoid(x) - t) k
"""

from __future__ import annotations

import numpy as np


def softmax_ce_forward_reference(x, target, p, loss) -> float:
    if len(target) and (target.min() < 0 or target.max() >= x.shape[1]):
        raise IndexError("softmax_ce_forward: a class id is out of range")
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    s = np.sum(e.astype(np.float64), axis=1, keepdims=True)
    p[...] = e / s
    loss[...] = np.log(s[:, 0]) - (x[np.arange(len(target)), target] - m[:, 0])
    return float(np.sum(loss, dtype=np.float64))


def softmax_ce_backward_reference(p, target, k, gx) -> None:
    gx[...] = p
    gx[np.arange(len(target)), target] -= 1
    gx *= k[:, None] if k.shape[0] > 1 else k[0]


def bce_forward_reference(x, t, sig, loss) -> float:
    e = np.exp(-np.abs(x))
    loss[...] = np.maximum(x, 0) - x * t + np.log1p(e)
    sig[...] = np.where(x >= 0, 1, e) / (1 + e)
    return float(np.sum(loss, dtype=np.float64))


def bce_backward_reference(sig, t, k, gx) -> None:
    gx[...] = (sig - t) * (k.reshape(sig.shape) if k.shape[0] > 1 else k[0])


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    _jit = cached_jit(boundscheck=False, nogil=True)

    @_jit
    def softmax_ce_forward(x, target, p, loss):  # pragma: no cover - compiled
        """``x`` (N, C) logits, ``target`` (N,) class ids; fills ``p`` (N, C), ``loss`` (N,)
        and returns the sum of ``loss``. An id outside [0, C) raises IndexError."""
        n, c = x.shape
        total = 0.0
        for i in range(n):
            if target[i] < 0 or target[i] >= c:
                raise IndexError("softmax_ce_forward: a class id is out of range")
            m = x[i, 0]
            for j in range(1, c):
                if x[i, j] > m:
                    m = x[i, j]
            s = 0.0
            for j in range(c):
                e = np.exp(x[i, j] - m)
                p[i, j] = e
                s += e
            inv = 1.0 / s
            for j in range(c):
                p[i, j] = p[i, j] * inv
            li = np.log(s) - (x[i, target[i]] - m)
            loss[i] = li
            total += loss[i]
        return total

    @_jit
    def softmax_ce_backward(p, target, k, gx):  # pragma: no cover - compiled
        """``gx = (p - onehot(target)) * k``; ``target`` was checked by the forward."""
        n, c = p.shape
        per_row = k.shape[0] > 1
        for i in range(n):
            ki = k[i] if per_row else k[0]
            for j in range(c):
                gx[i, j] = p[i, j] * ki
            gx[i, target[i]] = (p[i, target[i]] - 1) * ki

    @_jit
    def _bce_forward(x, t, sig, loss):  # pragma: no cover - compiled
        total = 0.0
        for i in range(x.shape[0]):
            xi = x[i]
            e = np.exp(-abs(xi))
            li = max(xi, 0) - xi * t[i] + np.log1p(e)
            loss[i] = li
            total += loss[i]
            sig[i] = (1 if xi >= 0 else e) / (1 + e)
        return total

    @_jit
    def _bce_backward(sig, t, k, gx):  # pragma: no cover - compiled
        per_elem = k.shape[0] > 1
        for i in range(sig.shape[0]):
            gx[i] = (sig[i] - t[i]) * (k[i] if per_elem else k[0])

    def bce_forward(x, t, sig, loss) -> float:
        """``x``, ``t`` logits and targets of one shape; fills ``sig`` and ``loss`` (that shape,
        C-contiguous) and returns the losses' sum."""
        assert sig.flags.c_contiguous and loss.flags.c_contiguous
        return _bce_forward(x.reshape(-1), t.reshape(-1), sig.reshape(-1), loss.reshape(-1))

    def bce_backward(sig, t, k, gx) -> None:
        assert gx.flags.c_contiguous
        _bce_backward(sig.reshape(-1), t.reshape(-1), k.reshape(-1), gx.reshape(-1))

else:  # pragma: no cover
    softmax_ce_forward = softmax_ce_forward_reference
    softmax_ce_backward = softmax_ce_backward_reference
    bce_forward = bce_forward_reference
    bce_backward = bce_backward_reference
