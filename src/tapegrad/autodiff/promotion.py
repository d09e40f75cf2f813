"""Type promotion: the one rule that picks the dtype an elementwise operation computes in.

It is PyTorch's rule:

1. **Categories** bool < integer < float. The result's category is the highest among the
   operands.
2. **Three strengths** of operand: dimensioned tensors/arrays, 0-d tensors/arrays, and Python
   (or NumPy scalar) numbers. A weaker operand decides the dtype only when it brings a higher
   category than every stronger one. So ``int8_tensor + 1`` is int8, ``float32_tensor + 2.5``
   is float32, ``float32_tensor + float64_0d`` is float32, ``int64_tensor + 2.5`` is the
   default float dtype (float32), and ``int32_tensor + float64_0d`` is float64.
3. Within a strength, the larger dtype wins: float32 + float64 -> float64, int32 + int64 ->
   int64, uint8 + int8 -> int16, any integer + float16 -> float16. A Python int counts as
   int64, a Python float as the default float dtype, a Python bool as bool.
4. **The operation**: integer arithmetic (``+ - * % ** // maximum minimum where abs neg
   sign floor ceil trunc round square relu``), bitwise operations, comparisons and logical
   tests compute in the promoted dtype, exactly; every other operation (``/``, ``exp``,
   ``sqrt``, ...) computes in floats, so integer or bool operands go to the default float
   dtype. ``where``'s condition takes no part in the promotion.

Only elementwise operations promote (as in PyTorch): ``matmul``, convolutions and the other
operations that combine several float arrays need them in one dtype, and say so.
"""

from __future__ import annotations

import numpy as np

from . import backend
from .backend import asarray, is_array
from .errors import DTypeError

_BOOL, _INT, _FLOAT = 0, 1, 2

KEEPS_INTEGERS = frozenset(
    """add sub mul maximum minimum where neg abs sign remainder fmod pow floor ceil trunc round
    square relu int_arith less less_equal greater greater_equal equal not_equal logical_and
    logical_or logical_xor logical_not isnan isinf isfinite isclose bitwise_and bitwise_or
    bitwise_xor bitwise_not left_shift right_shift div_rounded""".split()
)
"""Elementwise primitives that compute on integer dtypes; the others compute in floats (integer
operands go to the default float dtype, as PyTorch's ``/`` and ``exp`` do)."""

KEEPS_BOOL = frozenset(
    """add mul maximum minimum where less less_equal greater greater_equal equal not_equal
    logical_and logical_or logical_xor logical_not isnan isinf isfinite isclose bitwise_and
    bitwise_or bitwise_xor bitwise_not""".split()
)
"""Those of them that compute on bools too (``+`` is or, ``*`` and); PyTorch refuses the
others (``-``, ``%``, ``//``, ``<<``, ``abs``, ``floor``, ...) on bool, and so does tapegrad."""


def category(dtype) -> int:
    kind = np.dtype(dtype).kind
    return _BOOL if kind == "b" else _INT if kind in "iu" else _FLOAT


def promote_types(a, b) -> np.dtype:
    """The dtype two operands of the same strength meet in (rule 3)."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    r = np.promote_types(a, b)
    if category(r) != ca:  # uint64 with a signed integer: NumPy would give float64
        raise DTypeError(f"no integer dtype holds both {a} and {b}; cast one explicitly")
    return r


def _combine(higher, lower):
    """The stronger operands' dtype ``higher``, unless ``lower`` brings a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch = category(higher)
    if ch == _FLOAT:
        return higher
    if ch == _BOOL or category(lower) > ch:
        return promote_types(higher, lower)
    return higher


def _weak_dtype(value) -> np.dtype:
    """The dtype a Python or NumPy number (or a list of them) stands for (rule 3)."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(value, (int, np.integer)):
        return np.dtype(np.int64)
    if isinstance(value, (float, np.floating)):
        return backend.default_dtype()
    kind = np.asarray(value).dtype.kind
    if kind == "b":
        return np.dtype(np.bool_)
    return np.dtype(np.int64) if kind in "iu" else backend.default_dtype()


def result_type(operands) -> np.dtype:
    """The dtype ``operands`` (arrays and numbers) promote to (rules 1-3)."""
    dims = zeros = weak = None
    for d in operands:
        if type(d) is np.ndarray or is_array(d):
            t = d.dtype
            if d.ndim:
                dims = t if dims is None else promote_types(dims, t)
            else:
                zeros = t if zeros is None else promote_types(zeros, t)
        else:
            t = _weak_dtype(d)
            weak = t if weak is None else promote_types(weak, t)
    return _combine(dims, _combine(zeros, weak))


def computes_in(name: str, operands) -> np.dtype:
    """The dtype the elementwise primitive ``name`` computes in on ``operands`` (rule 4)."""
    dtype = result_type(operands)
    refused = name == "sub" and _any_bool(operands)  # x - mask: PyTorch refuses it too
    if dtype.kind == "f" and not refused:
        return dtype
    if name not in KEEPS_INTEGERS:
        return backend.default_dtype()
    if refused or dtype.kind == "b" and name not in KEEPS_BOOL:
        raise DTypeError(
            f"{name}: not defined for bool tensors, as in PyTorch (use ~ or logical_not to "
            f"invert a mask, or convert with .astype() first)"
        )
    return dtype


def _any_bool(operands) -> bool:
    return any(getattr(d, "dtype", None) == np.bool_ or isinstance(d, bool) for d in operands)


def promote(name: str, data: list) -> list:
    """``data`` (arrays and numbers) as arrays in the dtype ``name`` computes in; numbers
    become 0-d arrays on the arrays' device. ``where``'s condition is left as it is."""
    skip = 1 if name == "where" else 0
    dtype = computes_in(name, data[skip:])
    like = None
    for d in data:
        if type(d) is np.ndarray or is_array(d):
            like = d if like is None or type(like) is np.ndarray else like
    out = []
    for i, d in enumerate(data):
        if type(d) is np.ndarray or is_array(d):
            out.append(d if i < skip or d.dtype == dtype else d.astype(dtype))
        elif i < skip:
            out.append(asarray(d, np.bool_, like=like))
        elif dtype.kind in "iu" and isinstance(d, (int, np.integer)):
            # a Python int wraps into the integer dtype, as in PyTorch (uint8_t - 1: 255 - ...)
            out.append(asarray(np.array(d).astype(dtype), like=like))
        else:
            out.append(asarray(d, dtype, like=like))
    return out
