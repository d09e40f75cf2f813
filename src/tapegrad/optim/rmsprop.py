"""RMSprop: divide the gradient by a running root-mean-square of recent gradients."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor
from .optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """With ``d = grad (+ weight_decay * p)``: ``s = alpha s + (1 - alpha) d^2``;
    ``r = sqrt(s) + eps`` (``centered``: ``g = alpha g + (1 - alpha) d`` and
    ``r = sqrt(s - g^2) + eps``); then ``p -= lr * d / r``, or with momentum
    ``b = momentum * b + d / r`` and ``p -= lr * b``.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        momentum: float = 0.0,
        centered: bool = False,
        weight_decay: float = 0.0,
    ):
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            momentum=momentum,
            centered=centered,
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["alpha"] = self._number(group, "alpha", where, lo=0.0, hi=1.0)
        group["eps"] = self._number(group, "eps", where, lo=0.0)
        group["momentum"] = self._number(group, "momentum", where, lo=0.0)
        group["weight_decay"] = self._number(group, "weight_decay", where, lo=0.0)
        group["centered"] = self._flag(group, "centered", where)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        names: tuple[str, ...] = ("square_avg",)
        if group["momentum"] > 0:
            names += ("momentum_buffer",)
        if group["centered"]:
            names += ("grad_avg",)
        return names

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("step",)

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        momentum, wd = group["momentum"], group["weight_decay"]
        t0, t1 = scratch
        state["step"] += 1
        d = grad
        if wd != 0:
            np.multiply(p, wd, out=t0)
            np.add(grad, t0, out=t0)
            d = t0
        s = state["square_avg"]
        np.multiply(s, alpha, out=s)
        np.multiply(d, 1.0 - alpha, out=t1)
        np.multiply(t1, d, out=t1)
        np.add(s, t1, out=s)
        if group["centered"]:
            g = state["grad_avg"]
            # g += (1 - alpha) * (d - g)
            np.subtract(d, g, out=t1)
            np.multiply(t1, 1.0 - alpha, out=t1)
            np.add(g, t1, out=g)
            np.multiply(g, g, out=t1)
            np.subtract(s, t1, out=t1)
            np.sqrt(t1, out=t1)
        else:
            np.sqrt(s, out=t1)
        np.add(t1, eps, out=t1)
        np.divide(d, t1, out=t1)
        if momentum > 0:
            buf = state["momentum_buffer"]
            np.multiply(buf, momentum, out=buf)
            np.add(buf, t1, out=buf)
            np.multiply(buf, lr, out=t1)
        else:
            np.multiply(t1, lr, out=t1)
        np.subtract(p, t1, out=p)
