"""Fusion: rewrite pairs of operations named by one table into one fused primitive.

Run while tracing, when ``backward()`` starts: a node whose primitive and whose first parent's
primitive form a pattern of ``primitives/fused.py``'s table, the parent read by that node alone,
becomes one node of the fused primitive, and so does its equation.
"""

from __future__ import annotations

import numpy as np

from ..graph import Node
from ..primitives.fused import FUSIONS
from ..tensor import Tensor


def fuse(trace, order: list[Tensor], targets=None) -> None:
    """Rewrite the graph about to be differentiated by the fusion table: a node whose
    primitive and whose first parent's primitive form a pattern of ``FUSIONS``, the parent
    read by that node alone, becomes one node of the fused primitive (over the parent's
    inputs), and so does its equation. See ``primitives/fused.py``."""
    uses: dict[int, int] = {}
    for t in order:
        if t._node is not None:
            for p in t._node.parents:
                if p is not None:
                    uses[id(p)] = uses.get(id(p), 0) + 1
    for (first_name, second_name), rule in FUSIONS.items():
        for t in order:
            node = t._node
            if node is None or node.prim.name != second_name or node.parents[0] is None:
                continue
            p = node.parents[0]
            first = p._node
            if (
                first is None
                or first.prim.name != first_name
                or uses.get(id(p)) != 1
                or p._retain
                or (targets is not None and id(p) in targets)
                or id(t) not in trace.var_of
            ):
                continue
            fused = rule(first, node)
            if fused is None:
                continue
            prim, attrs = fused
            res = prim.forward(*first.inputs, **attrs)
            out, aux = (res[0], res[1:]) if type(res) is tuple else (res, ())
            if not np.array_equal(out, t.data, equal_nan=True):
                continue  # cannot happen by the kernels' construction; never trust it blindly
            t._node = Node(prim, first.parents, first.inputs, t.data, attrs, tuple(aux))
            eq = trace.eq_of[trace.var_of[id(t)]]
            eq.prim, eq.ins, eq.attrs = prim, trace.eq_of[trace.var_of[id(p)]].ins, attrs
            eq.packed = type(res) is tuple
            del eq.outs[1:]  # the second's saved arrays: the fused forward saves its own
            for a in aux:
                v = trace.new_var(Tensor._make(a, None, False))
                eq.outs.append(v)
                trace.eq_of[v] = eq
