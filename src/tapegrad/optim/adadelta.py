"""Adadelta: Adagrad's sum of squared gradients replaced by a running average, and the step
scaled by a running average of past squared updates, so the update has the parameter's units
and needs no learning-rate schedule (``lr`` only rescales it; 1 by default)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor
from .optimizer import Optimizer

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """With ``d = grad`` (``-grad`` with ``maximize``) ``+ weight_decay * p``:
    ``v = rho v + (1 - rho) d^2``, ``u = sqrt(a + eps) / sqrt(v + eps) * d``,
    ``a = rho a + (1 - rho) u^2``, ``p -= lr * u`` (``v``: ``square_avg``, ``a``:
    ``acc_delta``).
    """

    _n_scratch = 3

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        maximize: bool = False,
    ):
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["rho"] = self._number(group, "rho", where, lo=0.0, hi=1.0)
        group["eps"] = self._number(group, "eps", where, lo=0.0)
        group["weight_decay"] = self._number(group, "weight_decay", where, lo=0.0)
        group["maximize"] = self._flag(group, "maximize", where)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("square_avg", "acc_delta")

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("step",)

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        rho, eps = group["rho"], group["eps"]
        t0, t1, t2 = scratch
        state["step"] += 1
        d = self._direction(p, grad, t0, group["weight_decay"], group["maximize"])
        v, a = state["square_avg"], state["acc_delta"]
        np.multiply(v, rho, out=v)  # v = rho v + (1 - rho) d d
        np.multiply(d, 1.0 - rho, out=t1)
        np.multiply(t1, d, out=t1)
        np.add(v, t1, out=v)
        np.add(v, eps, out=t1)  # t1 = sqrt(v + eps)
        np.sqrt(t1, out=t1)
        np.add(a, eps, out=t2)  # t2 = u = sqrt(a + eps) / t1 * d
        np.sqrt(t2, out=t2)
        np.divide(t2, t1, out=t2)
        np.multiply(t2, d, out=t2)
        np.multiply(a, rho, out=a)  # a = rho a + (1 - rho) u u
        np.multiply(t2, 1.0 - rho, out=t1)
        np.multiply(t1, t2, out=t1)
        np.add(a, t1, out=a)
        np.multiply(t2, group["lr"], out=t2)
        np.subtract(p, t2, out=p)
