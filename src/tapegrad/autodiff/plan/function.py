"""``tapegrad.compile``: plans per input signature, traced on first use and replayed after."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import numpy as np

from .. import tensor as _tensor_mod
from ..backend import xp_of
from ..errors import TraceError
from ..tensor import Tensor
from .guards import (
    _captured,
    _check_assignments,
    _difference,
    _leaves,
    _rebuild,
    _rng_draws,
    _signature,
)
from .replay import Plan
from .trace import Trace, _flatten_outputs

MAX_PLANS = 8
"""Plans kept per input signature (one per train/eval mode, say); the oldest goes first."""


RETRACE_WARNING = 10
"""Re-traces of one function after which a warning says that tracing keeps repeating."""


CHURN_WARNING = 5
"""Calls in a row that each traced (none replayed) after which a warning says why."""


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
