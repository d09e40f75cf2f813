"""Tracing: the flat list of equations a compiled step records.

While a step runs under ``tapegrad.compile``, ``graph.apply`` records every primitive call as an
:class:`Eq` (inputs referred to as a value of the trace, a tensor read live, or a constant),
``backward()`` records where each gradient lands (:class:`Sink`), and effects and gradient
reductions record themselves (:class:`Call`, :class:`Reduce`). The trace also remembers what a
replay depends on (the guards' state, the tensors it reads live, random generators) so the
later passes and :class:`~.replay.Plan` can refuse or re-trace instead of replaying stale state.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import anomaly
from .. import tensor as _tensor_mod
from ..core.state import effect  # noqa: F401  (tg.effect; it lives in the core)
from ..errors import TraceError
from ..primitives.elementwise import _astype
from ..tensor import Tensor
from ..traced_grads import read as _read_grad

VAR, EXT, CONST, GRAD = 0, 1, 2, 3
"""How an equation refers to an input: a value of the plan, a tensor from outside the step
(read live: a parameter), a constant array, or the ``.grad`` of a tensor from outside the step
as it is at that point of the replay (an optimiser's update reads it there)."""


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

    def record_update(self, prim, param: Tensor, attrs: dict) -> None:
        """An in-place update of ``param`` by ``prim`` (an optimiser's update primitive): an
        equation over the parameter's array and its live ``.grad``, whose output is the
        parameter's array. Later reads of the parameter in the step read that output, so they
        come after the update."""
        ins = [(EXT, param), (GRAD, param)]
        self.watch(param)
        out = self.new_var(Tensor._make(param.data, None, False))
        eq = Eq(prim, ins, attrs, [out], False, anomaly.call_site())
        self.eq_of[out] = eq
        self.events.append(eq)


def _snapshot(t: Tensor) -> tuple:
    g = t._grad
    return (t, t.data, t.data.tobytes(), g, None if g is None else g.tobytes())


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
