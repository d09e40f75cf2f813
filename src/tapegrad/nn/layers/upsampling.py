"""``Upsample``: resize the spatial axes (nearest or linear), a module over
:func:`tapegrad.nn.functional.interpolate`."""

from __future__ import annotations

from ...autodiff.tensor import Tensor
from .. import functional as F
from ..module import Module


class Upsample(Module):
    """Resize ``(N, C, L)`` or ``(N, C, H, W)`` input to ``size`` or by ``scale_factor``;
    ``mode`` "nearest", "nearest-exact", "linear" or "bilinear" (``align_corners`` for the
    linear ones)."""

    def __init__(
        self,
        size=None,
        scale_factor=None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"
