"""Elementwise primitives. Binary ones broadcast; the engine undoes it for their gradients."""

from __future__ import annotations

import math

import numpy as np

from ..backend import copy_to_device, device_of, get_device, is_array, xp_of
from ..kernels.dispatch import kernels_for
from . import samples as S
from .registry import Sample, primitive, run


def _sigmoid(x, out=None):
    # 0.5 * (1 + tanh(x / 2)): one transcendental, no overflow for large |x|.
    out = np.multiply(x, 0.5, out=np.empty_like(x) if out is None else out)
    np.tanh(out, out=out)
    out += 1
    out *= 0.5
    return out


def _loop_operand(a, out) -> bool:
    """``a`` can go to a kernel writing ``out``: arrays of one float dtype (on the CPU the loops
    below replace NumPy calls that allocate a buffer per call even with ``out=``)."""
    return (
        is_array(a)
        and is_array(out)
        and a.dtype == out.dtype
        and out.dtype in (np.float32, np.float64)
    )


def _where(c, x, y, out=None):
    if out is None:
        return np.where(c, x, y)
    # an array and a number (the VJPs of ReLU and where): one compiled pass; NumPy's fill +
    # masked copy takes two, and a product with the bool mask casts through a 32 KiB buffer
    for a, s, keep in ((x, y, True), (y, x, False)):
        if (
            _loop_operand(a, out)
            and np.ndim(s) == 0
            and is_array(c)
            and c.dtype == np.bool_
            and c.shape == a.shape == out.shape
            and c.flags.c_contiguous
            and a.flags.c_contiguous
            and out.flags.c_contiguous
        ):
            kernels_for(out).select(c, a, s, keep, out)
            return out
    np.copyto(out, y)
    np.copyto(out, x, where=c)
    return out


# -- binary, broadcasting -------------------------------------------------------------------------
_LARGE = 1 << 16  # from how many elements a same-shape add runs in the device's kernel


def _add(x, y, out=None):
    """x + y; a (P, Q) array plus a (Q,) one (a Linear layer's bias) into a plan's buffer by the
    compiled loop: NumPy's broadcasting add with ``out`` allocates a 32 KiB buffer a call."""
    if out is not None and getattr(out, "ndim", 0) == 2:
        for a, b in ((x, y), (y, x)):
            if (
                _loop_operand(a, out)
                and _loop_operand(b, out)
                and a.shape == out.shape
                and b.shape == out.shape[1:]
            ):
                kernels_for(out).add_channel_bias(a[:, :, None], b, out[:, :, None])
                return out
    if (
        _loop_operand(x, x)
        and _loop_operand(y, x)
        and x.shape == y.shape
        and x.size >= _LARGE
        and x.flags.c_contiguous
        and y.flags.c_contiguous
        and (out is None or (_loop_operand(out, x) and out.flags.c_contiguous))
    ):  # large: over numba's threads (the same sums)
        if out is None:
            out = xp_of(x).empty(x.shape, x.dtype)
        kernels_for(x).add_arrays(x, y, out)
        return out
    return np.add(x, y, out=out)


add = primitive(
    "add",
    _add,
    (lambda g, out, x, y: g, lambda g, out, x, y: g),
    reference=lambda x, y: x + y,
    samples=S.binary(),
    broadcasting=True,
    doc="x + y, broadcasting.",
)
sub = primitive(
    "sub",
    np.subtract,
    (lambda g, out, x, y: g, lambda g, out, x, y: -g),
    reference=lambda x, y: x - y,
    samples=S.binary(),
    broadcasting=True,
    doc="x - y, broadcasting.",
)
mul = primitive(
    "mul",
    np.multiply,
    (lambda g, out, x, y: g * y, lambda g, out, x, y: g * x),
    reference=lambda x, y: x * y,
    samples=S.binary(),
    broadcasting=True,
    doc="x * y, broadcasting.",
)
div = primitive(
    "div",
    np.divide,
    (lambda g, out, x, y: g / y, lambda g, out, x, y: -g * out / y),
    reference=lambda x, y: x * (1.0 / y),
    samples=S.binary(gap=0.5),
    broadcasting=True,
    doc="x / y, broadcasting.",
)


def _pow_dx(g, out, x, y):
    # g * y * x ** (y - 1); where y == 0 the power is constant in x: 0 (not 0 * inf at x == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return run(where, y == 0, 0, g * y * run(power, x, y - 1))


def _pow_dy(g, out, x, y):
    # PyTorch's rule: g * out * log(x), except 0 where x == 0 and y >= 0 (so 0 ** 0 and 0 ** 2
    # give 0, 0 ** -1 gives -inf, a negative base gives nan as log does)
    with np.errstate(divide="ignore", invalid="ignore"):
        return run(where, (x == 0) & (y >= 0), 0, g * out * run(log, x))


power = primitive(
    "pow",
    np.power,
    (_pow_dx, _pow_dy),
    reference=lambda x, y: np.exp(y * np.log(x)),
    samples=S.binary(0.5, 2.0, -2.0, 2.0),
    broadcasting=True,
    doc="x ** y, broadcasting. d/dy is out * log(x), 0 where x == 0 and y >= 0 (PyTorch's rule).",
)
maximum = primitive(
    "maximum",
    np.maximum,
    (
        lambda g, out, x, y: g * (x > y) + g * (x == y) * 0.5,
        lambda g, out, x, y: g * (y > x) + g * (x == y) * 0.5,
    ),
    reference=lambda x, y: np.where(x > y, x, y),
    samples=S.binary(),
    broadcasting=True,
    doc="Elementwise maximum; at ties each side gets half of the gradient.",
)
minimum = primitive(
    "minimum",
    np.minimum,
    (
        lambda g, out, x, y: g * (x < y) + g * (x == y) * 0.5,
        lambda g, out, x, y: g * (y < x) + g * (x == y) * 0.5,
    ),
    reference=lambda x, y: np.where(x < y, x, y),
    samples=S.binary(),
    broadcasting=True,
    doc="Elementwise minimum; at ties each side gets half of the gradient.",
)


def _where_samples(rng):
    out = []
    for shape_c, shape_x, shape_y in [
        ((2, 3), (2, 3), (2, 3)),
        ((2, 3), (3,), ()),
        ((2, 1), (1, 3), (2, 3)),
        ((0, 2), (0, 2), (2,)),
    ]:
        cond = rng.uniform(size=shape_c) > 0.5
        out.append(Sample((cond, S.values(rng, shape_x), S.values(rng, shape_y))))
    return out


where = primitive(
    "where",
    _where,
    (
        None,
        lambda g, out, c, x, y: run(where, c, g, 0),
        lambda g, out, c, x, y: run(where, c, 0, g),
    ),
    reference=lambda c, x, y: c * x + (1 - c) * y,
    samples=_where_samples,
    broadcasting=True,
    doc="where(cond, x, y): x where cond is true, y elsewhere; cond is not differentiated.",
)

# -- unary -----------------------------------------------------------------------------------------
neg = primitive(
    "neg",
    np.negative,
    (lambda g, out, x: -g,),
    reference=lambda x: 0 - x,
    samples=S.unary(),
    broadcasting=True,
    doc="-x",
)
exp = primitive(
    "exp",
    np.exp,
    (lambda g, out, x: g * out,),
    reference=lambda x: np.e**x,
    samples=S.unary(),
    broadcasting=True,
    doc="e ** x",
)
log = primitive(
    "log",
    np.log,
    (lambda g, out, x: g / x,),
    reference=lambda x: np.log2(x) / np.log2(np.e),
    samples=S.unary(0.2, 3.0),
    broadcasting=True,
    doc="Natural logarithm.",
)
sqrt = primitive(
    "sqrt",
    np.sqrt,
    (lambda g, out, x: g * 0.5 / out,),
    reference=lambda x: x**0.5,
    samples=S.unary(0.2, 3.0),
    broadcasting=True,
    doc="Square root.",
)
sign = primitive(
    "sign",
    np.sign,
    None,
    reference=lambda x: (x > 0).astype(x.dtype) - (x < 0),
    samples=S.unary(gap=0.1),
    broadcasting=True,
    doc="-1, 0 or 1 by the sign of x; its derivative is zero (not differentiable).",
)
absolute = primitive(
    "abs",
    np.abs,
    (lambda g, out, x: g * run(sign, x),),
    reference=lambda x: np.where(x < 0, -x, x),
    samples=S.unary(gap=0.1),
    broadcasting=True,
    doc="|x|; the gradient at 0 is 0.",
)
sin = primitive(
    "sin",
    np.sin,
    (lambda g, out, x: g * run(cos, x),),
    reference=lambda x: np.cos(x - np.pi / 2),
    samples=S.unary(),
    broadcasting=True,
    doc="Sine.",
)
cos = primitive(
    "cos",
    np.cos,
    (lambda g, out, x: -g * run(sin, x),),
    reference=lambda x: np.sin(x + np.pi / 2),
    samples=S.unary(),
    broadcasting=True,
    doc="Cosine.",
)
tanh = primitive(
    "tanh",
    np.tanh,
    (lambda g, out, x: g * (1 - out * out),),
    reference=lambda x: (np.exp(2 * x) - 1) / (np.exp(2 * x) + 1),
    samples=S.unary(),
    broadcasting=True,
    doc="Hyperbolic tangent.",
)
sigmoid = primitive(
    "sigmoid",
    _sigmoid,
    (lambda g, out, x: g * out * (1 - out),),
    reference=lambda x: 1 / (1 + np.exp(-x)),
    samples=S.unary(-6, 6),
    broadcasting=True,
    doc="Logistic function 1 / (1 + exp(-x)), overflow-free.",
)


# -- more unary math, one line each: forward, derivative (through ``run``: twice
# differentiable), reference, sample range ------------------------------------------------------
_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))


def _math(name, forward, derivative, reference, lo=-2.0, hi=2.0, gap=0.0, doc=""):
    return primitive(
        name,
        forward,
        (lambda g, out, x: g * derivative(x, out),),
        reference=reference,
        samples=S.unary(lo, hi, gap),
        broadcasting=True,
        doc=doc or f"Elementwise {name}.",
    )


log1p = _math("log1p", np.log1p, lambda x, out: 1 / (1 + x), lambda x: np.log(1 + x), -0.5, 2)
expm1 = _math("expm1", np.expm1, lambda x, out: out + 1, lambda x: np.exp(x) - 1)
log2 = _math("log2", np.log2, lambda x, out: 1 / (x * _LN2), lambda x: np.log(x) / _LN2, 0.2, 3)
log10 = _math(
    "log10", np.log10, lambda x, out: 1 / (x * _LN10), lambda x: np.log(x) / _LN10, 0.2, 3
)
exp2 = _math("exp2", np.exp2, lambda x, out: out * _LN2, lambda x: np.exp(x * _LN2))
reciprocal = _math(
    "reciprocal", np.reciprocal, lambda x, out: -(out * out), lambda x: 1.0 / x, 0.3, 2
)


def _rsqrt(x, out=None):
    return np.reciprocal(np.sqrt(x, out=out), out=out)


rsqrt = _math(
    "rsqrt",
    _rsqrt,
    lambda x, out: -0.5 * out / x,
    lambda x: x**-0.5,
    0.2,
    3,
    doc="1 / sqrt(x).",
)
square = _math("square", np.square, lambda x, out: 2 * x, lambda x: x * x)
tan = _math("tan", np.tan, lambda x, out: 1 + out * out, lambda x: np.sin(x) / np.cos(x), -1.2, 1.2)
arcsin = _math(
    "asin",
    np.arcsin,
    lambda x, out: 1 / run(sqrt, 1 - x * x),
    lambda x: np.arctan(x / np.sqrt(1 - x * x)),
    -0.9,
    0.9,
)
arccos = _math(
    "acos",
    np.arccos,
    lambda x, out: -1 / run(sqrt, 1 - x * x),
    lambda x: np.pi / 2 - np.arcsin(x),
    -0.9,
    0.9,
)
arctan = _math(
    "atan", np.arctan, lambda x, out: 1 / (1 + x * x), lambda x: np.arcsin(x / np.sqrt(1 + x * x))
)
sinh = _math("sinh", np.sinh, lambda x, out: run(cosh, x), lambda x: (np.exp(x) - np.exp(-x)) / 2)
cosh = _math("cosh", np.cosh, lambda x, out: run(sinh, x), lambda x: (np.exp(x) + np.exp(-x)) / 2)
arcsinh = _math(
    "asinh",
    np.arcsinh,
    lambda x, out: 1 / run(sqrt, x * x + 1),
    lambda x: np.log(x + np.sqrt(x * x + 1)),
)
arccosh = _math(
    "acosh",
    np.arccosh,
    lambda x, out: 1 / run(sqrt, x * x - 1),
    lambda x: np.log(x + np.sqrt(x * x - 1)),
    1.2,
    3,
)
arctanh = _math(
    "atanh",
    np.arctanh,
    lambda x, out: 1 / (1 - x * x),
    lambda x: 0.5 * np.log((1 + x) / (1 - x)),
    -0.9,
    0.9,
)


def _erf(x, out=None):
    # NumPy has no erf: float arrays go through their device's kernel (on the CPU a compiled
    # loop over the C library's erf, the function Python's math.erf calls: the same float64
    # bits; on CUDA CuPy's erf, or the host's loop for a stand-in device)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    if out is None or (is_array(out) and out.dtype == x.dtype):
        xp = xp_of(x)
        xc = x if x.flags.c_contiguous else xp.ascontiguousarray(x)
        res = out if out is not None and out.flags.c_contiguous else xp.empty_like(xc)
        kernels_for(xc).erf(xc, res)
        if out is not None and res is not out:
            np.copyto(out, res)
            return out
        return res
    res = _erf(x)
    out[...] = res
    return out


erf = _math(
    "erf",
    _erf,
    lambda x, out: (2 / math.sqrt(math.pi)) * run(exp, -(x * x)),
    lambda x: np.array([math.erf(v) for v in np.ravel(x)]).reshape(np.shape(x)),
    doc="The error function (a compiled loop over the C library's erf, as Python's math.erf).",
)


def _rounding(name, fn, reference):
    return primitive(
        name,
        fn,
        None,
        reference=reference,
        samples=S.unary(-3, 3, gap=0.1),
        broadcasting=True,
        doc=f"Elementwise {name}; piecewise constant, so its derivative is zero (not "
        "differentiable).",
    )


floor = _rounding("floor", np.floor, lambda x: x - np.mod(x, 1.0))
ceil = _rounding("ceil", np.ceil, lambda x: -np.floor(-x))
trunc = _rounding("trunc", np.trunc, lambda x: np.sign(x) * np.floor(np.abs(x)))
round_ = _rounding("round", np.round, lambda x: np.floor(x + 0.5))  # samples avoid .5 ties


def _softplus(x, out=None):
    return np.logaddexp(x, xp_of(x).zeros((), x.dtype), out=out)


softplus = primitive(
    "softplus",
    _softplus,
    (lambda g, out, x: g * run(sigmoid, x),),
    reference=lambda x: np.log(1 + np.exp(x)),
    samples=S.unary(-5, 5),
    broadcasting=True,
    doc="log(1 + exp(x)), overflow-free.",
)


def _clip_fwd(x, lo=None, hi=None, out=None):
    return np.clip(x, lo, hi, out=out)


def _clip_vjp(g, out, x, lo=None, hi=None):
    if lo is None:
        return g * (x <= hi)
    if hi is None:
        return g * (x >= lo)
    return g * ((x >= lo) * (x <= hi))  # bool * bool: both bounds hold


def _clip_samples(rng):
    return [Sample((S.values(rng, s),), {"lo": -1.05, "hi": 0.95}) for s in [(), (7,), (3, 4)]] + [
        Sample((S.values(rng, (5,)),), {"lo": -0.55, "hi": None})
    ]


_clip = primitive(
    "clip",
    _clip_fwd,
    (_clip_vjp,),
    samples=_clip_samples,
    reference=lambda x, lo=None, hi=None: np.minimum(
        np.maximum(x, -np.inf if lo is None else lo), np.inf if hi is None else hi
    ),
    doc="Clip to [lo, hi]; the gradient is zero outside.",
)


def clip(x, lo=None, hi=None):
    """Clip ``x`` to [lo, hi] (either bound may be None); gradient 1 inside, 0 outside."""
    if lo is None and hi is None:
        from ..errors import ArgumentError

        raise ArgumentError("clip: give at least one of the bounds lo and hi (min, max)")
    return _clip(x, lo=lo, hi=hi)


def _astype_fwd(x, dtype, out=None):
    if out is None:
        return x.astype(dtype)
    np.copyto(out, x, casting="unsafe")
    return out


_astype = primitive(
    "astype",
    _astype_fwd,
    (lambda g, out, x, dtype: g.astype(x.dtype),),
    reference=lambda x, dtype: np.array(x, dtype=dtype),
    samples=lambda rng: [Sample((S.values(rng, (2, 3)),), {"dtype": np.dtype(np.float64)})],
    doc="Explicit dtype conversion; the gradient is converted back.",
)


def astype(x, dtype):
    """Convert ``x`` to ``dtype`` explicitly (the only way dtypes change)."""
    return _astype(x, dtype=np.dtype(dtype))


# -- random masks: drawn inside the engine, so compiled plans draw fresh ones on every replay ------
class _PatternRandom:
    """A stand-in generator with fixed, reproducible draws (for the registry samples)."""

    def random(self, size=None, dtype=np.float64, out=None):
        shape = out.shape if out is not None else size
        n = int(np.prod(shape, dtype=np.int64))
        r = ((np.arange(n) * 0.618034) % 1.0).astype(dtype).reshape(shape)
        return r if out is None else _into(out, r)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        shape = out.shape if out is not None else size
        r = (self.random(shape, dtype) - dtype(0.5)) * dtype(3.0)
        return r if out is None else _into(out, r)

    def integers(self, low, high, size, dtype=np.int64):
        return (low + np.floor(self.random(size) * (high - low))).astype(dtype)


def _into(out, r):
    np.copyto(out, r)
    return out


RNG_LOG: list | None = None
"""While a list (``tg.checkpoint``'s first forward), each generator a random primitive is about
to draw from is appended with its state, so a recomputation can draw the same numbers."""


def _log_rng(rng) -> None:
    if RNG_LOG is not None and hasattr(rng, "bit_generator"):
        RNG_LOG.append((rng, rng.bit_generator.state))


def _random(shape, dtype, dist, rng, low=0, high=None, device=None, out=None):
    _log_rng(rng)
    if dist == "integers":
        drawn = rng.integers(low, high, size=shape, dtype=dtype)
        if out is None:
            return _to(drawn, device)
        return _on_device(drawn, out)
    draw = rng.standard_normal if dist == "normal" else rng.random
    if out is None:
        return _to(draw(shape, dtype=dtype), device)
    if type(out) is not np.ndarray:  # drawn on the host (the same numbers on every device)
        return _on_device(draw(shape, dtype=dtype), out)
    return draw(dtype=dtype, out=out)


_HOST = np.empty(0)  # ``like=`` for a temporary that stays on the host


def _on_device(host, out):
    """``host`` (a NumPy array) copied into ``out``, which may live on a device."""
    np.copyto(out, host if type(out) is np.ndarray else copy_to_device(host, device_of(out)))
    return out


def _to(host, device):
    return host if device in (None, "cpu") else copy_to_device(host, get_device(device))


def _random_reference(shape, dtype, dist, rng, low=0, high=None, device=None):
    pattern = _PatternRandom()
    if dist == "integers":
        return pattern.integers(low, high, shape, dtype)
    if dist == "normal":
        return pattern.standard_normal(shape, dtype)
    return pattern.random(shape, dtype)


random_draw = primitive(
    "random_draw",
    _random,
    None,
    reference=_random_reference,
    samples=lambda rng: [
        Sample((), {"shape": s, "dtype": d, "dist": dist, "rng": _PatternRandom(), **bounds})
        for s, d, dist, bounds in [
            ((4, 5), np.float32, "normal", {}),
            ((7,), np.float64, "uniform", {}),
            ((3, 2), np.int64, "integers", {"low": -2, "high": 5}),
        ]
    ],
    effect=True,
    doc="Samples of shape ``shape`` from ``rng``: standard normal (dist='normal'), uniform on "
    "[0, 1) (dist='uniform'), or integers in [low, high) (dist='integers'), drawn on the host "
    "and moved to ``device`` (the same numbers on every device). Compiled plans draw afresh on "
    "every replay. Not differentiable.",
)


def _dropout_mask(x, p, rng, out=None):
    """A Philox mask (``kernels/cpu/random.py``) keyed by two 32-bit words drawn from ``rng``:
    each call one draw from the generator, the mask computed on the arrays' device, the same
    entries on every device and at any thread count."""
    _log_rng(rng)
    k0, k1 = (int(v) for v in rng.integers(0, 2**32, size=2, dtype=np.uint64))
    dtype = x.dtype if x.dtype == np.float32 else np.dtype(np.float64)
    xp = xp_of(x)
    res = out if out is not None and out.flags.c_contiguous else xp.empty(x.shape, dtype)
    threshold = min(2**32, math.ceil(float(p) * 2**32))  # a word below it drops the entry
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    kernels_for(x).dropout_mask(k0, k1, threshold, dtype.type(scale), res)
    if out is not None and res is not out:
        np.copyto(out, res)  # a plan's strided buffer: entries in the array's own order
        return out
    return res


def _dropout_mask_reference(x, p, rng):
    """The mask one Python int at a time (Philox4x32-10 as published, rounds then key bumps)."""
    k0, k1 = (int(v) for v in rng.integers(0, 2**32, size=2, dtype=np.uint64))
    low = 0xFFFFFFFF
    words = []
    for j in range((x.size + 3) // 4):
        c, ka, kb = [j & low, j >> 32, 0, 0], k0, k1
        for _ in range(10):
            p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
            c = [(p1 >> 32) ^ c[1] ^ ka, p1 & low, (p0 >> 32) ^ c[3] ^ kb, p0 & low]
            ka, kb = (ka + 0x9E3779B9) & low, (kb + 0xBB67AE85) & low
        words += c
    u = np.array(words[: x.size], np.float64).reshape(x.shape) / 2.0**32
    return np.where(u >= p, 1 / (1 - p), 0.0)


dropout_mask = primitive(
    "dropout_mask",
    _dropout_mask,
    None,
    reference=lambda x, p, rng: _dropout_mask_reference(x, p, _PatternRandom()),
    samples=lambda rng: [
        Sample((S.values(rng, s),), {"p": p, "rng": _PatternRandom()})
        for s, p in [((4, 5), 0.3), ((7,), 0.5)]
    ],
    effect=True,
    doc="A mask shaped like x: 0 with probability p, else 1/(1-p), from a counter-based "
    "generator (Philox4x32-10) keyed by two words drawn from ``rng``. Not differentiable (the "
    "product with it is).",
)


# -- comparisons: values only, no gradient ------------------------------------------------------
def _cmp(name, fn):
    return primitive(
        name,
        fn,
        None,
        reference=fn,
        samples=S.binary(),
        broadcasting=True,
        doc=f"Elementwise {name}; a bool tensor with no gradient.",
    )


less = _cmp("less", np.less)
less_equal = _cmp("less_equal", np.less_equal)
greater = _cmp("greater", np.greater)
greater_equal = _cmp("greater_equal", np.greater_equal)
equal = _cmp("equal", np.equal)
not_equal = _cmp("not_equal", np.not_equal)
