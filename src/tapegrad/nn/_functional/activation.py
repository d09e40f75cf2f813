"""The activations ``nn.functional`` lacked beside PyTorch's: ``softplus`` with ``beta`` and
``threshold``, ``tanhshrink``, ``softshrink``, ``hardshrink``, ``threshold``, ``prelu``,
``glu``; each composes engine operations (differentiable, twice where its parts are)."""

from __future__ import annotations

from ...autodiff import ops
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def softplus(x, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``
    (PyTorch's form, for numerical stability)."""
    x = _t(x)
    bx = x * float(beta) if beta != 1 else x
    soft = ops.softplus(bx)
    if beta != 1:
        soft = soft * (1.0 / float(beta))
    return ops.where(bx > float(threshold), x, soft)


def tanhshrink(x) -> Tensor:
    """``x - tanh(x)``."""
    return _t(x) - ops.tanh(x)


def softshrink(x, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between."""
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
    x = _t(x)
    return ops.where(x > lambd, x - lambd, ops.where(x < -lambd, x + lambd, x * 0.0))


def hardshrink(x, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, 0 elsewhere."""
    x = _t(x)
    return ops.where(ops.absolute(x) > lambd, x, x * 0.0)


def threshold(x, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, ``value`` elsewhere."""
    x = _t(x)
    return ops.where(x > threshold, x, x * 0.0 + value)


def prelu(x, weight) -> Tensor:
    """``x`` where ``x >= 0``, ``weight * x`` elsewhere; ``weight`` has one entry or one per
    channel (axis 1; an input of fewer axes has one channel)."""
    x, w = _t(x), _t(weight)
    if w.ndim != 1:
        raise ShapeError(f"prelu: weight must be 1-d, got shape {tuple(w.shape)}")
    if w.shape[0] != 1:
        if x.ndim < 2 or x.shape[1] != w.shape[0]:
            raise ShapeError(
                f"prelu: {w.shape[0]} weights for input of shape {tuple(x.shape)}: one weight "
                f"per channel (axis 1), or a single weight"
            )
        w = ops.reshape(w, (w.shape[0],) + (1,) * (x.ndim - 2))
    return ops.where(x >= 0, x, x * w)


def glu(x, dim: int = -1) -> Tensor:
    """The gated linear unit: ``a * sigmoid(b)`` for the two halves ``a, b`` of ``dim``."""
    x = _t(x)
    n = x.shape[dim] if x.ndim else 0
    if n % 2:
        raise ShapeError(f"glu: axis {dim} must have an even size, got shape {tuple(x.shape)}")
    a, b = ops.split(x, n // 2, dim)
    return a * ops.sigmoid(b)


def rrelu(x, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, rng=None):
    """Randomised leaky ReLU: in training each negative entry is scaled by its own slope drawn
    uniformly from ``[lower, upper)`` (from ``rng``, default ``nn.init``'s generator); in
    evaluation by the mean slope ``(lower + upper) / 2``."""
    if not 0 <= lower <= upper:
        raise ValueError(f"rrelu: need 0 <= lower <= upper, got lower={lower}, upper={upper}")
    x = _t(x)
    if not training:
        return ops.where(x >= 0, x, x * ((lower + upper) / 2))
    from .. import init  # the seedable default generator

    gen = rng if rng is not None else init.default_generator()
    u = ops.random_draw(shape=tuple(x.shape), dtype=x.dtype.type, dist="uniform", rng=gen)
    return ops.where(x >= 0, x, x * (u * (upper - lower) + lower))
