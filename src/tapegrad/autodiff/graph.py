"""The recorded graph: nodes, recording (``apply``), topological order and the backward pass.

A tensor made by a primitive while gradients are on holds a :class:`Node`: the primitive, the
parent tensors that need gradients (``None`` for the others), the input arrays and the output
array the VJP rules read, and the primitive's attributes. Nodes point at parents, never at their
own output tensor, so reference counting frees a graph as soon as its last tensor goes.

``backward`` orders the graph once (iteratively, so depth is limited by memory only), runs each
node's VJP rules in reverse order, frees each intermediate gradient as soon as it has been passed
on, and accumulates into ``.grad`` of the leaves. Unless ``retain_graph=True``, every node's saved
arrays are dropped during the pass, and a second backward through it raises :class:`GraphError`.
"""

from __future__ import annotations

import contextlib

import numpy as np

from . import anomaly
from .backend import DEFAULT_DTYPE, unbroadcast
from .errors import DTypeError, GraphError, IndexOutOfRange, ShapeError
from .primitives import registry
from .tensor import _TRACING, Tensor


class _GradMode:
    enabled = True


def is_grad_enabled() -> bool:
    return _GradMode.enabled


class _SetGrad(contextlib.ContextDecorator):
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        self.prev, _GradMode.enabled = _GradMode.enabled, self.enabled

    def __exit__(self, *exc):
        _GradMode.enabled = self.prev


def no_grad():
    """Context manager (and decorator): operations inside record no graph."""
    return _SetGrad(False)


def enable_grad():
    """Context manager (and decorator): turn recording back on inside ``no_grad``."""
    return _SetGrad(True)


class Node:
    """How a tensor was made: enough to run its VJP rules once (or more with retain_graph)."""

    __slots__ = ("prim", "parents", "inputs", "out", "attrs", "aux", "released", "site")

    def __init__(self, prim, parents, inputs, out, attrs, aux, site=None):
        self.prim = prim
        self.parents = parents
        self.inputs = inputs
        self.out = out
        self.attrs = attrs
        self.aux = aux
        self.released = False
        self.site = site  # "file:line" of the call, recorded in anomaly mode only

    def vjp(self, g: np.ndarray) -> list:
        prim, parents, inputs, attrs = self.prim, self.parents, self.inputs, self.attrs
        if prim.aux:
            attrs = {**attrs, "aux": self.aux}
        if prim.vjp_all is not None:
            needs = tuple(p is not None for p in parents)
            grads = list(prim.vjp_all(g, self.out, needs, *inputs, **attrs))
        else:
            grads = [
                None if p is None else rule(g, self.out, *inputs, **attrs)
                for p, rule in zip(parents, prim.vjps)
            ]
        for i, (p, gi) in enumerate(zip(parents, grads)):
            if p is None or gi is None:
                continue
            x = inputs[i]
            if type(gi) is not np.ndarray:
                gi = np.asarray(gi)
            if prim.broadcasting:
                gi = unbroadcast(gi, x.shape)
            if gi.shape != x.shape:
                raise GraphError(
                    f"internal error: VJP of {prim.name} returned a gradient of shape {gi.shape} "
                    f"for input {i} of shape {x.shape}"
                )
            if gi.dtype != x.dtype:
                gi = gi.astype(x.dtype)
            grads[i] = gi
        return grads

    def release(self):
        self.parents = self.inputs = self.out = self.attrs = self.aux = None
        self.released = True


def _lift(args: tuple, exact: bool) -> list:
    """Python numbers and integer operands (arrays or tensors alike) take the dtype of the float
    operands, float32 when there is none (one rule). ``exact`` (comparisons): with no float
    operand, integers stay integers, so large ones compare exactly."""
    data = [a.data if isinstance(a, Tensor) else a for a in args]
    dtype = None
    for d in data:
        if isinstance(d, np.ndarray) and d.dtype.kind == "f":
            dtype = d.dtype
            break
    if dtype is None and exact:
        return [d if isinstance(d, np.ndarray) else np.asarray(d) for d in data]
    dtype = dtype or DEFAULT_DTYPE
    out = []
    for d in data:
        if isinstance(d, np.ndarray):
            out.append(d.astype(dtype) if d.dtype.kind in "iu" else d)
        else:
            out.append(np.asarray(d, dtype=np.bool_ if isinstance(d, bool) else dtype))
    return out


def _check_dtypes(prim, arrays) -> None:
    dtype = None
    for d in arrays:
        if isinstance(d, np.ndarray) and d.dtype.kind == "f":
            if dtype is None:
                dtype = d.dtype
            elif d.dtype != dtype:
                raise DTypeError(
                    f"{prim.name}: operands have dtypes {dtype} and {d.dtype}; tapegrad never "
                    f"promotes silently, cast one explicitly with .astype()"
                )


def apply(prim, *args, **attrs) -> Tensor:
    """Run ``prim`` on tensors/arrays/numbers and, when any input needs a gradient, record it."""
    if prim.broadcasting:
        arrays = _lift(args, exact=not prim.differentiable)
    else:
        arrays = [a.data if isinstance(a, Tensor) else a for a in args]
    _check_dtypes(prim, arrays)
    try:
        out = prim.forward(*arrays, **attrs)
    except (ValueError, IndexError) as e:
        if isinstance(e, (ShapeError, DTypeError)):
            raise
        shapes = ", ".join(str(getattr(a, "shape", type(a).__name__)) for a in arrays)
        error = IndexOutOfRange if isinstance(e, IndexError) else ShapeError
        raise error(f"{prim.name}: {e} (input shapes: {shapes})") from e
    aux = None
    if prim.aux:
        out, aux = out
    if type(out) is not np.ndarray:
        out = np.asarray(out)  # ufuncs return NumPy scalars for 0-d inputs
    site = None
    if anomaly._Mode.enabled:
        site = anomaly.call_site()
        anomaly.check_forward(prim, arrays, out, site)
    parents = None
    if _GradMode.enabled and prim.differentiable:
        mask = prim.diff_mask
        parents = []
        record = False
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a.requires_grad and (mask is None or mask[i]):
                parents.append(a)
                record = True
            else:
                parents.append(None)
        if record:
            result = Tensor._make(
                out, Node(prim, tuple(parents), arrays, out, attrs, aux, site), True
            )
        else:
            parents = None
            result = Tensor._make(out, None, False)
    else:
        result = Tensor._make(out, None, False)
    trace = _TRACING.active
    if trace is not None:
        trace.record_eq(prim, args, arrays, attrs, result, parents)
    return result


def toposort(root: Tensor) -> list[Tensor]:
    """Tensors that ``root`` depends on through gradient-carrying edges, parents first."""
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in visited:
            continue
        visited.add(id(t))
        stack.append((t, True))
        node = t._node
        if node is not None:
            if node.released:
                raise GraphError(
                    "backward: this graph was freed by an earlier backward(); pass "
                    "retain_graph=True to the first backward() to run backward through it again"
                )
            for p in node.parents:
                if p is not None and id(p) not in visited:
                    stack.append((p, False))
    return order


def backward(root: Tensor, gradient=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf), weighted by ``gradient``, into ``.grad`` of every leaf."""
    if not root.requires_grad:
        raise GraphError(
            "backward: this tensor does not require grad (no input of it had requires_grad=True, "
            "or it was computed under no_grad())"
        )
    explicit = gradient is not None
    if gradient is None:
        if root.data.size != 1:
            raise GraphError(
                f"backward: the tensor has shape {root.shape}; backward() without a gradient "
                f"needs a single-element tensor, pass gradient= of shape {root.shape}"
            )
        gradient = np.ones_like(root.data)
    else:
        gradient = np.asarray(gradient.data if isinstance(gradient, Tensor) else gradient)
        if gradient.shape != root.shape:
            raise ShapeError(
                f"backward: gradient has shape {gradient.shape}, the tensor has shape {root.shape}"
            )
        if gradient.dtype != root.dtype:
            raise DTypeError(
                f"backward: gradient has dtype {gradient.dtype}, the tensor has dtype {root.dtype}"
            )
    order = toposort(root)
    if _TRACING.active is not None:
        _TRACING.active.record_backward(root, gradient if explicit else None, order)
    grads: dict[int, np.ndarray] = {id(root): gradient}
    for t in reversed(order):
        g = grads.pop(id(t), None)
        node = t._node
        if node is None:
            if g is not None:
                t._accumulate(g)
            continue
        if t._retain and g is not None:
            t._accumulate(g)
        if g is not None:
            input_grads = node.vjp(g)
            if anomaly._Mode.enabled:
                anomaly.check_backward(node, g, input_grads)
            for p, gp in zip(node.parents, input_grads):
                if p is None or gp is None:
                    continue
                k = id(p)
                prev = grads.get(k)
                grads[k] = gp if prev is None else prev + gp
        if not retain_graph:
            node.release()
    if _TRACING.active is not None:
        _TRACING.active.resnapshot()  # the leaves' new gradients are what replays produce


registry._engine_apply = apply
