"""Reading ``.grad`` inside a compiled step: hand-written updates that replays repeat.

A plan replays tapegrad operations, so anything a step computes from a gradient with NumPy
would be computed once, while tracing, and frozen into the plan. The manual update that
tutorials teach (``p -= lr * p.grad`` under ``no_grad``, ``p.add_(p.grad, alpha=-lr)``) is
exactly that. So while a step is traced, ``.grad`` returns a :class:`GradView`: an ndarray
view of the gradient's value that carries the traced value of a ``read_grad`` equation (which
each replay evaluates by reading the tensor's gradient at that point of the step). Arithmetic
on it with numbers, arrays and tensors is recorded as tapegrad operations and gives another
such view (``lr * p.grad``), and passing one to a tapegrad operation (``p -= lr * p.grad``)
passes its traced value. Whatever else would turn the gradient into plain values (NumPy
functions and reductions, ``.item()``, ``float()``, writes into it or with it into another
array, as ``p.data -= lr * p.grad``) is refused at trace time with a
:class:`~tapegrad.autodiff.errors.TraceError` that says what to write instead. Outside the
trace that made it, a view is an ordinary array.
"""

from __future__ import annotations

import operator

import numpy as np

from .core import state
from .core.primitive import Primitive
from .core.state import _TRACING
from .core.state import TensorBase as Tensor  # every tensor is one (tensor.py adds the methods)
from .errors import GraphError, TraceError


def _read_grad_forward(*, tensor: Tensor, out=None):
    g = tensor._grad
    if g is None:
        raise GraphError(
            f"read_grad: the gradient of a tensor of shape {tensor.shape} is None at this point "
            f"of the replay, while the trace found one; reset gradients in the same place on "
            f"every call (zero_grad() before backward())"
        )
    if out is None:
        return g.copy()
    np.copyto(out, g)
    return out


READ_GRAD = Primitive(
    "read_grad",
    _read_grad_forward,
    None,
    doc="The value of ``tensor.grad`` at this point of a compiled step (an equation with no "
    "array inputs; only traces record it).",
)

# NumPy ufuncs on a traced gradient and the tapegrad operation each one becomes
_ARITHMETIC = {
    np.add: operator.add,
    np.subtract: operator.sub,
    np.multiply: operator.mul,
    np.true_divide: operator.truediv,
    np.negative: operator.neg,
    np.positive: operator.pos,
    np.power: operator.pow,
}

_HOW = (
    "inside a compiled step `.grad` supports arithmetic with numbers, arrays and tensors "
    "(`p -= lr * p.grad`, `p.add_(p.grad, alpha=-lr)`) and being passed to tapegrad "
    "operations, which every replay recomputes from the live gradient; {what} would be "
    "computed once, while tracing, and frozen into the plan. Use tapegrad operations "
    "(tg.tensor(...) arithmetic, tapegrad.optim's clipping), or wrap NumPy code that reads "
    "gradients in tg.effect(fn), which every replay runs"
)


class GradView(np.ndarray):
    """``tensor.grad`` as a step being traced sees it (see the module docstring)."""

    _traced: Tensor | None = None  # the read_grad equation's value
    _trace = None  # the trace that recorded it

    def __array_finalize__(self, obj):
        self._traced = getattr(obj, "_traced", None)
        self._trace = getattr(obj, "_trace", None)

    def _live(self) -> bool:
        return self._trace is not None and _TRACING.active is self._trace

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if not self._live():
            return _plain_ufunc(ufunc, method, inputs, kwargs)
        op = _ARITHMETIC.get(ufunc)
        out = kwargs.get("out", ())
        if out and not any(o is self for o in out):
            raise TraceError(
                "compile: a value computed from a gradient is written into an array outside "
                "tapegrad operations (e.g. `p.data -= lr * p.grad`): a plan replays only "
                "tapegrad operations and recorded effects, so that write would happen once. "
                "Write `p -= lr * p.grad` (or p.add_(p.grad, alpha=-lr)) under tg.no_grad(), "
                "use an optimizer from tapegrad.optim, or wrap the update in tg.effect(fn)"
            )
        if method != "__call__" or op is None or kwargs:
            what = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
            if out:
                what += " writing into it"
            raise TraceError("compile: " + _HOW.format(what=f"{what} on a gradient"))
        return _view(op(*(traced(x) for x in inputs)), self._trace)

    def __array_function__(self, func, types, args, kwargs):
        if self._live():
            raise TraceError("compile: " + _HOW.format(what=f"np.{func.__name__} of a gradient"))
        return super().__array_function__(func, types, args, kwargs)

    def _refuse(self, what: str):
        raise TraceError("compile: " + _HOW.format(what=what))

    def __getitem__(self, index):
        if self._live():  # p.grad[0]: an indexing operation on the traced value
            return _view(self._traced[index], self._trace)
        return super().__getitem__(index)

    def __setitem__(self, index, value):
        if self._live():
            self._refuse("writing into a gradient (`p.grad[...] = ...`)")
        super().__setitem__(index, value)

    def item(self, *args):
        if self._live():
            self._refuse("`.item()` of a gradient")
        return super().item(*args)

    def tolist(self):
        if self._live():
            self._refuse("`.tolist()` of a gradient")
        return super().tolist()

    def astype(self, *args, **kwargs):
        if self._live():
            self._refuse("`.astype()` of a gradient (use tg.tensor arithmetic and .to())")
        return super().astype(*args, **kwargs)

    def __float__(self):
        if self._live():
            self._refuse("float() of a gradient")
        return super().__float__()

    def __int__(self):
        if self._live():
            self._refuse("int() of a gradient")
        return super().__int__()

    def __bool__(self):
        if self._live():
            self._refuse("the truth value of a gradient (`if p.grad.any():`)")
        return super().__bool__()


def _plain(x):
    return x.view(np.ndarray) if isinstance(x, GradView) else x


def _plain_ufunc(ufunc, method, inputs, kwargs):
    if "out" in kwargs:
        kwargs = dict(kwargs, out=tuple(_plain(o) for o in kwargs["out"]))
    return getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)


def traced(x):
    """``x``, or the traced value of a :class:`GradView` of the trace under way."""
    if type(x) is GradView and x._live():
        return x._traced
    return x


def _view(value: Tensor, trace) -> GradView:
    """The traced ``value`` as the array a step sees."""
    view = value.data.view(GradView)
    view._traced, view._trace = value, trace
    trace.keep.append(view)
    trace.grad_arrays.append(value.data)  # so that np.asarray(view) is caught (Trace.ref)
    return view


def read(trace, t: Tensor) -> GradView:
    """Record a read of ``t.grad`` in ``trace`` and return the view the step gets."""
    value = state.make_tensor(t._grad.copy(), None, False)
    trace.record_eq(READ_GRAD, (), (), {"tensor": t}, (value,), ())
    return _view(value, trace)


_TRACING.lift = traced  # the core's apply passes each argument through it while tracing
