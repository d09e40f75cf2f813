"""Changing a tensor after it was made: ``x[index] = value`` and the in-place methods
(``add_ sub_ mul_ div_ zero_ fill_ copy_ clamp_``), with PyTorch's refusals.

Two ways, chosen by what needs a gradient:

* **Recorded, out of place.** When gradients are recorded and ``x`` or the new value requires
  grad, the update is an operation like any other (``index_put``, ``x * y``, ...) applied to
  ``x``'s current state, and ``x`` then refers to the new node and its new array, so the update
  is differentiable in both. Recorded operations that used ``x`` before (the value itself may:
  ``h[:, 1:] = h[:, 1:] * 3``) are pointed at that earlier state, as PyTorch's graph would keep
  them; the old array stays intact for whatever saved it.
* **In place.** Otherwise (under ``no_grad``, or when nothing involved requires grad) the values
  are written into ``x``'s own array, which views of it and other holders of ``x`` see, through
  the effect primitives ``assign`` and ``index_put_`` that compiled plans replay.

Refused, each with a :class:`GraphError` that says what to write instead:

* a leaf that requires grad, while gradients are recorded (its gradient would lose its meaning);
* a tensor with a graph under ``no_grad`` (its values would no longer match its graph);
* an in-place write into an array that a recorded operation saved for its backward pass.

tapegrad's graph links tensors, not versions of them, so finding the operations that used ``x``
or saved its array means asking the garbage collector who holds them: a scan that runs only
when a quick reference count says someone beyond the caller does. (Saved *views* of the array
are not seen.)
"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np

from .core import TensorBase as Tensor  # every tensor is one (tensor.py adds the methods)
from .core import TraceError, is_grad_enabled, new_tensor, state
from .core.primitive import Node
from .core.state import _TRACING
from .errors import DTypeError, GraphError, ShapeError
from .primitives.elementwise import astype, clip
from .primitives.pointwise import int_arith
from .primitives.shape import broadcast_to
from .primitives.subscript import _index_put, _index_put_inplace, split_index
from .primitives.update import _assign
from .traced_grads import traced


class _Probe:
    """Calibration of the quick reference count: the count a tensor held by one variable has
    inside ``setitem`` / ``inplace`` (measured once per entry point, on this interpreter)."""

    active: str | None = None
    base: dict = {}


def _calibrate(path: str) -> int:
    d = new_tensor(np.zeros(1, np.float32))
    _Probe.active = path
    try:
        if path == "setitem":
            d[0] = 0.0
        elif path == "augmented":
            d += 0.0
        else:
            d.zero_()
    finally:
        _Probe.active = None
    return _Probe.base[path]


def _live_graph_holds(arr: np.ndarray) -> bool:
    """Whether a recorded node not yet freed by a backward pass saved ``arr`` (as an input or
    its output) for its VJP."""
    for r in gc.get_referrers(arr):
        if type(r) is Node:
            if r.out is arr and _live(r):
                return True
        elif isinstance(r, list):
            for n in gc.get_referrers(r):
                if type(n) is Node and n.inputs is r and _live(n):
                    return True
    return False


def _live(node) -> bool:
    # an eager node: unreleased, with tensor parents (a compiled plan's nodes have none)
    parents = node.parents
    return not node.released and parents is not None and any(isinstance(p, Tensor) for p in parents)


_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # trace -> its shadows


def _shadow(x: Tensor) -> Tensor:
    """A tensor for ``x``'s current state (array and node), standing in for ``x`` in the
    operations recorded before an update; a trace maps it where it maps ``x``."""
    s = state.make_tensor(x.data, x._node, x.requires_grad)
    trace = _TRACING.active
    if trace is not None:
        v = trace.var_of.get(id(x))
        if v is not None:
            trace.var_of[id(s)] = v
        elif id(x) in trace.made_inside:
            trace.made_inside.add(id(s))
        _KEPT.setdefault(trace, []).append(s)  # alive while tracing: its id stays its own
    return s


def _reroute(x: Tensor, shadow: Tensor, refcount: int, path: str) -> None:
    """Point the recorded operations that hold ``x`` as a parent at ``shadow``."""
    base = _Probe.base.get(path)
    if base is None:
        base = _calibrate(path)
    if refcount <= base:
        return  # nothing beyond the caller holds x: no recorded operation does
    for r in gc.get_referrers(x):
        if type(r) is tuple:
            for n in gc.get_referrers(r):
                if type(n) is Node and n.parents is r:
                    n.parents = tuple(shadow if p is x else p for p in r)


def _saved_by_graph(x: Tensor) -> bool:
    arr = x.data
    # the tensor's slot, ``arr`` and getrefcount's argument: anything beyond is another holder
    return sys.getrefcount(arr) > 3 and _live_graph_holds(arr)


def assign(target, value):
    """Write ``value`` into ``target``'s array in place (broadcast to its shape; a float value
    must have target's dtype) and return ``target``. Compiled plans replay the write."""
    if not isinstance(target, Tensor):
        raise TypeError(f"assign: the target must be a Tensor, got {type(target).__name__}")
    if target._node is not None:
        raise GraphError(
            f"assign: the target (shape {target.shape}) was computed by recorded operations, "
            f"whose backward pass may read it; assign into a leaf tensor (a buffer or parameter)"
        )
    if target.requires_grad and is_grad_enabled():
        raise GraphError(
            f"assign: the target (shape {target.shape}) requires grad; an in-place change to it "
            f"while gradients are recorded would corrupt them: wrap it in tg.no_grad()"
        )
    if _saved_by_graph(target):
        raise GraphError(
            f"assign: the target's array (shape {target.shape}) was saved by a recorded "
            f"operation for its backward pass; writing into it would change that gradient. "
            f"Assign after backward(), or into a copy"
        )
    target_dtype = target.data.dtype
    if not isinstance(value, Tensor) and not isinstance(value, np.ndarray):
        value = np.asarray(value)
        if value.dtype.kind in "iuf" and np.can_cast(value, target_dtype, "same_kind"):
            value = value.astype(target_dtype)  # a Python number takes the target's dtype
    vdtype = value.dtype if not isinstance(value, Tensor) else value.data.dtype
    if not np.can_cast(vdtype, target_dtype, "same_kind") or (
        target_dtype.kind == "f" and vdtype.kind == "f" and vdtype != target_dtype
    ):
        hint = (
            " (tapegrad's arithmetic on integer tensors gives floats: b.add_(1) stays exact)"
            if target_dtype.kind in "iu"
            else ", cast it with .astype()"
        )
        raise DTypeError(f"assign: a {target_dtype} target cannot take a {vdtype} value{hint}")
    _assign(target, value)
    return target


def _outside_check(x: Tensor, what: str) -> None:
    trace = _TRACING.active
    if trace is not None and id(x) not in trace.var_of and id(x) not in trace.made_inside:
        raise TraceError(
            f"{what}: the tensor (shape {x.shape}) comes from outside the compiled function; a "
            f"recorded update would give it a new array on every call, which the plan cannot "
            f"hand back. Update it under tg.no_grad() (written in place and replayed), or "
            f"return the new value"
        )


def _rebind(x: Tensor, new: Tensor) -> None:
    """Make ``x`` the tensor ``new`` is (its array and node); a trace maps ``x`` to it too."""
    trace = _TRACING.active
    if trace is not None:
        v = trace.var_of.get(id(new))
        if v is not None:
            trace.var_of[id(x)] = v
        else:  # a constant (x.zero_() on a tensor with a graph): x is a constant now
            trace.var_of.pop(id(x), None)
            trace.made_inside.add(id(x))
    x.data, x._node, x.requires_grad = new.data, new._node, new.requires_grad
    x._grad_t = None


def _own_array(x: Tensor) -> None:
    """Inside a compiled function a tensor made there without tapegrad operations (tg.zeros)
    is a constant of the plan; before writing into it, make it a fresh copy on every call."""
    trace = _TRACING.active
    if trace is not None and id(x) in trace.made_inside and id(x) not in trace.var_of:
        _rebind(x, astype(x, x.dtype))


def _leaf_error(what: str, x: Tensor) -> GraphError:
    return GraphError(
        f"{what}: a leaf tensor that requires grad (shape {x.shape}) cannot be changed in place "
        f"while gradients are recorded; do it under tg.no_grad() (parameter updates, "
        f"initialisation), or compute a new tensor"
    )


def _graph_error(what: str, x: Tensor) -> GraphError:
    return GraphError(
        f"{what}: the tensor (shape {x.shape}) was computed by recorded operations and "
        f"gradients are off; changing it would leave its graph describing other values. "
        f"Detach it first (x = x.detach()), or do the update with gradients on"
    )


def _saved_error(what: str, x: Tensor) -> GraphError:
    return GraphError(
        f"{what}: the array of this tensor (shape {x.shape}) is saved by recorded operations "
        f"for their backward pass; changing it in place would corrupt their gradients. Call "
        f"backward() (or drop the results) first, or compute out of place (x = x + y)"
    )


def _value_arg(x: Tensor, value):
    """The value of ``x[index] = value`` in ``x``'s dtype (converted, as PyTorch's setitem
    does: a float64 value into a float32 tensor, a float into an integer one)."""
    value = traced(value)  # p[...] = p.grad inside a traced step
    if isinstance(value, Tensor):
        return value if value.dtype == x.dtype else astype(value, x.dtype)
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return np.asarray(value).astype(x.dtype, copy=False)
    return np.asarray(value, dtype=x.dtype)  # Python numbers and lists take x's dtype


def setitem(x: Tensor, index, value) -> None:
    """``x[index] = value`` (see the module docstring for when it is recorded or in place)."""
    refcount = sys.getrefcount(x)
    if _Probe.active == "setitem":
        _Probe.base["setitem"] = refcount
        return
    what = "x[...] = value"
    template, arrays = split_index(what, index)
    value = _value_arg(x, value)
    grad = is_grad_enabled()
    if grad and x.requires_grad and x._node is None:
        raise _leaf_error(what, x)
    if grad and (x.requires_grad or (isinstance(value, Tensor) and value.requires_grad)):
        _outside_check(x, what)
        before = _shadow(x)
        if x.requires_grad:
            _reroute(x, before, refcount, "setitem")
        _rebind(x, _index_put(before, value, *arrays, template=template, accumulate=False))
        return
    if x._node is not None:
        raise _graph_error(what, x)
    if _saved_by_graph(x):
        raise _saved_error(what, x)
    _own_array(x)
    _index_put_inplace(x, value, *arrays, template=template)


def inplace(x: Tensor, what: str, compute, path: str = "method") -> Tensor:
    """Replace ``x``'s values by ``compute(x)`` (a Tensor, or a plain value broadcast to
    ``x``'s shape), recorded or in place; returns ``x``. ``path``: how the caller got here
    (a method call, or ``x += y``), for the quick reference count."""
    refcount = sys.getrefcount(x)
    if _Probe.active == path:
        _Probe.base[path] = refcount
        return x
    grad = is_grad_enabled()
    if grad and x.requires_grad and x._node is None:
        raise _leaf_error(what, x)
    if not grad and x._node is not None:
        raise _graph_error(what, x)
    before = _shadow(x) if grad and x.requires_grad else x
    value = compute(before)
    shape = tuple(value.shape) if isinstance(value, Tensor) else np.shape(value)
    try:
        full = np.broadcast_shapes(shape, x.shape)
    except ValueError:
        full = None
    if full != x.shape:
        raise ShapeError(
            f"{what}: the new values have shape {shape}, the tensor {x.shape}; an in-place "
            f"operation keeps the tensor's shape"
        )
    if isinstance(value, Tensor) and value.dtype != x.dtype:
        if not np.can_cast(value.dtype, x.dtype, "same_kind"):
            raise DTypeError(
                f"{what}: the result has dtype {value.dtype} and cannot be stored in the "
                f"tensor's dtype {x.dtype}"
            )
        value = astype(value, x.dtype)  # within a kind (int64 into int32), as PyTorch does
    recorded = grad and (x.requires_grad or (isinstance(value, Tensor) and value.requires_grad))
    if recorded:
        _outside_check(x, what)
        if before is not x:
            _reroute(x, before, refcount, path)
        if not isinstance(value, Tensor):
            value = new_tensor(np.broadcast_to(np.asarray(value, x.dtype), x.shape).copy())
        elif value.shape != x.shape or value is before:
            value = astype(broadcast_to(value, x.shape), x.dtype)  # a copy, not a view
        _rebind(x, value)
        return x
    if _saved_by_graph(x):
        raise _saved_error(what, x)
    _own_array(x)
    assign(x, value)
    return x


def _same_dtype(v, dtype):
    """A tensor operand in the target's dtype (copy_ and fill_ convert, as PyTorch's do)."""
    if isinstance(v, Tensor):
        return astype(v, dtype)  # a copy: the tensor updated must not share v's array
    return np.asarray(v).astype(dtype)


def _is_int(v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    d = v.data if isinstance(v, Tensor) else v
    return isinstance(d, np.ndarray) and d.dtype.kind in "iu"


def _arith(op: str, t, other, alpha=1):
    """``t op alpha * other``; on integer tensors with integer operands, exactly in integers
    (Python ints and ``alpha`` in the tensor's dtype)."""
    if t.dtype.kind in "iu" and _is_int(other) and _is_int(alpha):
        if not isinstance(other, Tensor):
            other = np.asarray(other, t.dtype)  # Python ints take the tensor's dtype
        if alpha != 1:
            other = int_arith(other, np.asarray(alpha, t.dtype), op="mul")
        return int_arith(t, other, op=op)
    if alpha != 1:
        other = other * alpha
    return {"add": lambda: t + other, "sub": lambda: t - other, "mul": lambda: t * other}[op]()


def add_(x: Tensor, other, alpha=1, path: str = "method") -> Tensor:
    return inplace(x, "add_", lambda t: _arith("add", t, other, alpha), path)


def sub_(x: Tensor, other, alpha=1, path: str = "method") -> Tensor:
    return inplace(x, "sub_", lambda t: _arith("sub", t, other, alpha), path)


def mul_(x: Tensor, other, path: str = "method") -> Tensor:
    return inplace(x, "mul_", lambda t: _arith("mul", t, other), path)


def div_(x: Tensor, other, path: str = "method") -> Tensor:
    return inplace(x, "div_", lambda t: t / other, path)


def zero_(x: Tensor) -> Tensor:
    return inplace(x, "zero_", lambda t: np.zeros((), t.dtype))


def fill_(x: Tensor, value) -> Tensor:
    if np.ndim(value.data if isinstance(value, Tensor) else value) != 0:
        raise ShapeError(f"fill_: the value must be a number or 0-d, got {value!r}")
    return inplace(x, "fill_", lambda t: _same_dtype(value, t.dtype))


def copy_(x: Tensor, src) -> Tensor:
    return inplace(x, "copy_", lambda t: _same_dtype(src, t.dtype))


def clamp_(x: Tensor, min=None, max=None) -> Tensor:  # noqa: A002 - PyTorch's names
    if min is None and max is None:
        from .errors import ArgumentError

        raise ArgumentError("clamp_: give at least one of min and max")
    return inplace(x, "clamp_", lambda t: clip(t, min, max))
