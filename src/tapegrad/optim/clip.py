"""Gradient clipping, in place: by the total norm of all gradients, or elementwise by value."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable

import numpy as np

from ..autodiff import Tensor
from ..autodiff.core.state import active_trace
from ..autodiff.plan import effect

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _params(params: Tensor | Iterable[Tensor], fn: str) -> list[Tensor]:
    if isinstance(params, Tensor):
        params = [params]
    params = list(params)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{fn}: parameter {i} is a {type(p).__name__}, expected a Tensor")
    return params


def _grads(params: list[Tensor]) -> list[tuple[int, np.ndarray]]:
    """(position, gradient) of the parameters that have one, read at the time of the call
    (a compiled step's replay finds the plan's gradient buffers there)."""
    return [(i, p.grad) for i, p in enumerate(params) if p.grad is not None]


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
    parameters whose gradients are not finite instead. Inside a compiled step the clipping is
    replayed on every call and the norm comes back as a 0-d float64 Tensor that each replay
    updates (a float is only known while tracing).
    """
    fn = "clip_grad_norm_"
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.number)):
        raise TypeError(f"{fn}: max_norm must be a number, got {max_norm!r}")
    if not max_norm >= 0:
        raise ValueError(f"{fn}: max_norm must be >= 0, got {max_norm}")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"{fn}: norm_type must be > 0 (or inf), got {norm_type}")
    params = _params(params, fn)
    if active_trace() is None:
        return _clip_norm(params, float(max_norm), norm_type, error_if_nonfinite)
    # Inside a compiled step: a recorded effect, so every replay clips; the norm it returns is
    # a 0-d tensor that each replay updates.
    total = np.zeros((), np.float64)

    def run():
        total[()] = _clip_norm(params, float(max_norm), norm_type, error_if_nonfinite)

    effect(run, fn)
    return Tensor(total)


def _clip_norm(params, max_norm, norm_type, error_if_nonfinite) -> float:
    fn = "clip_grad_norm_"
    grads = _grads(params)
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
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for _, g in grads:
            np.multiply(g, coef, out=g)
    return total


def clip_grad_value_(params: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient entry into ``[-clip_value, clip_value]``, in place, as PyTorch's
    ``clip_grad_value_`` does: the bound is rounded to each gradient's dtype, NaN entries stay
    NaN, ``-0.0`` keeps its sign; parameters with ``grad=None`` are skipped.

    Unlike PyTorch, a negative or NaN ``clip_value`` is an error (PyTorch would set every entry
    to ``-|clip_value|``), and a bound beyond the gradient dtype's range (1e40 for float32)
    clips nothing where PyTorch raises. Inside a compiled step the clipping is replayed."""
    fn = "clip_grad_value_"
    if isinstance(clip_value, bool) or not isinstance(clip_value, (int, float, np.number)):
        raise TypeError(f"{fn}: clip_value must be a number, got {clip_value!r}")
    if not clip_value >= 0:
        raise ValueError(f"{fn}: clip_value must be >= 0, got {clip_value}")
    huge = isinstance(clip_value, int) and clip_value > sys.float_info.max  # 10**400
    bound = math.inf if huge else float(clip_value)
    params = _params(params, fn)

    def run():
        with np.errstate(over="ignore"):  # a bound past float32's range becomes inf
            for _, g in _grads(params):
                np.clip(g, -bound, bound, out=g)

    effect(run, fn)  # inside a compiled step: replayed
