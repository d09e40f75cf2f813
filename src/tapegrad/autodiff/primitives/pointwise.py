"""More elementwise operations: ``logaddexp``, ``copysign``, ``fmod``, ``remainder`` (with
gradients), the tests ``isnan isinf isfinite isclose`` and the logical ``logical_and or xor not``
(bool results, no gradient), and ``lerp`` (a composite).

All broadcast like the arithmetic operators (the engine sums gradients back).
"""

from __future__ import annotations

import numpy as np

from . import samples as S
from .elementwise import absolute, exp, floor, sign, trunc, where
from .registry import Sample, primitive, run

logaddexp = primitive(
    "logaddexp",
    np.logaddexp,
    (
        lambda g, out, x, y: g * run(exp, x - out),
        lambda g, out, x, y: g * run(exp, y - out),
    ),
    reference=lambda x, y: np.log(np.exp(x) + np.exp(y)),
    samples=S.binary(),
    broadcasting=True,
    doc="log(exp(x) + exp(y)) without overflow; the gradients exp(x - out), exp(y - out) lie in "
    "[0, 1].",
)


def _copysign_dx(g, out, x, y):
    # |x| with y's sign: the derivative in x is sign(x) times y's sign (0 at x == 0)
    return g * run(sign, x) * run(copysign, 1.0, y)


copysign = primitive(
    "copysign",
    np.copysign,
    (_copysign_dx, None),
    reference=lambda x, y: np.abs(x) * np.where(np.signbit(y), -1.0, 1.0),
    samples=S.binary(gap=0.1),
    broadcasting=True,
    doc="|x| with the sign (bit) of y; differentiable in x (0 at x == 0), not in y.",
)


def _mod_samples(rng):
    # x / y kept away from whole numbers, where the quotient's rounding jumps
    out = []
    for a, b in [
        ((2, 3), (2, 3)),
        ((2, 3), (3,)),
        ((4, 2, 3), (2, 1)),
        ((2, 2), ()),
        ((0, 3), (3,)),
    ]:
        y = S.values(rng, b, 0.6, 1.7) * np.where(rng.uniform(size=b) > 0.5, 1.0, -1.0)
        q = np.floor(S.values(rng, a, -3.0, 3.0)) + rng.uniform(0.2, 0.8, size=a)
        out.append(Sample((q * y, y)))
    y = np.array([[1.3, -1.3], [-1.3, 1.3]])
    out.append(Sample((np.array(1.3 * 1.6), y)))  # x broadcasts: |x / y| = 1.6 everywhere
    return out


def _mod(name, fn, rounding, reference, doc):
    # d/dx = 1; d/dy = -round(x / y), the rounded quotient (piecewise constant: not
    # differentiated again)
    return primitive(
        name,
        fn,
        (lambda g, out, x, y: g, lambda g, out, x, y: -g * run(rounding, x / y)),
        reference=reference,
        samples=_mod_samples,
        broadcasting=True,
        doc=doc,
    )


fmod = _mod(
    "fmod",
    np.fmod,
    trunc,
    lambda x, y: x - y * np.trunc(x / y),
    "x - trunc(x / y) * y: the remainder with x's sign (C's fmod).",
)
remainder = _mod(
    "remainder",
    np.remainder,
    floor,
    lambda x, y: x - y * np.floor(x / y),
    "x - floor(x / y) * y: the remainder with y's sign (Python's %).",
)


# -- tests and logic: bool results, no gradient ------------------------------------------------
def _special_samples(rng):
    x = S.values(rng, (3, 4))
    x[0, 1], x[1, 2], x[2, 0], x[2, 3] = np.nan, np.inf, -np.inf, np.nan
    return [Sample((x,)), Sample((S.values(rng, (5,)),)), Sample((np.array([1, 2]),))]


def _test(name, fn, reference, doc):
    return primitive(
        name,
        fn,
        None,
        reference=reference,
        samples=_special_samples,
        broadcasting=True,
        doc=doc,
    )


isnan = _test("isnan", np.isnan, lambda x: x != x, "Whether each entry is NaN (bool).")
isinf = _test(
    "isinf", np.isinf, lambda x: np.abs(x) == np.inf, "Whether each entry is +-inf (bool)."
)
isfinite = _test(
    "isfinite",
    np.isfinite,
    lambda x: (x == x) & (np.abs(x) != np.inf),
    "Whether each entry is neither NaN nor +-inf (bool).",
)


def _isclose_samples(rng):
    x = S.values(rng, (3, 4))
    y = x + np.where(rng.uniform(size=(3, 4)) > 0.5, 1e-7, 1e-3)
    y[0, 0] = x[0, 0] = np.nan
    y[1, 1] = x[1, 1] = np.inf
    return [
        Sample((x, y), {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False}),
        Sample((x, y[0]), {"rtol": 1e-5, "atol": 1e-8, "equal_nan": True}),
        Sample((x, y), {"rtol": 0.0, "atol": 2e-3, "equal_nan": False}),
    ]


def _isclose_reference(x, y, rtol, atol, equal_nan):
    x, y = np.broadcast_arrays(x, y)
    with np.errstate(invalid="ignore"):
        close = (x == y) | (np.abs(x - y) <= atol + rtol * np.abs(y))
    if equal_nan:
        close |= (x != x) & (y != y)
    return close


_isclose = primitive(
    "isclose",
    lambda x, y, rtol, atol, equal_nan: np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan),
    None,
    reference=_isclose_reference,
    samples=_isclose_samples,
    broadcasting=True,
    doc="|x - y| <= atol + rtol * |y| elementwise (equal infinities close; NaN close to NaN "
    "only with equal_nan); bool.",
)


def isclose(x, y, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    """Whether ``|x - y| <= atol + rtol * |y|`` entry by entry (bool, broadcasting)."""
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose: rtol and atol must be >= 0, got {rtol} and {atol}")
    return _isclose(x, y, rtol=float(rtol), atol=float(atol), equal_nan=bool(equal_nan))


def _logic_samples(rng):
    return [
        Sample((rng.uniform(size=a) > 0.5, rng.uniform(size=b) > 0.5))
        for a, b in [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 2))]
    ] + [Sample((S.values(rng, (5,), gap=0.1) * (rng.uniform(size=5) > 0.3), np.arange(5) % 2))]


def _logic(name, fn, reference):
    return primitive(
        name,
        fn,
        None,
        reference=reference,
        samples=_logic_samples,
        broadcasting=True,
        doc=f"Elementwise {name} of the truth values (nonzero is true); bool.",
    )


logical_and = _logic("logical_and", np.logical_and, lambda x, y: (x != 0) * (y != 0) > 0)
logical_or = _logic("logical_or", np.logical_or, lambda x, y: (x != 0) + (y != 0) > 0)
logical_xor = _logic("logical_xor", np.logical_xor, lambda x, y: (x != 0) != (y != 0))
logical_not = primitive(
    "logical_not",
    np.logical_not,
    None,
    reference=lambda x: x == 0,
    samples=lambda rng: (
        [Sample((rng.uniform(size=s) > 0.5,)) for s in [(), (3,), (2, 4)]]
        + [Sample((np.array([0.0, 1.5, -2.0, 0.0]),))]
    ),
    broadcasting=True,
    doc="Elementwise not of the truth value (zero is false); bool.",
)


# -- exact integer arithmetic (in-place updates of integer tensors: counters, indices) -----------
_INT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _int_arith_reference(x, y, op):
    a = np.asarray(x).astype(object)
    b = np.asarray(y).astype(object)
    out = a + b if op == "add" else a - b if op == "sub" else a * b
    return np.asarray(out, dtype=np.result_type(x, y))


int_arith = primitive(
    "int_arith",
    lambda x, y, op: _INT_OPS[op](x, y),
    None,
    reference=_int_arith_reference,
    samples=lambda rng: (
        [
            Sample((rng.integers(-50, 50, a), rng.integers(-50, 50, b)), {"op": op})
            for a, b, op in [
                ((2, 3), (2, 3), "add"),
                ((2, 3), (3,), "sub"),
                ((4, 1), (1, 2), "mul"),
            ]
        ]
        + [Sample((np.array([2**40, -3]), np.array(2**20)), {"op": "mul"})]
    ),
    broadcasting=True,
    doc="x + y, x - y or x * y on integers, exact, in the operands' promoted dtype; in-place "
    "updates of integer tensors use it. Not differentiable.",
)


def lerp(start, end, weight):
    """``start + weight * (end - start)``, computed from whichever end is nearer (``end - (end
    - start) * (1 - weight)`` for ``|weight| >= 0.5``), so ``weight`` 0 and 1 give ``start`` and
    ``end`` exactly. Differentiable in all three."""
    diff = end - start
    if isinstance(weight, (int, float, np.integer, np.floating)):
        if abs(weight) < 0.5:
            return start + diff * weight
        return end - diff * (1 - weight)
    return where(absolute(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))
