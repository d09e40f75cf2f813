"""Adam (with optional L2 weight decay and AMSGrad) and AdamW (decoupled weight decay)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor
from ..autodiff.kernels.dispatch import kernels_for
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam: bias-corrected first and second moment estimates of the gradient.

    With ``d = grad (+ weight_decay * p)``, ``t`` the parameter's step count:
    ``m = b1 m + (1 - b1) d``, ``v = b2 v + (1 - b2) d^2`` (``v_max = max(v_max, v)`` with
    ``amsgrad``), ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``.
    """

    _decoupled = False

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
    ):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["betas"] = self._betas(group, where)
        group["eps"] = self._number(group, "eps", where, lo=0.0)
        group["weight_decay"] = self._number(group, "weight_decay", where, lo=0.0)
        group["amsgrad"] = self._flag(group, "amsgrad", where)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        names = ("exp_avg", "exp_avg_sq")
        return names + ("max_exp_avg_sq",) if group["amsgrad"] else names

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("step",)

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        lr, (beta1, beta2), eps, wd = (
            group["lr"],
            group["betas"],
            group["eps"],
            group["weight_decay"],
        )
        state["step"] = step = state["step"] + 1
        kernels_for(p).adam_update(
            p,
            grad,
            state["exp_avg"],
            state["exp_avg_sq"],
            state["max_exp_avg_sq"] if group["amsgrad"] else None,
            scratch,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            wd=wd,
            decoupled=self._decoupled,
            step=step,
        )


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before the Adam step
    (the decay does not pass through the moment estimates)."""

    _decoupled = True

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
