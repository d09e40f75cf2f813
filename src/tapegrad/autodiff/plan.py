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

A plan never replays stale state or silently skips work:

* **Guards.** Each plan remembers what it was traced under: the train/eval mode and the
  parameter and sub-module objects of every module called, and the Python values the function
  reads from its closure and globals (and those of helper functions of the same module). A
  replay first checks them; on a change the function is traced again (up to
  ``MAX_PLANS`` plans are kept per input signature, so switching train/eval back and forth
  costs nothing after the first time). :attr:`CompiledFunction.retraces` says why each re-trace
  happened.
* **Refusals at trace time** (:class:`TraceError`, with what to write instead): arrays of
  tensors the plan reads (parameters) or their ``.grad`` changed outside tapegrad operations
  and recorded effects (``p.data -= lr * p.grad``, NumPy clipping); random draws from NumPy's
  global generator or from a ``Generator`` the step reaches directly (use tapegrad's random
  operations, which every replay draws afresh); ``global``/``nonlocal`` assignments in the
  function. Optimiser steps, ``zero_grad``, gradient clipping and anything wrapped in
  :func:`effect` are recorded and replayed.
"""

from __future__ import annotations

import dis
import functools
import types
import warnings
from collections.abc import Callable

import numpy as np

from . import tensor as _tensor_mod
from .tensor import Tensor


class TraceError(RuntimeError):
    """Something in a traced function cannot be replayed faithfully."""


VAR, EXT, CONST = 0, 1, 2


class Eq:
    """One recorded primitive call."""

    __slots__ = ("prim", "ins", "attrs", "out", "needs")

    def __init__(self, prim, ins, attrs, out, needs):
        self.prim = prim
        self.ins = ins  # list of (kind, payload): (VAR, var), (EXT, tensor), (CONST, array)
        self.attrs = attrs
        self.out = out  # var index of the output
        self.needs = needs  # per input: does a gradient flow to it


class Backward:
    __slots__ = ("root", "gradient", "order")

    def __init__(self, root, gradient, order):
        self.root, self.gradient, self.order = root, gradient, order


class Call:
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Reduce:
    """A gradient reduction (see :func:`reduce_gradients`) and the loss it is handed."""

    __slots__ = ("fn", "loss")

    def __init__(self, fn, loss):
        self.fn, self.loss = fn, loss


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
        # What a replay must find unchanged (see the module docstring): state functions of the
        # objects the step used (modules), and snapshots of the tensors it reads live.
        self.guards: dict[int, tuple] = {}  # id(owner) -> (state_fn, state, what)
        self.watched: dict[int, tuple] = {}  # id(tensor) -> _snapshot(tensor)
        self.rngs: dict[int, tuple] = {}  # id(generator) -> (generator, state before)
        self.rngs_of_ops: set[int] = set()  # generators tapegrad operations drew from

    # -- what replays depend on ------------------------------------------------------------
    def guard(self, owner, state_fn: Callable[[], tuple], explain: Callable[[tuple], str]):
        """Record ``state_fn()`` (compared by identity, numbers by value) as a condition of
        replaying the plan; ``explain(old_state)`` says what changed when it no longer holds.
        Modules call this with their train/eval mode and parameter objects."""
        if id(owner) not in self.guards:
            self.guards[id(owner)] = (state_fn, state_fn(), explain)  # state_fn keeps owner
            for v in vars(owner).values():
                if isinstance(v, np.random.Generator):
                    self.note_rng(v)

    def note_rng(self, gen: np.random.Generator) -> None:
        if id(gen) not in self.rngs:
            self.rngs[id(gen)] = (gen, gen.bit_generator.state)

    def watch(self, t: Tensor) -> None:
        if id(t) not in self.watched:
            self.watched[id(t)] = _snapshot(t)

    def resnapshot(self) -> None:
        """After a recorded change (backward, an effect): the new state is the expected one."""
        for k, w in self.watched.items():
            self.watched[k] = _snapshot(w[0])

    def check_untouched(self, where: str) -> None:
        """Refuse changes to live-read tensors that no replay would repeat."""
        for t, data, data0, g, g0 in self.watched.values():
            what = f"{type(t).__name__} of shape {t.data.shape}"
            if t.data is not data or t.data.tobytes() != data0:
                raise TraceError(
                    f"compile: the array of a {what} that the step reads was changed outside "
                    f"tapegrad operations while tracing ({where}), e.g. `p.data -= lr * p.grad`: "
                    f"a plan replays only tapegrad operations and recorded effects, so that "
                    f"change would happen once. Update parameters with an optimizer from "
                    f"tapegrad.optim, or wrap the update in tg.effect(fn), which every replay runs"
                )
            if t._grad is not g or (g is not None and g.tobytes() != g0):
                raise TraceError(
                    f"compile: the gradient (.grad) of a {what} was changed outside tapegrad "
                    f"operations while tracing ({where}), e.g. clipped or scaled with NumPy: a "
                    f"plan would not repeat that. Use tapegrad.optim.clip_grad_norm_ / "
                    f"clip_grad_value_ (replayed), or wrap the change in tg.effect(fn)"
                )

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
                self.watch(arg)
                return (EXT, arg)  # a parameter or a tensor captured from outside: read live
            array = arg.data  # made while tracing: a view of a traced array, or a constant
        v = self.var_of_data.get(id(array))
        if v is not None:
            return (VAR, v)
        return (CONST, array)

    def record_eq(self, prim, args, arrays, attrs, result: Tensor, parents) -> None:
        ins = [self.ref(a, arr) for a, arr in zip(args, arrays)]
        for v in attrs.values():
            if isinstance(v, np.random.Generator):
                self.rngs_of_ops.add(id(v))  # a random operation: replays draw afresh
        needs = tuple(p is not None for p in parents) if parents else (False,) * len(ins)
        out = self.new_var(result)
        self.events.append(Eq(prim, ins, attrs, out, needs))

    def record_backward(self, root: Tensor, gradient, order: list[Tensor]) -> None:
        if id(root) not in self.var_of:
            raise TraceError("backward() of a tensor computed outside the compiled function")
        self.check_untouched("before backward()")
        items = []
        for t in reversed(order):
            v = self.var_of.get(id(t))
            items.append((VAR, v) if v is not None else (EXT, t))
        self.events.append(Backward(self.var_of[id(root)], gradient, items))

    def record_call(self, fn: Callable) -> None:
        self.events.append(Call(fn))


def effect(fn: Callable[[], object], name: str | None = None):
    """Run ``fn`` now and, while tracing, record it so every replay runs it at this point.

    Optimisers wrap ``step`` and ``zero_grad`` with this, and so does gradient clipping, which
    is what lets a compiled training step contain them. Wrap any other update a step makes to
    arrays outside tapegrad operations (a hand-written parameter update, a counter) the same
    way: ``tg.effect(lambda: sgd_update(params))``. What ``fn`` returns is returned now only.
    ``name`` names the effect in messages (default: ``fn``'s name).
    """
    trace = _tensor_mod._TRACING.active
    if trace is None:
        return fn()
    trace.check_untouched(f"before {name or getattr(fn, '__qualname__', 'an effect')}")
    trace.record_call(fn)
    _tensor_mod._TRACING.active = None  # an effect is opaque: nothing inside it is traced
    try:
        return fn()
    finally:
        _tensor_mod._TRACING.active = trace
        trace.resnapshot()


def _snapshot(t: Tensor) -> tuple:
    g = t._grad
    return (t, t.data, t.data.tobytes(), g, None if g is None else g.tobytes())


# -- what a traced function reads and writes outside tapegrad ---------------------------------
_MISSING = object()
_PLAIN = (int, float, complex, str, bytes, bool, type(None), np.generic)


def _same(a, b) -> bool:
    """Identity, or equal plain values (numbers, strings; NaN equals NaN), elementwise in
    tuples: how guards compare what a plan was traced under with what a call finds."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, _PLAIN):
        return bool(a == b) or (a != a and b != b)
    return False


def _code_objects(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _captured(fn) -> list[tuple[str, Callable[[], object]]]:
    """(name, getter) of every closure variable and global that ``fn`` reads, and those of
    the plain Python functions of its own module that it reaches that way (helpers)."""
    out: list = []
    seen: set[int] = set()

    def visit(f, depth):
        f = getattr(f, "__func__", f)  # bound methods
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen or depth > 3:
            return
        seen.add(id(f))
        globs = f.__globals__
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            out.append((f"the closure variable {name!r} of {f.__qualname__}", _cell_getter(cell)))
            _follow(_cell_value(cell), globs, depth)
        names = {n for c in _code_objects(code) for n in c.co_names if n in globs}
        for name in sorted(names):
            value = globs[name]
            if isinstance(value, types.ModuleType):
                continue
            out.append((f"the global {name!r} of {f.__qualname__}", _global_getter(globs, name)))
            _follow(value, globs, depth)

    def _follow(value, globs, depth):
        if isinstance(value, types.FunctionType) and value.__globals__ is globs:
            visit(value, depth + 1)

    visit(fn, 0)
    return out


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _cell_getter(cell):
    return lambda: _cell_value(cell)


def _global_getter(globs, name):
    return lambda: globs.get(name, _MISSING)


def _check_assignments(fn) -> None:
    """Refuse ``global``/``nonlocal`` assignments: a replay would not repeat them."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    if code is None:
        return
    for c in _code_objects(code):
        for ins in dis.get_instructions(c):
            if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") or (
                ins.opname == "STORE_DEREF" and ins.argval in c.co_freevars
            ):
                kind = "global" if "GLOBAL" in ins.opname else "nonlocal"
                raise TraceError(
                    f"compile: {f.__qualname__} assigns the {kind} variable {ins.argval!r}; a "
                    f"plan replays only tapegrad operations and recorded effects, so that "
                    f"assignment would run once. Keep such state outside the compiled function "
                    f"(return the value), or wrap the update in tg.effect(fn)"
                )


def _state_equal(a, b) -> bool:
    """Generator states: dicts of numbers and (for MT19937) arrays."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_state_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _rng_draws(trace: Trace, legacy_before) -> str | None:
    """Which generator the step drew from outside tapegrad's random operations, if any."""
    after = np.random.get_state()  # noqa: NPY002 (watching the legacy generator)
    if after[2] != legacy_before[2] or not np.array_equal(after[1], legacy_before[1]):
        return "NumPy's global generator (np.random.randn, np.random.rand, ...)"
    for k, (gen, state) in trace.rngs.items():
        if k not in trace.rngs_of_ops and not _state_equal(gen.bit_generator.state, state):
            return f"a {type(gen).__name__} the step holds"
    return None


def reduce_gradients(fn: Callable[[np.ndarray], object], loss: Tensor) -> None:
    """Call ``fn(loss.data)`` now: the seam where data-parallel training reduces gradients.

    Call it after ``backward()`` and before the optimiser step. While tracing it is recorded,
    so every replay of the plan calls ``fn`` at this point with the loss's current value. If
    ``fn`` has a ``buffers(leaves)`` method (``tapegrad.distributed.GradientAverager`` has),
    the plan asks it once for the arrays to accumulate the leaves' gradients into (views of one
    flat buffer, so the reduction is one in-place collective and copies nothing); otherwise the
    plan allocates gradient buffers as usual. Nothing inside ``fn`` is traced.
    """
    trace = _tensor_mod._TRACING.active
    if trace is None:
        fn(loss.data)
        return
    if id(loss) not in trace.var_of:
        raise TraceError("reduce_gradients: the loss was computed outside the compiled function")
    trace.check_untouched("before the gradient reduction")
    trace.events.append(Reduce(fn, trace.var_of[id(loss)]))
    _tensor_mod._TRACING.active = None
    try:
        fn(loss.data)
    finally:
        _tensor_mod._TRACING.active = trace
        trace.resnapshot()  # a recorded change, like an effect's: every replay reduces here


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


class _Guards:
    epoch = 0  # bumped whenever a guarded object may have changed (see state_changed)


def state_changed() -> None:
    """Say that an object plans guard on (a module: its mode, parameters, sub-modules) may have
    changed: the next replay re-checks those guards. Until then a replay skips them, which keeps
    the check out of the steady-state step."""
    _Guards.epoch += 1


MAX_PLANS = 8
"""Plans kept per input signature (one per train/eval mode, say); the oldest goes first."""
RETRACE_WARNING = 10
"""Re-traces of one function after which a warning says that tracing keeps repeating."""


class Plan:
    """A trace turned into a flat program of closures over buffers allocated once.

    Equations with a lowering (see ``lowering.py``) write into persistent buffers or are views
    of them; the others run their primitive's generic forward and VJP. The backward pass is
    scheduled when the plan is built: each equation's VJP closures, and for every value that
    receives gradients from several places, an accumulation buffer.
    """

    def __init__(self, trace: Trace, input_tensors: list[Tensor], outputs, captured=()):
        self.guards = list(trace.guards.values())
        self.epoch = _Guards.epoch
        self.captured = [(what, get, get()) for what, get in captured]
        self.inputs = input_tensors
        self.out_spec = outputs
        n = trace.n_vars
        self.vals: list = [None] * n
        self.grads: list = [None] * n
        self.eq_of: dict[int, Eq] = {e.out: e for e in trace.events if isinstance(e, Eq)}
        self.lowered: dict = {}
        self.nodes: dict = {}
        self.ext_arrays: list[tuple[Tensor, np.ndarray]] = []
        self.leaf_grads: dict[int, np.ndarray] = {}
        persistent = [False] * n
        for t, v in zip(input_tensors, trace.inputs):
            self.vals[v] = t.data
            persistent[v] = True
        self.input_vals = [t.data for t in input_tensors]
        self._check_constants(trace)
        self._reduction_buffers(trace)
        fusable = self._fusable(trace)
        deferred: dict[int, Eq] = {}
        program: list[Callable] = []
        for e in trace.events:
            if isinstance(e, Eq) and e.out in fusable:
                deferred[e.out] = e  # emitted with the one equation that consumes it
                continue
            if isinstance(e, Eq) and e.ins and e.ins[0][0] == VAR and e.ins[0][1] in deferred:
                first = deferred.pop(e.ins[0][1])
                if self._fuse(first, e, trace, persistent, program):
                    continue
                self._emit(first, trace, persistent, program)  # the fused kernel declined
            if isinstance(e, Eq):
                self._emit(e, trace, persistent, program)
            elif isinstance(e, Backward):
                program.append(self._schedule_backward(e, trace))
            elif isinstance(e, Reduce):
                program.append(self._reduction(e))
            else:
                program.append(e.fn)
        self.program = program
        self.ext_arrays = list({id(t): (t, a) for t, a in self.ext_arrays}.values())

    def _reduction_buffers(self, trace: Trace) -> None:
        """Let a gradient reduction choose where the leaves' gradients accumulate (one flat
        buffer it reduces in place); the leaves it does not claim get their own buffers."""
        for e in trace.events:
            if isinstance(e, Reduce) and hasattr(e.fn, "buffers"):
                leaves = [
                    p
                    for b in trace.events
                    if isinstance(b, Backward)
                    for k, p in b.order
                    if k == EXT
                ]
                self.leaf_grads.update(e.fn.buffers(leaves))

    def _reduction(self, e: Reduce) -> Callable:
        vals, fn, v = self.vals, e.fn, e.loss

        def reduce():
            fn(vals[v])

        return reduce

    def _fusable(self, trace: Trace) -> set[int]:
        """Outputs of equations fused into their single consumer (see ``FUSIONS``): read by
        that one equation, as its first input, and by nothing else (not even as a result). A
        ReLU feeding a max-pool fuses with the pool, not with a bias before it."""
        from .lowering import FUSIONS

        uses: dict[int, int] = {}
        for e in trace.events:
            if isinstance(e, Eq):
                for kind, p in e.ins:
                    if kind == VAR:
                        uses[p] = uses.get(p, 0) + 1
            elif isinstance(e, Backward):
                uses[e.root] = uses.get(e.root, 0) + 1
            elif isinstance(e, Reduce):
                uses[e.loss] = uses.get(e.loss, 0) + 1
        for v in _spec_vars(self.out_spec):
            uses[v] = uses.get(v, 0) + 1
        out = set()
        for consumers in (("max_pool1d", "max_pool2d"), ("relu",)):
            for e in trace.events:
                if not (isinstance(e, Eq) and e.prim.name in consumers and e.ins[0][0] == VAR):
                    continue
                if e.out in out:
                    continue  # this ReLU already fuses with its pool
                src = self.eq_of.get(e.ins[0][1])
                if (
                    src is not None
                    and (src.prim.name, e.prim.name) in FUSIONS
                    and uses.get(src.out) == 1
                ):
                    out.add(src.out)
        return out

    def _fuse(self, first: Eq, second: Eq, trace, persistent, program) -> bool:
        """Emit ``second(first(...))`` as one lowered equation over ``first``'s inputs."""
        from .lowering import FUSIONS

        xs = self._inputs(first, persistent)
        if any(not isinstance(x, np.ndarray) for x in xs):
            return False
        low = FUSIONS[first.prim.name, second.prim.name](
            first, second, xs, trace.keep[second.out].data
        )
        if low is None:
            return False
        fused = Eq(second.prim, first.ins, second.attrs, second.out, first.needs)
        self.eq_of[second.out] = fused
        del self.eq_of[first.out]
        self._install(fused, low, persistent, program)
        return True

    def _inputs(self, e: Eq, persistent) -> list:
        """``e``'s input arrays as they stand at plan time: None for a value no lowering wrote
        (it is recomputed each replay, so no buffer can hold on to it)."""
        return [
            (self.vals[p] if persistent[p] else None)
            if kind == VAR
            else (p.data if kind == EXT else p)
            for kind, p in e.ins
        ]

    def _install(self, e: Eq, low, persistent, program) -> None:
        """Make ``low`` the plan's code for ``e``: its output buffer, its forward kernel."""
        self.lowered[e.out] = low
        self.vals[e.out] = low.out
        persistent[e.out] = True
        self.ext_arrays += [(p, p.data) for kind, p in e.ins if kind == EXT]
        if low.fwd is not None:
            program.append(low.fwd)

    def _emit(self, e: Eq, trace, persistent, program) -> None:
        from .graph import Node
        from .lowering import lower

        xs = self._inputs(e, persistent)
        low = None
        if all(x is not None for x in xs):
            low = lower(e, xs, trace.keep[e.out].data)
        if low is not None:
            self._install(e, low, persistent, program)
        else:
            if any(e.needs):
                self.nodes[e.out] = Node(
                    e.prim,
                    tuple(True if k else None for k in e.needs),
                    None,
                    None,
                    e.attrs,
                    None,
                )
            program.append(self._generic(e))

    def _check_constants(self, trace: Trace) -> None:
        # An array made from an input outside tapegrad's operations (y.astype(...), np.asarray
        # of .data) would be frozen into the plan: catch the usual case, a copy or cast of an
        # input, by comparing every constant with the inputs.
        for e in trace.events:
            if not isinstance(e, Eq):
                continue
            for kind, c in e.ins:
                if kind != CONST or not isinstance(c, np.ndarray) or c.size < 2:
                    continue
                for k, x in enumerate(self.input_vals):
                    if x.shape == c.shape and np.array_equal(x, c):
                        raise TraceError(
                            f"compile: {e.prim.name} received a constant equal to input {k} "
                            f"(shape {c.shape}): it was made from the input outside tapegrad "
                            f"operations (e.g. .astype() or np.asarray on .data), so the plan "
                            f"would reuse this call's values forever. Convert inputs before "
                            f"calling the compiled function, or use tapegrad operations"
                        )

    # -- building ------------------------------------------------------------------------------
    def _generic(self, e: Eq) -> Callable:
        vals, prim, attrs, ins = self.vals, e.prim, e.attrs, e.ins
        node = self.nodes.get(e.out)
        out_var = e.out

        def run():
            arrays = [vals[p] if k == VAR else (p.data if k == EXT else p) for k, p in ins]
            out = prim.forward(*arrays, **attrs)
            aux = None
            if prim.aux:
                out, aux = out
            if type(out) is not np.ndarray:
                out = np.asarray(out)
            vals[out_var] = out
            if node is not None:
                node.inputs, node.out, node.aux = arrays, out, aux

        return run

    def _schedule_backward(self, b: Backward, trace: Trace) -> Callable:
        grads = self.grads
        leaf_store: dict[int, np.ndarray | None] = {}
        # how many contributions each target receives, to give shared ones a buffer
        counts: dict = {}
        for kind, p in b.order:
            if kind == VAR and p in self.eq_of:
                e = self.eq_of[p]
                for (rk, rp), need in zip(e.ins, e.needs):
                    if need:
                        key = ("v", rp) if rk == VAR else ("e", id(rp))
                        counts[key] = counts.get(key, 0) + 1
        acc = {
            k: np.empty(self._shape_of(k, trace), self._dtype_of(k, trace))
            for k, c in counts.items()
            if c > 1
        }

        def assign(ident):  # the only contribution this value receives: no checks needed
            def set_grad(c):
                grads[ident] = c

            return set_grad

        def deliver(key, c):
            kind, ident = key
            store_get = grads.__getitem__ if kind == "v" else leaf_store.get
            prev = store_get(ident)
            if prev is None:
                buf = acc.get(key)
                if buf is not None:
                    np.copyto(buf, c)
                    c = buf
                if kind == "v":
                    grads[ident] = c
                else:
                    leaf_store[ident] = c
            else:
                np.add(prev, c, out=prev)

        steps = []
        for kind, p in b.order:
            if kind == EXT:
                steps.append(self._leaf_step(p, leaf_store))
                continue
            e = self.eq_of.get(p)
            if e is None or not any(e.needs):
                continue
            targets = [
                (i, ("v", rp) if rk == VAR else ("e", id(rp)))
                for i, ((rk, rp), need) in enumerate(zip(e.ins, e.needs))
                if need
            ]
            low = self.lowered.get(p)
            if low is not None:
                # In input order: lowerings that compute every input's gradient in one pass
                # (the scans, the direct conv backward) do it in the first VJP called.
                rules = [
                    (
                        low.vjps[i],
                        assign(key[1])
                        if key[0] == "v" and counts[key] == 1
                        else functools.partial(deliver, key),
                    )
                    for i, key in targets
                ]

                def step(p=p, rules=rules):
                    g = grads[p]
                    grads[p] = None
                    if g is None:
                        return
                    for rule, give in rules:
                        give(rule(g))
            else:
                node = self.nodes[p]

                def step(p=p, node=node, targets=targets):
                    g = grads[p]
                    grads[p] = None
                    if g is None:
                        return
                    gs = node.vjp(g)
                    for i, key in targets:
                        if gs[i] is not None:
                            deliver(key, gs[i])

            steps.append(step)

        root = b.root
        like = trace.keep[root].data
        seed = np.ones_like(like) if b.gradient is None else b.gradient

        def backward():
            grads[root] = seed
            for step in steps:
                step()

        return backward

    def _shape_of(self, key, trace):
        kind, ident = key
        return trace.keep[ident].data.shape if kind == "v" else self._ext(ident, trace).data.shape

    def _dtype_of(self, key, trace):
        kind, ident = key
        return trace.keep[ident].data.dtype if kind == "v" else self._ext(ident, trace).data.dtype

    @staticmethod
    def _ext(ident, trace):
        for e in trace.events:
            if isinstance(e, Eq):
                for kind, p in e.ins:
                    if kind == EXT and id(p) == ident:
                        return p
        raise KeyError(ident)

    def _leaf_step(self, t: Tensor, leaf_store: dict) -> Callable:
        key = id(t)
        buf = self.leaf_grads.get(key)
        if buf is None:
            buf = self.leaf_grads[key] = np.empty_like(t.data)

        def step():
            g = leaf_store.pop(key, None)
            if g is None:
                return
            if t._grad is None:
                np.copyto(buf, g)
                t._grad = buf
            else:
                t._grad += g

        return step

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

    def run(self, args):
        inputs = iter(self.input_vals)
        for a in args:
            if isinstance(a, Tensor):
                np.copyto(next(inputs), a.data)
            elif isinstance(a, np.ndarray):
                np.copyto(next(inputs), a)
        for step in self.program:
            step()
        return _unflatten(self.out_spec, self)


def _spec_vars(spec):
    kind = spec[0]
    if kind == "var":
        yield spec[1]
    elif kind == "seq":
        for s in spec[2]:
            yield from _spec_vars(s)
    elif kind == "dict":
        for s in spec[1].values():
            yield from _spec_vars(s)


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
    """``fn`` with its plans, up to ``MAX_PLANS`` per input signature; see :func:`compile`.

    ``retraces`` lists why ``fn`` was traced again for a signature it had a plan for.
    """

    def __init__(self, fn: Callable):
        self.fn = fn
        self.plans: dict[tuple, list[Plan]] = {}
        self.retraces: list[str] = []
        self._warned = False
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        key = _signature(args)
        plans = self.plans.get(key)
        if plans:
            plan = plans[-1]  # the newest plan is the one the last call used (usually)
            reason = plan.stale()
            if reason is None:
                return plan.run(args)
            for other in plans[:-1]:
                if other.stale() is None:
                    plans.remove(other)
                    plans.append(other)
                    return other.run(args)
            self._note_retrace(reason)
        return self._trace(key, args)

    def _note_retrace(self, reason: str) -> None:
        self.retraces.append(reason)
        if len(self.retraces) >= RETRACE_WARNING and not self._warned:
            self._warned = True
            warnings.warn(
                f"compile: {getattr(self.fn, '__qualname__', 'the function')} was traced again "
                f"{len(self.retraces)} times, last because {reason}; each trace runs the step "
                f"slowly and builds a new plan. Pass values that change every call as array "
                f"arguments",
                RuntimeWarning,
                stacklevel=3,
            )

    def _trace(self, key, args):
        if _tensor_mod._TRACING.active is not None:
            raise TraceError("compile: a compiled function called while another is tracing")
        _check_assignments(self.fn)
        trace = Trace()
        call_args, inputs = [], []
        for k, a in enumerate(args):
            if isinstance(a, Tensor) and a.requires_grad:
                raise TraceError(
                    f"compile: argument {k} requires grad; a compiled function's arguments are "
                    f"data copied into the plan, so their gradients would be lost. Close over "
                    f"tensors you differentiate (parameters), or pass .detach()"
                )
        for a in args:
            if _is_array(a):
                data = a.data if isinstance(a, Tensor) else a
                t = Tensor._make(np.array(data, copy=True), None, False)
                trace.inputs.append(trace.new_var(t))
                inputs.append(t)
                call_args.append(t)
            else:
                call_args.append(a)
        captured = _captured(self.fn)
        for _, get in captured:
            value = get()
            if isinstance(value, np.random.Generator):
                trace.note_rng(value)
        legacy = np.random.get_state()  # noqa: NPY002
        _tensor_mod._TRACING.active = trace
        try:
            out = self.fn(*call_args)
        finally:
            _tensor_mod._TRACING.active = None
        trace.check_untouched("after the function returned")
        drawn = _rng_draws(trace, legacy)
        if drawn is not None:
            raise TraceError(
                f"compile: the step drew random numbers from {drawn} while tracing; a plan "
                f"would replay that one draw on every call. Draw with tapegrad's random "
                f"operations, which every replay draws afresh: tg.randn_like(x, rng=gen), "
                f"tg.rand_like, tg.randn(shape, rng=gen), nn.functional.dropout"
            )
        plans = self.plans.setdefault(key, [])
        plans.append(Plan(trace, inputs, _flatten_outputs(out, trace), captured))
        del plans[:-MAX_PLANS]
        return out

    @property
    def all_plans(self) -> list[Plan]:
        """Every plan, in the order of their signatures' first calls."""
        return [plan for plans in self.plans.values() for plan in plans]

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
