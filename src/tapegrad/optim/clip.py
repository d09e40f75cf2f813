"""Gradient clipping, in place: by the total norm of all gradients, or elementwise by value."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..autodiff import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _grads(params: Tensor | Iterable[Tensor], fn: str) -> list[tuple[int, np.ndarray]]:
    if isinstance(params, Tensor):
        params = [params]
    out = []
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{fn}: parameter {i} is a {type(p).__name__}, expected a Tensor")
        if p.grad is not None:
            out.append((i, p.grad))
    return out


def _norm(g: np.ndarray, norm_type: float) -> float:
    """The ``norm_type``-norm of one gradient as a Python float (float64)."""
    if g.size == 0:
        return 0.0
    flat = g.reshape(-1)
    if norm_type == math.inf:
        return float(max(np.max(flat), -np.min(flat)))
    if norm_type == 2.0:
        with np.errstate(over="ignore"):
            n = float(np.sqrt(np.dot(flat, flat)))
        if math.isinf(n) and np.all(np.isfinite(flat)):  # sum of squares overflowed g's dtype
            f64 = flat.astype(np.float64)
            n = float(np.sqrt(np.dot(f64, f64)))
        return n
    a = np.abs(flat.astype(np.float64))
    if norm_type == 1.0:
        return float(np.sum(a))
    return float(np.sum(a**norm_type) ** (1.0 / norm_type))


def clip_grad_norm_(
    params: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> float:
    """Scale all gradients in place so that their total ``norm_type``-norm (the norm of the
    per-parameter norms, as if all gradients were one vector) is at most ``max_norm``.

    Returns the total norm before clipping. The scale is ``max_norm / (total + 1e-6)``, applied
    only when it is below 1. Parameters with ``grad=None`` are ignored. If the total is NaN or
    infinite, the gradients are left unchanged and the total is returned so the caller can
    skip the step; with ``error_if_nonfinite=True`` a ``FloatingPointError`` names the
    parameters whose gradients are not finite instead.
    """
    fn = "clip_grad_norm_"
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.number)):
        raise TypeError(f"{fn}: max_norm must be a number, got {max_norm!r}")
    if not max_norm >= 0:
        raise ValueError(f"{fn}: max_norm must be >= 0, got {max_norm}")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"{fn}: norm_type must be > 0 (or inf), got {norm_type}")
    grads = _grads(params, fn)
    if not grads:
        return 0.0
    norms = [_norm(g, norm_type) for _, g in grads]
    biggest = max(norms)
    if any(math.isnan(n) for n in norms):
        total = math.nan
    elif norm_type == math.inf or biggest == 0 or math.isinf(biggest):
        total = biggest
    else:  # scaled by the largest norm so that n**norm_type cannot overflow
        scaled = math.fsum((n / biggest) ** norm_type for n in norms)
        total = biggest * scaled ** (1.0 / norm_type)
    if not math.isfinite(total):
        if error_if_nonfinite:
            bad = [i for (i, g) in grads if not np.all(np.isfinite(g))]
            raise FloatingPointError(
                f"{fn}: the total gradient norm is {total}; non-finite gradients in "
                f"parameter(s) {bad}"
            )
        return total
    coef = float(max_norm) / (total + 1e-6)
    if coef < 1.0:
        for _, g in grads:
            np.multiply(g, coef, out=g)
    return total


def clip_grad_value_(params: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient entry into ``[-clip_value, clip_value]``, in place."""
    fn = "clip_grad_value_"
    if isinstance(clip_value, bool) or not isinstance(clip_value, (int, float, np.number)):
        raise TypeError(f"{fn}: clip_value must be a number, got {clip_value!r}")
    if not clip_value >= 0:
        raise ValueError(f"{fn}: clip_value must be >= 0, got {clip_value}")
    for _, g in _grads(params, fn):
        np.clip(g, -clip_value, clip_value, out=g)
