"""Compiled plans: trace a function once per input signature, then replay it.

``tapegrad.compile(fn)`` runs ``fn`` once for real while recording what happens, in order:
every primitive call (an *equation*: primitive, input references, attributes, output), every
``backward()`` (with its topological order), and every side effect that registered itself
(optimiser ``zero_grad``/``step``). That record is the plan. Later calls with inputs of the same
shapes and dtypes copy the inputs into the plan's input buffers and replay the record: no
tensors or nodes are built, nothing is sorted, and each equation runs a kernel chosen for it
once. A new input signature (a smaller last batch) is traced into a plan of its own.

Inputs of a plan are its arguments; parameters and other tensors made outside ``fn`` are read
live (optimisers update them in place); arrays made inside ``fn`` that do not come from
tapegrad operations are constants of the plan. Python control flow on a traced value
(``if loss > 0``, ``loss.item()``) cannot be replayed and raises :class:`TraceError` while
tracing. The tensors a compiled function returns are views of the plan's buffers: the next
call overwrites them (copy what you keep).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from . import tensor as _tensor_mod
from .tensor import Tensor


class TraceError(RuntimeError):
    """Something in a traced function cannot be replayed faithfully."""


VAR, EXT, CONST = 0, 1, 2


class Eq:
    """One recorded primitive call."""

    __slots__ = ("prim", "ins", "attrs", "out", "needs", "kernel")

    def __init__(self, prim, ins, attrs, out, needs):
        self.prim = prim
        self.ins = ins  # list of (kind, payload): (VAR, var), (EXT, tensor), (CONST, array)
        self.attrs = attrs
        self.out = out  # var index of the output
        self.needs = needs  # per input: does a gradient flow to it
        self.kernel = None


class Backward:
    __slots__ = ("root", "gradient", "order")

    def __init__(self, root, gradient, order):
        self.root, self.gradient, self.order = root, gradient, order


class Call:
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Trace:
    """What a traced call did; built by the hooks in ``graph.apply`` and ``graph.backward``."""

    def __init__(self):
        self.events: list = []
        self.var_of: dict[int, int] = {}  # id(tensor) -> var
        self.var_of_data: dict[int, int] = {}  # id(array) -> var (arrays a var holds)
        self.keep: list = []  # keeps traced tensors alive so ids stay unique
        self.n_vars = 0
        self.inputs: list[int] = []
        self.made_inside: set[int] = set()  # ids of tensors constructed while tracing

    def new_var(self, t: Tensor) -> int:
        v = self.n_vars
        self.n_vars += 1
        self.var_of[id(t)] = v
        self.var_of_data[id(t.data)] = v
        self.keep.append(t)
        return v

    def is_traced(self, t) -> bool:
        return id(t) in self.var_of

    def ref(self, arg, array):
        if isinstance(arg, Tensor):
            v = self.var_of.get(id(arg))
            if v is not None:
                return (VAR, v)
            if id(arg) not in self.made_inside:
                return (EXT, arg)  # a parameter or a tensor captured from outside: read live
            array = arg.data  # made while tracing: a view of a traced array, or a constant
        v = self.var_of_data.get(id(array))
        if v is not None:
            return (VAR, v)
        return (CONST, array)

    def record_eq(self, prim, args, arrays, attrs, result: Tensor, parents) -> None:
        ins = [self.ref(a, arr) for a, arr in zip(args, arrays)]
        needs = tuple(p is not None for p in parents) if parents else (False,) * len(ins)
        out = self.new_var(result)
        self.events.append(Eq(prim, ins, attrs, out, needs))

    def record_backward(self, root: Tensor, gradient, order: list[Tensor]) -> None:
        if id(root) not in self.var_of:
            raise TraceError("backward() of a tensor computed outside the compiled function")
        items = []
        for t in reversed(order):
            v = self.var_of.get(id(t))
            items.append((VAR, v) if v is not None else (EXT, t))
        self.events.append(Backward(self.var_of[id(root)], gradient, items))

    def record_call(self, fn: Callable) -> None:
        self.events.append(Call(fn))


def effect(fn: Callable[[], object]):
    """Run ``fn`` now and, while tracing, record it so every replay runs it at this point.

    Optimisers wrap ``step`` and ``zero_grad`` with this, which is what lets a compiled
    training step contain them.
    """
    trace = _tensor_mod._TRACING.active
    if trace is None:
        return fn()
    trace.record_call(fn)
    _tensor_mod._TRACING.active = None  # an effect is opaque: nothing inside it is traced
    try:
        return fn()
    finally:
        _tensor_mod._TRACING.active = trace


def _signature(args) -> tuple:
    key = []
    for a in args:
        if isinstance(a, Tensor):
            key.append(("t", a.data.shape, a.data.dtype.str, a.requires_grad))
        elif isinstance(a, np.ndarray):
            key.append(("a", a.shape, a.dtype.str))
        else:
            try:
                hash(a)
            except TypeError:
                raise TraceError(
                    f"compile: argument of type {type(a).__name__} is neither an array nor "
                    f"hashable; pass arrays/Tensors, or close over the value"
                ) from None
            key.append(("v", a))
    return tuple(key)


class Plan:
    """A trace turned into something to replay: resolved references and per-equation state."""

    def __init__(self, trace: Trace, input_tensors: list[Tensor], outputs):
        self.events = trace.events
        self.inputs = input_tensors  # persistent input buffers (their .data is copied into)
        self.input_vars = list(trace.inputs)
        self.n_vars = trace.n_vars
        self.out_spec = outputs
        self.eq_of: dict[int, Eq] = {e.out: e for e in self.events if isinstance(e, Eq)}
        self.leaf_grads: dict[int, np.ndarray] = {}  # id(param) -> persistent grad buffer
        self._check_constants(trace)
        # the Node each equation's VJP rule runs through, refreshed on every replay
        from .graph import Node

        self.nodes: dict[int, Node] = {}
        for e in self.events:
            if isinstance(e, Eq) and any(e.needs):
                self.nodes[e.out] = Node(
                    e.prim, tuple(True if n else None for n in e.needs), None, None, e.attrs, None
                )
        self.vals: list = [None] * self.n_vars
        self.aux: list = [None] * self.n_vars

    def _check_constants(self, trace: Trace) -> None:
        # An array made from an input outside tapegrad's operations (y.astype(...), np.asarray
        # of .data) would be frozen into the plan: catch the usual case, a copy or cast of an
        # input, by comparing every constant with the inputs.
        inputs = [t.data for t in self.inputs]
        for e in self.events:
            if not isinstance(e, Eq):
                continue
            for kind, c in e.ins:
                if kind != CONST or not isinstance(c, np.ndarray) or c.size < 2:
                    continue
                for k, x in enumerate(inputs):
                    if x.shape == c.shape and np.array_equal(x, c):
                        raise TraceError(
                            f"compile: {e.prim.name} received a constant equal to input {k} "
                            f"(shape {c.shape}): it was made from the input outside tapegrad "
                            f"operations (e.g. .astype() or np.asarray on .data), so the plan "
                            f"would reuse this call's values forever. Convert inputs before "
                            f"calling the compiled function, or use tapegrad operations"
                        )

    # -- replay ------------------------------------------------------------------------------
    def _value(self, ref):
        kind, p = ref
        if kind == VAR:
            return self.vals[p]
        if kind == EXT:
            return p.data
        return p

    def run(self, args):
        vals, aux = self.vals, self.aux
        for t, v, a in zip(self.inputs, self.input_vars, (a for a in args if _is_array(a))):
            np.copyto(t.data, a.data if isinstance(a, Tensor) else a)
            vals[v] = t.data
        for e in self.events:
            if isinstance(e, Eq):
                arrays = [self._value(r) for r in e.ins]
                out = e.prim.forward(*arrays, **e.attrs)
                if e.prim.aux:
                    out, aux[e.out] = out
                if type(out) is not np.ndarray:
                    out = np.asarray(out)
                vals[e.out] = out
                node = self.nodes.get(e.out)
                if node is not None:
                    node.inputs, node.out, node.aux = arrays, out, aux[e.out]
            elif isinstance(e, Backward):
                self._backward(e)
            else:
                e.fn()
        return _unflatten(self.out_spec, self)

    def _backward(self, b: Backward) -> None:
        root = self.vals[b.root]
        grads: dict = {("v", b.root): np.ones_like(root) if b.gradient is None else b.gradient}
        for kind, p in b.order:
            if kind == EXT:
                g = grads.pop(("e", id(p)), None)
                if g is not None:
                    self._accumulate_leaf(p, g)
                continue
            g = grads.pop(("v", p), None)
            if g is None:
                continue
            e = self.eq_of[p]
            for (rk, rp), need, gi in zip(e.ins, e.needs, self.nodes[p].vjp(g)):
                if not need or gi is None:
                    continue
                key = ("v", rp) if rk == VAR else ("e", id(rp))
                prev = grads.get(key)
                grads[key] = gi if prev is None else prev + gi

    def _accumulate_leaf(self, t: Tensor, g: np.ndarray) -> None:
        if t._grad is None:
            buf = self.leaf_grads.get(id(t))
            if buf is None or buf.shape != t.data.shape:
                buf = self.leaf_grads[id(t)] = np.empty_like(t.data)
            np.copyto(buf, g)
            t._grad = buf
        else:
            t._grad += g


def _is_array(a) -> bool:
    return isinstance(a, (Tensor, np.ndarray))


def _flatten_outputs(out, trace: Trace):
    """Describe ``fn``'s return value so replays rebuild it from the plan's values."""
    if isinstance(out, Tensor):
        v = trace.var_of.get(id(out))
        if v is None:
            return ("const", out)
        return ("var", v, out.requires_grad)
    if isinstance(out, (tuple, list)):
        return ("seq", type(out), [_flatten_outputs(o, trace) for o in out])
    if isinstance(out, dict):
        return ("dict", {k: _flatten_outputs(o, trace) for k, o in out.items()})
    if out is None or isinstance(out, (int, float, str, bool)):
        return ("const", out)
    raise TraceError(f"compile: cannot return a {type(out).__name__} from a compiled function")


def _unflatten(spec, plan: Plan):
    kind = spec[0]
    if kind == "var":
        return Tensor._make(plan.vals[spec[1]], None, False)
    if kind == "seq":
        return spec[1](_unflatten(s, plan) for s in spec[2])
    if kind == "dict":
        return {k: _unflatten(s, plan) for k, s in spec[1].items()}
    return spec[1]


class CompiledFunction:
    """``fn`` with one plan per input signature; see :func:`compile`."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.plans: dict[tuple, Plan] = {}
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        key = _signature(args)
        plan = self.plans.get(key)
        if plan is not None:
            return plan.run(args)
        return self._trace(key, args)

    def _trace(self, key, args):
        if _tensor_mod._TRACING.active is not None:
            raise TraceError("compile: a compiled function called while another is tracing")
        trace = Trace()
        call_args, inputs = [], []
        for a in args:
            if _is_array(a):
                data = a.data if isinstance(a, Tensor) else a
                t = Tensor._make(
                    np.array(data, copy=True), None, bool(isinstance(a, Tensor) and a.requires_grad)
                )
                trace.inputs.append(trace.new_var(t))
                inputs.append(t)
                call_args.append(t)
            else:
                call_args.append(a)
        _tensor_mod._TRACING.active = trace
        try:
            out = self.fn(*call_args)
        finally:
            _tensor_mod._TRACING.active = None
        self.plans[key] = Plan(trace, inputs, _flatten_outputs(out, trace))
        return out

    def clear(self) -> None:
        """Forget every plan (they are rebuilt on the next calls)."""
        self.plans.clear()


def compile(fn: Callable) -> CompiledFunction:  # noqa: A001 - the public name users expect
    """Trace ``fn`` on its first call per input signature; replay the plan on later calls.

    Use it on a whole training step (forward, ``backward()``, optimiser ``step()``). See the
    module docstring for what can and cannot be traced.
    """
    if isinstance(fn, CompiledFunction):
        return fn
    return CompiledFunction(fn)
