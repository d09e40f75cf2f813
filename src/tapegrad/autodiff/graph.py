"""The recorded graph: nodes, recording (``apply``), topological order and the backward pass.

A tensor made by a primitive while gradients are on holds a :class:`Node`: the primitive, the
parent tensors that need gradients (``None`` for the others), the input arrays, the output and
the arrays the forward saved for the VJP rules, and the primitive's attributes. Nodes point at
parents, never at their own output tensor, so reference counting frees a graph as soon as its
last tensor goes.

``backward`` orders the graph once (iteratively, so depth is limited by memory only), runs each
node's VJP rules in reverse order, frees each intermediate gradient as soon as it has been passed
on, and accumulates into ``.grad`` of the leaves. Unless ``retain_graph=True``, every node's saved
arrays are dropped during the pass, and a second backward through it raises :class:`GraphError`.

One pass (``_pass``) serves every caller, over the same VJP rules run two ways: on arrays (the
first-order pass: no graph is recorded), or on Tensors (``Node.vjp_tensors``: the parents, the
output tensor and constants stand in for the saved arrays), where every operation a rule
performs is itself recorded: with ``create_graph`` as a graph whose gradients can be
differentiated again, and inside ``tapegrad.compile`` as the plan's equations (the backward pass
of a compiled step is traced like its forward). :func:`gradients` returns gradients for chosen
tensors instead of accumulating into leaves.
"""

from __future__ import annotations

import contextlib

import numpy as np

from . import anomaly
from .backend import asarray, check_same_device, is_array, on_device, xp_of
from .errors import DTypeError, GraphError, IndexOutOfRange, ShapeError
from .primitives import registry
from .primitives.shape import sum_to
from .promotion import promote
from .tensor import _TRACING, Tensor
from .traced_grads import traced


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
        self.aux = aux  # the arrays the forward saved for the rules (a tuple)
        self.released = False
        self.site = site  # "file:line" of the call, recorded in anomaly mode only

    def vjp(self, g: np.ndarray) -> list:
        """Each parent's gradient from the rules, run on the saved arrays (no graph)."""
        return self._run_rules(g, self.out, self.inputs, self.aux, False)

    def vjp_tensors(self, g: Tensor, out: Tensor, record: bool) -> list:
        """The same rules run on Tensors (the output, the parents, constants for the other
        inputs and the saved arrays), so each operation they perform is a recorded one: a graph
        that can be differentiated again (``record``) and, while tracing, a plan's equations."""
        if record and not self.prim.higher_order:
            raise GraphError(
                f"{self.prim.name}: its gradient cannot be differentiated (its VJP runs fused "
                f"kernels); second derivatives, hvp, hessian, jacobian and jvp work through "
                f"the other operations"
            )
        inputs = [
            p if p is not None else (_constant(a) if _is_array(a) else a)
            for p, a in zip(self.parents, self.inputs)
        ]
        if record and self.prim.saved is not None:  # saved values as functions of the inputs
            aux = tuple(self.prim.saved(*inputs, **self.attrs))
        else:
            aux = tuple(_constant(a) for a in self.aux)
        return self._run_rules(g, out, inputs, aux, True)

    def _run_rules(self, g, out, inputs, aux, tensors: bool) -> list:
        prim, parents, attrs = self.prim, self.parents, self.attrs
        if prim.aux:
            attrs = {**attrs, "aux": aux}
        if prim.vjp_all is not None:
            needs = tuple(p is not None for p in parents)
            grads = list(prim.vjp_all(g, out, needs, *inputs, **attrs))
        else:
            grads = [
                None if p is None else rule(g, out, *inputs, **attrs)
                for p, rule in zip(parents, prim.vjps)
            ]
        for i, (p, gi) in enumerate(zip(parents, grads)):
            if p is None or gi is None:
                continue
            x = inputs[i]
            if tensors:
                if not isinstance(gi, Tensor):
                    gi = _constant(gi if is_array(gi) else asarray(gi, like=x.data))
            elif type(gi) is not np.ndarray and not on_device(gi):
                gi = np.asarray(gi)
            if prim.broadcasting and gi.shape != x.shape:
                gi = registry.run(sum_to, gi, shape=x.shape)
            if gi.shape != x.shape:
                raise GraphError(
                    f"internal error: VJP of {prim.name} returned a gradient of shape {gi.shape} "
                    f"for input {i} of shape {x.shape}"
                )
            if gi.dtype != p.dtype:  # each input its gradient in its own dtype (promotion)
                gi = gi.astype(p.dtype)
            grads[i] = gi
        return grads

    def release(self):
        self.parents = self.inputs = self.out = self.attrs = self.aux = None
        self.released = True


def _is_array(a) -> bool:
    return is_array(a)


def _constant(a) -> Tensor:
    """An array as a Tensor that records nothing (a constant of a recorded rule)."""
    return Tensor._make(a, None, False)


def _lift(prim, args: tuple) -> list:
    """The operands of an elementwise primitive as arrays in the dtype it computes in
    (PyTorch's type promotion, one rule: ``promotion.py``)."""
    data = [a.data if isinstance(a, Tensor) else a for a in args]
    first = data[0]
    dtype = first.dtype if type(first) is np.ndarray and first.dtype.kind == "f" else None
    for d in data:  # every operand a float array of one dtype: nothing to do (the usual case)
        if dtype is None or type(d) is not np.ndarray or d.dtype != dtype:
            return promote(prim.name, data)
    return data


def _check_dtypes(prim, arrays) -> None:
    dtype = None
    mixed = False
    for d in arrays:
        if type(d) is not np.ndarray:
            mixed = mixed or on_device(d)
            if not is_array(d):
                continue
        if d.dtype.kind == "f":
            if dtype is None:
                dtype = d.dtype
            elif d.dtype != dtype:
                raise DTypeError(
                    f"{prim.name}: operands have dtypes {dtype} and {d.dtype}; like PyTorch, "
                    f"{prim.name} does not promote (only elementwise operations do), cast one "
                    f"explicitly with .astype()"
                )
    if mixed:
        check_same_device(prim.name, arrays)


def apply(prim, *args, **attrs):
    """Run ``prim`` on tensors/arrays/numbers and, when any input needs a gradient, record it.

    Returns a Tensor, or a tuple of Tensors for a multi-output primitive."""
    if _TRACING.active is not None:  # a .grad read inside a traced step: its traced value
        args = tuple(traced(a) for a in args)
    if (
        prim.composite is not None
        and _GradMode.enabled
        and any(isinstance(a, Tensor) and a.requires_grad for a in args)
    ):  # a fused kernel inside a graph being recorded: what it computes, differentiably
        return prim.composite(*args, **attrs)
    arrays = None
    if prim.broadcasting and len(args) == 2:  # the usual binary case, without a loop
        a, b = args
        da = a.data if isinstance(a, Tensor) else a
        db = b.data if isinstance(b, Tensor) else b
        if type(da) is np.ndarray and type(db) is np.ndarray and da.dtype is db.dtype:
            if da.dtype.kind == "f":
                arrays = [da, db]
    if arrays is None:
        if prim.broadcasting:
            arrays = _lift(prim, args)
        else:
            arrays = [a.data if isinstance(a, Tensor) else a for a in args]
        if len(arrays) > 1:
            _check_dtypes(prim, arrays)
    try:
        out = prim.forward(*arrays, **attrs)
    except (ValueError, IndexError) as e:
        if isinstance(e, (ShapeError, DTypeError)):
            raise
        shapes = ", ".join(str(getattr(a, "shape", type(a).__name__)) for a in arrays)
        error = IndexOutOfRange if isinstance(e, IndexError) else ShapeError
        said = str(e) if str(e).startswith(f"{prim.name}:") else f"{prim.name}: {e}"
        raise error(f"{said} (input shapes: {shapes})") from e
    aux = ()
    packed = type(out) is tuple
    if packed:
        if not prim.aux:
            return _apply_multi(prim, args, arrays, attrs, out)
        out, *aux = out
        aux = tuple(aux)
    if type(out) is not np.ndarray and not on_device(out):
        out = np.asarray(out)  # ufuncs return NumPy scalars for 0-d inputs
    site = None
    if anomaly._Mode.enabled:
        site = anomaly.call_site()
        anomaly.check_forward(prim, arrays, out, site)
    result = None
    if _GradMode.enabled and prim.differentiable:
        mask = prim.diff_mask
        if mask is None:
            parents = tuple(a if isinstance(a, Tensor) and a.requires_grad else None for a in args)
        else:
            parents = tuple(
                a if isinstance(a, Tensor) and a.requires_grad and m else None
                for a, m in zip(args, mask)
            )
        if any(p is not None for p in parents):
            result = Tensor._make(out, Node(prim, parents, arrays, out, attrs, aux, site), True)
    if result is None:
        result = Tensor._make(out, None, False)
    trace = _TRACING.active
    if trace is not None:
        trace.record_eq(prim, args, arrays, attrs, (result,), aux, packed)
        if prim.effect:
            trace.resnapshot()  # a recorded change (tg.assign): replays repeat it
    return result


def _apply_multi(prim, args, arrays, attrs, outs) -> tuple:
    """A multi-output primitive (a fused backward kernel): Tensors that record no graph."""
    if _GradMode.enabled and any(isinstance(a, Tensor) and a.requires_grad for a in args):
        raise GraphError(
            f"{prim.name}: a fused backward kernel cannot be differentiated (the operation "
            f"whose gradient it computes is first-order only)"
        )
    results = tuple(Tensor._make(o if is_array(o) else np.asarray(o), None, False) for o in outs)
    trace = _TRACING.active
    if trace is not None:
        trace.record_eq(prim, args, arrays, attrs, results, (), True)
    return results


def toposort(*roots: Tensor) -> list[Tensor]:
    """Tensors that ``roots`` depend on through gradient-carrying edges, parents first: the
    post-order of a depth-first walk that visits each tensor's parents in order (iterative, so
    depth is limited by memory only)."""
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list = [(r, False) for r in reversed(roots)]
    pop, push, done = stack.pop, stack.append, order.append
    while stack:
        t, expanded = pop()
        if expanded:
            done(t)
            continue
        k = id(t)
        if k in visited:
            continue
        visited.add(k)
        node = t._node
        if node is None:  # a leaf: nothing to visit first
            done(t)
            continue
        if node.released:
            raise GraphError(
                "backward: this graph was freed by an earlier backward(); pass "
                "retain_graph=True to the first backward() to run backward through it again"
            )
        push((t, True))
        for p in reversed(node.parents):
            if p is not None and id(p) not in visited:
                push((p, False))
    return order


def _seed(root: Tensor, gradient, fname: str, graph: bool = False):
    """The gradient a pass starts ``root`` with: ones for a scalar, else ``gradient`` checked
    (kept as a Tensor with its graph in a ``graph`` pass: forward mode by double VJP)."""
    if gradient is None:
        if root.data.size != 1:
            raise GraphError(
                f"{fname}: the tensor has shape {root.shape}; {fname}() without a gradient "
                f"needs a single-element tensor, pass gradient= of shape {root.shape}"
            )
        data = root.data
        if type(data) is np.ndarray:  # np.ones_like's Python dispatch is half a tiny step's seed
            return np.array(1, data.dtype).reshape(data.shape)
        return xp_of(data).ones_like(data)
    if graph and isinstance(gradient, Tensor) and gradient.requires_grad:
        g = gradient
    else:
        g = gradient.data if isinstance(gradient, Tensor) else gradient
        g = g if is_array(g) else asarray(g, like=root.data)
    if g.shape != root.shape:
        raise ShapeError(
            f"{fname}: gradient has shape {g.shape}, the tensor has shape {root.shape}"
        )
    if g.dtype != root.dtype:
        raise DTypeError(
            f"{fname}: gradient has dtype {g.dtype}, the tensor has dtype {root.dtype}"
        )
    return g


def _pass(roots, seeds, targets, retain_graph: bool, create_graph: bool):
    """The backward pass from ``roots`` (seeded with ``seeds``): into the leaves' ``.grad``
    (``targets`` None), or returned for the tensors in ``targets`` (a dict id -> slot).

    The rules run on arrays (first order), or on Tensors: with ``create_graph`` recording a graph
    of their own (every gradient can be differentiated again), and while a compiled function is
    traced so that the plan records each operation of the backward pass as an equation (first
    order: recording no graph)."""
    order = toposort(*roots)
    trace = _TRACING.active
    tensors = create_graph or trace is not None
    grads: dict[int, object] = {}
    for r, g in zip(roots, seeds):
        if tensors and not isinstance(g, Tensor):
            g = _constant(g)
        prev = grads.get(id(r))
        grads[id(r)] = g if prev is None else prev + g
    found: dict[int, object] = {}
    mode = _GradMode.enabled
    if tensors:
        _GradMode.enabled = create_graph  # a graph pass records the rules it runs
    try:
        for t in reversed(order):
            g = grads.pop(id(t), None)
            node = t._node
            if g is None:
                if node is not None and not retain_graph:
                    node.release()
                continue
            if targets is None:
                if node is None or t._retain:
                    if tensors:
                        if trace is not None:
                            trace.record_sink(t, g)
                        t._accumulate(g.data)
                        if create_graph:
                            t._grad_t = g if t._grad_t is None else t._grad_t + g
                    else:
                        t._accumulate(g)
            elif id(t) in targets:
                found[id(t)] = g
            if node is None:
                continue
            if tensors:
                input_grads = node.vjp_tensors(g, t, create_graph)
            else:
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
    finally:
        _GradMode.enabled = mode
    return found


def backward(
    root: Tensor, gradient=None, retain_graph: bool = False, create_graph: bool = False
) -> None:
    """Accumulate d(root)/d(leaf), weighted by ``gradient``, into ``.grad`` of every leaf
    (and, with ``create_graph``, the differentiable gradient into ``.grad_tensor``)."""
    if not root.requires_grad:
        raise GraphError(
            "backward: this tensor does not require grad (no input of it had requires_grad=True, "
            "or it was computed under no_grad())"
        )
    seed = _seed(root, gradient, "backward", create_graph)
    trace = _TRACING.active
    if trace is not None:
        trace.begin_backward(root)
    _pass([root], [seed], None, retain_graph or create_graph, create_graph)
    if trace is not None:
        trace.resnapshot()  # the leaves' new gradients are what replays produce


def gradients(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple:
    """Gradients of ``outputs`` (a Tensor or a sequence of them, summed) with respect to each of
    ``inputs``, as Tensors, without touching any ``.grad``. ``grad_outputs`` weights each output
    (required for non-scalar ones). With ``create_graph=True`` the gradients record their own
    graph, so they can be differentiated again (higher derivatives). An input the outputs do not
    depend on raises unless ``allow_unused=True`` (then its gradient is zeros).

    Inside a compiled function the pass is always recorded, so the plan replays it."""
    single_out = isinstance(outputs, Tensor)
    outs = [outputs] if single_out else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor) or is_array(grad_outputs):
        grad_outputs = (
            [grad_outputs] * len(outs) if single_out or grad_outputs is None else [grad_outputs]
        )
    if len(grad_outputs) != len(outs):
        raise ValueError(f"gradients: {len(grad_outputs)} grad_outputs for {len(outs)} outputs")
    for k, t in enumerate(ins):
        if not isinstance(t, Tensor):
            raise TypeError(f"gradients: input {k} is a {type(t).__name__}, expected a Tensor")
    graph = create_graph or _TRACING.active is not None  # a traced pass is recorded
    roots, seeds = [], []
    for o, go in zip(outs, grad_outputs):
        if not isinstance(o, Tensor):
            raise TypeError(f"gradients: an output is a {type(o).__name__}, expected a Tensor")
        if o.requires_grad:
            roots.append(o)
            seeds.append(_seed(o, go, "gradients", graph))
    targets = {id(t): k for k, t in enumerate(ins)}
    found = (
        _pass(roots, seeds, targets, create_graph if retain_graph is None else retain_graph, graph)
        if roots
        else {}
    )
    result = []
    for k, t in enumerate(ins):
        g = found.get(id(t))
        if g is None:
            if not allow_unused:
                raise GraphError(
                    f"gradients: the outputs do not depend on input {k} (shape {t.shape}); "
                    f"pass allow_unused=True for a zero gradient"
                )
            g = np.zeros_like(t.data)
        if not isinstance(g, Tensor):
            g = _constant(g if is_array(g) else np.asarray(g))
        result.append(g)
    return tuple(result)


registry._engine_apply = apply
registry._recording = is_grad_enabled
registry._Tensor = Tensor
