"""Adamax: Adam with the second moment replaced by an exponentially weighted infinity norm
(a running maximum of ``|grad|``), which needs no bias correction and bounds each step by
about ``lr``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor
from .optimizer import Optimizer

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """With ``d = grad`` (``-grad`` with ``maximize``) ``+ weight_decay * p`` and ``t`` the
    parameter's step count: ``m = b1 m + (1 - b1) d``, ``u = max(b2 u, |d| + eps)``,
    ``p -= (lr / (1 - b1^t) * m) / u`` (``m``: ``exp_avg``, ``u``: ``exp_inf``; a NaN in the
    gradient stays in ``u``, as in PyTorch).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        maximize: bool = False,
    ):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["betas"] = self._betas(group, where)
        group["eps"] = self._number(group, "eps", where, lo=0.0)
        group["weight_decay"] = self._number(group, "weight_decay", where, lo=0.0)
        group["maximize"] = self._flag(group, "maximize", where)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_inf")

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("step",)

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        beta1, beta2 = group["betas"]
        t0, t1 = scratch
        state["step"] = step = state["step"] + 1
        d = self._direction(p, grad, t0, group["weight_decay"], group["maximize"])
        m, u = state["exp_avg"], state["exp_inf"]
        # m moves towards d by w = 1 - beta1 from whichever end is nearer (from m when w < 1/2,
        # back from d otherwise): the rounding of PyTorch's lerp, with w and 1 - w in p's dtype
        w = p.dtype.type(1.0 - beta1)
        np.subtract(d, m, out=t1)
        if w < 0.5:  # m += w * (d - m)
            np.multiply(t1, w, out=t1)
            np.add(m, t1, out=m)
        else:  # m = d - (1 - w) * (d - m)
            np.multiply(t1, 1 - w, out=t1)
            np.subtract(d, t1, out=m)
        np.multiply(u, beta2, out=u)  # u = max(beta2 u, |d| + eps)
        np.abs(d, out=t1)
        np.add(t1, group["eps"], out=t1)
        np.maximum(u, t1, out=u)
        np.multiply(m, group["lr"] / (1.0 - beta1**step), out=t1)  # p -= (clr * m) / u
        np.divide(t1, u, out=t1)
        np.subtract(p, t1, out=p)
