"""The interpreter's state: grad mode, the trace being recorded, and the tensor's data fields.

Everything here is read on every operation, so it is plain class attributes and module globals.
The layers above register what the core needs from them instead of being imported by it:

* ``tensor.py`` registers the ``Tensor`` class (:func:`register_tensor_class`): the core builds
  results through :func:`make_tensor` and checks ``isinstance(x, TensorBase)``;
* ``plan/`` sets ``_TRACING.active`` to the trace it records into (its methods are the hooks the
  core calls: ``record_eq``, ``record_call``, ``resnapshot``, ...), and ``traced_grads.py``
  sets ``_TRACING.lift``, which maps a ``.grad`` view of the trace under way to its traced value.
  Only the engine (``autodiff/``) touches ``_TRACING``; the layers above ask
  :func:`active_trace` and suspend a trace with :func:`untraced`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..errors import TraceError


class _GradMode:
    enabled = True


def is_grad_enabled() -> bool:
    return _GradMode.enabled


class _SetGrad(contextlib.ContextDecorator):
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        self.prev, _GradMode.enabled = _GradMode.enabled, self.enabled

    def __exit__(self, *exc):
        _GradMode.enabled = self.prev


def no_grad():
    """Context manager (and decorator): operations inside record no graph."""
    return _SetGrad(False)


def enable_grad():
    """Context manager (and decorator): turn recording back on inside ``no_grad``."""
    return _SetGrad(True)


def _no_lift(x):
    return x


class _TRACING:
    """The trace being recorded by ``tapegrad.compile`` (None when not tracing)."""

    active = None
    lift: Callable = _no_lift  # an argument of an operation as the trace sees it


def active_trace():
    """The trace ``tapegrad.compile`` is recording now, None outside one: how the layers above
    the engine (optimisers, modules, clipping) ask whether they run inside a trace."""
    return _TRACING.active


@contextlib.contextmanager
def untraced():
    """Suspend the trace under way, if any, for the block (yields it): the block's array
    operations are not recorded (an update the caller records as one equation, a checkpoint's
    segment)."""
    trace = _TRACING.active
    _TRACING.active = None
    try:
        yield trace
    finally:
        _TRACING.active = trace


class TensorBase:
    """A tensor's data fields; ``tapegrad.autodiff.tensor.Tensor`` adds its behaviour."""

    __slots__ = ("data", "_grad", "_grad_t", "requires_grad", "_node", "_retain", "__weakref__")

    @classmethod
    def _make(cls, data, node, requires_grad: bool):
        t = object.__new__(cls)
        t.data = data
        t._grad = None
        t._grad_t = None
        t.requires_grad = requires_grad
        t._node = node
        t._retain = False
        return t


make_tensor = TensorBase._make
"""``make_tensor(data, node, requires_grad)``: a Tensor of the registered class for an array.
Rebound by :func:`register_tensor_class`: read it as ``state.make_tensor`` (or call
:func:`new_tensor`), never ``from .state import make_tensor``."""


def new_tensor(data, requires_grad: bool = False):
    """``Tensor(data)`` for an array ``data``: a leaf holding it (not copied) that, while a
    step is traced, counts as made inside the step."""
    t = make_tensor(data, None, requires_grad)
    if _TRACING.active is not None:
        _TRACING.active.made_inside.add(id(t))
    return t


def register_tensor_class(cls: type) -> None:
    """Make :func:`make_tensor` build instances of ``cls`` (the tensor module calls this)."""
    global make_tensor
    if not issubclass(cls, TensorBase):
        raise TypeError(f"register_tensor_class: {cls.__name__} is not a TensorBase")
    make_tensor = cls._make


def untraceable(t, what: str) -> None:
    """Refuse reading ``t``'s value while it is a traced value (naming ``what`` reads it)."""
    trace = _TRACING.active
    if trace is not None and trace.is_traced(t):
        raise TraceError(
            f"{what} of a traced tensor inside a compiled function: its value is only known "
            f"while tracing, so the plan could not replay this. Return the tensor and use its "
            f"value outside the compiled function, or compute with tapegrad operations "
            f"(tg.where instead of if/else)"
        )


def effect(fn: Callable[[], object], name: str | None = None):
    """Run ``fn`` now and, while tracing, record it so every replay runs it at this point.

    Optimisers wrap ``zero_grad`` with this, and so does gradient clipping, which
    is what lets a compiled training step contain them. Wrap any other update a step makes to
    arrays outside tapegrad operations (a hand-written parameter update, a counter) the same
    way: ``tg.effect(lambda: sgd_update(params))``. What ``fn`` returns is returned now only.
    ``name`` names the effect in messages (default: ``fn``'s name).
    """
    trace = _TRACING.active
    if trace is None:
        return fn()
    trace.check_untouched(f"before {name or getattr(fn, '__qualname__', 'an effect')}")
    trace.record_call(fn)
    _TRACING.active = None  # an effect is opaque: nothing inside it is traced
    try:
        return fn()
    finally:
        _TRACING.active = trace
        trace.resnapshot()
