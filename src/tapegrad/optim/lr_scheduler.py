"""Learning-rate schedulers: they set ``group["lr"]`` of an optimiser once per ``step()``.

Call ``scheduler.step()`` after ``optimizer.step()`` (once per epoch or per batch, as the
schedule is meant). Each schedule is computed as PyTorch's is (most from the current ``lr``
recursively), so the sequences agree with it to the last bit; ``base_lrs`` are the groups'
``initial_lr`` (set on construction).

- ``StepLR``: times ``gamma`` every ``step_size`` steps.
- ``MultiStepLR``: times ``gamma`` at each of the ``milestones`` (a milestone listed twice
  multiplies twice).
- ``ExponentialLR``: times ``gamma`` every step.
- ``CosineAnnealingLR``: cosine from ``initial_lr`` down to ``eta_min`` over ``T_max`` steps.
- ``OneCycleLR``: up to ``max_lr`` and down far below it, over ``total_steps``, cycling
  momentum the other way (PyTorch's defaults).
- ``LambdaLR``: ``initial_lr * lr_lambda(epoch)``, a function per group (functions are not
  part of the state dict, as in PyTorch: the resumed scheduler is built with them again).
- ``ReduceLROnPlateau``: ``step(metric)``; times ``factor`` when the metric has not improved
  for ``patience`` steps.

Each has ``state_dict()`` (JSON-ready) and ``load_state_dict()``; loading sets the
optimiser's learning rates to the saved last ones, so a resumed run continues exactly.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

from .optimizer import Optimizer

__all__ = [
    "LRScheduler",
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "OneCycleLR",
    "LambdaLR",
    "ReduceLROnPlateau",
]


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

    def _initial_lrs(self) -> list[float]:
        """The learning rates construction sets: the groups' own, for a recursive schedule."""
        return [g["lr"] for g in self.optimizer.param_groups]

    def step(self) -> None:
        """Advance the schedule by one and write the new learning rates into the optimiser."""
        self._step_count += 1
        self.last_epoch += 1
        lrs = self._initial_lrs() if self._initial else self._next_lrs()
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


class MultiStepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` at each of the ``milestones`` (step counts; a
    milestone listed ``k`` times multiplies by ``gamma ** k``): ``lr = initial_lr * gamma **
    (number of milestones <= last_epoch)``. A milestone 0 applies on construction, as in
    PyTorch."""

    _hyper = ("milestones", "gamma")

    def __init__(
        self,
        optimizer: Optimizer,
        milestones: Iterable[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
    ):
        name = "MultiStepLR"
        if isinstance(milestones, (str, bytes)) or not isinstance(milestones, Iterable):
            raise TypeError(f"{name}: milestones must be a list of step counts, got {milestones!r}")
        ms = list(milestones)
        for m in ms:
            if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
                raise ValueError(f"{name}: milestones must be ints >= 0, got {m!r} in {ms!r}")
        self.milestones = sorted(int(m) for m in ms)
        self.gamma = _nonnegative(name, "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def _next_lrs(self) -> list[float]:
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        k = self.milestones.count(self.last_epoch)
        if k == 0:
            return lrs
        return [lr * self.gamma**k for lr in lrs]

    def _initial_lrs(self) -> list[float]:
        return self._next_lrs() if self.last_epoch == 0 else super()._initial_lrs()


class ExponentialLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every step: ``lr = initial_lr * gamma **
    last_epoch``."""

    _hyper = ("gamma",)

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = _nonnegative("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def _next_lrs(self) -> list[float]:
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]


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
    """The 1cycle policy (Smith & Topin), as PyTorch's ``OneCycleLR``: the learning rate goes
    from ``max_lr / div_factor`` up to ``max_lr`` over the first ``pct_start`` of the
    ``total_steps`` steps (or ``epochs * steps_per_epoch``), then down to ``max_lr /
    div_factor / final_div_factor`` at the last step (``three_phase``: back down to the start
    over a second ``pct_start``, then to the floor), annealed by cosine or linearly
    (``anneal_strategy``). With ``cycle_momentum`` (the default, as in PyTorch) the momentum
    (SGD's ``momentum``, Adam-like ``betas[0]``) moves the opposite way between
    ``max_momentum`` and ``base_momentum``; optimisers without either then raise. Construction
    sets each group's ``lr`` (and momentum) to the starting values; stepping past
    ``total_steps`` raises ``ValueError``, as PyTorch does."""

    _hyper = (
        "total_steps", "max_lrs", "pct_start", "div_factor", "final_div_factor",
        "anneal_strategy", "cycle_momentum", "base_momentums", "max_momentums", "three_phase",
    )  # fmt: skip

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        name = "OneCycleLR"
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError(f"{name}: give total_steps, or epochs and steps_per_epoch")
            total_steps = _positive_int(name, "epochs", epochs) * _positive_int(
                name, "steps_per_epoch", steps_per_epoch
            )
        self.total_steps = _positive_int(name, "total_steps", total_steps)
        n = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 1
        self.max_lrs = [_nonnegative(name, "max_lr", v) for v in _per_group(max_lr, n)]
        self.pct_start = _nonnegative(name, "pct_start", pct_start)
        if not 0 < self.pct_start < 1:
            raise ValueError(f"{name}: pct_start must be in (0, 1), got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"{name}: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.anneal_strategy, self.three_phase = anneal_strategy, bool(three_phase)
        self.div_factor = _nonnegative(name, "div_factor", div_factor)
        self.final_div_factor = _nonnegative(name, "final_div_factor", final_div_factor)
        if self.div_factor <= 0 or self.final_div_factor <= 0:
            raise ValueError(f"{name}: div_factor and final_div_factor must be positive")
        self.cycle_momentum = bool(cycle_momentum)
        self.base_momentums = [float(v) for v in _per_group(base_momentum, n)]
        self.max_momentums = [float(v) for v in _per_group(max_momentum, n)]
        if isinstance(optimizer, Optimizer) and self.cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    f"{name}: {type(optimizer).__name__} has neither momentum nor betas to "
                    f"cycle; pass cycle_momentum=False"
                )
        if isinstance(optimizer, Optimizer) and last_epoch == -1:
            for k in ("max_lr", "base_momentum", "max_momentum"):
                if len(getattr(self, k + "s")) != n:
                    raise ValueError(
                        f"{name}: {len(getattr(self, k + 's'))} {k} values for {n} groups"
                    )
            for group, top, m in zip(optimizer.param_groups, self.max_lrs, self.max_momentums):
                group["lr"] = top / self.div_factor
                group["initial_lr"] = group["lr"]
                if self.cycle_momentum:
                    _set_momentum(group, m)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "linear":
            return (end - start) * pct + start
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    def _phases(self, low: float, top: float, floor: float, m_low: float, m_top: float):
        """(end step, start lr, end lr, start momentum, end momentum) of each phase."""
        up = float(self.pct_start * self.total_steps) - 1
        last = float(self.total_steps - 1)
        if self.three_phase:
            down = float(2 * self.pct_start * self.total_steps) - 2
            return [(up, low, top, m_top, m_low), (down, top, low, m_low, m_top),
                    (last, low, floor, m_top, m_top)]  # fmt: skip
        return [(up, low, top, m_top, m_low), (last, top, floor, m_low, m_top)]

    def _next_lrs(self) -> list[float]:
        t = self.last_epoch
        if t > self.total_steps:
            raise ValueError(
                f"OneCycleLR: stepped {t} times, past total_steps={self.total_steps}; the cycle "
                f"is over (give more total_steps, or epochs and steps_per_epoch)"
            )
        out = []
        groups = self.optimizer.param_groups
        for g, top, m_low, m_top in zip(
            groups, self.max_lrs, self.base_momentums, self.max_momentums
        ):
            low = top / self.div_factor
            phases = self._phases(low, top, low / self.final_div_factor, m_low, m_top)
            begin = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(phases):
                if t <= end or i == len(phases) - 1:
                    pct = (t - begin) / (end - begin)
                    out.append(self._anneal(lr0, lr1, pct))
                    if self.cycle_momentum:
                        _set_momentum(g, self._anneal(m0, m1, pct))
                    break
                begin = end
        return out


def _per_group(v, n: int) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v] * n


def _set_momentum(group: dict, m: float) -> None:
    """Write a cycled momentum: ``betas[0]`` for Adam-like optimisers, else ``momentum``."""
    if "betas" in group:
        group["betas"] = (m, *tuple(group["betas"])[1:])
    else:
        group["momentum"] = m


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(last_epoch)``: ``lr_lambda`` is one function of the step
    count for every group, or a list with one per group (warm-up, custom decays). Construction
    sets ``initial_lr * lr_lambda(0)``. The functions are not in the state dict (as in
    PyTorch, which keeps only callable objects' attributes): build the resumed scheduler with
    the same functions, then load its state."""

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
        last_epoch: int = -1,
    ):
        name = "LambdaLR"
        n = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 1
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n:
            raise ValueError(f"{name}: {len(fns)} lr_lambda functions for {n} parameter groups")
        for i, f in enumerate(fns):
            if not callable(f):
                raise TypeError(
                    f"{name}: lr_lambda {i} is a {type(f).__name__}, expected a function of the "
                    "step count"
                )
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def _next_lrs(self) -> list[float]:
        out = []
        for gi, (f, base) in enumerate(zip(self.lr_lambdas, self.base_lrs)):
            factor = f(self.last_epoch)
            if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
                raise TypeError(
                    f"LambdaLR: lr_lambda({self.last_epoch}) for group {gi} returned "
                    f"{factor!r}, expected a number"
                )
            lr = base * float(factor)
            if not 0 <= lr < math.inf:
                raise ValueError(
                    f"LambdaLR: lr_lambda({self.last_epoch}) for group {gi} returned {factor!r}, "
                    f"giving lr {lr}; learning rates must be finite and >= 0"
                )
            out.append(lr)
        return out

    _initial_lrs = _next_lrs


def _count(name: str, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise ValueError(f"{name}: {key} must be an int >= 0, got {v!r}")
    return int(v)


class ReduceLROnPlateau(LRScheduler):
    """Multiply every group's learning rate by ``factor`` when the metric passed to
    ``step(metric)`` (a validation loss, an accuracy) has not improved for more than
    ``patience`` steps, then wait ``cooldown`` steps before counting again.

    ``mode="min"`` wants the metric lower, ``"max"`` higher; an improvement must beat the best
    by ``threshold``, relative (``threshold_mode="rel"``: below ``best * (1 - threshold)``,
    or above ``best * (1 + threshold)``) or absolute (``"abs"``: below ``best - threshold``,
    or above ``best + threshold``). Learning rates never go below ``min_lr`` (one number, or
    one per group), and a reduction smaller than ``eps`` is skipped. A NaN metric counts as
    no improvement. As PyTorch's, it does not set ``initial_lr``; ``get_last_lr()`` gives
    the rates after the last step. Its state dict holds ``best`` as a float (``inf`` before
    the first step: Python's ``json`` writes it as ``Infinity``).
    """

    _hyper = (
        "mode",
        "factor",
        "patience",
        "threshold",
        "threshold_mode",
        "cooldown",
        "min_lrs",
        "default_min_lr",
        "eps",
    )
    _progress = ("last_epoch", "best", "num_bad_epochs", "cooldown_counter", "last_lr")

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | list[float] = 0.0,
        eps: float = 1e-8,
    ):
        name = "ReduceLROnPlateau"
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected a tapegrad Optimizer, got {type(optimizer)}")
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError(f"{name}: {len(min_lr)} min_lr values for {n} parameter groups")
            default, min_lrs = None, list(min_lr)
        else:
            default, min_lrs = min_lr, [min_lr] * n
        self._configure(
            dict(
                mode=mode,
                factor=factor,
                patience=patience,
                threshold=threshold,
                threshold_mode=threshold_mode,
                cooldown=cooldown,
                min_lrs=min_lrs,
                default_min_lr=default,
                eps=eps,
            )
        )
        self.last_epoch = 0
        self._step_count = 0
        self.best = math.inf if self.mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _configure(self, hp: dict[str, Any], where: str = "") -> None:
        """Validate all the settings, then set them (so an error changes nothing)."""
        name = f"ReduceLROnPlateau{where}"
        if hp["mode"] not in ("min", "max"):
            raise ValueError(f"{name}: mode must be 'min' or 'max', got {hp['mode']!r}")
        if hp["threshold_mode"] not in ("rel", "abs"):
            raise ValueError(
                f"{name}: threshold_mode must be 'rel' or 'abs', got {hp['threshold_mode']!r}"
            )
        factor = _nonnegative(name, "factor", hp["factor"])
        if factor >= 1:
            raise ValueError(f"{name}: factor must be < 1 (it multiplies the lr), got {factor}")
        default = hp["default_min_lr"]
        out = dict(
            mode=hp["mode"],
            threshold_mode=hp["threshold_mode"],
            factor=factor,
            patience=_count(name, "patience", hp["patience"]),
            threshold=_nonnegative(name, "threshold", hp["threshold"]),
            cooldown=_count(name, "cooldown", hp["cooldown"]),
            eps=_nonnegative(name, "eps", hp["eps"]),
            default_min_lr=None if default is None else _nonnegative(name, "min_lr", default),
        )
        if not isinstance(hp["min_lrs"], list):
            raise ValueError(f"{name}: min_lrs must be a list, got {hp['min_lrs']!r}")
        out["min_lrs"] = [_nonnegative(name, "min_lr", v) for v in hp["min_lrs"]]
        for k, v in out.items():
            setattr(self, k, v)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, a: float) -> bool:
        best, th = self.best, self.threshold
        if self.mode == "min":
            return a < best * (1.0 - th) if self.threshold_mode == "rel" else a < best - th
        return a > best * (th + 1.0) if self.threshold_mode == "rel" else a > best + th

    def step(self, metric: Any) -> None:  # type: ignore[override]
        """Record one value of the watched metric (a number or a 0-d tensor), and reduce the
        learning rates if it has not improved for more than ``patience`` steps."""
        try:
            current = float(metric)
        except (TypeError, ValueError):
            raise TypeError(
                f"ReduceLROnPlateau.step: the metric must be a number (or a one-element "
                f"tensor), got {type(metric).__name__}"
            ) from None
        self._step_count += 1
        self.last_epoch += 1
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad steps during the cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _reduce(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise ValueError(
                    f"ReduceLROnPlateau: the optimiser has {len(groups)} parameter groups but "
                    f"min_lr gave {len(self.min_lrs)} (a group was added); set min_lrs to match"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, floor in zip(groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, floor)
            if old - new > self.eps:
                group["lr"] = new

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state: type, settings, step count, best metric, counters, last lrs."""
        sd: dict[str, Any] = {"type": "ReduceLROnPlateau", "step_count": self._step_count}
        sd.update({k: getattr(self, k) for k in self._hyper})
        sd["min_lrs"] = list(self.min_lrs)
        sd.update(
            last_epoch=self.last_epoch,
            best=self.best,
            num_bad_epochs=self.num_bad_epochs,
            cooldown_counter=self.cooldown_counter,
            last_lr=list(self._last_lr),
        )
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s values (validated first; on an error nothing changes)
        and set the optimiser's learning rates to the saved last ones."""
        name = "ReduceLROnPlateau.load_state_dict"
        expected = {"type", "step_count", *self._hyper, *self._progress}
        if not isinstance(state_dict, dict) or set(state_dict) != expected:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict)
            raise ValueError(f"{name}: expected keys {sorted(expected)}, got {got}")
        if state_dict["type"] != "ReduceLROnPlateau":
            raise ValueError(
                f"{name}: state dict is for {state_dict['type']!r}, not 'ReduceLROnPlateau'"
            )
        n = len(self.optimizer.param_groups)
        last = state_dict["last_lr"]
        if not isinstance(last, list) or len(last) != n:
            raise ValueError(f"{name}: last_lr must be a list of {n} learning rates, got {last!r}")
        best = state_dict["best"]
        if isinstance(best, bool) or not isinstance(best, numbers.Real):
            raise ValueError(f"{name}: best must be a number, got {best!r}")
        progress = {
            k: _count(name, k, state_dict[k])
            for k in ("step_count", "last_epoch", "num_bad_epochs", "cooldown_counter")
        }
        last_lrs = [_nonnegative(name, "last_lr", x) for x in last]
        self._configure({k: state_dict[k] for k in self._hyper}, where=".load_state_dict")
        self._step_count = progress["step_count"]
        self.last_epoch = progress["last_epoch"]
        self.num_bad_epochs = progress["num_bad_epochs"]
        self.cooldown_counter = progress["cooldown_counter"]
        self.best = float(best)
        self._last_lr = last_lrs
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr
