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
    vjp[i](g, out, *inputs, **attrs) -> grad of input i   # None: input i not differentiable

or, for primitives with a variable number of inputs, a single rule::

    vjp(g, out, needs, *inputs, **attrs) -> sequence of grads   # needs[i]: input i wants one

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
arrays to the tensors' dtype.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import xp_of


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
        "higher_order",
        "effect",
        "saved",
        "composite",
        "writes_out",
        "uses_ws",
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
        doc: str = "",
    ):
        self.name = name
        self.forward = forward
        if vjp is None:
            self.vjps, self.vjp_all, self.differentiable = (), None, False
        elif callable(vjp):
            self.vjps, self.vjp_all, self.differentiable = (), vjp, True
        else:
            self.vjps, self.vjp_all = tuple(vjp), None
            self.differentiable = any(v is not None for v in self.vjps)
        self.diff_mask = (
            None if self.vjp_all is not None else tuple(v is not None for v in self.vjps)
        )
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
        self.doc = doc or f"The ``{name}`` primitive."

    def differentiable_input(self, i: int) -> bool:
        if self.vjp_all is not None:
            return True
        return i < len(self.vjps) and self.vjps[i] is not None

    def __call__(self, *args: Any, **attrs: Any):
        return _engine_apply(self, *args, **attrs)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def run(prim: Primitive, *args, **attrs):
    """``prim`` inside a VJP rule: its forward on arrays, the recorded operation when any
    argument is a Tensor (a rule being differentiated, or traced into a plan)."""
    for a in args:
        if isinstance(a, _Tensor):
            return _engine_apply(prim, *args, **attrs)
    out = prim.forward(*args, **attrs)
    return out[0] if prim.aux and type(out) is tuple else out  # its result, not what it saved


def differentiating(g) -> bool:
    """Whether a rule runs to build a gradient graph (its output cotangent ``g`` is a Tensor
    and operations record): then it must compute from the inputs what its forward saved, so
    that the saved values' dependence on the inputs is differentiated too."""
    return isinstance(g, _Tensor) and _recording()


class _Tensor:  # replaced by the Tensor class when the engine is imported (as _engine_apply)
    pass


def _recording() -> bool:  # replaced by ``graph.is_grad_enabled`` when the engine is imported
    return False


def _engine_apply(prim, *args, **attrs):
    # Replaced by ``graph.apply`` when the engine is imported (the registry sits below the graph).
    from ..graph import apply

    return apply(prim, *args, **attrs)


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
