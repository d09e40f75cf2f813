"""Changing a tensor after it was made: ``x[index] = value`` and the in-place methods
(``add_ sub_ mul_ div_ zero_ fill_ copy_ clamp_``), with PyTorch's refusals.

Two ways, chosen by what needs a gradient:

* **Recorded, out of place.** When gradients are recorded and ``x`` or the new value requires
  grad, the update is an operation like any other (``index_put``, ``x + y``, ...): ``x`` then
  refers to the new node and its new array, so the update is differentiable in both. The old
  value stays intact for whatever saved it.
* **In place.** Otherwise (under ``no_grad``, or when nothing involved requires grad) the values
  are written into ``x``'s own array, which views of it and other holders of ``x`` see, through
  the effect primitives ``assign`` and ``index_put_`` that compiled plans replay.

Refused, each with a :class:`GraphError` that says what to write instead:

* a leaf that requires grad, while gradients are recorded (its gradient would lose its meaning);
* a tensor with a graph under ``no_grad`` (its values would no longer match its graph);
* a tensor that requires grad and was already used by recorded operations: they hold it as their
  input, so after the update their gradient would flow through the update (tapegrad's graph
  links tensors, not versions of them);
* an in-place write into an array that a recorded operation saved for its backward pass.

The last two are found by asking the garbage collector who holds the tensor or its array, a scan
that is only needed when a quick reference count says someone beyond the caller does. (Saved
*views* of the array are not seen.)
"""

from __future__ import annotations

import gc
import sys

import numpy as np

from .errors import DTypeError, GraphError, ShapeError
from .graph import Node, is_grad_enabled
from .primitives.elementwise import astype, clip
from .primitives.indexing import _index_put, _index_put_inplace, split_index
from .primitives.shape import broadcast_to
from .primitives.update import assign
from .tensor import _TRACING, Tensor


class _Probe:
    """Calibration of the quick reference count: the count a tensor held by one variable has
    inside ``setitem`` / ``inplace`` (measured once per entry point, on this interpreter)."""

    active: str | None = None
    base: dict = {}


def _calibrate(path: str) -> int:
    d = Tensor(np.zeros(1, np.float32))
    _Probe.active = path
    try:
        if path == "setitem":
            d[0] = 0.0
        else:
            d.zero_()
    finally:
        _Probe.active = None
    return _Probe.base[path]


def _live_graph_holds(obj, as_input: bool) -> bool:
    """Whether a recorded node not yet freed by a backward pass holds ``obj``: as a parent
    (a tensor) or, with ``as_input``, as a saved input or output array."""
    for r in gc.get_referrers(obj):
        if type(r) is Node:
            if as_input and r.out is obj and _live(r):
                return True
        elif isinstance(r, (list, tuple)):
            for n in gc.get_referrers(r):
                if type(n) is Node and _live(n):
                    if n.parents is r or (as_input and n.inputs is r):
                        return True
    return False


def _live(node) -> bool:
    # an eager node: unreleased, with tensor parents (a compiled plan's nodes have none)
    parents = node.parents
    return not node.released and parents is not None and any(isinstance(p, Tensor) for p in parents)


def _used_by_graph(x: Tensor, refcount: int, path: str) -> bool:
    base = _Probe.base.get(path)
    if base is None:
        base = _calibrate(path)
    return refcount > base and _live_graph_holds(x, False)


def _saved_by_graph(x: Tensor) -> bool:
    arr = x.data
    # the tensor's slot, ``arr`` and getrefcount's argument: anything beyond is another holder
    return sys.getrefcount(arr) > 3 and _live_graph_holds(arr, True)


def _rebind(x: Tensor, new: Tensor, what: str) -> None:
    """Make ``x`` the tensor ``new`` is (its array and node); a trace maps ``x`` to it too."""
    trace = _TRACING.active
    if trace is not None and id(x) is not id(new):
        if id(x) not in trace.var_of and id(x) not in trace.made_inside:
            from .plan import TraceError

            raise TraceError(
                f"{what}: the tensor (shape {x.shape}) comes from outside the compiled function; "
                f"a recorded update would give it a new array on every call, which the plan "
                f"cannot hand back. Update it under tg.no_grad() (written in place and "
                f"replayed), or return the new value"
            )
        trace.var_of[id(x)] = trace.var_of[id(new)]
    x.data, x._node, x.requires_grad = new.data, new._node, new.requires_grad
    x._grad_t = None


def _own_array(x: Tensor) -> None:
    """Inside a compiled function a tensor made there without tapegrad operations (tg.zeros)
    is a constant of the plan; before writing into it, make it a fresh copy on every call."""
    trace = _TRACING.active
    if trace is not None and id(x) in trace.made_inside and id(x) not in trace.var_of:
        _rebind(x, astype(x, x.dtype), "an in-place write")


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


def _used_error(what: str, x: Tensor) -> GraphError:
    return GraphError(
        f"{what}: the tensor (shape {x.shape}) requires grad and was already used by recorded "
        f"operations, whose gradient would then flow through this update. Update it before "
        f"using it, or update a copy: y = x.clone(); then change y"
    )


def _saved_error(what: str, x: Tensor) -> GraphError:
    return GraphError(
        f"{what}: the array of this tensor (shape {x.shape}) is saved by recorded operations "
        f"for their backward pass; changing it in place would corrupt their gradients. Call "
        f"backward() (or drop the results) first, or compute out of place (x = x + y)"
    )


def _value_arg(x: Tensor, value):
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and x.dtype.kind == "f" and arr.dtype != x.dtype:
            raise DTypeError(
                f"x[...] = value: value has dtype {arr.dtype} and x {x.dtype}; cast explicitly "
                f"(tapegrad never converts float precisions silently)"
            )
        return arr
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
        if x.requires_grad and _used_by_graph(x, refcount, "setitem"):
            raise _used_error(what, x)
        new = _index_put(x, value, *arrays, template=template, accumulate=False)
        _rebind(x, new, what)
        return
    if x._node is not None:
        raise _graph_error(what, x)
    if _saved_by_graph(x):
        raise _saved_error(what, x)
    _own_array(x)
    _index_put_inplace(x, value, *arrays, template=template)


def inplace(x: Tensor, what: str, compute) -> Tensor:
    """Replace ``x``'s values by ``compute(x)`` (a Tensor, or a plain value broadcast to
    ``x``'s shape), recorded or in place; returns ``x``."""
    refcount = sys.getrefcount(x)
    if _Probe.active == "method":
        _Probe.base["method"] = refcount
        return x
    grad = is_grad_enabled()
    if grad and x.requires_grad:
        if x._node is None:
            raise _leaf_error(what, x)
        if _used_by_graph(x, refcount, "method"):
            raise _used_error(what, x)
    elif x._node is not None:
        raise _graph_error(what, x)
    value = compute(x)
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
    if isinstance(value, Tensor):
        if value.dtype != x.dtype:
            raise DTypeError(
                f"{what}: the result has dtype {value.dtype} and cannot be stored in the "
                f"tensor's dtype {x.dtype}"
            )
    recorded = grad and (x.requires_grad or (isinstance(value, Tensor) and value.requires_grad))
    if recorded:
        if not isinstance(value, Tensor):
            value = Tensor(np.broadcast_to(np.asarray(value, x.dtype), x.shape).copy())
        elif value.shape != x.shape:
            value = astype(broadcast_to(value, x.shape), x.dtype)  # a copy, not a view
        _rebind(x, value, what)
        return x
    if _saved_by_graph(x):
        raise _saved_error(what, x)
    _own_array(x)
    assign(x, value)
    return x


def _same_dtype(v, dtype):
    """A tensor operand in the target's dtype (copy_ and fill_ convert, as PyTorch's do)."""
    if isinstance(v, Tensor):
        return v if v.dtype == dtype else astype(v, dtype)
    return np.asarray(v).astype(dtype)


def add_(x: Tensor, other, alpha=1) -> Tensor:
    return inplace(x, "add_", lambda t: t + (other if alpha == 1 else other * alpha))


def sub_(x: Tensor, other, alpha=1) -> Tensor:
    return inplace(x, "sub_", lambda t: t - (other if alpha == 1 else other * alpha))


def mul_(x: Tensor, other) -> Tensor:
    return inplace(x, "mul_", lambda t: t * other)


def div_(x: Tensor, other) -> Tensor:
    return inplace(x, "div_", lambda t: t / other)


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
        raise ValueError("clamp_: give at least one of min and max")
    return inplace(x, "clamp_", lambda t: clip(t, min, max))
