"""``Tensor``: an ndarray, its gradient, and the node that made it.

Dtypes: a tensor made from Python floats (or lists of them) is float32, from Python ints int64;
one made from an ndarray or NumPy scalar keeps its dtype. Elementwise operations on operands of
different dtypes promote by PyTorch's rule (``promotion.py``); integer arithmetic stays integer
and exact. Cast explicitly with :meth:`Tensor.astype`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from . import backend
from .backend import default_dtype, to_host, xp_of
from .core.state import _TRACING, TensorBase, effect, register_tensor_class  # noqa: F401
from .core.state import untraceable as _untraceable
from .errors import TraceError
from .graph import backward as _backward
from .tensor_ops import TensorOps, _axis_args


def _as_array(data, dtype, device=None) -> np.ndarray:
    if isinstance(data, Tensor):
        data = data.data
    if device is not None:
        dev = backend.get_device(device)
        if dtype is None and backend.device_of(data) is backend.CPU:
            data = _as_array(data, None)
        return backend.copy_to_device(data if dtype is None else data.astype(dtype), dev)
    if type(data) is not np.ndarray and backend.on_device(data):
        return data if dtype is None else data.astype(dtype)  # a device array keeps its device
    if dtype is not None:
        return np.asarray(data, dtype=dtype)
    if isinstance(data, (np.ndarray, np.generic)):
        return np.asarray(data)  # NumPy arrays and scalars keep their dtype
    arr = np.asarray(data)
    if arr.dtype == np.float64 or arr.dtype == object:
        arr = arr.astype(default_dtype())
    return arr


class Tensor(TensorOps, TensorBase):
    """An n-dimensional array that records the operations applied to it for reverse-mode AD.

    ``requires_grad=True`` marks a leaf whose gradient ``backward()`` accumulates into ``.grad``
    (an ndarray of the same shape and dtype). Only float tensors can require grad.
    Its data fields (and ``_make``) are the core's :class:`~tapegrad.autodiff.core.TensorBase`;
    the methods in PyTorch's forms with ``dim=`` beside ``axis=`` are ``tensor_ops.TensorOps``'s.
    """

    __slots__ = ()
    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operators

    def __init__(self, data, requires_grad: bool = False, dtype=None, device=None):
        self.data = _as_array(data, dtype, device)
        if requires_grad and self.data.dtype.kind != "f":
            raise TypeError(f"only float tensors can require grad, got dtype {self.data.dtype}")
        self._grad = None
        self._grad_t = None
        self.requires_grad = bool(requires_grad)
        self._node = None
        self._retain = False
        if _TRACING.active is not None:
            _TRACING.active.made_inside.add(id(self))

    # -- plain attributes ------------------------------------------------------------------
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: _Size(self.data.size, self.data.shape))
    is_leaf = property(lambda self: self._node is None)

    def __len__(self) -> int:
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return len(self.data)

    def __iter__(self):
        """The sub-tensors along the first axis (each ``self[i]``, differentiable)."""
        if self.data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self.data)))

    def numpy(self) -> np.ndarray:
        """The value as an ndarray: shared, not copied, on the CPU; a copy from a device."""
        _untraceable(self, "numpy()")
        return to_host(self.data)

    def item(self) -> float:
        _untraceable(self, "item()")
        return self.data.item()

    def tolist(self):
        _untraceable(self, "tolist()")
        return to_host(self.data).tolist()

    def detach(self) -> Tensor:
        """The same values, cut from the graph (shares memory)."""
        return Tensor._make(self.data, None, False)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if self._node is not None:
            raise ValueError("requires_grad_ can only be set on a leaf tensor; use detach() first")
        if flag and self.data.dtype.kind != "f":
            raise TypeError(f"only float tensors can require grad, got dtype {self.data.dtype}")
        self.requires_grad = flag
        return self

    def retain_grad(self) -> Tensor:
        """Also keep the gradient of this intermediate tensor in ``.grad`` during backward."""
        self._retain = True
        return self

    @property
    def grad(self):
        """The accumulated gradient (an ndarray shaped like ``data``), or None. Inside a
        compiled step being traced, a view whose arithmetic replays recompute from the live
        gradient (see ``autodiff/traced_grads.py``)."""
        g = self._grad
        trace = _TRACING.active
        if g is None or trace is None:
            return g
        return trace.read_grad(self)

    @grad.setter
    def grad(self, value) -> None:
        self._grad_t = None
        trace = _TRACING.active
        if trace is not None:
            if value is not None:
                raise TraceError(
                    "assigning an array to .grad inside a compiled function cannot "
                    "be replayed; clear gradients with zero_grad() or .grad = None"
                )
            effect(lambda: setattr(self, "_grad", None), ".grad = None")
            return
        self._grad = value

    def zero_grad(self) -> None:
        self.grad = None

    def backward(
        self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False
    ) -> None:
        """Accumulate gradients of this tensor into ``.grad`` of the leaves it depends on.

        With ``create_graph=True`` the gradients are computed with recorded operations, so they
        can be differentiated again: each leaf's :attr:`grad_tensor` then holds its gradient as a
        Tensor with a graph (``.grad`` keeps the values), and the graph is retained."""
        retain = create_graph if retain_graph is None else retain_graph
        _backward(self, gradient, retain, create_graph)

    @property
    def grad_tensor(self):
        """The gradient accumulated by ``backward(create_graph=True)`` as a Tensor that records
        how it was computed (differentiate it again), or None."""
        return self._grad_t

    def _accumulate(self, g: np.ndarray) -> None:
        if self._grad is None:
            self._grad = xp_of(g).array(g, dtype=self.data.dtype, copy=True)
        else:
            self._grad += g

    def __repr__(self) -> str:
        body = np.array2string(to_host(self.data), separator=", ", prefix="tensor(")
        extra = ""
        if backend.on_device(self.data):
            extra += f", device={self.device!r}"
        if self.data.dtype != default_dtype():
            extra += f", dtype={self.data.dtype}"
        if self._node is not None:
            extra += f", op={self._node.prim.name}"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    def __bool__(self) -> bool:
        _untraceable(self, "Python truth (if/while/and/or)")
        return bool(self.data)

    def __float__(self) -> float:
        _untraceable(self, "float()")
        return float(self.data)

    def __int__(self) -> int:
        _untraceable(self, "int()")
        return int(self.data)

    def __index__(self) -> int:
        _untraceable(self, "use as an index")
        return self.data.__index__()

    __hash__ = object.__hash__

    # -- arithmetic --------------------------------------------------------------------------
    def __add__(self, o):
        return _apply(add, self, o)

    def __radd__(self, o):
        return _apply(add, o, self)

    def __sub__(self, o):
        return _apply(sub, self, o)

    def __rsub__(self, o):
        return _apply(sub, o, self)

    def __mul__(self, o):
        return _apply(mul, self, o)

    def __rmul__(self, o):
        return _apply(mul, o, self)

    def __truediv__(self, o):
        return _apply(div, self, o)

    def __rtruediv__(self, o):
        return _apply(div, o, self)

    def __pow__(self, o):
        return _apply(power, self, o)

    def __rpow__(self, o):
        return _apply(power, o, self)

    def __matmul__(self, o):
        return _apply(matmul, self, o)

    def __rmatmul__(self, o):
        return _apply(matmul, o, self)

    def __neg__(self):
        return _apply(neg, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return absolute(self)

    # comparisons give non-differentiable bool tensors
    def __lt__(self, o):
        return _apply(less, self, o)

    def __le__(self, o):
        return _apply(less_equal, self, o)

    def __gt__(self, o):
        return _apply(greater, self, o)

    def __ge__(self, o):
        return _apply(greater_equal, self, o)

    def __eq__(self, o):
        return _apply(equal, self, o)

    def __ne__(self, o):
        return _apply(not_equal, self, o)

    def __getitem__(self, index):
        return getitem(self, index)

    # -- methods mirroring the functions -------------------------------------------------------
    def exp(self):
        return exp(self)

    def log(self):
        return log(self)

    def sqrt(self):
        return sqrt(self)

    def abs(self):
        return absolute(self)

    def sin(self):
        return sin(self)

    def cos(self):
        return cos(self)

    def tanh(self):
        return tanh(self)

    def sigmoid(self):
        return sigmoid(self)

    def relu(self):
        return relu(self)

    def clip(self, lo=None, hi=None):
        return clip(self, lo, hi)

    # reductions take NumPy's names (axis, keepdims) and PyTorch's (dim, keepdim)
    def sum(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return sum(self, *_axis_args("sum", axis, keepdims, dim, keepdim))

    def mean(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return mean(self, *_axis_args("mean", axis, keepdims, dim, keepdim))

    def max(self, dim=None, keepdim=None, *, axis=None, keepdims=False):
        """The maximum over all entries, or over NumPy's ``axis=``; over one ``dim`` (an int,
        positional or not) it returns ``(values, indices)`` as PyTorch (``.values``,
        ``.indices``): ``_, predicted = logits.max(1)``."""
        return _max_min(self, max, argmax, dim, keepdim, axis, keepdims)

    def min(self, dim=None, keepdim=None, *, axis=None, keepdims=False):
        """The minimum; over one ``dim`` it returns ``(values, indices)``."""
        return _max_min(self, min, argmin, dim, keepdim, axis, keepdims)

    def logsumexp(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return logsumexp(self, *_axis_args("logsumexp", axis, keepdims, dim, keepdim))

    def argmax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return argmax(self, *_axis_args("argmax", axis, keepdims, dim, keepdim))

    def argmin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return argmin(self, *_axis_args("argmin", axis, keepdims, dim, keepdim))

    def var(self, axis=None, correction=1, keepdims=False, *, dim=None, keepdim=None, **kw):
        axis, keepdims = _axis_args("var", axis, keepdims, dim, keepdim)
        return var(self, axis, correction, keepdims, **kw)  # kw: PyTorch's unbiased=

    def std(self, axis=None, correction=1, keepdims=False, *, dim=None, keepdim=None, **kw):
        axis, keepdims = _axis_args("std", axis, keepdims, dim, keepdim)
        return std(self, axis, correction, keepdims, **kw)

    def norm(self, ord=2, axis=None, keepdims=False, *, dim=None, keepdim=None):  # noqa: A002
        axis, keepdims = _axis_args("norm", axis, keepdims, dim, keepdim)
        return norm(self, ord, axis, keepdims)

    def softmax(self, axis=-1, *, dim=None):
        return softmax(self, _axis_args("softmax", axis, False, dim, None, -1)[0])

    def log_softmax(self, axis=-1, *, dim=None):
        return log_softmax(self, _axis_args("log_softmax", axis, False, dim, None, -1)[0])

    # PyTorch's names for what the operators and functions already do
    def eq(self, o):
        return equal(self, o)

    def ne(self, o):
        return not_equal(self, o)

    def lt(self, o):
        return less(self, o)

    def le(self, o):
        return less_equal(self, o)

    def gt(self, o):
        return greater(self, o)

    def ge(self, o):
        return greater_equal(self, o)

    def pow(self, o):
        return power(self, o)

    def matmul(self, o):
        return matmul(self, o)

    mm = matmul

    def numel(self) -> int:
        return int(self.data.size)

    def dim(self) -> int:
        return self.data.ndim

    def view(self, *shape):
        """``reshape`` (tapegrad reshapes into a view whenever NumPy can); ``view(dtype)``:
        the same bytes read as ``dtype`` (not differentiable), as PyTorch's."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, tuple, list)):
            from .primitives.integer import bitcast

            return bitcast(self, shape[0])
        return self.reshape(*shape)

    def view_as(self, other):
        return self.reshape(other.shape)

    def new_zeros(self, *shape):
        """Zeros of ``shape`` in this tensor's dtype (not recording a graph)."""
        return Tensor(xp_of(self.data).zeros(_shape_arg(shape), self.data.dtype))

    def new_ones(self, *shape):
        return Tensor(xp_of(self.data).ones(_shape_arg(shape), self.data.dtype))

    def new_full(self, shape, fill_value):
        return Tensor(xp_of(self.data).full(_shape_arg((shape,)), fill_value, self.data.dtype))

    def __format__(self, spec: str) -> str:
        """A one-element tensor formats as its number (``f"{loss:.4f}"``)."""
        if spec and self.data.size == 1:
            return format(self.data.reshape(()).item(), spec)
        return format(str(self), spec)

    def reshape(self, *shape):
        return reshape(
            self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        )

    def flatten(self, start_axis=0, end_axis=-1, *, start_dim=None, end_dim=None):
        return flatten(self, start_axis, end_axis, start_dim=start_dim, end_dim=end_dim)

    def permute(self, *axes):
        return permute(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)

    def transpose(self, *axes):
        """No axes: reverse them; two ints ``d0, d1``: swap those two axes (PyTorch's form); a
        full permutation (a tuple, or three or more ints): NumPy's ``transpose(axes)``."""
        if len(axes) == 2 and all(isinstance(a, (int, np.integer)) for a in axes):
            perm = list(range(self.data.ndim))
            d0, d1 = (int(a) % (self.data.ndim or 1) for a in axes)
            perm[d0], perm[d1] = perm[d1], perm[d0]
            return transpose(self, tuple(perm))
        return transpose(
            self, (axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes) or None
        )

    @property
    def T(self):
        return transpose(self)

    def squeeze(self, axis=None):
        return squeeze(self, axis)

    def unsqueeze(self, axis):
        return expand_dims(self, axis)

    def broadcast_to(self, shape):
        return broadcast_to(self, shape)

    def astype(self, dtype):
        return astype(self, dtype)

    # -- x[index] = value and in-place methods (see autodiff/inplace.py for the rules) ---------
    def __setitem__(self, index, value):
        _inplace.setitem(self, index, value)

    def add_(self, other, *, alpha=1):
        return _inplace.add_(self, other, alpha)

    def sub_(self, other, *, alpha=1):
        return _inplace.sub_(self, other, alpha)

    def mul_(self, other):
        return _inplace.mul_(self, other)

    def div_(self, other):
        return _inplace.div_(self, other)

    def zero_(self):
        return _inplace.zero_(self)

    def fill_(self, value):
        return _inplace.fill_(self, value)

    def copy_(self, src):
        return _inplace.copy_(self, src)

    def clamp_(self, min=None, max=None):  # noqa: A002 - PyTorch's names
        return _inplace.clamp_(self, min, max)

    clip_ = clamp_

    # x += y and the like change x as add_ does (PyTorch's meaning; NumPy's too for arrays)
    def __iadd__(self, o):
        return _inplace.add_(self, o, path="augmented")

    def __isub__(self, o):
        return _inplace.sub_(self, o, path="augmented")

    def __imul__(self, o):
        return _inplace.mul_(self, o, path="augmented")

    def __itruediv__(self, o):
        return _inplace.div_(self, o, path="augmented")

    # -- devices and dtypes, PyTorch's way ----------------------------------------------------
    @property
    def device(self) -> str:
        """Where the values live: ``"cpu"`` or ``"cuda"``."""
        return backend.device_of(self.data).name

    def to(self, *args, **kwargs):
        """PyTorch's ``to``: a dtype converts (``x.to(np.float64)``, ``x.to("float64")``,
        ``x.to(other_tensor)``: dtype and device of the other), a device moves (``"cpu"``,
        ``"cuda"``, ``"cuda:0"``): both differentiable, and the tensor itself when nothing
        changes. A device this machine cannot serve raises ``DeviceError`` saying why."""
        dtype, device = _to_args(args, kwargs)
        t = self
        if device is not None and backend.get_device(device) is not backend.device_of(t.data):
            t = to_device(t, device=backend.get_device(device).name)
        if dtype is None or dtype == t.data.dtype:
            return t
        return astype(t, dtype)

    def cpu(self):
        """This tensor on the CPU (itself when it is there; a differentiable copy otherwise)."""
        return self.to("cpu")

    def cuda(self, device=None, **kwargs):
        """This tensor on the GPU (``device``: an index or ``"cuda:N"``, default the current)."""
        name = "cuda" if device is None else device if isinstance(device, str) else f"cuda:{device}"
        return self.to(name)

    def float(self):
        return self.to(np.float32)

    def double(self):
        return self.to(np.float64)

    def half(self):
        return self.to(np.float16)

    def long(self):
        return self.to(np.int64)

    def int(self):
        return self.to(np.int32)

    def bool(self):
        return self.to(np.bool_)


register_tensor_class(Tensor)  # the core's operations return Tensors


class MaxMin(NamedTuple):
    """``t.max(dim=d)`` / ``t.min(dim=d)``: the values and where they are."""

    values: Tensor
    indices: Tensor


class _Size(int):
    """``t.size``: the element count, an int (NumPy's ``size``, which code relies on), that is
    also callable as PyTorch's ``size()`` (the shape) and ``size(d)`` (the length of axis d)."""

    def __new__(cls, count: int, shape: tuple = ()):
        obj = super().__new__(cls, count)
        obj.shape = tuple(shape)
        return obj

    def __call__(self, dim=None):
        if dim is None:
            return self.shape
        n = len(self.shape)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"size: the axis must be an int, got {dim!r}")
        if not -n <= dim < n:
            raise IndexError(f"size: axis {dim} is out of range for a tensor of {n} axes")
        return self.shape[dim]

    def __reduce__(self):  # pickles (and copies) as the plain int
        return (int, (int(self),))


_DEVICE = re.compile(r"^(cpu|cuda|mps|xpu|xla|meta|hip|hpu|ipu|mtia|vulkan|lazy)(:\d+)?$")
_DTYPE_NAMES = {
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
}  # fmt: skip
_NO_DEVICE = (
    "to({device!r}): tapegrad computes on the CPU ('cpu') and on NVIDIA GPUs through CuPy "
    "('cuda'); {device!r} is not one of them"
)


def _to_args(args, kwargs):
    """(dtype, device) that ``Tensor.to(...)`` asks for (None: keep it)."""
    unknown = set(kwargs) - {"dtype", "device", "non_blocking", "copy"}
    if unknown:
        raise TypeError(f"to: unexpected keyword arguments {sorted(unknown)}")
    dtype = device = None
    for a in list(args) + [kwargs.get("device"), kwargs.get("dtype")]:
        if a is None:
            continue
        if isinstance(a, Tensor):
            dtype, device = a.data.dtype, a.device
            continue
        if isinstance(a, backend.Device):
            device = a.name
            continue
        if type(a).__name__ == "device":  # a device object from another library
            a = str(a)
        if isinstance(a, str):
            if _DEVICE.match(a):
                if not a.startswith(("cpu", "cuda")):
                    raise backend.DeviceError(_NO_DEVICE.format(device=a))
                device = a
                continue
            if a not in _DTYPE_NAMES:
                raise ValueError(
                    f"to: {a!r} is neither a device ('cpu') nor a dtype name "
                    f"({', '.join(sorted(_DTYPE_NAMES))})"
                )
        try:
            d = np.dtype(a)
        except TypeError:
            raise TypeError(f"to: cannot read {a!r} as a dtype or a device") from None
        if d.kind not in "biuf":
            raise TypeError(f"to: {a!r} is not a numeric dtype")
        dtype = d
    return dtype, device


def _shape_arg(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(n) for n in shape)


# The operations the methods above delegate to.
from . import inplace as _inplace  # noqa: E402  (x[i] = v and the in-place methods)
from .graph import apply as _apply  # noqa: E402  (the operators call it directly)
from .ops import (  # noqa: E402
    absolute,
    add,
    argmax,
    argmin,
    astype,
    broadcast_to,
    clip,
    cos,
    equal,
    exp,
    expand_dims,
    flatten,
    getitem,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log_softmax,
    logsumexp,
    matmul,
    max,
    mean,
    min,
    mul,
    neg,
    norm,
    not_equal,
    permute,
    power,
    relu,
    reshape,
    sigmoid,
    sin,
    softmax,
    sqrt,
    squeeze,
    std,
    sub,
    sum,
    tanh,
    transpose,
    var,
)
from .primitives.device import to_device  # noqa: E402
from .primitives.elementwise import div  # noqa: E402  (the primitive: ops.div takes rounding_mode)


def _max_min(x, reduce, arg, dim, keepdim, axis, keepdims):
    """``Tensor.max``/``min``: the values over ``axis`` (NumPy's form, or a tuple of dims),
    ``(values, indices)`` over one int ``dim`` (PyTorch's form)."""
    if isinstance(dim, (tuple, list)):  # several axes: values only, as NumPy
        dim, axis = None, dim
    args = _axis_args(reduce.__name__, axis, keepdims, dim, keepdim)
    if dim is None:
        return reduce(x, *args)
    return MaxMin(reduce(x, *args), arg(x, *args))
