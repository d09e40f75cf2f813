"""Layers that only rearrange: ``Flatten``, ``Permute``, ``Reshape``."""

from __future__ import annotations

from ...autodiff import ops
from ...autodiff.tensor import Tensor
from ..module import Module
from ._check import fail


class Flatten(Module):
    """Merge the axes from ``start_axis`` (default 1, keeping the batch axis) to the end."""

    def __init__(self, start_axis: int = 1) -> None:
        super().__init__()
        self.start_axis = int(start_axis)

    def forward(self, x: Tensor) -> Tensor:
        if not -x.ndim <= self.start_axis < max(x.ndim, 1):
            fail(self, f"an input of rank > {self.start_axis}", x.shape)
        return ops.flatten(x, self.start_axis)

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}"


class Permute(Module):
    """Reorder axes: ``dims`` is a permutation of ALL axes, the batch axis included, so it
    normally starts with 0. For example ``Permute(0, 2, 1)`` turns embeddings ``(N, L, D)`` into
    Conv1d input ``(N, D, L)``."""

    def __init__(self, *dims: int) -> None:
        super().__init__()
        if len(dims) == 1 and not isinstance(dims[0], int):
            dims = tuple(dims[0])
        if sorted(dims) != list(range(len(dims))):
            raise ValueError(
                f"Permute: dims must be a permutation of 0..{len(dims) - 1}, got {dims}"
            )
        self.dims = tuple(int(d) for d in dims)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != len(self.dims):
            fail(self, f"an input of rank {len(self.dims)}", x.shape)
        return ops.permute(x, self.dims)

    def extra_repr(self) -> str:
        return ", ".join(str(d) for d in self.dims)


class Reshape(Module):
    """Reshape each sample to ``shape``, keeping the batch axis: ``(N, ...) -> (N, *shape)``.
    One entry of ``shape`` may be -1."""

    def __init__(self, *shape: int) -> None:
        super().__init__()
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        self.shape = tuple(int(s) for s in shape)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 1:
            fail(self, "an input with a batch axis", x.shape)
        known = 1
        for s in self.shape:
            known *= s if s != -1 else 1
        per_sample = 1
        for s in x.shape[1:]:
            per_sample *= s
        fits = known > 0 and per_sample % known == 0 if -1 in self.shape else per_sample == known
        if not fits or self.shape.count(-1) > 1:
            fail(self, f"(N, ...) with samples reshapeable to {self.shape}", x.shape)
        return ops.reshape(x, (x.shape[0], *self.shape))

    def extra_repr(self) -> str:
        return ", ".join(str(s) for s in self.shape)
