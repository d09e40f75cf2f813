"""Fused kernels: ReLU followed by max pooling, and a Linear layer's bias followed by ReLU, in
one pass each way.

Forward: each window's maximum of ``relu(x)`` and where it sits. Because ReLU keeps the order
of positive values, the maximum of ``relu(x)`` is ``max(x)`` when that is positive (at the first
position holding it), and 0 otherwise, where no gradient flows (ReLU's derivative is 0 at every
entry of such a window). Backward: add each output gradient at its window's position when the
output is positive. These are exactly the values the separate ReLU and max-pool rules give;
the fused loop reads the input once instead of three times.

Both run the max-pooling loops of ``kernels/cpu/pool.py`` (the pairs for 2x2 windows at
stride 2, else the loops compiled per window geometry) with their ReLU flag set. Windows are
(kh, kw) with strides (sh, sw) over (M, H, W) planes; 1-d pooling uses H = 1.

Bias + ReLU: the epilogue of a Linear layer's GEMM (the product itself stays with BLAS, which
no hand loop matches). Forward ``out = max(x + b, 0)`` in one pass instead of two; backward the
ReLU mask applied to ``g`` and the bias gradient (the masked rows summed in order) in one pass
instead of three. The arithmetic is the separate rules' (one rounding for the sum, NaN kept by
the maximum, the mask read from ``out > 0``, which holds exactly where ``x + b > 0``), so the
results are the same bits.
"""

from __future__ import annotations

import numpy as np

from .pool import max_pool_backward_reference, max_pool_forward_reference


def relu_max_pool_forward_reference(x, kernel, stride, out, arg) -> None:
    max_pool_forward_reference(np.maximum(x, 0), kernel, stride, out, arg)


def relu_max_pool_backward_reference(g, out, arg, kernel, stride, gx) -> None:
    gx.fill(0)
    max_pool_backward_reference(np.where(out > 0, g, 0), arg, kernel, stride, gx)


def bias_relu_forward_reference(x, b, out) -> None:
    np.maximum(x + b, 0, out=out)


def bias_relu_backward_reference(g, out, gx, gb) -> None:
    np.copyto(gx, np.where(out > 0, g, 0))
    np.sum(gx, axis=0, out=gb)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .pool import pool_planes_backward, pool_planes_forward

    def relu_max_pool_planes_forward(x, kh, kw, sh, sw, out, arg, scratch=None) -> None:
        """``relu(x)``'s window maxima over (M, H, W) planes and their offsets (see
        :func:`~.pool.pool_planes_forward`)."""
        pool_planes_forward(x, out, arg, (kh, kw), (sh, sw), (1, 1), True, scratch)

    def relu_max_pool_planes_backward(g, out, arg, kh, kw, sh, sw, gx, scratch=None) -> None:
        """``gx`` whole: each ``g`` at its window's offset where ``out > 0``, zeros elsewhere."""
        pool_planes_backward(g, arg, out, gx, (kh, kw), (sh, sw), (1, 1), True, scratch)

    @cached_jit(boundscheck=False, nogil=True)
    def bias_relu_forward(x, b, out):  # pragma: no cover - compiled
        """``out = max(x + b, 0)`` for ``x`` (N, F) and ``b`` (F,), NaN propagating."""
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                v = x[i, j] + b[j]
                out[i, j] = v if (v >= 0 or v != v) else 0

    @cached_jit(boundscheck=False, nogil=True)
    def bias_relu_backward(g, out, gx, gb):  # pragma: no cover - compiled
        """``gx = where(out > 0, g, 0)`` and ``gb`` its rows summed in order (``gx``'s first row,
        then each next one added), as the separate ReLU and bias rules compute them (a select:
        masked entries are 0 even where ``g`` is not finite, and never -0)."""
        zero = gx.dtype.type(0)
        for i in range(g.shape[0]):
            for j in range(g.shape[1]):
                v = g[i, j] if out[i, j] > 0 else zero
                gx[i, j] = v
                gb[j] = v if i == 0 else gb[j] + v
        if g.shape[0] == 0:
            gb[:] = 0

else:  # pragma: no cover

    def relu_max_pool_planes_forward(x, kh, kw, sh, sw, out, arg, scratch=None):
        relu_max_pool_forward_reference(x, (kh, kw), (sh, sw), out, arg)

    def relu_max_pool_planes_backward(g, out, arg, kh, kw, sh, sw, gx, scratch=None):
        relu_max_pool_backward_reference(g, out, arg, (kh, kw), (sh, sw), gx)

    bias_relu_forward = bias_relu_forward_reference
    bias_relu_backward = bias_relu_backward_reference


def _planes(a: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) as (N*C, H, W) planes (H = 1 for 1-d): a view of a contiguous array."""
    return a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:])


def _2d(kernel: tuple, stride: tuple) -> tuple:
    return ((1,) + tuple(kernel), (1,) + tuple(stride)) if len(kernel) == 1 else (kernel, stride)


def relu_max_pool_forward(x, kernel: tuple, stride: tuple, out, arg, scratch=None) -> None:
    """Each window's maximum of ``relu(x)`` and its offset, for x (N, C, L) or (N, C, H, W) and
    windows without padding or dilation, into ``out`` and ``arg`` (contiguous);
    ``scratch(key, shape, dtype)`` keeps the temporaries (a plan's workspace)."""
    (kh, kw), (sh, sw) = _2d(kernel, stride)
    x = np.ascontiguousarray(x)
    relu_max_pool_planes_forward(_planes(x), kh, kw, sh, sw, _planes(out), _planes(arg), scratch)


def relu_max_pool_backward(
    g, y, arg, x_shape: tuple, kernel: tuple, stride: tuple, gx, scratch=None
) -> None:
    """The input gradient of :func:`relu_max_pool_forward` (``y`` its output, ``g``
    contiguous), into ``gx`` of shape ``x_shape``."""
    (kh, kw), (sh, sw) = _2d(kernel, stride)
    planes = (_planes(g), _planes(y), _planes(arg), kh, kw, sh, sw, _planes(gx))
    relu_max_pool_planes_backward(*planes, scratch)
