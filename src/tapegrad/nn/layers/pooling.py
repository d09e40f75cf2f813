"""Average pooling layers: ``AvgPool1d``, ``AvgPool2d``, ``AvgPool3d``, ``AdaptiveAvgPool1d``,
``AdaptiveAvgPool2d`` (max pooling lives with the convolutions, in ``conv.py``)."""

from __future__ import annotations

from ...autodiff.tensor import Tensor
from .. import functional as F
from ..module import Module
from ._check import fail


class _AvgPool(Module):
    """What AvgPool1d and AvgPool2d share: their settings, the rank check and the call."""

    _ranks: tuple[int, int] = (2, 3)
    _layout = ""

    def _keep(self, kernel_size, stride, padding, ceil_mode, count_include_pad) -> None:
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def _settings(self) -> tuple:
        return (self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def _check(self, x: Tensor) -> None:
        if x.ndim not in self._ranks:
            fail(self, f"input of shape {self._layout}", x.shape)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
            f"padding={self.padding}"
        )


class AvgPool1d(_AvgPool):
    """Mean over windows of ``kernel_size`` along L of ``(N, C, L)`` (or ``(C, L)``); see
    :func:`tapegrad.nn.functional.avg_pool1d`."""

    _ranks, _layout = (2, 3), "(N, C, L) or (C, L)"

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
    ) -> None:
        super().__init__()
        self._keep(kernel_size, stride, padding, ceil_mode, count_include_pad)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        return F.avg_pool1d(x, *self._settings())


class AvgPool2d(_AvgPool):
    """Mean over ``kernel_size`` windows of ``(N, C, H, W)`` (or ``(C, H, W)``); see
    :func:`tapegrad.nn.functional.avg_pool2d`."""

    _ranks, _layout = (3, 4), "(N, C, H, W) or (C, H, W)"

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode=False,
        count_include_pad=True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self._keep(kernel_size, stride, padding, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        return F.avg_pool2d(x, *self._settings(), self.divisor_override)


class AvgPool3d(AvgPool2d):
    """Mean over ``kernel_size`` windows of ``(N, C, D, H, W)`` (or ``(C, D, H, W)``); see
    :func:`tapegrad.nn.functional.avg_pool3d`."""

    _ranks, _layout = (4, 5), "(N, C, D, H, W) or (C, D, H, W)"

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        return F.avg_pool3d(x, *self._settings(), self.divisor_override)


class AdaptiveAvgPool1d(Module):
    """Average pooling of ``(N, C, L)`` to length ``output_size``; see
    :func:`tapegrad.nn.functional.adaptive_avg_pool1d`."""

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (2, 3):
            fail(self, "input of shape (N, C, L) or (C, L)", x.shape)
        return F.adaptive_avg_pool1d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    """Average pooling of ``(N, C, H, W)`` to ``output_size`` (an int, a pair, None to keep an
    axis); see :func:`tapegrad.nn.functional.adaptive_avg_pool2d`."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            fail(self, "input of shape (N, C, H, W) or (C, H, W)", x.shape)
        return F.adaptive_avg_pool2d(x, self.output_size)
