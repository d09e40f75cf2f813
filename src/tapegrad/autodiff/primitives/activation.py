"""Activations as single primitives with compiled kernels: exact GELU, and ReLU with its VJP.

``gelu(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))`` in one pass (``kernels/cpu/special.py``)
where the composed form reads and writes the array five times and keeps four temporaries for
its backward pass. Its VJP is ``gelu_backward(g, x) = g * gelu'(x)``, itself a primitive whose
rule is written with primitives (``gelu''(x) = phi(x) * (2 - x^2)``), so higher derivatives
work as for any composed function.

``relu(x) = max(x, 0)``; its VJP ``relu_backward(g, x)``, g where x > 0 and 0 elsewhere, is
one primitive (one pass, where a comparison then a select took two and a boolean temporary),
whose own VJP is itself in g (x is not differentiated: the mask is constant almost everywhere).
The fusion pass (``plan/fusion.py``) folds it into a bias add or max pooling beside it.

Float arrays go through their device's kernels (``kernels_for``, over numba's threads when
large); integer ones use the same formula in array operations.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import is_array, xp_of
from ..kernels.dispatch import kernels_for
from . import samples as S
from .elementwise import _erf, exp
from .registry import Sample, primitive, run

_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def into_kernel(name, out, *arrays):
    """Run the kernel ``name`` of the arrays' device, ``kernel(*arrays, out)``, on C-contiguous
    operands: ``out`` when given (copied into when it is not contiguous), else a new array.
    None when the operands are not float arrays of one shape and dtype (the caller then takes
    its array-operation path). The kernels are elementwise, so one operand may be ``out``
    itself: a non-contiguous operand (a broadcast gradient, a mean's) is copied into ``out``
    first where nothing else reads ``out``'s memory, instead of into a temporary."""
    first = arrays[0]
    for a in arrays:
        if not is_array(a) or a.dtype != first.dtype or a.shape != first.shape:
            return None
    if first.dtype not in _FLOATS:
        return None
    if out is not None and (not is_array(out) or out.dtype != first.dtype):
        return None
    xp = xp_of(first)
    operands, staged = [], False
    for a in arrays:
        if not a.flags.c_contiguous:
            if not staged and _unshared(out, arrays):  # into out, worked on there
                np.copyto(out, a)
                a, staged = out, True
            else:
                a = xp.ascontiguousarray(a)
        operands.append(a)
    arrays = operands
    target = out if out is not None and out.flags.c_contiguous else xp.empty_like(arrays[0])
    getattr(kernels_for(first), name)(*arrays, target)
    if out is not None and target is not out:
        np.copyto(out, target)
        return out
    return target


def _unshared(out, arrays) -> bool:
    """Whether ``out`` is a C-contiguous NumPy array whose memory no operand reads."""
    return (
        type(out) is np.ndarray
        and out.flags.c_contiguous
        and not any(np.may_share_memory(out, a) for a in arrays)
    )


def _assign(out, value):
    if out is None:
        return value
    out[...] = value
    return out


def _gelu_fwd(x, out=None):
    res = into_kernel("gelu_forward", out, x)
    if res is not None:
        return res
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    return _assign(out, x * (_erf(x * _INV_SQRT2) + 1.0) * 0.5)


def _gelu_backward_fwd(g, x, out=None):
    res = into_kernel("gelu_backward", out, g, x)
    if res is not None:
        return res
    cdf = (_erf(x * _INV_SQRT2) + 1.0) * 0.5
    return _assign(out, g * (cdf + x * xp_of(x).exp(x * x * -0.5) * _INV_SQRT_2PI))


def _erf_ref(x):
    return np.array([math.erf(v) for v in np.ravel(x)]).reshape(np.shape(x))


def _gelu_second(x):
    """``gelu''(x) = phi(x) * (2 - x^2)``, with primitives (differentiable in turn)."""
    return run(exp, x * x * -0.5) * _INV_SQRT_2PI * (2 - x * x)


gelu_backward = primitive(
    "gelu_backward",
    _gelu_backward_fwd,
    (
        lambda gg, out, g, x: run(gelu_backward, gg, x),
        lambda gg, out, g, x: gg * g * _gelu_second(x),
    ),
    reference=lambda g, x: (
        g * ((1 + _erf_ref(x * _INV_SQRT2)) / 2 + x * np.exp(-x * x / 2) * _INV_SQRT_2PI)
    ),
    samples=S.binary(-4, 4, pairs=[((2, 3), (2, 3)), ((5,), (5,)), ((), ()), ((0, 3), (0, 3))]),
    broadcasting=True,
    doc="``g * gelu'(x)``: exact GELU's VJP in one pass.",
)
gelu = primitive(
    "gelu",
    _gelu_fwd,
    (lambda g, out, x: run(gelu_backward, g, x),),
    reference=lambda x: x * (1 + _erf_ref(x * _INV_SQRT2)) / 2,
    samples=lambda rng: S.unary(-4, 4)(rng) + [Sample((S.values(rng, (3, 4), -9, 9),))],
    broadcasting=True,
    doc="Exact GELU ``0.5 * x * (1 + erf(x / sqrt(2)))`` in one compiled pass each way.",
)


# -- ReLU ---------------------------------------------------------------------------------------
def _relu_fwd(x, out=None):
    res = into_kernel("relu_forward", out, x)
    return np.maximum(x, 0, out=out) if res is None else res


def _relu_backward_fwd(g, x, out=None):
    res = into_kernel("relu_backward", out, g, x)
    if res is not None:
        return res
    # a select, not g * mask: masked entries are 0 even where g is not finite
    return _assign(out, xp_of(g).where(x > 0, g, 0))


def _relu_backward_samples(rng):
    return [
        Sample((S.values(rng, shape), S.values(rng, shape, gap=0.1)))
        for shape in [(2, 3), (5,), (), (0, 3)]
    ]


relu_backward = primitive(
    "relu_backward",
    _relu_backward_fwd,
    (lambda h, out, g, x: run(relu_backward, h, x), None),
    reference=lambda g, x: g * (x > 0),
    samples=_relu_backward_samples,
    doc="ReLU's VJP in one pass: g where x > 0, 0 elsewhere (x NaN too); x not differentiated.",
)
relu = primitive(
    "relu",
    _relu_fwd,
    (lambda g, out, x: run(relu_backward, g, x),),
    reference=lambda x: x * (x > 0),
    samples=S.unary(gap=0.1),
    broadcasting=True,
    doc="max(x, 0); the gradient at 0 is 0.",
)
