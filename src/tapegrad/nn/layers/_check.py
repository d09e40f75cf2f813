"""Input checks shared by the layers: a wrong rank or size raises ``ShapeError`` naming the
layer, the expected shape pattern and the actual shape, before anything is computed."""

from __future__ import annotations

import contextlib

from ...autodiff.errors import ShapeError


def check_input(layer, x, pattern: tuple, sizes: dict[int, int] | None = None) -> None:
    """Check ``x`` has rank ``len(pattern)`` and ``x.shape[axis] == size`` for ``sizes``.

    ``pattern`` spells the expected shape for the message, e.g. ``("N", 1, "H", "W")``.
    """
    shape = tuple(x.shape)
    ok = len(shape) == len(pattern) and all(shape[a] == s for a, s in (sizes or {}).items())
    if not ok:
        raise ShapeError(f"{layer!r}: expected input of shape {_fmt(pattern)}, got {shape}")


def fail(layer, expected: str, shape) -> None:
    """Raise the layer's ShapeError for a condition check_input cannot express."""
    raise ShapeError(f"{layer!r}: expected {expected}, got {tuple(shape)}")


@contextlib.contextmanager
def named(layer):
    """A ShapeError raised inside names the layer first (its repr: type and settings)."""
    try:
        yield
    except ShapeError as e:
        raise type(e)(f"{layer!r}: {e}") from None


def _fmt(pattern: tuple) -> str:
    return "(" + ", ".join(str(p) for p in pattern) + ")"


def pair(v, name: str) -> tuple[int, int]:
    """An int or a pair of ints as a pair (kernel sizes, strides, paddings)."""
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(a) for a in v)
    if len(t) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return t
