"""PyTorch's Tensor methods that ``tensor.py`` does not define, in PyTorch's signatures:
``contiguous``, ``all``/``any`` (with ``dim``), ``expand``, ``expand_as``, ``t``, ``narrow``,
``type``, ``type_as``, ``bmm``, ``nelement``, ``ndimension``,
``is_contiguous``, ``element_size``, ``fill_diagonal_``; the functions PyTorch also has as
methods (``x.neg()``, ``x.log1p()``, ...) and in-place twins of the methods (``exp_``,
``masked_fill_``, ``scatter_``, ...). Each composes existing operations, so gradients follow.

They are attached to :class:`Tensor` in one place, :func:`attach`, called once by the engine's
package on import (``multinomial``, which draws from ``nn.init``'s generator, is attached
by ``tapegrad.compat``).
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import ShapeError
from .tensor import Tensor

# PyTorch's legacy type names (``x.type()``, ``x.type("torch.DoubleTensor")``) and dtypes
_TYPE_NAMES = {
    "torch.FloatTensor": np.float32,
    "torch.DoubleTensor": np.float64,
    "torch.HalfTensor": np.float16,
    "torch.LongTensor": np.int64,
    "torch.IntTensor": np.int32,
    "torch.ShortTensor": np.int16,
    "torch.CharTensor": np.int8,
    "torch.ByteTensor": np.uint8,
    "torch.BoolTensor": np.bool_,
}
_NAME_OF = {np.dtype(v): k for k, v in _TYPE_NAMES.items()}


def contiguous(self, memory_format=None) -> Tensor:
    """The tensor itself when its values are laid out in row-major order, else a copy that
    is (recorded, so gradients flow back)."""
    if self.data.flags.c_contiguous:
        return self
    return ops.reshape(ops.reshape(self, (-1,)), self.shape)  # flattening copies in C order


def is_contiguous(self, memory_format=None) -> bool:
    return bool(self.data.flags.c_contiguous)


def all_(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    """Whether every entry (over ``dim``, or NumPy's ``axis``: an int or a tuple) is nonzero;
    bool."""
    kd = keepdim if keepdims is None else keepdims
    return ops.all(self, axis, False, dim=dim, keepdim=kd)


def any_(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    """Whether some entry (over ``dim`` or ``axis``) is nonzero; bool."""
    kd = keepdim if keepdims is None else keepdims
    return ops.any(self, axis, False, dim=dim, keepdim=kd)


def _sizes(sizes) -> tuple:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    return tuple(int(s) for s in sizes)


def expand(self, *sizes) -> Tensor:
    """A broadcast view of size ``sizes`` (``-1`` keeps an axis' size; new axes go in
    front), as PyTorch's ``expand``; the gradient sums over the expanded axes."""
    sizes = _sizes(sizes)
    new = len(sizes) - self.ndim
    if new < 0:
        raise ShapeError(
            f"expand: {len(sizes)} sizes {sizes} for a tensor of {self.ndim} axes "
            f"{tuple(self.shape)}; give at least one size per axis"
        )
    shape = []
    for i, s in enumerate(sizes):
        if s == -1:
            if i < new:
                raise ShapeError(f"expand: -1 is not allowed for a new leading axis ({sizes})")
            s = self.shape[i - new]
        elif i >= new and self.shape[i - new] not in (1, s):
            raise ShapeError(
                f"expand: axis {i - new} has size {self.shape[i - new]}, which cannot expand "
                f"to {s} (only size-1 axes expand); shape {tuple(self.shape)} to {sizes}"
            )
        shape.append(s)
    return ops.broadcast_to(self, tuple(shape))


def expand_as(self, other) -> Tensor:
    return expand(self, tuple(other.shape))


def t(self) -> Tensor:
    """The transpose of a matrix; a 0-d or 1-d tensor as it is (PyTorch's ``t``)."""
    if self.ndim > 2:
        raise ShapeError(f"t: expects a tensor of at most 2 axes, got shape {tuple(self.shape)}")
    return self if self.ndim < 2 else ops.transpose(self)


def narrow(self, dim: int, start: int, length: int) -> Tensor:
    """``length`` entries from ``start`` along ``dim`` (a view; negative ``start`` counts from
    the end)."""
    n = self.ndim
    if not -n <= dim < n:
        raise IndexError(f"narrow: dim {dim} is out of range for a tensor of {n} axes")
    dim %= n
    size = self.shape[dim]
    start = int(start) + size if start < 0 else int(start)
    if not 0 <= start <= size or length < 0 or start + length > size:
        raise IndexError(
            f"narrow: start {start} and length {length} exceed axis {dim} of size {size}"
        )
    index = (slice(None),) * dim + (slice(start, start + int(length)),)
    return self[index]


def type_(self, dtype=None, non_blocking: bool = False, **kwargs):
    """No argument: the PyTorch type name (``"torch.FloatTensor"``); a dtype or such a name:
    the tensor converted to it (itself when it already is)."""
    if dtype is None:
        return _NAME_OF.get(self.data.dtype, f"tapegrad.{self.data.dtype}Tensor")
    if isinstance(dtype, str) and dtype in _TYPE_NAMES:
        dtype = _TYPE_NAMES[dtype]
    return self.to(dtype)


def type_as(self, other) -> Tensor:
    return self.to(other.dtype)


def bmm(self, other) -> Tensor:
    """Batched matrix product of ``(B, n, m)`` and ``(B, m, p)`` tensors."""
    return batch_matmul(self, other)


def batch_matmul(a, b) -> Tensor:
    """``bmm``: the product of matching 3-D batches ``(B, n, m) @ (B, m, p)``."""
    sa, sb = np.shape(getattr(a, "data", a)), np.shape(getattr(b, "data", b))
    if len(sa) != 3 or len(sb) != 3 or sa[0] != sb[0] or sa[2] != sb[1]:
        raise ShapeError(f"bmm: expects (B, n, m) and (B, m, p) tensors, got {sa} and {sb}")
    return ops.matmul(a, b)


def element_size(self) -> int:
    return int(self.data.dtype.itemsize)


_FUNCTIONS = {
    "negative": ops.neg,
    "clamp_min": lambda x, min: ops.clip(x, min, None),  # noqa: A006
    "clamp_max": lambda x, max: ops.clip(x, None, max),  # noqa: A006
}


def _function_method(name: str):
    """The method ``x.name(...)`` as ``tg.name(x, ...)`` (PyTorch has both forms)."""
    fn = _FUNCTIONS.get(name) or getattr(ops, name)

    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``tg.{name}(self, ...)``."
    return method


def _inplace_method(name: str):
    """PyTorch's in-place twin ``x.name_(...)`` of the method ``x.name(...)``: ``x`` takes
    the result (recorded when gradients are, else written into its array; see
    ``autodiff/inplace.py`` for the rules and refusals) and is returned."""

    def method(self, *args, **kwargs):
        from .inplace import inplace

        return inplace(self, name + "_", lambda t: getattr(t, name)(*args, **kwargs))

    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"In place: ``x`` becomes ``x.{name}(...)``; returns ``x``."
    return method


def fill_diagonal_(self, fill_value, wrap: bool = False) -> Tensor:
    """Write ``fill_value`` on the main diagonal (entries ``[i, i, ...]``) in place; a tensor
    of more than 2 axes must have them all of one size, as PyTorch requires."""
    shape = tuple(self.shape)
    if len(shape) < 2 or (len(shape) > 2 and len(set(shape)) != 1):
        raise ShapeError(
            f"fill_diagonal_: expects a matrix or a tensor with all axes of one size, got {shape}"
        )
    if wrap and len(shape) == 2 and shape[0] > shape[1] + 1:
        raise NotImplementedError("fill_diagonal_(wrap=True) of a tall matrix")
    mask = np.zeros(shape, bool)
    i = np.arange(min(shape))
    mask[(i,) * len(shape)] = True
    return _inplace_method("masked_fill")(self, mask, fill_value)


def _grad_fn(self):
    """The recorded operation that made this tensor (None for a leaf or a constant): truthy
    where PyTorch's ``grad_fn`` is."""
    return self._node


def _is_cuda(self) -> bool:
    return str(self.device).startswith("cuda")


# PyTorch's methods that tapegrad has as functions only, then the in-place twins
_FUNCTION_METHODS = (
    "neg negative floor ceil round trunc sign reciprocal rsqrt square log1p expm1 erf "
    "clamp_min clamp_max"
).split()
_INPLACE_METHODS = (
    "masked_fill scatter scatter_add index_add exp log sqrt abs pow tanh sigmoid relu lerp "
    "sin cos copysign neg floor ceil round trunc sign reciprocal rsqrt square log1p expm1 erf "
    "clamp_min clamp_max"
).split()

_METHODS = {
    "contiguous": contiguous,
    "is_contiguous": is_contiguous,
    "all": all_,
    "any": any_,
    "expand": expand,
    "expand_as": expand_as,
    "t": t,
    "narrow": narrow,
    "type": type_,
    "type_as": type_as,
    "bmm": bmm,
    "nelement": Tensor.numel,
    "ndimension": Tensor.dim,
    "element_size": element_size,
}


def bitcast(self, dtype) -> Tensor:
    """tinygrad's name for PyTorch's ``x.view(dtype)``: the same bytes read as ``dtype``."""
    from .primitives.integer import bitcast as _bitcast

    return _bitcast(self, dtype)


def attach() -> None:
    """Put the methods above on :class:`Tensor` (those it does not define itself)."""
    methods = dict(_METHODS, fill_diagonal_=fill_diagonal_, bitcast=bitcast)
    methods.update(grad_fn=property(_grad_fn), is_cuda=property(_is_cuda))
    methods.update({name: _function_method(name) for name in _FUNCTION_METHODS})
    methods.update({name + "_": _inplace_method(name) for name in _INPLACE_METHODS})
    for name, fn in methods.items():
        if name not in Tensor.__dict__:
            setattr(Tensor, name, fn)
