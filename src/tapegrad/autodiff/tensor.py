"""``Tensor``: an ndarray, its gradient, and the node that made it.

Dtype rule (one, documented): a tensor made from Python numbers or lists is float32; one made
from an ndarray or NumPy scalar keeps its dtype. Inside an operation, Python numbers and integer
arrays take the dtype of the float operands; float operands of different precision are an error
(:class:`DTypeError`), never a silent upcast. Cast explicitly with :meth:`Tensor.astype`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .backend import DEFAULT_DTYPE


class _TRACING:
    """The trace being recorded by ``tapegrad.compile`` (None when not tracing)."""

    active = None


def _untraceable(t: Tensor, what: str) -> None:
    trace = _TRACING.active
    if trace is not None and trace.is_traced(t):
        from .plan import TraceError

        raise TraceError(
            f"{what} of a traced tensor inside a compiled function: its value is only known "
            f"while tracing, so the plan could not replay this. Return the tensor and use its "
            f"value outside the compiled function, or compute with tapegrad operations "
            f"(tg.where instead of if/else)"
        )


def _as_array(data, dtype) -> np.ndarray:
    if isinstance(data, Tensor):
        data = data.data
    if dtype is not None:
        return np.asarray(data, dtype=dtype)
    if isinstance(data, (np.ndarray, np.generic)):
        return np.asarray(data)  # NumPy arrays and scalars keep their dtype
    arr = np.asarray(data)
    if arr.dtype == np.float64 or arr.dtype == object:
        arr = arr.astype(DEFAULT_DTYPE)
    return arr


class Tensor:
    """An n-dimensional array that records the operations applied to it for reverse-mode AD.

    ``requires_grad=True`` marks a leaf whose gradient ``backward()`` accumulates into ``.grad``
    (an ndarray of the same shape and dtype). Only float tensors can require grad.
    """

    __slots__ = ("data", "_grad", "_grad_t", "requires_grad", "_node", "_retain", "__weakref__")
    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operators

    def __init__(self, data, requires_grad: bool = False, dtype=None):
        self.data = _as_array(data, dtype)
        if requires_grad and self.data.dtype.kind != "f":
            raise TypeError(f"only float tensors can require grad, got dtype {self.data.dtype}")
        self._grad = None
        self._grad_t = None
        self.requires_grad = bool(requires_grad)
        self._node = None
        self._retain = False
        if _TRACING.active is not None:
            _TRACING.active.made_inside.add(id(self))

    @classmethod
    def _make(cls, data: np.ndarray, node, requires_grad: bool) -> Tensor:
        t = object.__new__(cls)
        t.data = data
        t._grad = None
        t._grad_t = None
        t.requires_grad = requires_grad
        t._node = node
        t._retain = False
        return t

    # -- plain attributes ------------------------------------------------------------------
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
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
        """The value as an ndarray (shared, not copied)."""
        _untraceable(self, "numpy()")
        return self.data

    def item(self) -> float:
        _untraceable(self, "item()")
        return self.data.item()

    def tolist(self):
        _untraceable(self, "tolist()")
        return self.data.tolist()

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
        """The accumulated gradient (an ndarray shaped like ``data``), or None."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        self._grad_t = None
        trace = _TRACING.active
        if trace is not None:
            if value is not None:
                from .plan import TraceError

                raise TraceError(
                    "assigning an array to .grad inside a compiled function cannot "
                    "be replayed; clear gradients with zero_grad() or .grad = None"
                )
            from .plan import effect

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
        from .graph import backward

        retain = create_graph if retain_graph is None else retain_graph
        backward(self, gradient, retain, create_graph)

    @property
    def grad_tensor(self):
        """The gradient accumulated by ``backward(create_graph=True)`` as a Tensor that records
        how it was computed (differentiate it again), or None."""
        return self._grad_t

    def _accumulate(self, g: np.ndarray) -> None:
        if self._grad is None:
            self._grad = np.array(g, dtype=self.data.dtype, copy=True)
        else:
            self._grad += g

    def __repr__(self) -> str:
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = ""
        if self.data.dtype != DEFAULT_DTYPE:
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
        return add(self, o)

    def __radd__(self, o):
        return add(o, self)

    def __sub__(self, o):
        return sub(self, o)

    def __rsub__(self, o):
        return sub(o, self)

    def __mul__(self, o):
        return mul(self, o)

    def __rmul__(self, o):
        return mul(o, self)

    def __truediv__(self, o):
        return div(self, o)

    def __rtruediv__(self, o):
        return div(o, self)

    def __pow__(self, o):
        return power(self, o)

    def __rpow__(self, o):
        return power(o, self)

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(o, self)

    def __neg__(self):
        return neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return absolute(self)

    # comparisons give non-differentiable bool tensors
    def __lt__(self, o):
        return less(self, o)

    def __le__(self, o):
        return less_equal(self, o)

    def __gt__(self, o):
        return greater(self, o)

    def __ge__(self, o):
        return greater_equal(self, o)

    def __eq__(self, o):
        return equal(self, o)

    def __ne__(self, o):
        return not_equal(self, o)

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

    def max(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """The maximum over ``axis``; PyTorch's form ``max(dim=d)`` returns ``(values,
        indices)`` like PyTorch (``.values``, ``.indices``)."""
        args = _axis_args("max", axis, keepdims, dim, keepdim)
        if dim is None:
            return max(self, *args)
        return MaxMin(max(self, *args), argmax(self, *args))

    def min(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """The minimum over ``axis``; ``min(dim=d)`` returns ``(values, indices)``."""
        args = _axis_args("min", axis, keepdims, dim, keepdim)
        if dim is None:
            return min(self, *args)
        return MaxMin(min(self, *args), argmin(self, *args))

    def logsumexp(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return logsumexp(self, *_axis_args("logsumexp", axis, keepdims, dim, keepdim))

    def argmax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return argmax(self, *_axis_args("argmax", axis, keepdims, dim, keepdim))

    def argmin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return argmin(self, *_axis_args("argmin", axis, keepdims, dim, keepdim))

    def var(self, axis=None, correction=1, keepdims=False, *, dim=None, keepdim=None):
        axis, keepdims = _axis_args("var", axis, keepdims, dim, keepdim)
        return var(self, axis, correction, keepdims)

    def std(self, axis=None, correction=1, keepdims=False, *, dim=None, keepdim=None):
        axis, keepdims = _axis_args("std", axis, keepdims, dim, keepdim)
        return std(self, axis, correction, keepdims)

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
        """``reshape`` (tapegrad reshapes into a view whenever NumPy can)."""
        return self.reshape(*shape)

    def view_as(self, other):
        return self.reshape(other.shape)

    def new_zeros(self, *shape):
        """Zeros of ``shape`` in this tensor's dtype (not recording a graph)."""
        return Tensor(np.zeros(_shape_arg(shape), self.data.dtype))

    def new_ones(self, *shape):
        return Tensor(np.ones(_shape_arg(shape), self.data.dtype))

    def new_full(self, shape, fill_value):
        return Tensor(np.full(_shape_arg((shape,)), fill_value, self.data.dtype))

    def __format__(self, spec: str) -> str:
        """A one-element tensor formats as its number (``f"{loss:.4f}"``)."""
        if spec and self.data.size == 1:
            return format(self.data.reshape(()).item(), spec)
        return format(str(self), spec)

    def reshape(self, *shape):
        return reshape(
            self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        )

    def flatten(self, start_axis=0):
        return flatten(self, start_axis)

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


class MaxMin(NamedTuple):
    """``t.max(dim=d)`` / ``t.min(dim=d)``: the values and where they are."""

    values: Tensor
    indices: Tensor


def _axis_args(op, axis, keepdims, dim, keepdim, default=None):
    """(axis, keepdims) from NumPy's names or PyTorch's (``dim``, ``keepdim``), not both."""
    if dim is not None:
        if axis is not default:
            raise TypeError(f"{op}: give axis or dim, not both")
        axis = dim
    if keepdim is not None:
        keepdims = keepdim
    return axis, bool(keepdims)


def _shape_arg(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(n) for n in shape)


# The operations the methods above delegate to; imported last because they import Tensor.
from .ops import (  # noqa: E402
    absolute,
    add,
    argmax,
    argmin,
    astype,
    broadcast_to,
    clip,
    cos,
    div,
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
