"""Additions NumPy can only do through a buffered iterator, as allocation-free compiled loops.

``add_channel_bias``: ``out[p, q, r] = x[p, q, r] + b[q]``.

This is the bias of a Linear layer (P = batch, Q = features, R = 1) and of a convolution
(P = batch, Q = channels, R = spatial size). NumPy computes the same sum with a broadcasting
ufunc, but that goes through a buffered iterator which allocates up to 32 KiB per call; the
compiled loop allocates nothing, which is what compiled plans need. Results are identical
(one float addition per element either way).

``add_into``: ``dst += src`` for 3-d arrays where ``dst`` is a strided window of a larger
buffer (the input gradient of a convolution, one kernel tap at a time): NumPy buffers both
operands of such an in-place add (64 KiB per call).
"""

from __future__ import annotations

import numpy as np


def add_channel_bias_reference(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.add(x, b[None, :, None], out=out)


def add_into_reference(dst: np.ndarray, src: np.ndarray) -> None:
    np.add(dst, src, out=dst)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:

    @numba.njit(cache=True, boundscheck=False, nogil=True)
    def _add_channel_bias(x, b, out):  # pragma: no cover - compiled
        if x.shape[2] == 1:  # a Linear bias: keep the feature loop innermost (vectorised)
            for p in range(x.shape[0]):
                for q in range(x.shape[1]):
                    out[p, q, 0] = x[p, q, 0] + b[q]
            return
        for p in range(x.shape[0]):
            for q in range(x.shape[1]):
                bq = b[q]
                for r in range(x.shape[2]):
                    out[p, q, r] = x[p, q, r] + bq

    def add_channel_bias(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """``out = x + b[None, :, None]`` for 3-d ``x``/``out`` (P, Q, R) and ``b`` (Q,)."""
        _add_channel_bias(x, b, out)

    @numba.njit(cache=True, boundscheck=False, nogil=True)
    def add_into(dst, src):  # pragma: no cover - compiled
        """``dst += src`` for 3-d arrays of one shape (any strides)."""
        for p in range(dst.shape[0]):
            for q in range(dst.shape[1]):
                for r in range(dst.shape[2]):
                    dst[p, q, r] += src[p, q, r]

else:  # pragma: no cover
    add_channel_bias = add_channel_bias_reference

    def add_into(dst, src):
        np.add(dst, src, out=dst)
