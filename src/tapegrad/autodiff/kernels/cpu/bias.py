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

``add_taps``: ``out[n, o, l] = sum_k z[k * O + o, n * L + l + k]``, the last step of a 1-d
convolution over a channels-last input computed as one GEMM for the whole batch (``z`` holds
every kernel tap's product at every input position; see ``primitives/conv.py``). Taps are added
in order k = 0, 1, ..., each a contiguous run of ``z``.
"""

from __future__ import annotations

import numpy as np


def add_channel_bias_reference(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.add(x, b[None, :, None], out=out)


def add_into_reference(dst: np.ndarray, src: np.ndarray) -> None:
    np.add(dst, src, out=dst)


def add_taps_reference(z: np.ndarray, out: np.ndarray) -> None:
    n, o, length = out.shape
    taps = z.reshape(z.shape[0] // o, o, n, -1)
    np.copyto(out, taps[0, :, :, :length].transpose(1, 0, 2))
    for k in range(1, taps.shape[0]):
        np.add(out, taps[k, :, :, k : k + length].transpose(1, 0, 2), out=out)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    @cached_jit(boundscheck=False, nogil=True)
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

    @cached_jit(boundscheck=False, nogil=True)
    def add_into(dst, src):  # pragma: no cover - compiled
        """``dst += src`` for 3-d arrays of one shape (any strides)."""
        for p in range(dst.shape[0]):
            for q in range(dst.shape[1]):
                for r in range(dst.shape[2]):
                    dst[p, q, r] += src[p, q, r]

    @cached_jit(boundscheck=False, nogil=True)
    def _add_taps(z, out):  # pragma: no cover - compiled
        n_, o_, length = out.shape
        width = z.shape[1] // n_
        for n in range(n_):
            for o in range(o_):
                dst = out[n, o]
                src = z[o, n * width : n * width + length]
                for r in range(length):
                    dst[r] = src[r]
                for k in range(1, z.shape[0] // o_):
                    src = z[k * o_ + o, n * width + k : n * width + k + length]
                    for r in range(length):
                        dst[r] += src[r]

    def add_taps(z: np.ndarray, out: np.ndarray) -> None:
        """``out[n, o, l] = sum_k z[k * O + o, n * L + l + k]`` for ``z`` (K * O, N * L) and
        ``out`` (N, O, L') with L' <= L - K + 1."""
        _add_taps(z, out)

else:  # pragma: no cover
    add_channel_bias = add_channel_bias_reference

    def add_into(dst, src):
        np.add(dst, src, out=dst)

    add_taps = add_taps_reference
