"""Learning-rate schedulers: they set ``group["lr"]`` of an optimiser once per ``step()``.

Call ``scheduler.step()`` after ``optimizer.step()`` (once per epoch or per batch, as the
schedule is meant). Each schedule is computed from the current ``lr`` recursively, as
PyTorch's are, so the sequences agree with it to the last bit; ``base_lrs`` are the groups'
``initial_lr`` (set on construction).
"""

from __future__ import annotations

import math
from typing import Any

from .optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "OneCycleLR"]


class LRScheduler:
    """Base class. ``last_epoch`` counts ``step()`` calls (-1 before the first, done on
    construction); subclasses define ``_next_lrs()`` and ``_hyper`` (their settings)."""

    _hyper: tuple[str, ...] = ()

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected a tapegrad Optimizer, got {type(optimizer)}")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError(f"{name}: last_epoch must be an int >= -1, got {last_epoch!r}")
        self.optimizer = optimizer
        for gi, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(
                    f"{name}: resuming with last_epoch={last_epoch} needs 'initial_lr' in "
                    f"parameter group {gi}; load the optimiser's state dict first"
                )
        self.base_lrs: list[float] = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._initial = True
        self.step()
        self._initial = False

    def _next_lrs(self) -> list[float]:
        raise NotImplementedError

    def step(self) -> None:
        """Advance the schedule by one and write the new learning rates into the optimiser."""
        self._step_count += 1
        self.last_epoch += 1
        lrs = [g["lr"] for g in self.optimizer.param_groups] if self._initial else self._next_lrs()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = list(lrs)

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` set, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state: type, settings, ``last_epoch``, step count, base and last lrs."""
        sd: dict[str, Any] = {
            "type": type(self).__name__,
            "last_epoch": self.last_epoch,
            "step_count": self._step_count,
            "base_lrs": list(self.base_lrs),
            "last_lr": list(self._last_lr),
        }
        sd.update({k: getattr(self, k) for k in self._hyper})
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s values and set the optimiser's lrs to the last ones, so a
        resumed run continues the schedule exactly."""
        name = type(self).__name__
        expected = {"type", "last_epoch", "step_count", "base_lrs", "last_lr", *self._hyper}
        if not isinstance(state_dict, dict) or set(state_dict) != expected:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict)
            raise ValueError(f"{name}.load_state_dict: expected keys {sorted(expected)}, got {got}")
        if state_dict["type"] != name:
            raise ValueError(
                f"{name}.load_state_dict: state dict is for {state_dict['type']!r}, not {name!r}"
            )
        n = len(self.optimizer.param_groups)
        for k in ("base_lrs", "last_lr"):
            v = state_dict[k]
            if not isinstance(v, list) or len(v) != n:
                raise ValueError(
                    f"{name}.load_state_dict: {k} must be a list of {n} learning rates, got {v!r}"
                )
        self.last_epoch = int(state_dict["last_epoch"])
        self._step_count = int(state_dict["step_count"])
        self.base_lrs = [float(x) for x in state_dict["base_lrs"]]
        self._last_lr = [float(x) for x in state_dict["last_lr"]]
        for k in self._hyper:
            setattr(self, k, state_dict[k])
        for group, lr, base in zip(self.optimizer.param_groups, self._last_lr, self.base_lrs):
            group["lr"] = lr
            group["initial_lr"] = base


def _positive_int(name: str, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name}: {key} must be a positive int, got {v!r}")
    return v


def _nonnegative(name: str, key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
        raise ValueError(f"{name}: {key} must be a finite number >= 0, got {v!r}")
    return float(v)


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` steps:
    ``lr = initial_lr * gamma ** (last_epoch // step_size)``."""

    _hyper = ("step_size", "gamma")

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ):
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _nonnegative("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def _next_lrs(self) -> list[float]:
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return lrs
        return [lr * self.gamma for lr in lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine from ``initial_lr`` down to ``eta_min`` over ``T_max`` steps (and back up over
    the next ``T_max``, periodically): ``eta_min + (initial_lr - eta_min) *
    (1 + cos(pi * last_epoch / T_max)) / 2``."""

    _hyper = ("T_max", "eta_min")

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ):
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _nonnegative("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def _next_lrs(self) -> list[float]:
        t, T, lo = self.last_epoch, self.T_max, self.eta_min
        groups = self.optimizer.param_groups
        if t == 0:
            return [g["lr"] for g in groups]
        if (t - 1 - T) % (2 * T) == 0:
            # leaving the minimum, where the ratio below would divide by 1 + cos(pi) = 0
            c = 1 - math.cos(math.pi / T)
            return [g["lr"] + (base - lo) * c / 2 for g, base in zip(groups, self.base_lrs)]
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [ratio * (g["lr"] - lo) + lo for g in groups]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin), as PyTorch's ``OneCycleLR`` with cosine annealing and
    two phases, learning rates only (momentum is not cycled): from ``max_lr / div_factor`` up
    to ``max_lr`` over the first ``pct_start`` of ``total_steps`` steps, then down to
    ``max_lr / div_factor / final_div_factor`` at the last step (and held there after it).
    Construction sets each group's ``lr`` to the starting value."""

    _hyper = ("total_steps", "max_lrs", "pct_start", "div_factor", "final_div_factor")

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | list[float],
        total_steps: int,
        pct_start: float = 0.3,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        last_epoch: int = -1,
    ):
        name = "OneCycleLR"
        self.total_steps = _positive_int(name, "total_steps", total_steps)
        n = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 1
        lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * n
        self.max_lrs = [_nonnegative(name, "max_lr", v) for v in lrs]
        self.pct_start = _nonnegative(name, "pct_start", pct_start)
        if not 0 < self.pct_start < 1:
            raise ValueError(f"{name}: pct_start must be in (0, 1), got {pct_start!r}")
        self.div_factor = _nonnegative(name, "div_factor", div_factor)
        self.final_div_factor = _nonnegative(name, "final_div_factor", final_div_factor)
        if self.div_factor <= 0 or self.final_div_factor <= 0:
            raise ValueError(f"{name}: div_factor and final_div_factor must be positive")
        if isinstance(optimizer, Optimizer) and last_epoch == -1:
            if len(self.max_lrs) != n:
                raise ValueError(f"{name}: {len(self.max_lrs)} max_lr values for {n} groups")
            for group, top in zip(optimizer.param_groups, self.max_lrs):
                group["lr"] = top / self.div_factor
                group["initial_lr"] = group["lr"]
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _cos(start: float, end: float, pct: float) -> float:
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    def _next_lrs(self) -> list[float]:
        t = min(self.last_epoch, self.total_steps - 1)
        up = float(self.pct_start * self.total_steps) - 1
        last = self.total_steps - 1
        out = []
        for top in self.max_lrs:
            low = top / self.div_factor
            floor = low / self.final_div_factor
            if t <= up:
                out.append(self._cos(low, top, t / up if up > 0 else 1.0))
            else:
                span = last - up
                out.append(self._cos(top, floor, (t - up) / span if span > 0 else 1.0))
        return out
