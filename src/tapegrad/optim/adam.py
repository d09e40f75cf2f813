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

    def _update_group(self, group: dict, offset: int) -> None:
        """Eager step: each parameter's kernel called straight, its scalars made once for the
        group (``adam_scalars`` keeps them), where the group's parameters are NumPy's at one
        step count; else the update primitive per parameter. Same bits either way."""
        params, state = group["params"], self.state
        step = first = None  # every gradient checked first: a bad one stops the step unmoved
        for j, p in enumerate(params):
            if p._grad is not None:
                s = self._param_state(offset + j, group, p.data, p._grad)
                if step is None:
                    step, first = s["step"] + 1, p.data
                if s["step"] + 1 != step or type(p.data) is not np.ndarray:
                    step = -1
        if step is None:  # no gradients
            return
        if step == -1:  # steps apart (a parameter skipped some), or not NumPy's arrays
            super()._update_group(group, offset)
            return
        for j, p in enumerate(params):
            if p._grad is not None:
                state[offset + j]["step"] = step
        amsgrad, (beta1, beta2) = group["amsgrad"], group["betas"]
        lr, eps, wd, decoupled = group["lr"], group["eps"], group["weight_decay"], self._decoupled
        update = kernels_for(first).adam_update
        for j, p in enumerate(params):
            if p._grad is not None:
                index, data = offset + j, p.data
                s = state[index]
                vmax = s["max_exp_avg_sq"] if amsgrad else None
                scratch = self._scratch(index, data)
                update(data, p._grad, s["exp_avg"], s["exp_avg_sq"], vmax, scratch, lr=lr,
                       beta1=beta1, beta2=beta2, eps=eps, wd=wd, decoupled=decoupled,
                       step=step)  # fmt: skip


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
