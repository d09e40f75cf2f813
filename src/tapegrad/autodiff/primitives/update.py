"""In-place updates of state tensors (running statistics, counters, hand-written parameter
updates): ``assign(target, value)`` writes ``value`` into ``target``'s array.

It is an operation like any other, so a compiled plan records it where it happens and every
replay repeats it (``effect=True``: never dropped as dead code, never reordered). The target is a
tensor made outside the computation (a module's buffer, a parameter under ``no_grad``); writing
into a tensor the recorded graph still needs, or into a leaf that requires grad while gradients
are being recorded, is refused, as it would change values a backward pass reads.
"""

from __future__ import annotations

import numpy as np

from . import samples as S
from .registry import Sample, primitive


def _assign_fwd(target, value):
    np.copyto(target, value, casting="same_kind")
    return target


def _assign_samples(rng):
    return [
        Sample((S.values(rng, (2, 3)), S.values(rng, (2, 3)))),
        Sample((S.values(rng, (2, 3)), S.values(rng, (3,)))),
        Sample((S.values(rng, (4,)), np.float64(1.5))),
    ]


_assign = primitive(
    "assign",
    _assign_fwd,
    None,
    reference=lambda target, value: np.broadcast_to(value, np.shape(target)).copy(),
    samples=_assign_samples,
    effect=True,
    doc="Write value (broadcast, same dtype kind) into target's array in place; returns target. "
    "Not differentiable; compiled plans replay it.",
)
