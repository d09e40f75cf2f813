"""Convolutions and max pooling over NCL (1-D) and NCHW (2-D) inputs."""

from __future__ import annotations

import numpy as np

from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from ._check import check_input, fail, pair


class Conv1d(Module):
    """1-D convolution (cross-correlation) of ``x (N, in_channels, L)``.

    ``weight (out_channels, in_channels, kernel_size)``, ``bias (out_channels,)``; output
    ``(N, out_channels, (L + 2*padding - kernel_size) // stride + 1)``. Initialisation:
    Xavier/Glorot uniform weight (fans include the kernel size), zero bias.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
        rng: np.random.Generator | None = None,
        dtype=np.float32,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.stride, self.padding = int(kernel_size), int(stride), int(padding)
        self.weight = Parameter(np.empty((out_channels, in_channels, kernel_size), dtype=dtype))
        init.xavier_uniform_(self.weight, rng=rng)
        self.bias = Parameter(np.zeros(out_channels, dtype=dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, ("N", self.in_channels, "L"), {1: self.in_channels})
        if x.shape[2] + 2 * self.padding < self.kernel_size:
            fail(self, f"length + 2*padding >= kernel_size {self.kernel_size}", x.shape)
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}"
        )


class Conv2d(Module):
    """2-D convolution (cross-correlation) of ``x (N, in_channels, H, W)``.

    ``kernel_size``, ``stride``, ``padding``: int or (height, width) pair.
    ``weight (out_channels, in_channels, KH, KW)``, ``bias (out_channels,)``. Initialisation:
    Xavier/Glorot uniform weight (fans include the kernel area), zero bias.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        bias: bool = True,
        rng: np.random.Generator | None = None,
        dtype=np.float32,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = pair(kernel_size, "Conv2d kernel_size")
        self.stride = pair(stride, "Conv2d stride")
        self.padding = pair(padding, "Conv2d padding")
        shape = (out_channels, in_channels, *self.kernel_size)
        self.weight = Parameter(np.empty(shape, dtype=dtype))
        init.xavier_uniform_(self.weight, rng=rng)
        self.bias = Parameter(np.zeros(out_channels, dtype=dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, ("N", self.in_channels, "H", "W"), {1: self.in_channels})
        (kh, kw), (ph, pw) = self.kernel_size, self.padding
        if x.shape[2] + 2 * ph < kh or x.shape[3] + 2 * pw < kw:
            fail(self, f"H, W + 2*padding >= kernel_size {self.kernel_size}", x.shape)
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}"
        )


class MaxPool1d(Module):
    """Max over windows of ``kernel_size`` along L of ``x (N, C, L)``; ``stride`` defaults to
    ``kernel_size``; a partial window at the end is dropped (floor)."""

    def __init__(self, kernel_size: int, stride: int | None = None) -> None:
        super().__init__()
        self.kernel_size = int(kernel_size)
        self.stride = self.kernel_size if stride is None else int(stride)

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, ("N", "C", "L"))
        if x.shape[2] < self.kernel_size:
            fail(self, f"length >= kernel_size {self.kernel_size}", x.shape)
        return F.max_pool1d(x, self.kernel_size, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class MaxPool2d(Module):
    """Max over ``kernel_size`` windows of ``x (N, C, H, W)`` (int or pair); ``stride`` defaults
    to ``kernel_size``; partial windows at the edges are dropped (floor)."""

    def __init__(self, kernel_size, stride=None) -> None:
        super().__init__()
        self.kernel_size = pair(kernel_size, "MaxPool2d kernel_size")
        self.stride = self.kernel_size if stride is None else pair(stride, "MaxPool2d stride")

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, ("N", "C", "H", "W"))
        if x.shape[2] < self.kernel_size[0] or x.shape[3] < self.kernel_size[1]:
            fail(self, f"H, W >= kernel_size {self.kernel_size}", x.shape)
        return F.max_pool2d(x, self.kernel_size, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"
