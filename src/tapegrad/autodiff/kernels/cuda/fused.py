"""The fused kernels on CUDA (twins of ``kernels/cpu/fused.py``). ReLU + max pooling is the pooling
kernels' ``relu=True`` form (``pool.py``, taking the (N, C, ...) arrays and the whole window
geometry); a Linear layer's bias + ReLU is here."""

from __future__ import annotations

from numba import cuda

from .launch import jit, launch
from .pool import window_max_backward, window_max_forward


def relu_max_pool_forward(x, kernel: tuple, stride: tuple, out, arg, scratch=None) -> None:
    """Each window's maximum of ``relu(x)`` and its offset (x (N, C, ...), as max pooling);
    ``scratch`` is unused (the loops here need no temporaries)."""
    window_max_forward(x, kernel, stride, out, arg, relu=True)


def relu_max_pool_backward(
    g, y, arg, x_shape: tuple, kernel: tuple, stride: tuple, gx, scratch=None
) -> None:
    """The input gradient of :func:`relu_max_pool_forward` (``y`` its output), into ``gx``
    (``scratch`` unused)."""
    window_max_backward(g, arg, x_shape, kernel, stride, gx, out=y)


@jit
def _bias_relu_forward(x, b, out):  # pragma: no cover - compiled
    n, f = x.shape
    for k in range(cuda.grid(1), n * f, cuda.gridsize(1)):
        i = k // f
        j = k % f
        v = x[i, j] + b[j]
        out[i, j] = v if (v >= 0 or v != v) else 0


@jit
def _bias_relu_backward(g, out, zero, gx, gb):  # pragma: no cover - compiled
    n, f = g.shape
    for j in range(cuda.grid(1), f, cuda.gridsize(1)):
        acc = zero
        for i in range(n):
            v = g[i, j] if out[i, j] > 0 else zero
            gx[i, j] = v
            acc = v if i == 0 else acc + v
        gb[j] = acc


def bias_relu_forward(x, b, out) -> None:
    """``out = max(x + b, 0)`` for ``x`` (N, F) and ``b`` (F,), NaN propagating."""
    launch(_bias_relu_forward, x.size, x, b, out)


def bias_relu_backward(g, out, gx, gb) -> None:
    """``gx = where(out > 0, g, 0)`` and ``gb`` its rows summed in order (one thread per
    column)."""
    launch(_bias_relu_backward, g.shape[1], g, out, g.dtype.type(0), gx, gb)
