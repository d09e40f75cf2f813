"""The backward pass over the recorded graph: topological order, ``backward``, ``gradients``.

A tensor made by a primitive while gradients are on holds a :class:`Node` (``core/primitive.py``,
recorded by ``apply``): the primitive, the parent tensors that need gradients (``None`` for the
others), the input arrays, the output and the arrays the forward saved for the VJP rules, and
the primitive's attributes. Nodes point at parents, never at their own output tensor, so
reference counting frees a graph as soon as its last tensor goes. This module imports only the
core; it re-exports ``Node``, ``apply`` and the grad-mode functions from there.

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

import numpy as np

from . import anomaly
from .backend import asarray, is_array, xp_of
from .core.primitive import Node, _constant, apply  # noqa: F401  (Node, apply: re-exported)
from .core.state import _TRACING, _GradMode, enable_grad, is_grad_enabled, no_grad  # noqa: F401
from .core.state import TensorBase as Tensor  # every tensor is one (tensor.py adds the methods)
from .errors import DTypeError, GraphError, ShapeError


def toposort(*roots: Tensor) -> list[Tensor]:
    """Tensors that ``roots`` depend on through gradient-carrying edges, parents first: the
    post-order of a depth-first walk that visits each tensor's parents in order (iterative, so
    depth is limited by memory only)."""
    order: list[Tensor] = []
    visited: set[int] = set()
    # a tensor to visit, or (tensor,): its parents are done, it goes next in the order
    stack: list = list(reversed(roots))
    pop, push, done, seen = stack.pop, stack.append, order.append, visited.add
    while stack:
        t = pop()
        if type(t) is tuple:
            done(t[0])
            continue
        k = id(t)
        if k in visited:
            continue
        seen(k)
        node = t._node
        if node is None:  # a leaf: nothing to visit first
            done(t)
            continue
        if node.released:
            raise GraphError(
                "backward: this graph was freed by an earlier backward(); pass "
                "retain_graph=True to the first backward() to run backward through it again"
            )
        push((t,))
        for p in reversed(node.parents):
            if p is not None and id(p) not in visited:
                push(p)
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
    check = anomaly._Mode.enabled
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
                if check:
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
