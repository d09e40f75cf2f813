"""Compiled plans: trace a function once per input signature, then replay it.

``tapegrad.compile(fn)`` runs ``fn`` once for real while recording, in order, one flat list of
*equations* (JAX's jaxpr is the model): every primitive call of the forward pass; every
primitive call of the backward pass, because ``backward()`` inside a trace runs the same VJP
rules on Tensors (they are written with primitives, so each of their operations is recorded like
any other); where each gradient lands in a ``.grad`` (a *sink*); and every side effect that
registered itself (optimiser ``zero_grad``/``step``, gradient clipping, ``tg.effect``, the
gradient reduction of data-parallel training). That list is turned into a plan in three passes:

1. **Fusion** (while tracing, at ``backward()``): pairs of nodes named by one table of patterns
   (``primitives/fused.py``) become one node of a fused primitive, whose own rule then runs.
2. **Dead code and liveness**: equations whose results nothing reads are dropped (side effects
   never are); each value's last reader is found, a view counting as a reader of its base.
3. **Buffers**: every value gets a buffer, allocated once, taken from a pool that a value gives
   back after its last reader (so buffers are shared over time, as the seeds' region memory);
   an equation whose forward returns a view of its input costs nothing (the view is taken once).

A replay copies the inputs into their buffers and calls each equation's forward with its input
arrays and output buffers (``forward(*ins, out=..., ws=...)``: the primitive's one forward, so
compiled results are eager's bits): no tensors or nodes are built, nothing is sorted, and a
steady step allocates (almost) nothing. A new input signature (a smaller last batch) is traced
into a plan of its own.

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
  function. Optimiser steps, ``zero_grad``, gradient clipping, ``tg.assign`` and anything
  wrapped in :func:`effect` are recorded and replayed.
"""

from __future__ import annotations

import bisect
import dis
import functools
import types
import warnings
from collections.abc import Callable

import numpy as np

from . import anomaly
from . import tensor as _tensor_mod
from .backend import device_of, is_array, xp_of
from .errors import TraceError
from .primitives.registry import Workspace
from .tensor import Tensor
from .traced_grads import read as _read_grad

VAR, EXT, CONST = 0, 1, 2
"""How an equation refers to an input: a value of the plan, a tensor from outside the step
(read live: a parameter), or a constant array."""


class Eq:
    """One recorded primitive call: ``outs = prim(*ins, **attrs)`` (``packed``: the forward
    returns, and takes as ``out``, a tuple)."""

    __slots__ = ("prim", "ins", "attrs", "outs", "packed", "site")

    def __init__(self, prim, ins, attrs, outs, packed, site=None):
        self.prim, self.ins, self.attrs, self.outs, self.packed = prim, ins, attrs, outs, packed
        self.site = site  # "file:line" of the call that recorded it (for detect_anomaly)


class Sink:
    """A gradient delivered into ``tensor.grad`` (set, or added to what is there)."""

    __slots__ = ("tensor", "grad")

    def __init__(self, tensor, grad):
        self.tensor, self.grad = tensor, grad


class Call:
    """A recorded side effect (``effect``): ``fn()`` runs at this point of every replay."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Reduce:
    """A gradient reduction (see :func:`reduce_gradients`) and the loss it is handed."""

    __slots__ = ("fn", "loss")

    def __init__(self, fn, loss):
        self.fn, self.loss = fn, loss


class Trace:
    """What a traced call did; built by the hooks in ``graph.apply`` and ``graph._pass``."""

    def __init__(self):
        self.events: list = []
        self.var_of: dict[int, int] = {}  # id(tensor) -> var
        self.var_of_data: dict[int, int] = {}  # id(array) -> var (arrays a var holds)
        self.values: list[np.ndarray] = []  # var -> its value while tracing
        self.keep: list = []  # keeps traced tensors alive so ids stay unique
        self.eq_of: dict[int, Eq] = {}  # var -> the equation that made it
        self.inputs: list[int] = []
        self.made_inside: set[int] = set()  # ids of tensors constructed while tracing
        # What a replay must find unchanged (see the module docstring): state functions of the
        # objects the step used (modules), and snapshots of the tensors it reads live.
        self.guards: dict[int, tuple] = {}  # id(owner) -> (state_fn, state, what)
        self.watched: dict[int, tuple] = {}  # id(tensor) -> _snapshot(tensor)
        self.rngs: dict[int, tuple] = {}  # id(generator) -> (generator, state before)
        self.rngs_of_ops: set[int] = set()  # generators tapegrad operations drew from
        self.grad_arrays: list = []  # values computed from .grad reads (traced_grads.py)

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
                    f"tapegrad.optim, or tg.assign (or wrap the update in tg.effect(fn)), which "
                    f"every replay runs"
                )
            if t._grad is not g or (g is not None and g.tobytes() != g0):
                raise TraceError(
                    f"compile: the gradient (.grad) of a {what} was changed outside tapegrad "
                    f"operations while tracing ({where}), e.g. clipped or scaled with NumPy: a "
                    f"plan would not repeat that. Use tapegrad.optim.clip_grad_norm_ / "
                    f"clip_grad_value_ (replayed), or wrap the change in tg.effect(fn)"
                )

    # -- recording ---------------------------------------------------------------------------
    def new_var(self, t: Tensor) -> int:
        v = len(self.values)
        self.var_of[id(t)] = v
        self.var_of_data[id(t.data)] = v
        self.values.append(t.data)
        self.keep.append(t)
        return v

    def read_grad(self, t: Tensor):
        """``t.grad`` read by the step: a view whose uses replays recompute (traced_grads.py)."""
        return _read_grad(self, t)

    def is_traced(self, t) -> bool:
        return id(t) in self.var_of

    def ref(self, arg, array):
        """How an equation refers to ``arg`` (whose array the primitive received as ``array``)."""
        if isinstance(arg, Tensor):
            v = self.var_of.get(id(arg))
            if v is None:
                v = self.var_of_data.get(id(arg.data))  # a constant wrapper of a traced value
            if v is not None:
                return (VAR, v)
            if id(arg) in self.made_inside:
                return (CONST, arg.data)
            self.watch(arg)
            return (EXT, arg)  # a parameter or a tensor captured from outside: read live
        v = self.var_of_data.get(id(array))
        if v is not None:
            return (VAR, v)
        if getattr(array, "size", 0) > 1 and any(
            np.may_share_memory(array, g) for g in self.grad_arrays
        ):
            raise TraceError(
                "compile: a gradient reached an operation as a plain array (np.asarray(p.grad) "
                "or a view of it): its value would be frozen into the plan. Pass p.grad "
                "itself, or compute with tapegrad operations, so every replay reads it live"
            )
        return (CONST, array)

    def record_eq(self, prim, args, arrays, attrs, results, aux, packed=False) -> None:
        from .primitives.elementwise import _astype

        ins = []
        for a, arr in zip(args, arrays):
            if isinstance(a, Tensor) and arr is not a.data and arr.dtype != a.data.dtype:
                # an integer operand lifted to the float dtype: an equation of its own
                lifted = Tensor._make(arr, None, False)
                self.record_eq(_astype, (a,), (a.data,), {"dtype": arr.dtype}, (lifted,), ())
                a = lifted
            ins.append(self.ref(a, arr))
        for v in attrs.values():
            if isinstance(v, np.random.Generator):
                self.rngs_of_ops.add(id(v))  # a random operation: replays draw afresh
        outs = [self.new_var(r) for r in results]
        outs += [self.new_var(Tensor._make(a, None, False)) for a in aux]
        eq = Eq(prim, ins, attrs, outs, packed, anomaly.call_site())
        for v in outs:
            self.eq_of[v] = eq
        self.events.append(eq)

    def begin_backward(self, root: Tensor) -> None:
        if id(root) not in self.var_of:
            raise TraceError("backward() of a tensor computed outside the compiled function")
        self.check_untouched("before backward()")

    def record_sink(self, t: Tensor, g: Tensor) -> None:
        self.events.append(Sink(t, self.ref(g, g.data)))

    def record_call(self, fn: Callable) -> None:
        self.events.append(Call(fn))

    def fuse(self, order: list[Tensor], targets=None) -> None:
        """Rewrite the graph about to be differentiated by the fusion table: a node whose
        primitive and whose first parent's primitive form a pattern of ``FUSIONS``, the parent
        read by that node alone, becomes one node of the fused primitive (over the parent's
        inputs), and so does its equation. See ``primitives/fused.py``."""
        from .graph import Node
        from .primitives.fused import FUSIONS

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
                    or id(t) not in self.var_of
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
                eq = self.eq_of[self.var_of[id(t)]]
                eq.prim, eq.ins, eq.attrs = prim, self.eq_of[self.var_of[id(p)]].ins, attrs
                eq.packed = type(res) is tuple
                del eq.outs[1:]  # the second's saved arrays: the fused forward saves its own
                for a in aux:
                    v = self.new_var(Tensor._make(a, None, False))
                    eq.outs.append(v)
                    self.eq_of[v] = eq


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
        names = {n for n in _global_reads(code) if n in globs}
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


def _global_reads(code: types.CodeType) -> set[str]:
    """The global names ``code`` (and the functions nested in it) reads: not its attribute
    names (``opt.step`` reads no global ``step``), which share ``co_names`` with them."""
    return {
        ins.argval
        for c in _code_objects(code)
        for ins in dis.get_instructions(c)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    }


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


def _leaves(args, out: list) -> tuple:
    """Flatten ``args`` (tuples, lists, dicts of them, nested) into ``out``, the arrays and
    tensors in order; return the structure with every other leaf by value: the key a plan is
    kept under (a new structure or value is a new signature)."""
    if isinstance(args, Tensor):
        out.append(args)
        d = args.data
        return ("t", d.shape, d.dtype.str, args.requires_grad, type(d))
    if is_array(args):
        out.append(args)
        return ("a", args.shape, args.dtype.str, type(args))
    if isinstance(args, (tuple, list)):
        return (type(args), tuple(_leaves(a, out) for a in args))
    if isinstance(args, dict):
        return (dict, tuple((k, _leaves(v, out)) for k, v in args.items()))
    try:
        hash(args)
    except TypeError:
        raise TraceError(
            f"compile: an argument of type {type(args).__name__} is neither an array, a "
            f"tensor, a tuple, list or dict of them, nor hashable; pass arrays/Tensors, or "
            f"close over the value"
        ) from None
    return ("v", args)


def _signature(args) -> tuple:
    leaves: list = []
    return _leaves(args, leaves), leaves


def _rebuild(args, new: list):
    """``args`` with its arrays and tensors replaced, in order, by ``new``'s (consumed)."""
    if isinstance(args, Tensor) or is_array(args):
        return new.pop(0)
    if isinstance(args, (tuple, list)):
        items = [_rebuild(a, new) for a in args]
        return type(args)(*items) if hasattr(args, "_fields") else type(args)(items)
    if isinstance(args, dict):
        return type(args)((k, _rebuild(v, new)) for k, v in args.items())
    return args


def _difference(old: tuple, new: tuple, where: str = "the arguments") -> str | None:
    """What differs between two signatures, in words (None if only array shapes do)."""
    if old == new:
        return None
    if old[0] == "v" or new[0] == "v":
        if old[0] == new[0] == "v":
            return f"{where} changed from {old[1]!r} to {new[1]!r}"
        return f"{where} changed kind"
    if old[0] in ("t", "a") or new[0] in ("t", "a"):
        return None  # an array of another shape or dtype: a plan of its own is expected
    if old[0] is not new[0] or len(old[1]) != len(new[1]):
        return f"the structure of {where} changed"
    for k, (a, b) in enumerate(zip(old[1], new[1])):
        if old[0] is dict:
            if a[0] != b[0]:
                return f"the keys of {where} changed"
            d = _difference(a[1], b[1], f"{where}[{a[0]!r}]")
        else:
            d = _difference(a, b, f"argument {k}" if where == "the arguments" else f"{where}[{k}]")
        if d is not None:
            return d
    return None


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
CHURN_WARNING = 5
"""Calls in a row that each traced (none replayed) after which a warning says why."""


class _Pool:
    """Memory blocks that values of a plan share over time: a value takes the smallest free
    block that holds it (or a new one) and gives it back after its last reader. Free blocks are
    kept sorted by size per device, so taking and giving back cost a binary search (tracing
    stays linear in the number of operations)."""

    def __init__(self):
        self.free: dict = {}  # device -> ([sizes], [uint8 blocks]), sorted by size
        self.allocated = 0

    def take(self, like: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(an array shaped and laid out like ``like``, the block it lives in)."""
        if like.nbytes == 0:
            return np.empty_like(like), None
        dev = device_of(like)
        sizes, blocks = self.free.setdefault(dev, ([], []))
        i = bisect.bisect_left(sizes, like.nbytes)
        if i < len(sizes):
            del sizes[i]
            block = blocks.pop(i)
        else:
            block = dev.xp.empty(like.nbytes, np.uint8)
            self.allocated += like.nbytes
        return _laid_out_like(like, block), block

    def give(self, block: np.ndarray | None) -> None:
        if block is not None:
            sizes, blocks = self.free.setdefault(device_of(block), ([], []))
            i = bisect.bisect_right(sizes, block.nbytes)  # after equal sizes: oldest first
            sizes.insert(i, block.nbytes)
            blocks.insert(i, block)


def _laid_out_like(like: np.ndarray, block: np.ndarray) -> np.ndarray:
    """An array over ``block`` with ``like``'s shape, dtype and memory order (the axis order
    of its strides: an elementwise result of a transposed view is laid out transposed, and
    kernels downstream choose their path by layout, so a plan keeps eager's)."""
    order = sorted(range(like.ndim), key=lambda i: -abs(like.strides[i]))
    strides = [0] * like.ndim
    step = like.itemsize
    for i in reversed(order):
        strides[i] = step
        step *= like.shape[i]
    return device_of(like).from_block(block, like.shape, like.dtype, tuple(strides))


def _equal_after_cast(x: np.ndarray, c: np.ndarray) -> bool:
    if x.dtype == c.dtype:
        return np.array_equal(x, c)
    with np.errstate(all="ignore"):
        return bool(np.array_equal(x.astype(c.dtype), c)) and np.array_equal(x, c.astype(x.dtype))


def _start(a: np.ndarray) -> int:
    return device_of(a).data_ptr(a)


def _dense(a: np.ndarray) -> bool:
    """Whether ``a`` fills its memory without gaps, in some order of its axes."""
    step = a.itemsize
    for i in sorted(range(a.ndim), key=lambda i: abs(a.strides[i])):
        if a.shape[i] != 1 and a.strides[i] != step:
            return False
        step *= a.shape[i]
    return True


def _view_source(out, arrays) -> int | None:
    """The position of the input array whose memory ``out`` is a view of, if any."""
    if not is_array(out) or out.size == 0:
        return None
    dev = device_of(out)
    for k, a in enumerate(arrays):
        if is_array(a) and device_of(a) is dev and np.may_share_memory(out, a):
            return k
    return None


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
        events = _live_events(trace, self.out_spec)
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


def _live_events(trace: Trace, out_spec) -> list:
    """The events a replay must run: side effects, and the equations whose values something
    reads (dead-code elimination, from the last event back)."""
    needed = set(_spec_vars(out_spec))
    live = []
    for e in reversed(trace.events):
        if isinstance(e, Eq):
            if not (e.prim.effect or any(v in needed for v in e.outs)):
                continue
            needed.update(p for k, p in e.ins if k == VAR)
        elif isinstance(e, Sink):
            if e.grad[0] == VAR:
                needed.add(e.grad[1])
        elif isinstance(e, Reduce):
            needed.add(e.loss)
        live.append(e)
    live.reverse()
    return live


def _lifetimes(trace: Trace, events: list, out_spec) -> tuple[dict, dict, dict]:
    """``root[v]``: the value whose buffer ``v`` lives in (itself, the base it is a view of,
    or None for a view of a parameter or constant); ``views[v]``: for a value that is a view
    of its equation's input, that input's position; ``dies[i]``: the roots whose last reader is
    event ``i`` (their buffers go back to the pool after it). Plan inputs and outputs never die."""
    root: dict[int, int | None] = {v: v for v in trace.inputs}
    views: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, e in enumerate(events):
        reads = []
        if isinstance(e, Eq):
            reads = [p for k, p in e.ins if k == VAR]
            for v in e.outs:
                root[v] = v
                last[v] = i  # a value nothing reads goes back right after it is made
            if len(e.outs) == 1:
                srcs = [
                    trace.values[p] if k == VAR else (p.data if k == EXT else p) for k, p in e.ins
                ]
                k = _view_source(trace.values[e.outs[0]], srcs)
                if k is not None:  # a view of an input: it lives in that input's buffer
                    del last[e.outs[0]]
                    kind, p = e.ins[k]
                    root[e.outs[0]] = root[p] if kind == VAR else None
                    views[e.outs[0]] = k
        elif isinstance(e, Sink) and e.grad[0] == VAR:
            reads = [e.grad[1]]
        elif isinstance(e, Reduce):
            reads = [e.loss]
        for v in reads:
            if root[v] is not None:
                last[root[v]] = i
    keep = {root[v] for v in _spec_vars(out_spec)} | set(trace.inputs)
    dies: dict[int, list] = {}
    for r, i in last.items():
        if r not in keep:
            dies.setdefault(i, []).append(r)
    return root, views, dies


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


def _flatten_outputs(out, trace: Trace):
    """Describe ``fn``'s return value so replays rebuild it from the plan's values."""
    if isinstance(out, Tensor):
        v = trace.var_of.get(id(out))
        if v is None:  # a new Tensor over a traced value's array (tg.tensor(tg.hvp(...)))
            v = trace.var_of_data.get(id(out.data))
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
        items = [_unflatten(s, plan) for s in spec[2]]
        return spec[1](*items) if hasattr(spec[1], "_fields") else spec[1](items)
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
        self._last_key = None
        self._fresh = 0  # calls in a row that traced instead of replaying
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        key, leaves = _signature(args)
        plans = self.plans.get(key)
        reason = None
        if plans:
            plan = plans[-1]  # the newest plan is the one the last call used (usually)
            reason = plan.stale()
            if reason is None:
                self._fresh, self._last_key = 0, key
                return plan.run(leaves)
            for other in plans[:-1]:
                if other.stale() is None:
                    plans.remove(other)
                    plans.append(other)
                    self._fresh, self._last_key = 0, key
                    return other.run(leaves)
        elif self._last_key is not None:
            reason = _difference(self._last_key, key)
            if reason is not None:
                reason = f"a new input signature: {reason}"
        self._note_trace(reason, key)
        return self._trace(key, args, leaves)

    def _note_trace(self, reason: str | None, key) -> None:
        self._fresh += 1
        self._last_key = key
        if reason is not None:
            self.retraces.append(reason)
        if self._warned:
            return
        if len(self.retraces) >= RETRACE_WARNING or self._fresh >= CHURN_WARNING:
            self._warned = True
            last = reason or "the input arrays' shapes or dtypes changed"
            warnings.warn(
                f"compile: {getattr(self.fn, '__qualname__', 'the function')} was traced "
                f"{self._fresh if self._fresh >= CHURN_WARNING else len(self.retraces)} times "
                f"{'in a row' if self._fresh >= CHURN_WARNING else 'again'}, last because "
                f"{last}; each trace runs the step slowly and builds a new plan. Pass values "
                f"that change every call as array arguments",
                RuntimeWarning,
                stacklevel=3,
            )

    def _trace(self, key, args, leaves):
        if _tensor_mod._TRACING.active is not None:
            raise TraceError("compile: a compiled function called while another is tracing")
        _check_assignments(self.fn)
        trace = Trace()
        inputs = []
        for k, a in enumerate(args):
            inside: list = []
            _leaves(a, inside)
            if any(isinstance(t, Tensor) and t.requires_grad for t in inside):
                raise TraceError(
                    f"compile: argument {k} requires grad; a compiled function's arguments are "
                    f"data copied into the plan, so their gradients would be lost. Close over "
                    f"tensors you differentiate (parameters), or pass .detach()"
                )
        for a in leaves:
            data = a.data if isinstance(a, Tensor) else a
            t = Tensor._make(xp_of(data).array(data, copy=True), None, False)
            trace.inputs.append(trace.new_var(t))
            inputs.append(t)
        call_args = _rebuild(args, list(inputs))
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
