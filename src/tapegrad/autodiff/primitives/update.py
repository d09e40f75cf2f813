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


def assign(target, value):
    """Write ``value`` into ``target``'s array in place (broadcast to its shape; a float value
    must have target's dtype) and return ``target``. Compiled plans replay the write."""
    from ..errors import DTypeError, GraphError
    from ..graph import is_grad_enabled
    from ..tensor import Tensor

    if not isinstance(target, Tensor):
        raise TypeError(f"assign: the target must be a Tensor, got {type(target).__name__}")
    if target._node is not None:
        raise GraphError(
            f"assign: the target (shape {target.shape}) was computed by recorded operations, "
            f"whose backward pass may read it; assign into a leaf tensor (a buffer or parameter)"
        )
    if target.requires_grad and is_grad_enabled():
        raise GraphError(
            f"assign: the target (shape {target.shape}) requires grad; an in-place change to it "
            f"while gradients are recorded would corrupt them: wrap it in tg.no_grad()"
        )
    from ..inplace import _saved_by_graph

    if _saved_by_graph(target):
        raise GraphError(
            f"assign: the target's array (shape {target.shape}) was saved by a recorded "
            f"operation for its backward pass; writing into it would change that gradient. "
            f"Assign after backward(), or into a copy"
        )
    target_dtype = target.data.dtype
    if not isinstance(value, Tensor) and not isinstance(value, np.ndarray):
        value = np.asarray(value)
        if value.dtype.kind in "iuf" and np.can_cast(value, target_dtype, "same_kind"):
            value = value.astype(target_dtype)  # a Python number takes the target's dtype
    vdtype = value.dtype if not isinstance(value, Tensor) else value.data.dtype
    if not np.can_cast(vdtype, target_dtype, "same_kind") or (
        target_dtype.kind == "f" and vdtype.kind == "f" and vdtype != target_dtype
    ):
        hint = (
            " (tapegrad's arithmetic on integer tensors gives floats: b.add_(1) stays exact)"
            if target_dtype.kind in "iu"
            else ", cast it with .astype()"
        )
        raise DTypeError(f"assign: a {target_dtype} target cannot take a {vdtype} value{hint}")
    _assign(target, value)
    return target
