"""More of ``Tensor``'s methods: operations in PyTorch's forms (``dim=`` beside ``axis=``):
scans, sorting, movement, indexing, integer and bitwise operations. ``Tensor`` inherits them
(``class Tensor(TensorOps, TensorBase)`` in ``tensor.py``); each delegates to ``ops``.
"""

from __future__ import annotations

from . import ops as _ops
from .primitives.movement import repeat as _repeat
from .primitives.movement import unfold as _unfold


def _axis_args(op, axis, keepdims, dim, keepdim, default=None):
    """(axis, keepdims) from NumPy's names or PyTorch's (``dim``, ``keepdim``), not both."""
    if dim is not None:
        if axis is not default:
            raise TypeError(f"{op}: give axis or dim, not both")
        axis = dim
    if keepdim is not None:
        keepdims = keepdim
    return axis, bool(keepdims)


class TensorOps:
    """The methods ``Tensor`` inherits from this module (no data of its own)."""

    __slots__ = ()

    def cumsum(self, axis=None, *, dim=None):
        return _ops.cumsum(self, _axis_args("cumsum", axis, False, dim, None)[0])

    def cumprod(self, axis=None, *, dim=None):
        return _ops.cumprod(self, _axis_args("cumprod", axis, False, dim, None)[0])

    def logcumsumexp(self, axis=None, *, dim=None):
        return _ops.logcumsumexp(self, _axis_args("logcumsumexp", axis, False, dim, None)[0])

    def cummax(self, axis=None, *, dim=None):
        return _ops.cummax(self, _axis_args("cummax", axis, False, dim, None)[0])

    def cummin(self, axis=None, *, dim=None):
        return _ops.cummin(self, _axis_args("cummin", axis, False, dim, None)[0])

    def prod(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _ops.prod(self, *_axis_args("prod", axis, keepdims, dim, keepdim))

    def sort(self, axis=-1, descending=False, *, dim=None, stable=False):  # always stable
        return _ops.sort(self, _axis_args("sort", axis, False, dim, None, -1)[0], descending)

    def argsort(self, axis=-1, descending=False, *, dim=None, stable=False):  # always stable
        return _ops.argsort(self, _axis_args("argsort", axis, False, dim, None, -1)[0], descending)

    def topk(self, k, axis=-1, largest=True, sorted=True, *, dim=None):  # noqa: A002
        axis = _axis_args("topk", axis, False, dim, None, -1)[0]
        return _ops.topk(self, k, axis, largest, sorted)

    def flip(self, *axes, dims=None, axis=None):
        """``x.flip(0)``, ``x.flip(0, 1)``, ``x.flip((0, 1))`` or ``x.flip(dims=...)``."""
        given = [a for a in (axes or None, dims, axis) if a is not None]
        if len(given) > 1:
            raise TypeError("flip: give the axes once (positionally, dims= or axis=)")
        chosen = given[0] if given else None
        if isinstance(chosen, tuple) and len(chosen) == 1 and isinstance(chosen[0], (tuple, list)):
            chosen = chosen[0]
        return _ops.flip(self, chosen)

    def roll(self, shifts, dims=None, *, axis=None):
        if dims is not None and axis is not None:
            raise TypeError("roll: give dims or axis, not both")
        return _ops.roll(self, shifts, dims if dims is not None else axis)

    def repeat(self, *sizes):
        """PyTorch's ``repeat``: tiled ``sizes[i]`` times along axis i (not NumPy's repeat,
        which is :meth:`repeat_interleave`)."""
        return _repeat(self, *sizes)

    def tile(self, *reps):
        return _ops.tile(self, reps[0] if len(reps) == 1 else reps)

    def repeat_interleave(self, repeats, axis=None, *, dim=None):
        return _ops.repeat_interleave(
            self, repeats, _axis_args("repeat_interleave", axis, False, dim, None)[0]
        )

    def tril(self, diagonal=0):
        return _ops.tril(self, diagonal)

    def triu(self, diagonal=0):
        return _ops.triu(self, diagonal)

    def diag(self, diagonal=0):
        return _ops.diag(self, diagonal)

    def diagonal(self, offset=0, dim1=0, dim2=1):
        return _ops.diagonal(self, offset, dim1, dim2)

    def split(self, split_size, axis=0, *, dim=None):
        """PyTorch's ``split``: pieces of ``split_size`` entries (or of the listed sizes)."""
        return _ops.split(self, split_size, _axis_args("split", axis, False, dim, None, 0)[0])

    def chunk(self, chunks, axis=0, *, dim=None):
        return _ops.chunk(self, chunks, _axis_args("chunk", axis, False, dim, None, 0)[0])

    def unbind(self, axis=0, *, dim=None):
        return _ops.unbind(self, _axis_args("unbind", axis, False, dim, None, 0)[0])

    def unfold(self, dimension, size, step):
        """The windows of ``size`` entries, ``step`` apart, along ``dimension`` (a new last
        axis holds each window)."""
        return _unfold(self, dimension, size, step)

    def gather(self, axis, index):
        return _ops.gather(self, axis, index)

    def scatter(self, axis, index, src=None, *, value=None):
        if (src is None) == (value is None):
            raise TypeError("scatter: give src or value (one of them)")
        return _ops.scatter(self, axis, index, src if value is None else value)

    def scatter_add(self, axis, index, src):
        return _ops.scatter_add(self, axis, index, src)

    def scatter_reduce(self, axis, index, src, reduce, *, include_self=True):
        return _ops.scatter_reduce(self, axis, index, src, reduce, include_self)

    def index_select(self, axis, index):
        return _ops.index_select(self, axis, index)

    def index_add(self, axis, index, source, *, alpha=1):
        return _ops.index_add(self, axis, index, source, alpha)

    def index_put(self, indices, values, accumulate=False):
        return _ops.index_put(self, indices, values, accumulate)

    def take(self, index):
        """The entries ``index`` of the flattened tensor (PyTorch's ``take``)."""
        return _ops.take(self, index)

    def masked_fill(self, mask, value):
        return _ops.masked_fill(self, mask, value)

    def masked_select(self, mask):
        return _ops.masked_select(self, mask)

    def nonzero(self, *, as_tuple=False):
        return _ops.nonzero(self, as_tuple=as_tuple)

    def lerp(self, end, weight):
        return _ops.lerp(self, end, weight)

    def copysign(self, other):
        return _ops.copysign(self, other)

    def fmod(self, other):
        return _ops.fmod(self, other)

    def remainder(self, other):
        return _ops.remainder(self, other)

    def __mod__(self, o):
        return _ops.remainder(self, o)

    def __rmod__(self, o):
        return _ops.remainder(o, self)

    def logaddexp(self, other):
        return _ops.logaddexp(self, other)

    def isnan(self):
        return _ops.isnan(self)

    def isinf(self):
        return _ops.isinf(self)

    def isfinite(self):
        return _ops.isfinite(self)

    def isclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False):
        return _ops.isclose(self, other, rtol, atol, equal_nan)

    def logical_and(self, other):
        return _ops.logical_and(self, other)

    def logical_or(self, other):
        return _ops.logical_or(self, other)

    def logical_xor(self, other):
        return _ops.logical_xor(self, other)

    def logical_not(self):
        return _ops.logical_not(self)

    # & | ^ ~ << >> on integer and bool tensors (on bools & | ^ ~ are the logical operations)
    def __and__(self, o):
        return _ops.bitwise_and(self, o)

    def __rand__(self, o):
        return _ops.bitwise_and(o, self)

    def __or__(self, o):
        return _ops.bitwise_or(self, o)

    def __ror__(self, o):
        return _ops.bitwise_or(o, self)

    def __xor__(self, o):
        return _ops.bitwise_xor(self, o)

    def __rxor__(self, o):
        return _ops.bitwise_xor(o, self)

    def __invert__(self):
        return _ops.bitwise_not(self)

    def __lshift__(self, o):
        return _ops.left_shift(self, o)

    def __rlshift__(self, o):
        return _ops.left_shift(o, self)

    def __rshift__(self, o):
        return _ops.right_shift(self, o)

    def __rrshift__(self, o):
        return _ops.right_shift(o, self)

    def __floordiv__(self, o):
        return _ops.floor_divide(self, o)

    def __rfloordiv__(self, o):
        return _ops.floor_divide(o, self)

    def div(self, other, *, rounding_mode=None):
        return _ops.divide(self, other, rounding_mode=rounding_mode)

    def clamp(self, min=None, max=None):  # noqa: A002 - PyTorch's names
        return _ops.clip(self, min, max)

    def clone(self):
        """A copy with its own array, recorded (the gradient flows back to this tensor)."""
        return _ops.astype(self, self.data.dtype)
