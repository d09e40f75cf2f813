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

    forward(*arrays, **attrs) -> out                   # or (out, aux) when aux=True
    vjp[i](g, out, *arrays, **attrs) -> grad of input i   # None: input i not differentiable

or, for primitives with a variable number of inputs, a single rule::

    vjp(g, out, needs, *arrays, **attrs) -> sequence of grads   # needs[i]: input i wants one

VJP rules are written with primitives: a rule calls another primitive through :func:`run`,
which is that primitive's forward on ndarrays (the first-order backward pass, no graph) and the
recorded operation on Tensors (``backward(create_graph=True)``, :func:`tapegrad.gradients`), so
the same rule gives first derivatives fast and higher derivatives by differentiating it.
A fused backward kernel is a primitive of its own with its own VJP (``embedding_backward``,
``ce_grad``, ``bce_grad``); primitives whose rules still call kernels directly (convolution,
max pooling, the recurrent scans) say ``higher_order=False``: a gradient graph through them
raises :class:`GraphError` naming them.

With ``aux=True`` the forward returns ``(out, aux)`` and every rule also receives ``aux=aux``.
With ``effect=True`` the forward changes state outside its output (writes into an input, draws
from a generator): compiled plans keep it in place and never drop it as dead code.

With ``broadcasting=True`` the engine undoes broadcasting of each input gradient (one shared
helper, :func:`tapegrad.autodiff.backend.unbroadcast`), checks that float inputs share one dtype,
and lifts Python numbers and integer arrays to the tensors' dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Sample:
    """One input of a primitive's test: positional arrays and keyword attributes."""

    args: tuple
    attrs: dict = field(default_factory=dict)
    atol: float = 1e-6
    """Gradcheck tolerance; raise it only with a comment saying why the math needs it."""


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
        doc: str = "",
    ):
        self.name = name
        self.effect = effect
        self.higher_order = higher_order
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
    argument is a Tensor (a rule being differentiated)."""
    for a in args:
        if isinstance(a, _Tensor):
            return _engine_apply(prim, *args, **attrs)
    return prim.forward(*args, **attrs)


class _Tensor:  # replaced by the Tensor class when the engine is imported (as _engine_apply)
    pass


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
