"""Convolutions, transposed convolutions, max pooling and max unpooling over NCL (1-D) and
NCHW (2-D) inputs, with PyTorch's arguments and weight layouts."""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import float_dtype
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init as _init
from ..module import Module
from ..parameter import Parameter
from ._check import check_input, named

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(v, d: int, name: str) -> tuple:
    if isinstance(v, (int, np.integer)):
        return (int(v),) * d
    t = tuple(int(a) for a in v)
    if len(t) != d:
        raise ValueError(f"{name} must be an int or {d} ints, got {v!r}")
    return t


def _pattern(d: int, channels) -> tuple:
    return ("N", channels, *{1: ("L",), 2: ("H", "W")}.get(d, ("D", "H", "W")))


def _make_parameters(layer, shape, bias, dtype, init, rng, device, name) -> None:
    """``layer.weight`` of ``shape`` and ``layer.bias`` (out_channels,) or None, initialised."""
    layer.weight = Parameter(np.empty(shape, dtype=float_dtype(dtype)))
    layer.bias = Parameter(np.zeros(layer.out_channels, dtype=float_dtype(dtype))) if bias else None
    _init.layer_init_(layer.weight, layer.bias, init, rng, name)
    if device is not None and str(device) != "cpu":
        raise ValueError(f"{name}: parameters are made on the CPU; got device {device!r}")


class _ConvNd(Module):
    d = 1

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
        *,
        init: str = "pytorch",
    ) -> None:
        super().__init__()
        d, name = self.d, type(self).__name__
        self.in_channels, self.out_channels, self.groups = (
            int(in_channels),
            int(out_channels),
            int(groups),
        )
        if self.groups < 1 or self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(
                f"{name}: groups={groups} must divide in_channels ({in_channels}) and "
                f"out_channels ({out_channels})"
            )
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"{name}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}"
            )
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"{name}: padding must be 'same', 'valid' or ints, got {padding!r}")
        self.kernel_size = _tuple(kernel_size, d, f"{name} kernel_size")
        self.stride = _tuple(stride, d, f"{name} stride")
        self.dilation = _tuple(dilation, d, f"{name} dilation")
        self.padding = (
            padding if isinstance(padding, str) else _tuple(padding, d, f"{name} padding")
        )
        if self.padding == "same" and any(s != 1 for s in self.stride):
            raise ValueError(f"{name}: padding='same' needs stride 1, got {self.stride}")
        self.padding_mode = padding_mode
        shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        _make_parameters(self, shape, bias, dtype, init, rng, device, name)

    def _pad_pairs(self) -> tuple:
        if self.padding == "valid":
            return ((0, 0),) * self.d
        if self.padding == "same":
            total = [dl * (k - 1) for dl, k in zip(self.dilation, self.kernel_size)]
            return tuple((t // 2, t - t // 2) for t in total)
        return tuple((p, p) for p in self.padding)

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, _pattern(self.d, self.in_channels), {1: self.in_channels})
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[self.d]
        padding = self._pad_pairs()
        if self.padding_mode != "zeros" and any(lo or hi for lo, hi in padding):
            mode = {"reflect": "reflect", "replicate": "replicate", "circular": "circular"}
            x = ops.pad(x, ((0, 0), (0, 0)) + padding, mode=mode[self.padding_mode])
            padding = ((0, 0),) * self.d
        with named(self):
            return conv(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
        s += f"stride={self.stride}, padding={self.padding}"
        if any(d != 1 for d in self.dilation):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode!r}"
        return s + f", bias={self.bias is not None}"


class Conv1d(_ConvNd):
    """1-D convolution (cross-correlation) of ``x (N, in_channels, L)``, PyTorch's arguments:
    ``weight (out_channels, in_channels/groups, kernel_size)``, ``bias (out_channels,)``;
    ``padding`` an int, ``'same'`` or ``'valid'``; ``padding_mode`` zeros, reflect, replicate
    or circular. Initialisation (``init=``): PyTorch's by default (weight and bias uniform in
    +-1/sqrt(fan_in), fan_in = in_channels/groups * kernel_size), ``"glorot"``: Xavier uniform
    weight, zero bias."""

    d = 1


class Conv2d(_ConvNd):
    """2-D convolution (cross-correlation) of ``x (N, in_channels, H, W)``; ``kernel_size``,
    ``stride``, ``padding``, ``dilation``: an int or a (height, width) pair (padding also
    ``'same'``/``'valid'``). ``weight (out_channels, in_channels/groups, KH, KW)``."""

    d = 2


class Conv3d(_ConvNd):
    """3-D convolution of ``x (N, in_channels, D, H, W)``: ``weight (out_channels,
    in_channels/groups, KD, KH, KW)``; arguments an int or a triple, as :class:`Conv2d`."""

    d = 3


class _ConvTransposeNd(Module):
    d = 1

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
        *,
        init: str = "pytorch",
    ) -> None:
        super().__init__()
        d, name = self.d, type(self).__name__
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode='zeros' is supported (as in PyTorch)")
        self.in_channels, self.out_channels, self.groups = (
            int(in_channels),
            int(out_channels),
            int(groups),
        )
        if self.groups < 1 or self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(
                f"{name}: groups={groups} must divide in_channels ({in_channels}) and "
                f"out_channels ({out_channels})"
            )
        self.kernel_size = _tuple(kernel_size, d, f"{name} kernel_size")
        self.stride = _tuple(stride, d, f"{name} stride")
        self.padding = _tuple(padding, d, f"{name} padding")
        self.output_padding = _tuple(output_padding, d, f"{name} output_padding")
        self.dilation = _tuple(dilation, d, f"{name} dilation")
        shape = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
        _make_parameters(self, shape, bias, dtype, init, rng, device, name)

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        check_input(self, x, _pattern(self.d, self.in_channels), {1: self.in_channels})
        extra = self.output_padding
        if output_size is not None:  # PyTorch's way of choosing output_padding
            size = tuple(int(v) for v in tuple(output_size)[-self.d :])
            least = tuple(
                (n - 1) * s - 2 * p + dl * (k - 1) + 1
                for n, s, p, dl, k in zip(
                    x.shape[2:], self.stride, self.padding, self.dilation, self.kernel_size
                )
            )
            extra = tuple(z - m for z, m in zip(size, least))
            if any(e < 0 or e >= max(s, dl) for e, s, dl in zip(extra, self.stride, self.dilation)):
                raise ValueError(
                    f"{self!r}: output_size {size} is not reachable from input {tuple(x.shape)} "
                    f"(between {least} and the stride more)"
                )
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[self.d]
        with named(self):
            return fn(
                x,
                self.weight,
                self.bias,
                self.stride,
                self.padding,
                extra,
                self.groups,
                self.dilation,
            )

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
        s += f"stride={self.stride}, padding={self.padding}"
        if any(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if any(d != 1 for d in self.dilation):
            s += f", dilation={self.dilation}"
        return s + f", bias={self.bias is not None}"


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution of ``x (N, in_channels, L)``, PyTorch's arguments:
    ``weight (in_channels, out_channels/groups, kernel_size)``; ``forward(x, output_size=None)``
    (``output_size`` picks ``output_padding``)."""

    d = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution of ``x (N, in_channels, H, W)``:
    ``weight (in_channels, out_channels/groups, KH, KW)``."""

    d = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-D convolution of ``x (N, in_channels, D, H, W)``:
    ``weight (in_channels, out_channels/groups, KD, KH, KW)``."""

    d = 3


class _MaxPoolNd(Module):
    d = 1

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices=False,
        ceil_mode=False,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.kernel_size = _tuple(kernel_size, self.d, f"{name} kernel_size")
        self.stride = (
            self.kernel_size if stride is None else _tuple(stride, self.d, f"{name} stride")
        )
        self.padding = _tuple(padding, self.d, f"{name} padding")
        self.dilation = _tuple(dilation, self.d, f"{name} dilation")
        self.return_indices, self.ceil_mode = bool(return_indices), bool(ceil_mode)

    def forward(self, x: Tensor):
        check_input(self, x, _pattern(self.d, "C"))
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[self.d]
        with named(self):
            return fn(
                x,
                self.kernel_size,
                self.stride,
                self.padding,
                self.dilation,
                self.ceil_mode,
                self.return_indices,
            )

    def extra_repr(self) -> str:
        one = self.d == 1  # PyTorch's MaxPool1d shows ints
        k, st, p, dl = (
            v[0] if one else v for v in (self.kernel_size, self.stride, self.padding, self.dilation)
        )
        s = f"kernel_size={k}, stride={st}"
        if any(self.padding):
            s += f", padding={p}"
        if any(d != 1 for d in self.dilation):
            s += f", dilation={dl}"
        if self.ceil_mode:
            s += ", ceil_mode=True"
        return s


class MaxPool1d(_MaxPoolNd):
    """Max over windows of ``kernel_size`` along L of ``x (N, C, L)``; ``stride`` defaults to
    ``kernel_size``; -inf ``padding``, ``dilation``, ``ceil_mode`` (else a partial window at the
    end is dropped) and ``return_indices`` (for MaxUnpool1d) as PyTorch."""

    d = 1


class MaxPool2d(_MaxPoolNd):
    """Max over ``kernel_size`` windows of ``x (N, C, H, W)`` (int or pair); ``stride``
    defaults to ``kernel_size``; padding, dilation, ceil_mode, return_indices as PyTorch."""

    d = 2


class MaxPool3d(_MaxPoolNd):
    """Max over ``kernel_size`` windows of ``x (N, C, D, H, W)`` (int or triple), as
    :class:`MaxPool2d`."""

    d = 3


class _MaxUnpoolNd(Module):
    d = 1

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        name = type(self).__name__
        self.kernel_size = _tuple(kernel_size, self.d, f"{name} kernel_size")
        self.stride = (
            self.kernel_size if stride is None else _tuple(stride, self.d, f"{name} stride")
        )
        self.padding = _tuple(padding, self.d, f"{name} padding")

    def forward(self, x: Tensor, indices, output_size=None) -> Tensor:
        fn = F.max_unpool1d if self.d == 1 else F.max_unpool2d
        with named(self):
            return fn(x, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The partial inverse of MaxPool1d: ``forward(x, indices, output_size=None)``."""

    d = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """The partial inverse of MaxPool2d: ``forward(x, indices, output_size=None)``."""

    d = 2
