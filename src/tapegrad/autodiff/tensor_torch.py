"""PyTorch's Tensor methods that ``tensor.py`` does not define, in PyTorch's signatures:
``contiguous``, ``all``/``any`` (with ``dim``), ``expand``, ``expand_as``, ``t``, ``narrow``,
``type``, ``type_as``, ``bmm``, ``nelement``, ``ndimension``,
``is_contiguous``, ``element_size``. Each composes existing operations, so gradients follow.

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


def attach() -> None:
    """Put the methods above on :class:`Tensor` (those it does not define itself)."""
    for name, fn in _METHODS.items():
        if name not in Tensor.__dict__:
            setattr(Tensor, name, fn)
