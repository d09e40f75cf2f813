"""Replay: a trace turned into a flat program over buffers allocated once.

:class:`Plan` runs the passes over a trace (dead code, lifetimes, buffers) and binds each
equation's forward to its input arrays and output buffers; a replay copies the inputs in and
calls the program in order, so compiled results are eager's bits and a steady step allocates
(almost) nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .. import anomaly
from ..backend import device_of, is_array, xp_of
from ..errors import TraceError
from ..primitives.registry import Workspace
from ..tensor import Tensor
from .deadcode import _live_events
from .fusion import fuse
from .guards import _PLAIN, _Guards, _same
from .memory import _dense, _laid_out_like, _lifetimes, _Pool, _start, _view_source
from .trace import CONST, EXT, GRAD, VAR, Eq, Reduce, Sink, Trace, _spec_vars


def _equal_after_cast(x: np.ndarray, c: np.ndarray) -> bool:
    if x.dtype == c.dtype:
        return np.array_equal(x, c)
    with np.errstate(all="ignore"):
        return bool(np.array_equal(x.astype(c.dtype), c)) and np.array_equal(x, c.astype(x.dtype))


class Plan:
    """A trace turned into a flat program over buffers allocated once (see the module
    docstring): ``program`` is a list of calls, each an equation's forward bound to its input
    arrays and output buffers, a sink, an effect, or a reduction."""

    def __init__(self, trace: Trace, input_tensors: list[Tensor], outputs, captured=()):
        self.guards = list(trace.guards.values())
        self.epoch = _Guards.epoch
        self.captured = [(what, get, get()) for what, get in captured]
        self.inputs = input_tensors
        self.out_spec = outputs
        self.input_vals = [t.data for t in input_tensors]
        self._check_constants(trace)
        events = _live_events(fuse(trace.values, trace.events), self.out_spec)
        self.eqs = [e for e in events if isinstance(e, Eq)]
        root, views, dies = _lifetimes(trace, events, self.out_spec)
        self.vals: dict[int, np.ndarray] = dict(zip(trace.inputs, self.input_vals))
        self.leaf_grads: dict[int, np.ndarray] = self._reduction_buffers(events)
        direct = self._direct_sinks(trace, events, root)
        self.ext_arrays: list[tuple[Tensor, np.ndarray]] = []
        self.allocating: list[str] = []  # equations whose forward allocates (then copied)
        pool, blocks = _Pool(), {}
        program: list[Callable] = []
        labels: list[str] = []  # what each step is, for profiles (benchmarks/profile_step.py)
        checks: list = []  # (equation, input arrays, output arrays) of each step, for anomalies

        def emit(step: Callable, label: str, check=None) -> None:
            program.append(step)
            labels.append(label)
            checks.append(check)

        for i, e in enumerate(events):
            if isinstance(e, Eq):
                ins = [self._array(r) for r in e.ins]
                k = views.get(e.outs[0])
                if k is not None and e.prim.effect:  # it writes into that input (tg.assign)
                    self.vals[e.outs[0]] = ins[k]
                    if any(type(a) is _LiveGrad for a in ins):  # an optimiser's update
                        emit(_live_call(e, ins), _label(e, ins))
                    else:
                        emit(
                            functools.partial(e.prim.forward, *ins, **e.attrs),
                            _label(e, ins),
                            (e, ins, [ins[k]]),
                        )
                    self._release(dies, i, pool, blocks)
                    continue
                if k is not None:  # a view of an input: taken once, here
                    view = e.prim.forward(*ins, **e.attrs)
                    if _view_source(view, ins) is not None:
                        self.vals[e.outs[0]] = view
                        self._release(dies, i, pool, blocks)
                        continue
                outs = []
                for v in e.outs:
                    if v in direct:  # a gradient computed straight into its leaf's .grad
                        buf = self.leaf_grads[id(direct[v])]
                        self.vals[v] = _laid_out_like(
                            trace.values[v], buf.reshape(-1).view(np.uint8)
                        )
                        emit(functools.partial(_make_room, direct[v], buf), "gradient buffer")
                    else:
                        self.vals[v], blocks[v] = pool.take(trace.values[v])
                    outs.append(self.vals[v])
                emit(_bound(e, ins, outs), _label(e, ins), (e, ins, outs))
                if not e.prim.writes_out:
                    self.allocating.append(e.prim.name)
            elif isinstance(e, Sink):
                g = self._array(e.grad)
                if e.grad[0] == VAR and direct.get(e.grad[1]) is e.tensor:
                    buf = self.leaf_grads[id(e.tensor)]
                    assert _start(g) == _start(buf) and g.strides == buf.strides
                    emit(functools.partial(_deliver_in_place, e.tensor, buf), "gradient sink")
                else:
                    emit(self._sink(e.tensor, g), "gradient sink")
            elif isinstance(e, Reduce):
                emit(functools.partial(e.fn, self.vals[e.loss]), "reduction")
            else:
                emit(e.fn, "call " + getattr(e.fn, "__qualname__", "?"))
            self._release(dies, i, pool, blocks)
        self.program, self.labels, self.checks = program, labels, checks
        self.buffer_bytes = pool.allocated
        self.ext_arrays = list({id(t): (t, a) for t, a in self.ext_arrays}.values())

    @staticmethod
    def _release(dies, i, pool, blocks) -> None:
        for r in dies.get(i, ()):
            pool.give(blocks.pop(r, None))

    def _array(self, ref):
        kind, p = ref
        if kind == VAR:
            return self.vals[p]
        if kind == EXT:
            self.ext_arrays.append((p, p.data))
            return p.data
        if kind == GRAD:
            return _LiveGrad(p)
        return p

    def _reduction_buffers(self, events) -> dict:
        """Let a gradient reduction choose where the leaves' gradients accumulate (one flat
        buffer it reduces in place); the leaves it does not claim get their own buffers."""
        leaves = list({id(e.tensor): e.tensor for e in events if isinstance(e, Sink)}.values())
        out = {}
        for e in events:
            if isinstance(e, Reduce) and hasattr(e.fn, "buffers"):
                out.update(e.fn.buffers(leaves))
        return out

    def _direct_sinks(self, trace: Trace, events: list, root: dict) -> dict:
        """Gradients an equation can compute straight into their leaf's ``.grad`` buffer:
        ``{var: tensor}`` for the value whose buffer becomes the leaf's, for the first sink of
        each tensor whose value nothing else reads (directly or through views of it) and which
        lies in that buffer exactly as the leaf's gradient does. Saves a copy of every such
        gradient on every replay (a 4 MiB embedding table's, for one)."""
        made = {v for e in events if isinstance(e, Eq) for v in e.outs}
        reads: dict[int, int] = {}  # root -> reads of it or its views, other than taking views
        for e in events:
            refs = e.ins if isinstance(e, Eq) else [e.grad] if isinstance(e, Sink) else []
            for kind, p in refs:
                if kind == VAR and root[p] is not None:
                    if isinstance(e, Eq) and root[e.outs[0]] == root[p]:
                        continue  # a view of it
                    reads[root[p]] = reads.get(root[p], 0) + 1
        keep = {root[v] for v in _spec_vars(self.out_spec)}
        direct, seen = {}, set()
        for e in events:
            if not isinstance(e, Sink) or id(e.tensor) in seen:
                continue
            seen.add(id(e.tensor))
            kind, v = e.grad
            r = root.get(v) if kind == VAR else None
            if r is None or r not in made or reads.get(r) != 1 or r in keep or r in direct:
                continue
            buf = self.leaf_grads.get(id(e.tensor))
            if buf is None:
                buf = self.leaf_grads[id(e.tensor)] = np.empty_like(e.tensor.data)
            value, base = trace.values[v], trace.values[r]
            if (
                (value.shape, value.dtype, value.strides) == (buf.shape, buf.dtype, buf.strides)
                and _start(value) == _start(base)
                and base.nbytes == buf.nbytes
                and _dense(base)
                and buf.flags.c_contiguous
            ):
                direct[r] = e.tensor
                direct[v] = e.tensor
        return direct

    def _sink(self, t: Tensor, g: np.ndarray) -> Callable:
        buf = self.leaf_grads.get(id(t))
        if buf is None:
            buf = self.leaf_grads[id(t)] = np.empty_like(t.data)

        def deliver():
            if t._grad is None:
                np.copyto(buf, g)
                t._grad = buf
            else:
                t._grad += g

        return deliver

    def _check_constants(self, trace: Trace) -> None:
        # An array made from an input outside tapegrad's operations (y.astype(...), np.asarray
        # of .data) would be frozen into the plan: catch the usual cases, a copy or a cast of
        # an input, by comparing every constant with the inputs (cast to its dtype).
        for e in trace.events:
            if not isinstance(e, Eq):
                continue
            for kind, c in e.ins:
                if kind != CONST or not is_array(c) or c.size < 2:
                    continue
                for k, x in enumerate(self.input_vals):
                    if (
                        x.shape == c.shape
                        and device_of(x) is device_of(c)
                        and _equal_after_cast(x, c)
                    ):
                        raise TraceError(
                            f"compile: {e.prim.name} received a constant equal to input {k} "
                            f"(shape {c.shape}): it was made from the input outside tapegrad "
                            f"operations (e.g. .astype() or np.asarray on .data), so the plan "
                            f"would reuse this call's values forever. Convert inputs before "
                            f"calling the compiled function, or use tapegrad operations"
                        )

    # -- replay --------------------------------------------------------------------------------
    def stale(self) -> str | None:
        """What changed since tracing that this plan depends on, or None (see the guards in
        the module docstring)."""
        if self.epoch != _Guards.epoch:
            for state_fn, state, explain in self.guards:
                if not _same(state_fn(), state):
                    return explain(state)
            self.epoch = _Guards.epoch
        for what, get, value in self.captured:
            now = get()
            if now is not value and not _same(now, value):
                if isinstance(value, _PLAIN) and isinstance(now, _PLAIN):
                    return f"{what} changed from {value!r} to {now!r}"
                return f"{what} now refers to another object"
        for t, a in self.ext_arrays:
            if t.data is not a:
                return f"the array of a {type(t).__name__} of shape {t.data.shape} was replaced"
        return None

    def run(self, leaves):
        for buf, a in zip(self.input_vals, leaves):
            np.copyto(buf, a.data if isinstance(a, Tensor) else a)
        if anomaly._Mode.enabled:
            self._run_checked()
        else:
            for step in self.program:
                step()
        return _unflatten(self.out_spec, self)

    def _run_checked(self) -> None:
        """A replay under ``detect_anomaly()``: the first equation that turns finite inputs
        into a NaN or Inf raises :class:`AnomalyError` naming it and where it was traced."""
        for step, check in zip(self.program, self.checks):
            step()
            if check is None:
                continue
            e, ins, outs = check
            bad = next((o for o in outs if not anomaly._finite(o)), None)
            if bad is None or not all(anomaly._finite(a) for a in ins):
                continue
            what = "NaN" if np.isnan(bad).any() else "Inf"
            raise anomaly.AnomalyError(
                f"{e.prim.name} produced {what} in a compiled replay from finite inputs "
                f"(input shapes: {anomaly._describe(ins)}), recorded at {e.site} "
                f"(a line that calls backward() means the backward pass)"
            )


class _LiveGrad:
    """An input that is ``tensor.grad`` as it is when the equation runs (see ``GRAD``)."""

    __slots__ = ("tensor", "shape")

    def __init__(self, tensor: Tensor):
        self.tensor, self.shape = tensor, tensor.data.shape


def _live_call(e: Eq, ins: list) -> Callable:
    """``e``'s forward over ``ins``, the gradients among them read when it runs."""
    forward, attrs, args = e.prim.forward, e.attrs, list(ins)
    live = [(i, a.tensor) for i, a in enumerate(ins) if type(a) is _LiveGrad]

    def run():
        for i, t in live:
            args[i] = t._grad
        forward(*args, **attrs)

    return run


def _label(e: Eq, ins: list) -> str:
    shapes = ", ".join(str(tuple(a.shape)) if hasattr(a, "shape") else repr(a) for a in ins)
    return f"{e.prim.name}({shapes})"


def _make_room(t: Tensor, buf: np.ndarray) -> None:
    """Before an equation computes ``t``'s gradient into ``t``'s own gradient buffer: if
    ``.grad`` still holds that buffer (gradients accumulating over calls, no ``zero_grad``),
    move what it holds aside first."""
    if t._grad is buf:
        t._grad = buf.copy()


def _deliver_in_place(t: Tensor, buf: np.ndarray) -> None:
    """The sink of a gradient already computed into ``t``'s gradient buffer."""
    if t._grad is None:
        t._grad = buf
    else:
        t._grad += buf


def _bound(e: Eq, ins: list, outs: list) -> Callable:
    """``e``'s forward bound to its arrays: called with nothing, it writes into ``outs``."""
    prim, attrs = e.prim, e.attrs
    out = tuple(outs) if e.packed else outs[0]
    if prim.bind is not None and not e.packed:  # the forward's decisions taken once, here
        call = prim.bind(*ins, out=out, **attrs)
        if call is not None:
            return call
    if prim.writes_out:
        kw = dict(attrs, out=out)
        if prim.uses_ws:
            kw["ws"] = Workspace(xp_of(*ins, *outs))
        return functools.partial(prim.forward, *ins, **kw)

    def run():  # a forward that only allocates (a custom operation, a rare one): copy its result
        res = prim.forward(*ins, **attrs)
        for buf, r in zip(outs, res if type(res) is tuple else (res,)):
            np.copyto(buf, r)

    return run


def _unflatten(spec, plan: Plan):
    kind = spec[0]
    if kind == "var":
        return Tensor._make(plan.vals[spec[1]], None, False)
    if kind == "seq":
        items = [_unflatten(s, plan) for s in spec[2]]
        return spec[1](*items) if hasattr(spec[1], "_fields") else spec[1](items)
    if kind == "dict":
        return {k: _unflatten(s, plan) for k, s in spec[1].items()}
    return spec[1]
