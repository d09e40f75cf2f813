"""Compiled plans: trace a function once per input signature, then replay it.

``tapegrad.compile(fn)`` runs ``fn`` once for real while recording, in order, one flat list of
*equations* (JAX's jaxpr is the model): every primitive call of the forward pass; every
primitive call of the backward pass, because ``backward()`` inside a trace runs the same VJP
rules on Tensors (they are written with primitives, so each of their operations is recorded like
any other); where each gradient lands in a ``.grad`` (a *sink*); each parameter's optimiser update
(``opt.step()`` is one equation of the optimiser's update primitive per parameter, reading the
gradient, hyperparameters and state live: see ``Trace.record_update``); and every side effect
that registered itself (``zero_grad``, gradient clipping, ``tg.effect``, the gradient reduction
of data-parallel training). That list is turned into a plan by passes, one
file each in this package:

* ``trace.py``: the recording (equations, sinks, effects, reductions, what replays depend on);
* ``fusion.py``: a table-driven rewrite of the equation list, on every plan: the equations of a
  pattern it names (a bias then ReLU, ReLU then max pooling), forward and backward alike,
  become the fused primitives of ``primitives/fused.py``;
* ``deadcode.py``: equations whose results nothing reads are dropped (side effects never are);
* ``memory.py``: each value's last reader is found, a view counting as a reader of its base;
  every value gets a buffer, allocated once, taken from a pool that a value gives back after
  its last reader (so buffers are shared over time, as the seeds' region memory); an equation
  whose forward returns a view of its input costs nothing (the view is taken once);
* ``replay.py``: the plan, each equation's forward bound to its arrays, and the replay;
* ``guards.py``: the key a plan is kept under and what a replay must find unchanged;
* ``function.py``: ``compile`` itself, plans per signature, re-tracing and its warnings.

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

from ..errors import TraceError
from .function import CHURN_WARNING, MAX_PLANS, RETRACE_WARNING, CompiledFunction, compile
from .guards import state_changed
from .replay import Plan
from .trace import CONST, EXT, VAR, Eq, Trace, effect, reduce_gradients

__all__ = [
    "CHURN_WARNING",
    "CONST",
    "EXT",
    "MAX_PLANS",
    "RETRACE_WARNING",
    "VAR",
    "CompiledFunction",
    "Eq",
    "Plan",
    "Trace",
    "TraceError",
    "compile",
    "effect",
    "reduce_gradients",
    "state_changed",
]
