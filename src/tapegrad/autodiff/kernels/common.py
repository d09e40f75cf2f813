"""Helpers every device's kernels share: plain Python and NumPy, no kernel of any device."""

from __future__ import annotations

import numpy as np


def pool_arg_dtype(kernel: tuple):
    """The dtype of max pooling's offsets: uint8 when a window has at most 256 entries."""
    return np.uint8 if np.prod(kernel) <= 256 else np.intp


def adam_scalars(dtype, lr, beta1, beta2, eps, wd, decoupled, step) -> tuple:
    """The Adam kernels' arguments after the arrays: (l2, decoupled, wd, decay, c1, b2, c2, b2s,
    eps, size), the numbers cast to ``dtype`` (one set for the CPU and the CUDA kernel)."""
    t = np.dtype(dtype).type
    return (
        wd != 0 and not decoupled,
        wd != 0 and decoupled,
        t(wd),
        t(1.0 - lr * wd),
        t(1.0 - beta1),
        t(beta2),
        t(1.0 - beta2),
        t(np.sqrt(1.0 - beta2**step)),
        t(eps),
        t(lr / (1.0 - beta1**step)),
    )
