"""The Trainer's step with the optimiser inside it: the guard between ``backward()`` and the
updates that ends a step (eager, or a compiled replay) whose loss is not finite, and which
optimisers a plan can record."""

from __future__ import annotations

import math

from ..autodiff.primitives.registry import Primitive
from ..optim.optimizer import Optimizer


class NonFiniteLoss(Exception):
    """Raised inside a training step whose loss is not finite, before the optimiser step
    (what the step returns instead: the loss)."""

    def __init__(self, value: float):
        super().__init__(value)
        self.value = value


def _finite_or_stop(loss, out=None):
    """The loss (a 0-d array), or :class:`NonFiniteLoss` when it is NaN or infinite."""
    value = float(loss)
    if not math.isfinite(value):
        raise NonFiniteLoss(value)
    if out is None:
        return loss
    out[...] = loss
    return out


stop_unless_finite = Primitive(
    "stop_unless_finite",
    _finite_or_stop,
    None,
    effect=True,
    doc="The Trainer's guard between backward() and the optimiser step: raises when the loss "
    "is not finite, so neither an eager step nor a compiled replay updates with it.",
)


def updates_in_step(optimizer) -> bool:
    """Whether ``optimizer.step()`` can run inside the traced step: a tapegrad optimiser whose
    step is the per-parameter update primitives (which plans record), not one of its own
    (LBFGS's closure) or another library's object."""
    return isinstance(optimizer, Optimizer) and type(optimizer).step is Optimizer.step
