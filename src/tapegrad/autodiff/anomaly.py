"""``detect_anomaly()``: find the first operation that produces a NaN or Inf.

Inside the context, every primitive remembers where it was called (the first frame outside
tapegrad, as ``file:line``), each forward output is checked, and during ``backward`` each
gradient a VJP rule returns is checked. The first non-finite value that a primitive produced
from finite inputs raises :class:`AnomalyError` naming the primitive, the input shapes and the
call site. It costs a pass over every array, so it is for debugging, not for training runs.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class AnomalyError(FloatingPointError):
    """A primitive produced a NaN or Inf from finite inputs (forward or backward)."""


class _Mode:
    enabled = False


def is_anomaly_enabled() -> bool:
    return _Mode.enabled


@contextlib.contextmanager
def detect_anomaly():
    """Context manager: raise at the first primitive whose forward or VJP creates a NaN/Inf."""
    prev, _Mode.enabled = _Mode.enabled, True
    try:
        yield
    finally:
        _Mode.enabled = prev


def call_site() -> str:
    """``file:line`` of the innermost frame outside the tapegrad package."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _finite(a) -> bool:
    return not (isinstance(a, np.ndarray) and a.dtype.kind in "fc" and not np.isfinite(a).all())


def _describe(arrays) -> str:
    return ", ".join(str(getattr(a, "shape", type(a).__name__)) for a in arrays)


def check_forward(prim, arrays, out, site: str) -> None:
    if _finite(out) or not all(_finite(a) for a in arrays):
        return
    what = "NaN" if np.isnan(out).any() else "Inf"
    raise AnomalyError(
        f"{prim.name} produced {what} in its forward pass from finite inputs "
        f"(input shapes: {_describe(arrays)}), called at {site}"
    )


def check_backward(node, g, grads) -> None:
    if not _finite(g):
        return
    for i, gi in enumerate(grads):
        if gi is not None and not _finite(gi):
            what = "NaN" if np.isnan(gi).any() else "Inf"
            raise AnomalyError(
                f"the backward of {node.prim.name} produced {what} in the gradient of input {i} "
                f"from a finite output gradient (input shapes: {_describe(node.inputs)}), "
                f"the {node.prim.name} was called at {node.site or '(not recorded)'}"
            )
