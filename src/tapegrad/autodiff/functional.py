"""JAX-style function transformations over the tape: ``grad``, ``value_and_grad``, ``vjp``.

They take functions of ndarrays or Tensors (numbers too) and return ndarrays. Inputs keep their
dtype (pass float64 arrays for float64 derivatives); Python numbers become float32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from .errors import GraphError
from .graph import backward, enable_grad
from .tensor import Tensor


def _leaf(x) -> Tensor:
    t = Tensor(x.data if isinstance(x, Tensor) else x)
    if t.data.dtype.kind != "f":
        raise TypeError(f"can only differentiate with respect to float inputs, got {t.data.dtype}")
    return t.requires_grad_()


def _argnums(argnums, n) -> tuple[tuple[int, ...], bool]:
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise ValueError(f"argnums {a} is out of range for a function called with {n} args")
    return tuple(a % n for a in nums), single


def _prepare(args, nums):
    args = list(args)
    leaves = []
    for a in nums:
        args[a] = _leaf(args[a])
        leaves.append(args[a])
    return args, leaves


def _scalar_out(out, fname) -> Tensor:
    if not isinstance(out, Tensor):
        raise TypeError(f"{fname}: the function must return a tapegrad Tensor, got {type(out)}")
    if out.data.size != 1:
        raise GraphError(f"{fname}: the function must return a scalar, got shape {out.shape}")
    return out


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``f`` -> a function returning ``(f(*args) as ndarray, gradient(s) of f)``."""

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        nums, single = _argnums(argnums, len(args))
        args, leaves = _prepare(args, nums)
        with enable_grad():
            out = _scalar_out(f(*args, **kwargs), "value_and_grad")
        grads = []
        if out.requires_grad:
            backward(out)
        for t in leaves:
            grads.append(t.grad if t.grad is not None else np.zeros_like(t.data))
        return out.data, (grads[0] if single else tuple(grads))

    return wrapped


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``f`` (scalar-valued) -> a function returning its gradient(s) as ndarrays."""
    vg = value_and_grad(f, argnums)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return wrapped


def vjp(f: Callable, *args) -> tuple[np.ndarray, Callable]:
    """Evaluate ``f(*args)``; return its value and a function mapping a cotangent of the output
    to the cotangents of every argument (a tuple of ndarrays). The function can be called more
    than once."""
    args, leaves = _prepare(args, range(len(args)))
    with enable_grad():
        out = f(*args)
    if not isinstance(out, Tensor):
        raise TypeError(f"vjp: the function must return a tapegrad Tensor, got {type(out)}")

    def pullback(cotangent) -> tuple[np.ndarray, ...]:
        for t in leaves:
            t.grad = None
        if out.requires_grad:
            ct = np.asarray(
                cotangent.data if isinstance(cotangent, Tensor) else cotangent, dtype=out.dtype
            )
            backward(out, ct, retain_graph=True)
        return tuple(t.grad if t.grad is not None else np.zeros_like(t.data) for t in leaves)

    return out.data, pullback
