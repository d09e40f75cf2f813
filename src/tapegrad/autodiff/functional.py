"""JAX-style function transformations over the tape: ``grad``, ``value_and_grad``, ``vjp``,
and the higher-order ones built on them: ``hvp``, ``hessian``, ``jacobian``, ``jvp``.

They take functions of ndarrays or Tensors (numbers too) and return ndarrays. Inputs keep their
dtype (pass float64 arrays for float64 derivatives); Python numbers become float32.

They nest: called with Tensors that require grad (inside another transformation, as in
``tg.grad(tg.grad(f))``), a transformation differentiates with ``create_graph=True`` and returns
Tensors, so the outer one can differentiate through it. Forward mode (``jvp``) transposes the
linearised VJP: the VJP is linear in its cotangent ``u``, so differentiating ``<vjp(u), v>`` with
respect to ``u`` gives ``J v``; it costs two reverse passes and needs the operations on the way to
be twice differentiable (the fused network primitives say so when they are not).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from .errors import GraphError
from .graph import enable_grad, gradients
from .tensor import Tensor


def _nested(x) -> bool:
    """A Tensor that requires grad: we are inside another transformation."""
    return isinstance(x, Tensor) and x.requires_grad


def _leaf(x) -> Tensor:
    if _nested(x):
        return x  # keep the outer transformation's graph
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
    nested = any(_nested(a) for a in args)
    leaves = []
    for a in nums:
        args[a] = _leaf(args[a])
        leaves.append(args[a])
    return args, leaves, nested


def _scalar_out(out, fname) -> Tensor:
    if not isinstance(out, Tensor):
        raise TypeError(f"{fname}: the function must return a tapegrad Tensor, got {type(out)}")
    if out.data.size != 1:
        raise GraphError(f"{fname}: the function must return a scalar, got shape {out.shape}")
    return out


def _grads(out: Tensor, leaves, nested: bool, cotangent=None) -> list:
    """d out / d leaves: Tensors with a graph when nested, else ndarrays (zeros where unused)."""
    if not out.requires_grad:
        zeros = [np.zeros_like(t.data) for t in leaves]
        return [Tensor._make(z, None, False) for z in zeros] if nested else zeros
    gs = gradients(out, leaves, cotangent, create_graph=nested, allow_unused=True)
    return list(gs) if nested else [g.data for g in gs]


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``f`` -> a function returning ``(f(*args) as ndarray, gradient(s) of f)``."""

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        nums, single = _argnums(argnums, len(args))
        args, leaves, nested = _prepare(args, nums)
        with enable_grad():
            out = _scalar_out(f(*args, **kwargs), "value_and_grad")
            grads = _grads(out, leaves, nested)
        value = out if nested else out.data
        return value, (grads[0] if single else tuple(grads))

    return wrapped


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``f`` (scalar-valued) -> a function returning its gradient(s) as ndarrays; nests
    (``grad(grad(f))`` is the second derivative)."""
    vg = value_and_grad(f, argnums)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return wrapped


def vjp(f: Callable, *args) -> tuple[np.ndarray, Callable]:
    """Evaluate ``f(*args)``; return its value and a function mapping a cotangent of the output
    to the cotangents of every argument (a tuple of ndarrays). The function can be called more
    than once."""
    args, leaves, nested = _prepare(args, range(len(args)))
    with enable_grad():
        out = f(*args)
    if not isinstance(out, Tensor):
        raise TypeError(f"vjp: the function must return a tapegrad Tensor, got {type(out)}")

    def pullback(cotangent) -> tuple:
        ct = (
            cotangent
            if _nested(cotangent)
            else np.asarray(
                cotangent.data if isinstance(cotangent, Tensor) else cotangent, dtype=out.dtype
            )
        )
        with enable_grad():
            if not out.requires_grad:
                return tuple(_grads(out, leaves, nested))
            gs = gradients(
                out, leaves, ct, retain_graph=True, create_graph=nested, allow_unused=True
            )
        return tuple(gs) if nested else tuple(g.data for g in gs)

    return (out if nested else out.data), pullback


def _as_float(x, fname) -> np.ndarray:
    a = np.asarray(x.data if isinstance(x, Tensor) else x)
    if a.dtype.kind != "f":
        a = a.astype(np.float32)
    return a


def hvp(f: Callable, x, v) -> np.ndarray:
    """The Hessian of scalar ``f`` at ``x`` times ``v`` (reverse over reverse: the gradient of
    ``<grad f(x), v>``), without forming the Hessian."""
    x = _as_float(x, "hvp")
    v = np.asarray(v.data if isinstance(v, Tensor) else v, dtype=x.dtype)
    if v.shape != x.shape:
        raise ValueError(f"hvp: v has shape {v.shape}, x has shape {x.shape}")
    leaf = Tensor(x).requires_grad_()
    with enable_grad():
        out = _scalar_out(f(leaf), "hvp")
        (g,) = gradients(out, [leaf], create_graph=True, allow_unused=True)
        if not g.requires_grad:
            return np.zeros_like(x)
        (h,) = gradients((g * v).sum(), [leaf], allow_unused=True)
    return h.data


def _stacked(rows: list, shape: tuple) -> np.ndarray:
    """``rows`` stacked into ``shape`` by tapegrad's own stack, so that inside a compiled step
    the plan records it (a NumPy stack of traced values would be frozen into the plan)."""
    from .ops import reshape, stack

    return reshape(stack([Tensor._make(r, None, False) for r in rows]), shape).data


def hessian(f: Callable) -> Callable:
    """``f`` (scalar-valued) -> a function returning its Hessian at ``x``, of shape
    ``x.shape + x.shape`` (one Hessian-vector product per entry of ``x``)."""

    @functools.wraps(f)
    def wrapped(x):
        x = _as_float(x, "hessian")
        leaf = Tensor(x).requires_grad_()
        with enable_grad():
            out = _scalar_out(f(leaf), "hessian")
            (g,) = gradients(out, [leaf], create_graph=True, allow_unused=True)
            rows = []
            for k in range(x.size):
                if not g.requires_grad:
                    rows.append(np.zeros_like(x))
                    continue
                e = np.zeros(x.size, x.dtype)
                e[k] = 1
                (h,) = gradients(
                    g, [leaf], e.reshape(x.shape), retain_graph=True, allow_unused=True
                )
                rows.append(h.data)
        return _stacked(rows, x.shape + x.shape)

    return wrapped


def jacobian(f: Callable) -> Callable:
    """``f`` -> a function returning its Jacobian at ``x``, of shape ``f(x).shape + x.shape``
    (one VJP per output entry)."""

    @functools.wraps(f)
    def wrapped(x):
        x = _as_float(x, "jacobian")
        out, pullback = vjp(f, x)
        rows = []
        for k in range(out.size):
            e = np.zeros(out.size, out.dtype)
            e[k] = 1
            rows.append(pullback(e.reshape(out.shape))[0])
        return (
            _stacked(rows, out.shape + x.shape) if rows else np.zeros(out.shape + x.shape, x.dtype)
        )

    return wrapped


def jvp(f: Callable, primals: Sequence, tangents: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Forward mode: ``(f(*primals), J tangents)`` as ndarrays, by transposing the linearised
    VJP (see the module docstring)."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    leaves = [Tensor(_as_float(p, "jvp")).requires_grad_() for p in primals]
    vs = []
    for k, (leaf, t) in enumerate(zip(leaves, tangents)):
        t = np.asarray(t.data if isinstance(t, Tensor) else t, dtype=leaf.dtype)
        if t.shape != leaf.shape:
            raise ValueError(f"jvp: tangent {k} has shape {t.shape}, primal {leaf.shape}")
        vs.append(t)
    with enable_grad():
        out = f(*leaves)
        if not isinstance(out, Tensor):
            raise TypeError(f"jvp: the function must return a tapegrad Tensor, got {type(out)}")
        if not out.requires_grad:
            return out.data, np.zeros_like(out.data)
        u = Tensor(np.zeros_like(out.data)).requires_grad_()
        gs = gradients(out, leaves, u, create_graph=True, allow_unused=True)
        inner = None
        for g, v in zip(gs, vs):
            if g.requires_grad:
                term = (g * v).sum()
                inner = term if inner is None else inner + term
        if inner is None:
            return out.data, np.zeros_like(out.data)
        (jv,) = gradients(inner, [u], allow_unused=True)
    return out.data, jv.data
