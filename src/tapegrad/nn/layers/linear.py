"""``Linear``: an affine map of the last axis."""

from __future__ import annotations

import numpy as np

from ...autodiff.backend import float_dtype
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init as _init
from ..module import Module
from ..parameter import Parameter
from ._check import fail


class Linear(Module):
    """``y = x @ weight.T + bias`` over the last axis of ``x (..., in_features)``.

    ``weight (out_features, in_features)``, ``bias (out_features,)`` — the layout PyTorch uses,
    so weights copy across 1:1. Initialisation (``init=``): ``"pytorch"`` (the default,
    PyTorch's: weight and bias uniform in +-1/sqrt(in_features)) or ``"glorot"`` (Xavier
    uniform weight, zero bias: the seed models'), drawn from ``rng`` (default: ``nn.init``'s
    seedable generator). ``device``: only ``"cpu"``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
        *,
        init: str = "pytorch",
    ) -> None:
        super().__init__()
        if device is not None and str(device) != "cpu":
            raise ValueError(f"Linear: parameters are made on the CPU; got device {device!r}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.weight = Parameter(np.empty((out_features, in_features), dtype=float_dtype(dtype)))
        self.bias = Parameter(np.zeros(out_features, dtype=float_dtype(dtype))) if bias else None
        _init.layer_init_(self.weight, self.bias, init, rng, "Linear")

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            fail(self, f"input of shape (..., {self.in_features})", x.shape)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )
