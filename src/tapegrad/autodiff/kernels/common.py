"""Helpers every device's kernels share: plain Python and NumPy, no kernel of any device."""

from __future__ import annotations

import functools

import numpy as np


def pool_arg_dtype(kernel: tuple):
    """The dtype of max pooling's offsets: uint8 when a window has at most 256 entries."""
    return np.uint8 if np.prod(kernel) <= 256 else np.intp


def adam_scalars(dtype, lr, beta1, beta2, eps, wd, decoupled, step) -> tuple:
    """The Adam kernels' arguments after the arrays: (l2, decoupled, wd, decay, c1, b2, c2, b2s,
    eps, size), the numbers cast to ``dtype`` (one set for the CPU and the CUDA kernel).

    Every parameter of a step asks for the same set, so the last one is kept (making a set
    costs ~8 us of NumPy scalars, as much as a small parameter's update)."""
    try:
        return _adam_scalars_kept(np.dtype(dtype), lr, beta1, beta2, eps, wd, decoupled, step)
    except TypeError:  # a number that cannot be a key (a 0-d array as the learning rate)
        return _adam_scalars(dtype, lr, beta1, beta2, eps, wd, decoupled, step)


def _adam_scalars(dtype, lr, beta1, beta2, eps, wd, decoupled, step) -> tuple:
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


_adam_scalars_kept = functools.lru_cache(maxsize=1, typed=True)(_adam_scalars)


def sgd_scalars(dtype, lr, momentum, dampening, wd) -> tuple:
    """The SGD kernels' numbers (wd, momentum, 1 - dampening, lr), each cast to ``dtype``: the
    operands NumPy's float32 arithmetic takes from Python numbers (one set for every device;
    the last set is kept, as Adam's)."""
    try:
        return _sgd_scalars_kept(np.dtype(dtype), lr, momentum, dampening, wd)
    except TypeError:  # a number that cannot be a key
        return _sgd_scalars(dtype, lr, momentum, dampening, wd)


def _sgd_scalars(dtype, lr, momentum, dampening, wd) -> tuple:
    t = np.dtype(dtype).type
    return t(wd), t(momentum), t(1.0 - dampening), t(lr)


_sgd_scalars_kept = functools.lru_cache(maxsize=1, typed=True)(_sgd_scalars)
