"""The single table of primitives.

A primitive is an array operation together with its vector-Jacobian product (VJP) rule,
registered once. Everything a user calls (``tg.exp``, ``x @ y``, layers) either is a primitive
or composes primitives. Each primitive also carries:

* ``reference``: a plain-NumPy definition written independently of ``forward``, which the
  registry test checks the forward against;
* ``samples``: inputs covering broadcasting, keepdims, negative axes and edge sizes, on which the
  registry test checks the forward against ``reference`` and the VJP against float64 finite
  differences. A primitive without samples fails that test.

Forward and VJP signatures::

    forward(*arrays, out=None, ws=None, **attrs) -> out
    vjp(g, out, needs, *inputs, **attrs) -> sequence of grads   # needs[i]: input i wants one

The engine calls that one rule. A primitive may instead be written with one rule per input,
``vjp[i](g, out, *inputs, **attrs) -> grad of input i`` (None: input i not differentiable);
registering it makes them the one rule (``_one_rule``), which runs the rules of the inputs
that need a gradient.

**One forward.** It computes on arrays; when ``out`` is given (compiled plans pass the buffers
their liveness pass assigned) it writes its result there, and ``ws`` (a :class:`Workspace`)
keeps its temporaries from one call to the next. Eager calls pass neither, and the forward
allocates. A forward may return a tuple: with ``aux=True`` the first entry is the result and
the others are arrays saved for the VJP rules (they receive them as ``aux=(...)``); without
``aux`` every entry is a result (multi-output primitives, such as the fused backward kernels,
which are not differentiable). With ``out`` it receives the buffers as a tuple in that order.
A forward that returns a view of one of its inputs (reshape, permute, a slice) costs a plan
nothing: the view is taken once, when the plan is built.

**One VJP rule, written with primitives.** A rule calls other primitives through :func:`run`
(or the Tensor operators), which is that primitive's forward on ndarrays (the first-order
backward pass, no graph) and the recorded operation on Tensors (``backward(create_graph=True)``,
:func:`tapegrad.gradients`, and the backward pass a compiled plan traces), so the same rule gives
first derivatives fast, higher derivatives by differentiating it, and compiled equations without
a second copy. A fused backward kernel is a primitive of its own (``embedding_backward``,
``ce_grad``, ``conv_backward``, ``max_pool_backward``, the scans' backward kernels). Primitives
whose rule calls a kernel that is not itself differentiable say ``higher_order=False``: a
gradient graph through them raises :class:`GraphError` naming them.

**Saved values and composites: one rule whatever the mode.** A forward that saves arrays for
its rules (``aux=True``) says how they follow from the inputs with ``saved(*inputs, **attrs)``
(written with primitives: the softmax a cross-entropy saves is ``softmax(logits)``); when the
rules run to build a gradient graph (``create_graph``, ``tapegrad.gradients``) the engine passes
them recomputed that way, so their dependence on the inputs is differentiated too. A fused
kernel that has no rule of its own (``layer_norm_backward``) says what it computes with
``composite(*inputs, **attrs)`` (primitives); applied while a graph is recorded through it, the
engine records the composite instead, so its result can be differentiated again. Either way the
rules themselves never ask which mode they run in.

With ``effect=True`` the forward changes state outside its output (writes into an input, draws
from a generator): compiled plans keep it in place and never drop it as dead code. With
``broadcasting=True`` the engine undoes broadcasting of each input gradient (the ``sum_to``
primitive), checks that float inputs share one dtype, and lifts Python numbers and integer
arrays to the tensors' dtype. ``bind(*inputs, out=..., **attrs)`` (optional) returns a call with
no arguments that computes the forward into ``out`` for those very arrays, its checks and
decisions taken once: a compiled plan, whose buffers never move, replays that call (matmul's
sizing, planning and operand addresses); it computes exactly what ``forward`` would.

**Recording.** :func:`apply` runs a primitive on tensors, arrays or numbers and, when an input
needs a gradient and grad mode is on, records a :class:`Node` (the primitive, the parents, the
input arrays, the output and what the forward saved); while a compiled function is traced it
also hands the call to the trace (``_TRACING.active.record_eq``). The backward pass that runs
the nodes' rules is ``graph.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import anomaly
from ..backend import ARRAY_TYPES, asarray, check_same_device, is_array, on_device, xp_of
from ..errors import DTypeError, GraphError, IndexOutOfRange, ShapeError
from ..promotion import promote
from . import state as _state
from .state import _TRACING, TensorBase, _GradMode


@dataclass
class Sample:
    """One input of a primitive's test: positional arrays and keyword attributes."""

    args: tuple
    attrs: dict = field(default_factory=dict)
    atol: float = 1e-6
    """Gradcheck tolerance; raise it only with a comment saying why the math needs it."""


class Workspace:
    """Temporaries a forward keeps between calls of one compiled equation (eager calls get
    none and allocate): ``ws.array(key, shape, dtype)`` is the same buffer on every call, on
    the device of the plan's arrays (``xp``: their array module)."""

    __slots__ = ("arrays", "xp")

    def __init__(self, xp=np):
        self.arrays: dict = {}
        self.xp = xp

    def array(self, key, shape, dtype, zero: bool = False, like=None) -> np.ndarray:
        a = self.arrays.get(key)
        if a is None or a.shape != tuple(shape) or a.dtype != dtype:
            xp = self.xp if like is None else xp_of(like)
            a = self.arrays[key] = (xp.zeros if zero else xp.empty)(shape, dtype)
        return a


def scratch(ws: Workspace | None, key, shape, dtype, zero: bool = False, like=None):
    """A temporary for a forward: kept in ``ws`` by compiled plans, fresh when eager; on
    ``like``'s device (the workspace's when None; the CPU for an eager call without one)."""
    if ws is None:
        xp = xp_of(like)
        return (xp.zeros if zero else xp.empty)(shape, dtype)
    return ws.array(key, shape, dtype, zero, like)


def kernel_scratch(ws: Workspace | None, like):
    """A kernel's ``scratch(key, shape, dtype=None)`` for its temporaries (``like``'s dtype
    unless given), kept in ``ws`` (a plan's workspace); None when eager (the kernel allocates)."""
    if ws is None:
        return None
    return lambda key, shape, dtype=None: ws.array(
        key, shape, like.dtype if dtype is None else dtype, False, like
    )


def _takes(fn, name: str) -> bool:
    if isinstance(fn, np.ufunc):
        return name == "out"
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params


class Primitive:
    """An array operation with its VJP rule. Calling it records a node when grads are on."""

    __slots__ = (
        "name",
        "forward",
        "vjps",
        "vjp_all",
        "reference",
        "samples",
        "broadcasting",
        "aux",
        "differentiable",
        "diff_mask",
        "diff_all",
        "higher_order",
        "effect",
        "saved",
        "composite",
        "writes_out",
        "uses_ws",
        "bind",
        "doc",
    )

    def __init__(
        self,
        name: str,
        forward: Callable,
        vjp: Sequence[Callable | None] | Callable | None,
        *,
        reference: Callable | None = None,
        samples: Callable[[np.random.Generator], list[Sample]] | None = None,
        broadcasting: bool = False,
        aux: bool = False,
        higher_order: bool = True,
        effect: bool = False,
        saved: Callable | None = None,
        composite: Callable | None = None,
        bind: Callable | None = None,
        doc: str = "",
    ):
        self.name = name
        self.forward = forward
        if vjp is None:
            self.vjps, self.vjp_all, self.differentiable = (), None, False
        elif callable(vjp):
            self.vjps, self.vjp_all, self.differentiable = (), vjp, True
        else:  # per-input rules: written one per input, run as the one rule they make up
            self.vjps = tuple(vjp)
            self.vjp_all = _one_rule(self.vjps)
            self.differentiable = any(v is not None for v in self.vjps)
        self.diff_mask = None if callable(vjp) else tuple(v is not None for v in self.vjps)
        # how many leading inputs all have a rule (None: a rule for every input; -1: not all
        # of them do): apply's inline path for one or two inputs
        mask = self.diff_mask
        self.diff_all = None if mask is None else (len(mask) if all(mask) else -1)
        self.reference = reference
        self.samples = samples
        self.broadcasting = broadcasting
        self.aux = aux
        self.higher_order = higher_order
        self.effect = effect
        self.saved = saved
        self.composite = composite
        self.writes_out = _takes(forward, "out")
        self.uses_ws = _takes(forward, "ws")
        self.bind = bind
        self.doc = doc or f"The ``{name}`` primitive."

    def differentiable_input(self, i: int) -> bool:
        if self.diff_mask is None:
            return self.vjp_all is not None
        return i < len(self.diff_mask) and self.diff_mask[i]

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def _one_rule(rules: tuple) -> Callable:
    """Per-input rules ``rules[i](g, out, *inputs, **attrs)`` as the engine's one calling
    convention, ``vjp(g, out, needs, *inputs, **attrs) -> grads`` (inputs past the rules and
    those without a rule get None)."""

    if len(rules) == 1:  # the common arities without a loop: a rule runs on every backward
        (r0,) = rules

        def vjp(g, out, needs, *inputs, **attrs):
            return [r0(g, out, *inputs, **attrs) if needs[0] and r0 is not None else None]

    elif len(rules) == 2:
        r0, r1 = rules

        def vjp(g, out, needs, *inputs, **attrs):
            return [
                r0(g, out, *inputs, **attrs) if needs[0] and r0 is not None else None,
                r1(g, out, *inputs, **attrs) if needs[1] and r1 is not None else None,
            ]

    else:

        def vjp(g, out, needs, *inputs, **attrs):
            return [
                rule(g, out, *inputs, **attrs) if need and rule is not None else None
                for need, rule in zip(needs, rules)
            ]

    return vjp


def run(prim: Primitive, *args, **attrs):
    """``prim`` inside a VJP rule: its forward on arrays, the recorded operation when any
    argument is a Tensor (a rule being differentiated, or traced into a plan)."""
    for a in args:
        if isinstance(a, TensorBase):
            return apply(prim, *args, **attrs)
    out = prim.forward(*args, **attrs)
    return out[0] if prim.aux and type(out) is tuple else out  # its result, not what it saved


REGISTRY: dict[str, Primitive] = {}


def register(prim: Primitive) -> Primitive:
    """Add ``prim`` to the registry; a name can be registered once."""
    if prim.name in REGISTRY:
        raise ValueError(f"primitive {prim.name!r} is already registered")
    REGISTRY[prim.name] = prim
    return prim


def primitive(name: str, forward: Callable, vjp, **kw) -> Primitive:
    """Make and register a primitive in one call."""
    return register(Primitive(name, forward, vjp, **kw))


# -- recording: Node and apply --------------------------------------------------------------------
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
        """Each parent's gradient from the rules, run on the saved arrays (no graph): the eager
        backward pass, once per recorded operation."""
        prim, parents, inputs = self.prim, self.parents, self.inputs
        attrs = {**self.attrs, "aux": self.aux} if prim.aux else self.attrs
        grads = prim.vjp_all(g, self.out, [p is not None for p in parents], *inputs, **attrs)
        if type(grads) is not list:
            grads = list(grads)
        i = 0
        for p, gi in zip(parents, grads):
            if p is not None and gi is not None:
                if type(gi) not in ARRAY_TYPES:
                    gi = np.asarray(gi)  # ufuncs return NumPy scalars for 0-d inputs
                shape, dtype = inputs[i].shape, p.data.dtype
                grads[i] = (
                    gi
                    if gi.shape == shape and gi.dtype == dtype
                    else self._fit(gi, i, shape, dtype)
                )
            i += 1
        return grads

    def vjp_tensors(self, g, out, record: bool) -> list:
        """The same rules run on Tensors (the output, the parents, constants for the other
        inputs and the saved arrays), so each operation they perform is a recorded one: a graph
        that can be differentiated again (``record``) and, while tracing, a plan's equations."""
        prim = self.prim
        if record and not prim.higher_order:
            raise GraphError(
                f"{prim.name}: its gradient cannot be differentiated (its VJP runs fused "
                f"kernels); second derivatives, hvp, hessian, jacobian and jvp work through "
                f"the other operations"
            )
        parents = self.parents
        inputs = [
            p if p is not None else (_constant(a) if _is_array(a) else a)
            for p, a in zip(parents, self.inputs)
        ]
        if record and prim.saved is not None:  # saved values as functions of the inputs
            aux = tuple(prim.saved(*inputs, **self.attrs))
        else:
            aux = tuple(_constant(a) for a in self.aux)
        attrs = {**self.attrs, "aux": aux} if prim.aux else self.attrs
        grads = prim.vjp_all(g, out, [p is not None for p in parents], *inputs, **attrs)
        if type(grads) is not list:
            grads = list(grads)
        for i, (p, gi) in enumerate(zip(parents, grads)):
            if p is None or gi is None:
                continue
            if not isinstance(gi, TensorBase):
                gi = _constant(gi if is_array(gi) else asarray(gi, like=inputs[i].data))
            grads[i] = self._fit(gi, i, inputs[i].shape, p.dtype)
        return grads

    def _fit(self, gi, i: int, shape: tuple, dtype):
        """A rule's gradient for input ``i`` in the input's ``shape`` and ``dtype``: a
        broadcasting primitive's summed to the shape (any other shape is an internal error),
        cast where the input's dtype differs (promotion)."""
        if gi.shape != shape:
            if self.prim.broadcasting:
                gi = run(REGISTRY["sum_to"], gi, shape=shape)
            if gi.shape != shape:
                raise GraphError(
                    f"internal error: VJP of {self.prim.name} returned a gradient of shape "
                    f"{gi.shape} for input {i} of shape {shape}"
                )
        if gi.dtype != dtype:
            gi = gi.astype(dtype)
        return gi

    def release(self):
        self.parents = self.inputs = self.out = self.attrs = self.aux = None
        self.released = True


def _is_array(a) -> bool:
    return is_array(a)


def _constant(a):
    """An array as a Tensor that records nothing (a constant of a recorded rule)."""
    return _state.make_tensor(a, None, False)


def _lift(prim, args: tuple) -> list:
    """The operands of an elementwise primitive as arrays in the dtype it computes in
    (PyTorch's type promotion, one rule: ``promotion.py``)."""
    data = [a.data if isinstance(a, TensorBase) else a for a in args]
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

    Returns a Tensor, or a tuple of Tensors for a multi-output primitive. (Every eager operation
    runs this: the usual cases, one or two float arrays of one dtype, take the first branches
    without a loop or a call.)"""
    if _TRACING.active is not None:  # a .grad read inside a traced step: its traced value
        lift = _TRACING.lift
        args = tuple(lift(a) for a in args)
    if prim.composite is not None and _recording(args):
        return prim.composite(*args, **attrs)  # a fused kernel in a graph: what it computes
    arrays = None
    if prim.broadcasting:
        if len(args) == 2:
            a, b = args
            da = a.data if isinstance(a, TensorBase) else a
            db = b.data if isinstance(b, TensorBase) else b
            if type(da) is np.ndarray and type(db) is np.ndarray and da.dtype is db.dtype:
                if da.dtype.kind == "f":
                    arrays = [da, db]
        elif len(args) == 1:
            (a,) = args
            da = a.data if isinstance(a, TensorBase) else a
            if type(da) is np.ndarray and da.dtype.kind == "f":
                arrays = [da]
    if arrays is None:
        arrays = _operands(prim, args)
    try:
        out = prim.forward(*arrays, **attrs)
    except (ShapeError, DTypeError):
        raise
    except (ValueError, IndexError) as e:
        raise _forward_error(prim, arrays, e) from e
    aux = ()
    packed = type(out) is tuple
    if packed:
        if not prim.aux:
            return _apply_multi(prim, args, arrays, attrs, out)
        out, aux = out[0], out[1:]
    if type(out) not in ARRAY_TYPES:
        out = np.asarray(out)  # ufuncs return NumPy scalars for 0-d inputs
    site = None
    if anomaly._Mode.enabled:
        site = anomaly.call_site()
        anomaly.check_forward(prim, arrays, out, site)
    node = None
    if _GradMode.enabled and prim.differentiable:
        k, full = len(args), prim.diff_all
        if 0 < k <= 2 and (full is None or full == k):  # each input has a rule
            a = args[0]
            pa = a if isinstance(a, TensorBase) and a.requires_grad else None
            if k == 1:
                parents = None if pa is None else (pa,)
            else:
                b = args[1]
                pb = b if isinstance(b, TensorBase) and b.requires_grad else None
                parents = None if pa is None and pb is None else (pa, pb)
        else:
            parents = _parents(prim, args)
        if parents is not None:
            node = Node(prim, parents, arrays, out, attrs, aux, site)
    result = _state.make_tensor(out, node, node is not None)
    trace = _TRACING.active
    if trace is not None:
        trace.record_eq(prim, args, arrays, attrs, (result,), aux, packed)
        if prim.effect:
            trace.resnapshot()  # a recorded change (tg.assign): replays repeat it
    return result


def _recording(args) -> bool:
    """Whether an operation on ``args`` is recorded: gradients on and an input needs one."""
    return _GradMode.enabled and any(isinstance(a, TensorBase) and a.requires_grad for a in args)


def _operands(prim, args) -> list:
    """The arrays a primitive's forward takes for ``args`` (not the usual cases ``apply``
    handles inline): an elementwise primitive's lifted to the dtype it computes in, the dtypes
    of the others' checked."""
    if prim.broadcasting:
        arrays = _lift(prim, args)
    else:
        arrays = [a.data if isinstance(a, TensorBase) else a for a in args]
    if len(arrays) > 1:
        _check_dtypes(prim, arrays)
    return arrays


def _forward_error(prim, arrays, e: Exception) -> Exception:
    """A forward's ValueError or IndexError as tapegrad's error, naming the operation and the
    input shapes."""
    shapes = ", ".join(str(getattr(a, "shape", type(a).__name__)) for a in arrays)
    error = IndexOutOfRange if isinstance(e, IndexError) else ShapeError
    said = str(e) if str(e).startswith(f"{prim.name}:") else f"{prim.name}: {e}"
    return error(f"{said} (input shapes: {shapes})")


def _parents(prim, args) -> tuple | None:
    """The recorded node's parents: each input that needs a gradient and has a rule (None for
    the others); None when no input does."""
    rules = (True,) * len(args) if prim.diff_mask is None else prim.diff_mask  # (zip truncates)
    parents = tuple(
        a if has_rule and isinstance(a, TensorBase) and a.requires_grad else None
        for a, has_rule in zip(args, rules)
    )
    return parents if any(p is not None for p in parents) else None


# calling a primitive is apply itself (not a method that calls it: a Python frame fewer on every
# eager operation)
Primitive.__call__ = apply


def _apply_multi(prim, args, arrays, attrs, outs) -> tuple:
    """A multi-output primitive (a fused backward kernel): Tensors that record no graph."""
    if _GradMode.enabled and any(isinstance(a, TensorBase) and a.requires_grad for a in args):
        raise GraphError(
            f"{prim.name}: a fused backward kernel cannot be differentiated (the operation "
            f"whose gradient it computes is first-order only)"
        )
    results = tuple(
        _state.make_tensor(o if is_array(o) else np.asarray(o), None, False) for o in outs
    )
    trace = _TRACING.active
    if trace is not None:
        trace.record_eq(prim, args, arrays, attrs, results, (), True)
    return results
