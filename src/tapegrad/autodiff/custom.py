"""User-defined operations with their own gradient, like ``torch.autograd.Function`` or
``jax.custom_vjp``::

    @tg.custom_op
    def cube(x):                      # ndarrays in, an ndarray out
        return x ** 3

    @cube.defvjp
    def _(g, out, x):                 # the output's cotangent, the output, the inputs
        return (3 * x ** 2 * g,)      # one gradient per input (None: no gradient)

    y = cube(t)                       # a Tensor; backward() runs the rule

A custom operation is a primitive of its own that lives with the user's code rather than in
tapegrad's registry: defining it again (re-running a notebook cell) replaces nothing and raises
nothing, and its name (``custom:`` + the function's qualified name) can never be mistaken for a
built-in one. It runs eagerly and inside compiled steps (as a generic equation: its forward and
rule run as written on every replay: the rule is a primitive of its own, ``custom:<name>:vjp``).
Its gradient is first-order only (the rule is NumPy code): a gradient graph through it raises
:class:`GraphError` naming it. Keyword arguments are attributes passed to the forward and
to the rule, not differentiated. With ``broadcasting=True`` the engine sums each gradient back
to its input's shape, as for tapegrad's own binary operations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .errors import GraphError, ShapeError
from .graph import is_grad_enabled
from .primitives.registry import Primitive, run
from .tensor import Tensor


class CustomOp:
    """An operation from a NumPy forward and a VJP rule; see the module docstring."""

    def __init__(
        self,
        forward: Callable,
        vjp: Callable | None = None,
        *,
        name: str | None = None,
        broadcasting: bool = False,
    ):
        self.forward = forward
        self.name = f"custom:{name or getattr(forward, '__qualname__', 'op')}"
        self.broadcasting = broadcasting
        self._vjp = vjp
        self._prim: Primitive | None = None
        functools.update_wrapper(self, forward)

    def defvjp(self, vjp: Callable) -> Callable:
        """Set the rule ``vjp(g, out, *inputs, **attrs) -> gradients`` (a decorator)."""
        self._vjp = vjp
        self._prim = None
        return vjp

    def __call__(self, *args, **attrs):
        if self._vjp is None and is_grad_enabled():
            for i, a in enumerate(args):
                if isinstance(a, Tensor) and a.requires_grad:
                    raise GraphError(
                        f"{self.name}: input {i} requires grad but the operation has no VJP "
                        f"rule; define one with @{self.__name__}.defvjp, or pass .detach()"
                    )
        if self._prim is None:
            backward = Primitive(f"{self.name}:vjp", self._run_vjp, None)

            def vjp(g, result, needs, *inputs, **attrs):
                got = iter(run(backward, g, result, *inputs, needs=needs, **attrs))
                return [next(got) if need else None for need in needs]

            self._prim = Primitive(
                self.name,
                self._run_forward,
                None if self._vjp is None else vjp,
                broadcasting=self.broadcasting,
                higher_order=False,
                doc=self.forward.__doc__ or "",
            )
        return self._prim(*args, **attrs)

    def _run_forward(self, *arrays, **attrs):
        out = self.forward(*arrays, **attrs)
        if not isinstance(out, (np.ndarray, np.generic, int, float, bool)):
            raise TypeError(
                f"{self.name}: the forward must return an ndarray (or a number), got "
                f"{type(out).__name__}"
            )
        return out

    def _run_vjp(self, g, result, *arrays, needs, **attrs):
        """The user's rule on arrays: the gradients of the inputs ``needs`` names, checked."""
        grads = self._vjp(g, result, *arrays, **attrs)
        if isinstance(grads, np.ndarray) or grads is None:
            grads = (grads,)
        grads = list(grads)
        if len(grads) != len(arrays):
            raise ValueError(
                f"{self.name}: its VJP returned {len(grads)} gradient(s) for {len(arrays)} "
                f"input(s); return one per input (None where there is none)"
            )
        for i, (gi, x, need) in enumerate(zip(grads, arrays, needs)):
            if gi is None:
                if need:
                    raise ValueError(
                        f"{self.name}: its VJP returned None for input {i}, which requires grad"
                    )
                continue
            gi = np.asarray(gi)
            shape = np.shape(x)
            if gi.shape != shape and not (self.broadcasting and _broadcasts_to(shape, gi.shape)):
                raise ShapeError(
                    f"{self.name}: its VJP returned a gradient of shape {gi.shape} for input {i} "
                    f"of shape {shape}"
                )
            dtype = getattr(x, "dtype", None)
            if need and dtype is not None and gi.dtype != dtype:
                raise TypeError(
                    f"{self.name}: its VJP returned a {gi.dtype} gradient for input {i} of dtype "
                    f"{dtype}; return it in the input's dtype"
                )
            grads[i] = gi
        return tuple(g for g, need in zip(grads, needs) if need)

    def __repr__(self) -> str:
        return f"<custom op {self.name}>"


def _broadcasts_to(shape, big) -> bool:
    try:
        return np.broadcast_shapes(shape, big) == tuple(big)
    except ValueError:
        return False


def custom_op(
    forward: Callable | None = None,
    *,
    vjp: Callable | None = None,
    name: str | None = None,
    broadcasting: bool = False,
):
    """Make ``forward`` (ndarrays in, ndarray out) an operation with its own gradient rule; use
    as ``@tg.custom_op`` or ``@tg.custom_op(name=..., broadcasting=True)``, then set the rule
    with ``@op.defvjp`` (or pass ``vjp=``). See the module docstring."""
    if forward is None:
        return lambda f: CustomOp(f, vjp, name=name, broadcasting=broadcasting)
    return CustomOp(forward, vjp, name=name, broadcasting=broadcasting)
