"""Integer and bool operations: bitwise ``and or xor not``, the shifts ``<< >>``, and division
with a rounding mode (``//``, ``div(rounding_mode="floor" | "trunc")``).

All broadcast and promote by the one rule (``autodiff/promotion.py``), and none has a
gradient (the rounded quotient is piecewise constant; PyTorch does not differentiate it either).
Integer results are exact whatever their size; division by an integer zero raises.
"""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from . import samples as S
from .elementwise import div
from .registry import Sample, primitive


def _integers(name: str, *xs) -> None:
    for x in xs:
        if x.dtype.kind not in "biu":
            raise DTypeError(f"{name}: needs integer or bool tensors, got dtype {x.dtype}")


def _int_samples(rng):
    pairs = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 2)), ((), (3,))]
    out = [Sample((rng.integers(-60, 60, a), rng.integers(-60, 60, b))) for a, b in pairs]
    out.append(Sample((np.array([2**40 + 3, -(2**35)], np.int64), np.array(2**20 - 1, np.int64))))
    out.append(Sample((rng.uniform(size=(2, 3)) > 0.5, rng.uniform(size=(3,)) > 0.5)))
    return out


def _object(x):
    """``x`` as Python integers (the references' exact arithmetic)."""
    return np.asarray(x).astype(object)


def _wrap(values, dtype):
    """Python integers ``values`` wrapped into ``dtype``'s width (two's complement)."""
    mask = (1 << (np.dtype(dtype).itemsize * 8)) - 1
    return np.asarray((values & mask).astype(np.uint64).astype(dtype))


def _as(result, x, y):
    return np.asarray(result, dtype=np.result_type(x, y))


def _bitwise(name, fn, py):
    def forward(x, y, out=None):
        _integers(name, x, y)
        return fn(x, y, out=out)

    return primitive(
        name,
        forward,
        None,
        reference=lambda x, y: _as(py(_object(x), _object(y)), x, y),
        samples=_int_samples,
        broadcasting=True,
        doc=f"Elementwise bitwise {name[8:]} of integer or bool tensors (on bools: the "
        "logical operation). Not differentiable.",
    )


bitwise_and = _bitwise("bitwise_and", np.bitwise_and, lambda a, b: a & b)
bitwise_or = _bitwise("bitwise_or", np.bitwise_or, lambda a, b: a | b)
bitwise_xor = _bitwise("bitwise_xor", np.bitwise_xor, lambda a, b: a ^ b)


def _not(x, out=None):
    _integers("bitwise_not", x)
    return np.invert(x, out=out)


bitwise_not = primitive(
    "bitwise_not",
    _not,
    None,
    reference=lambda x: (
        np.logical_not(x) if x.dtype == np.bool_ else _wrap((-1 - _object(x)), x.dtype)
    ),
    samples=lambda rng: [
        Sample((rng.integers(-100, 100, (2, 3)),)),
        Sample((np.array([0, 7, 255], np.uint8),)),
        Sample((rng.uniform(size=(4,)) > 0.5,)),
    ],
    broadcasting=True,
    doc="Elementwise bitwise not (~x: -x - 1 for signed integers, not for bools). Not "
    "differentiable.",
)


def _shift_samples(rng):
    return [
        Sample((rng.integers(-1000, 1000, (2, 3)), rng.integers(0, 20, (3,)))),
        Sample((np.array([1, 3, -5], np.int64), np.array(40, np.int64))),
        Sample((np.array([200, 17], np.uint8), np.array([1, 3], np.uint8))),
    ]


def _shift(name, fn, py, doc):
    def forward(x, y, out=None):
        _integers(name, x, y)
        return fn(x, y, out=out)

    def reference(x, y):
        a, b = np.broadcast_arrays(_object(x), _object(y))
        return _wrap(np.frompyfunc(py, 2, 1)(a, b), np.result_type(x, y))

    return primitive(
        name,
        forward,
        None,
        reference=reference,
        samples=_shift_samples,
        broadcasting=True,
        doc=doc,
    )


left_shift = _shift(
    "left_shift",
    np.left_shift,
    lambda a, b: a << b,
    "x << y on integers (bits shifted past the dtype's width are lost). Not differentiable.",
)
right_shift = _shift(
    "right_shift",
    np.right_shift,
    lambda a, b: a >> b,
    "x >> y on integers (arithmetic shift: negative values stay negative). Not differentiable.",
)


# -- division with a rounding mode ----------------------------------------------------------------
def _div_rounded(x, y, mode, out=None):
    if x.dtype.kind in "biu":
        if x.dtype == np.bool_:
            raise DTypeError(f"div (rounding_mode={mode!r}): not defined for bool tensors")
        if np.any(y == 0):
            raise ZeroDivisionError(f"div (rounding_mode={mode!r}): integer division by zero")
        q = np.floor_divide(x, y, out=out)
        if mode == "trunc":  # one less step down where the exact quotient is negative
            q += (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
        return q
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "floor":
            return np.floor_divide(x, y, out=out)
        return np.trunc(np.divide(x, y, out=out), out=out)


def _div_rounded_reference(x, y, mode):
    if np.asarray(x).dtype.kind in "iu":
        a, b = np.broadcast_arrays(_object(x), _object(y))

        def one(u, v):
            q = u // v  # Python's: floor
            return q + 1 if mode == "trunc" and q < 0 and q * v != u else q

        return np.asarray(np.frompyfunc(one, 2, 1)(a, b), dtype=np.result_type(x, y))
    q = np.asarray(x, np.float64) / np.asarray(y, np.float64)
    return np.floor(q) if mode == "floor" else np.trunc(q)


def _div_rounded_samples(rng):
    out = []
    for mode in ("floor", "trunc"):
        a = rng.integers(-50, 50, (2, 3))
        b = rng.integers(1, 9, (3,)) * np.array([1, -1, 1])
        out.append(Sample((a, b), {"mode": mode}))
        out.append(Sample((np.array([2**53 + 3, -(2**45) - 1]), np.array([3, 7])), {"mode": mode}))
        # floats with the quotient away from whole numbers (where rounding jumps)
        y = S.values(rng, (2, 3), 0.6, 1.7) * np.where(rng.uniform(size=(2, 3)) > 0.5, 1, -1)
        q = np.floor(S.values(rng, (2, 3), -3, 3)) + rng.uniform(0.2, 0.8, size=(2, 3))
        out.append(Sample((q * y, y), {"mode": mode}))
    return out


div_rounded = primitive(
    "div_rounded",
    _div_rounded,
    None,
    reference=_div_rounded_reference,
    samples=_div_rounded_samples,
    broadcasting=True,
    doc="x / y rounded toward -inf (mode='floor', the // operator) or toward 0 (mode='trunc'); "
    "exact on integers, where the result stays integer. Not differentiable.",
)

_MODES = (None, "floor", "trunc")


def divide(x, y, *, rounding_mode=None):
    """PyTorch's ``div``: ``x / y`` (true division: integers give the default float dtype), or
    rounded with ``rounding_mode="floor"`` (the ``//`` operator) or ``"trunc"`` (toward 0),
    which keep integers integer."""
    if rounding_mode not in _MODES:
        raise ValueError(
            f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}"
        )
    if rounding_mode is None:
        return div(x, y)
    return div_rounded(x, y, mode=rounding_mode)


def floor_divide(x, y):
    """``x // y``: the quotient rounded toward -inf (integers stay integer, exactly)."""
    return div_rounded(x, y, mode="floor")


# -- bitcast: the same bytes read as another dtype (PyTorch's ``x.view(dtype)``) ---------------
def _bitcast_fwd(x, dtype):
    return (x if x.flags.c_contiguous else x.copy()).view(np.dtype(dtype))


def _bitcast_reference(x, dtype):
    raw = np.frombuffer(np.ascontiguousarray(x).tobytes(), np.dtype(dtype))
    last = x.shape[-1] * x.dtype.itemsize // np.dtype(dtype).itemsize if x.ndim else None
    return raw.reshape(x.shape[:-1] + (last,) if x.ndim else ())


_bitcast = primitive(
    "bitcast",
    _bitcast_fwd,
    None,
    reference=_bitcast_reference,
    samples=lambda rng: [
        Sample((rng.standard_normal((2, 3)).astype(np.float32),), {"dtype": "int32"}),
        Sample((rng.standard_normal((2, 2)),), {"dtype": "uint8"}),
        Sample((rng.integers(0, 255, (3, 4)).astype(np.uint8),), {"dtype": "float32"}),
        Sample((np.array(7, np.int32),), {"dtype": "float32"}),
    ],
    doc="The bytes of x read as ``dtype`` (PyTorch's x.view(dtype)): the last axis scales by "
    "the ratio of the item sizes. Not differentiable.",
)


def bitcast(x, dtype):
    """``x``'s bytes as ``dtype``, PyTorch's ``x.view(dtype)`` (tinygrad's ``bitcast``): same
    shape for the same item size, else the last axis (contiguous, divisible) rescaled."""
    from .args import dtype_of, plain

    src, dst = dtype_of(x), np.dtype(dtype)
    if src.itemsize != dst.itemsize:
        a = plain(x)
        why = None
        if a.ndim == 0:
            why = "a 0-d tensor cannot change item size"
        elif a.strides[-1] != src.itemsize and a.shape[-1] != 1:
            why = f"the last axis must be contiguous (stride {a.strides[-1] // src.itemsize})"
        elif (a.shape[-1] * src.itemsize) % dst.itemsize:
            why = f"the last axis ({a.shape[-1]}) must hold a whole number of {dst} items"
        if why:
            from ..errors import ShapeError

            raise ShapeError(f"bitcast: cannot view {src} of shape {a.shape} as {dst}: {why}")
    return _bitcast(x, dtype=dst.name)
