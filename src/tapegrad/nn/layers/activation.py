"""Activation layers: thin modules over the engine's elementwise and softmax functions."""

from __future__ import annotations

from ...autodiff import ops
from ...autodiff.tensor import Tensor
from ..module import Module


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Tanh(Module):
    """``tanh(x)``."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class Softmax(Module):
    """Softmax along ``axis`` (default the last)."""

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, x: Tensor) -> Tensor:
        return ops.softmax(x, self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class LogSoftmax(Softmax):
    """Log-softmax along ``axis`` (default the last), computed stably."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.log_softmax(x, self.axis)
