"""Adagrad: per-element step sizes from the sum of all past squared gradients, so each
element's step shrinks as it keeps receiving gradient (rarely updated elements keep large
steps)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor, backend
from .optimizer import Optimizer

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """With ``d = grad`` (``-grad`` with ``maximize``) ``+ weight_decay * p`` and ``t`` the
    parameter's step count: ``s += d^2`` (``s`` starts at ``initial_accumulator_value``),
    ``p -= lr / (1 + (t - 1) * lr_decay) * d / (sqrt(s) + eps)``.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        maximize: bool = False,
    ):
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        for key in ("lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            group[key] = self._number(group, key, where, lo=0.0)
        group["maximize"] = self._flag(group, "maximize", where)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("sum",)

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("step",)

    def _init_state(self, p: np.ndarray, grad: np.ndarray, group: dict) -> dict:
        return {
            "step": 0,
            "sum": backend.xp_of(p).full(p.shape, group["initial_accumulator_value"], p.dtype),
        }

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        t0, t1 = scratch
        state["step"] = step = state["step"] + 1
        d = self._direction(p, grad, t0, group["weight_decay"], group["maximize"])
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        s = state["sum"]
        np.multiply(d, d, out=t1)
        np.add(s, t1, out=s)
        np.sqrt(s, out=t1)
        np.add(t1, group["eps"], out=t1)
        np.divide(d, t1, out=t1)
        np.multiply(t1, clr, out=t1)
        np.subtract(p, t1, out=p)
