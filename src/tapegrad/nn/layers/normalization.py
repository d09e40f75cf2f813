"""Normalisation layers: ``BatchNorm1d``, ``BatchNorm2d``, ``LayerNorm``, ``GroupNorm``.

Parameters and buffers carry PyTorch's names (``weight``, ``bias``, ``running_mean``,
``running_var``, ``num_batches_tracked``), so state dicts map 1:1. BatchNorm's running
statistics are buffers updated in place in training mode (by :func:`tapegrad.assign`, and the
batch counter by a recorded effect), so compiled steps update them exactly as eager ones do.
"""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import float_dtype
from ...autodiff.errors import ShapeError
from ...autodiff.plan import effect
from ...autodiff.tensor import Tensor
from .. import functional as F
from ..module import Module
from ..parameter import Parameter


def _check_device(name: str, device) -> None:
    if device is not None and str(device) != "cpu":
        raise ValueError(f"{name}: tapegrad runs on the CPU; got device {device!r}")


class _BatchNorm(Module):
    _layouts: dict[int, str] = {}

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        _check_device(name, device)
        if int(num_features) != num_features or num_features < 1:
            raise ValueError(f"{name}: num_features must be a positive int, got {num_features!r}")
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{name}: momentum must be in [0, 1] or None, got {momentum!r}")
        self.num_features = int(num_features)
        self.eps, self.momentum = float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        dtype = float_dtype(dtype)
        if self.affine:
            self.weight = Parameter(np.ones(self.num_features, dtype))
            self.bias = Parameter(np.zeros(self.num_features, dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", np.zeros(self.num_features, dtype))
            self.register_buffer("running_var", np.ones(self.num_features, dtype))
            self.register_buffer("num_batches_tracked", np.zeros((), np.int64))
        else:
            for b in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(b, None)

    def reset_running_stats(self) -> None:
        """Running mean 0, variance 1, no batches seen."""
        if self.track_running_stats:
            self.running_mean.data[...] = 0
            self.running_var.data[...] = 1
            self.num_batches_tracked.data[...] = 0

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._layouts or x.shape[1] != self.num_features:
            want = " or ".join(p.format(self.num_features) for p in self._layouts.values())
            raise ShapeError(f"{self!r}: expected input of shape {want}, got {tuple(x.shape)}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            counter = self.num_batches_tracked
            effect(lambda: np.add(counter.data, 1, out=counter.data), "num_batches_tracked += 1")
            if self.momentum is None:  # a cumulative average: 1 / batches seen, read each step
                factor = 1.0 / ops.astype(counter, x.dtype)
        use_batch = self.training or self.running_mean is None
        keep_stats = not self.training or self.track_running_stats
        return F.batch_norm(
            x,
            self.running_mean if keep_stats else None,
            self.running_var if keep_stats else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` input per channel C: training mode
    normalises with the batch's mean and (biased) variance and updates the running statistics
    (``running = (1 - momentum) * running + momentum * batch``, unbiased variance;
    ``momentum=None``: the cumulative average), evaluation mode uses the running statistics.
    ``affine``: a learned per-channel ``weight`` (1) and ``bias`` (0);
    ``track_running_stats=False``: batch statistics always, no buffers."""

    _layouts = {2: "(N, {})", 3: "(N, {}, L)"}


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``(N, C, H, W)`` input per channel C; see :class:`BatchNorm1d`."""

    _layouts = {4: "(N, {}, H, W)"}


class LayerNorm(Module):
    """Normalise each sample over its last axes ``normalized_shape`` (mean and biased
    variance), then an elementwise ``weight`` (1) and ``bias`` (0) of that shape
    (``elementwise_affine``; ``bias=False`` drops the shift)."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_device("LayerNorm", device)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        if not self.normalized_shape or min(self.normalized_shape) < 1:
            raise ValueError(f"LayerNorm: normalized_shape must be positive sizes, got {shape!r}")
        self.eps, self.elementwise_affine = float(eps), bool(elementwise_affine)
        dtype = float_dtype(dtype)
        if self.elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, dtype))
            self.bias = Parameter(np.zeros(self.normalized_shape, dtype)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if x.ndim < k or tuple(x.shape[x.ndim - k :]) != self.normalized_shape:
            dims = ", ".join(str(s) for s in self.normalized_shape)
            raise ShapeError(
                f"{self!r}: expected input of shape (..., {dims}), got {tuple(x.shape)}"
            )
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class GroupNorm(Module):
    """Split the ``num_channels`` channels into ``num_groups`` groups and normalise each group
    of each sample over its channels and positions; then a per-channel ``weight`` (1) and
    ``bias`` (0) when ``affine``."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_device("GroupNorm", device)
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                f"({num_groups})"
            )
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps, self.affine = float(eps), bool(affine)
        dtype = float_dtype(dtype)
        if self.affine:
            self.weight = Parameter(np.ones(self.num_channels, dtype))
            self.bias = Parameter(np.zeros(self.num_channels, dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(
                f"{self!r}: expected input of shape (N, {self.num_channels}, ...), got "
                f"{tuple(x.shape)}"
            )
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
