"""Helpers every device's kernels share: plain Python and NumPy, no kernel of any device."""

from __future__ import annotations

import functools

import numpy as np


def pool_arg_dtype(kernel: tuple):
    """The dtype of max pooling's offsets: uint8 when a window has at most 256 entries."""
    return np.uint8 if np.prod(kernel) <= 256 else np.intp


def _last_set(make):
    """``make(dtype, *numbers)`` (an update's scalars cast to ``dtype``) with its last result
    kept: every parameter of a step asks for the same set, and making one costs several
    microseconds of NumPy scalars, as much as a small parameter's update. A number that cannot
    be a key (a 0-d array as the learning rate) makes the set afresh."""
    kept = functools.lru_cache(maxsize=1, typed=True)(make)

    @functools.wraps(make)
    def scalars(dtype, *numbers, **named):
        try:
            return kept(np.dtype(dtype), *numbers, **named)
        except TypeError:
            return make(dtype, *numbers, **named)

    return scalars


@_last_set
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


@_last_set
def sgd_scalars(dtype, lr, momentum, dampening, wd) -> tuple:
    """The SGD kernels' numbers (wd, momentum, 1 - dampening, lr), each cast to ``dtype``: the
    operands NumPy's float32 arithmetic takes from Python numbers (one set for every device)."""
    t = np.dtype(dtype).type
    return t(wd), t(momentum), t(1.0 - dampening), t(lr)
