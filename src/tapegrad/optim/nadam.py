"""NAdam: Adam with Nesterov momentum (Dozat, 2016), in PyTorch's default formulation with a
momentum schedule: ``mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor
from .optimizer import Optimizer

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """With ``d = grad`` (``-grad`` with ``maximize``) ``+ weight_decay * p`` (or, with
    ``decoupled_weight_decay``, ``p *= 1 - lr * weight_decay`` first, as AdamW does), ``t`` the
    parameter's step count and ``P_t = mu_1 ... mu_t`` (state ``mu_product``):
    ``m = b1 m + (1 - b1) d``, ``v = b2 v + (1 - b2) d^2``,
    ``r = sqrt(v / (1 - b2^t)) + eps`` and
    ``p -= lr (1 - mu_t) / (1 - P_t) * d / r + lr mu_{t+1} / (1 - P_t mu_{t+1}) * m / r``.
    """

    _n_scratch = 3

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        maximize: bool = False,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["betas"] = self._betas(group, where)
        group["eps"] = self._number(group, "eps", where, lo=0.0)
        group["weight_decay"] = self._number(group, "weight_decay", where, lo=0.0)
        group["momentum_decay"] = self._number(group, "momentum_decay", where, lo=0.0)
        group["decoupled_weight_decay"] = self._flag(group, "decoupled_weight_decay", where)
        group["maximize"] = self._flag(group, "maximize", where)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("step",)

    def _state_floats(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("mu_product",)

    def _init_state(self, p: np.ndarray, grad: np.ndarray, group: dict) -> dict:
        state = super()._init_state(p, grad, group)
        state["mu_product"] = 1.0
        return state

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
        t0, t1, t2 = scratch
        state["step"] = step = state["step"] + 1
        decoupled = group["decoupled_weight_decay"]
        if wd != 0 and decoupled:
            np.multiply(p, 1.0 - lr * wd, out=p)
        d = self._direction(p, grad, t0, 0.0 if decoupled else wd, group["maximize"])
        decay = group["momentum_decay"]
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        state["mu_product"] = product = state["mu_product"] * mu
        m, v = state["exp_avg"], state["exp_avg_sq"]
        np.subtract(d, m, out=t1)  # m += (1 - beta1) * (d - m)
        np.multiply(t1, 1.0 - beta1, out=t1)
        np.add(m, t1, out=m)
        np.multiply(v, beta2, out=v)  # v = beta2 v + (1 - beta2) d d
        np.multiply(d, 1.0 - beta2, out=t1)
        np.multiply(t1, d, out=t1)
        np.add(v, t1, out=v)
        np.divide(v, 1.0 - beta2**step, out=t1)  # r = sqrt(v / (1 - beta2^t)) + eps
        np.sqrt(t1, out=t1)
        np.add(t1, group["eps"], out=t1)
        np.divide(d, t1, out=t2)
        np.multiply(t2, lr * (1.0 - mu) / (1.0 - product), out=t2)
        np.subtract(p, t2, out=p)
        np.divide(m, t1, out=t2)
        np.multiply(t2, lr * mu_next / (1.0 - product * mu_next), out=t2)
        np.subtract(p, t2, out=p)
