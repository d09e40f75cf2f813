"""Stochastic gradient descent with optional momentum, Nesterov momentum and weight decay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor, backend
from ..autodiff.kernels.dispatch import kernels_for
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """``p -= lr * d`` where ``d = grad + weight_decay * p``, or with momentum
    ``b = momentum * b + (1 - dampening) * d`` (``b = d`` on the first step) and
    ``d = b`` (or ``d + momentum * b`` with ``nesterov=True``).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            nesterov=nesterov,
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["momentum"] = self._number(group, "momentum", where, lo=0.0)
        group["dampening"] = self._number(group, "dampening", where, lo=0.0, hi=1.0)
        group["weight_decay"] = self._number(group, "weight_decay", where, lo=0.0)
        group["nesterov"] = self._flag(group, "nesterov", where)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            place = f"SGD{' ' + where if where else ''}"
            raise ValueError(
                f"{place}: nesterov=True needs momentum > 0 and dampening = 0, got "
                f"momentum={group['momentum']}, dampening={group['dampening']}"
            )

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _init_state(self, p: np.ndarray, grad: np.ndarray, group: dict) -> dict:
        return {}  # the momentum buffer starts as the first step's d, made in _update

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        momentum = group["momentum"]
        buf, first = None, False
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:  # filled with the first step's direction by the kernel
                buf = state["momentum_buffer"] = backend.xp_of(p).empty(p.shape, p.dtype)
                first = True
        kernels_for(p).sgd_update(
            p,
            grad,
            buf,
            scratch,
            lr=group["lr"],
            momentum=momentum,
            dampening=group["dampening"],
            wd=group["weight_decay"],
            nesterov=group["nesterov"],
            first=first,
        )
