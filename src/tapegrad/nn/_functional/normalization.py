"""Normalisation: ``batch_norm`` (batch statistics and running statistics), ``layer_norm``,
``group_norm``.

``batch_norm`` in training mode is one primitive (``batch_norm_train``: compiled kernels, two
passes each way); the others compose primitives. Each normalises with the biased variance,
``(x - mean) / sqrt(var + eps)``, then applies an optional per-channel (or per-element, for
``layer_norm``) scale and shift. ``batch_norm`` in training mode also updates running statistics
in place with :func:`tapegrad.assign`, so a compiled step replays the update on every call:
``running = (1 - momentum) * running + momentum * batch_statistic``, with the unbiased batch
variance (``n / (n - 1)`` times the biased one) going into ``running_var``.
"""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import xp_of
from ...autodiff.errors import ShapeError
from ...autodiff.graph import no_grad
from ...autodiff.primitives.batch_norm import batch_moments, batch_norm_train
from ...autodiff.primitives.norm import layer_norm as _fused_layer_norm
from ...autodiff.tensor import Tensor

ArrayLike = Tensor | np.ndarray


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    """``(1, C, 1, ...)``: how a per-channel vector broadcasts against ``x (N, C, ...)``."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _affine(y: Tensor, weight, bias, shape) -> Tensor:
    if weight is not None:
        y = y * ops.reshape(weight, shape)
    if bias is not None:
        y = y + ops.reshape(bias, shape)
    return y


def _check_vector(op: str, name: str, v, c: int, x_shape) -> None:
    if v is not None and tuple(v.shape) != (c,):
        raise ShapeError(
            f"{op}: {name} must have shape ({c},) for input {tuple(x_shape)}, got {tuple(v.shape)}"
        )


def batch_norm(
    input: ArrayLike,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float | Tensor = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalisation of ``input (N, C, ...)`` per channel C.

    ``training=True`` normalises with the statistics of this batch (over N and every axis
    after C) and, if ``running_mean``/``running_var`` are given, updates them in place (see
    the module docstring; ``momentum`` may be a 0-d tensor, as ``BatchNorm`` passes for a
    cumulative average). ``training=False`` normalises with the running statistics.
    """
    x = _t(input)
    op = "batch_norm"
    if x.ndim < 2:
        raise ShapeError(f"{op}: input must be (N, C, ...), got shape {x.shape}")
    c = x.shape[1]
    for name, v in (("running_mean", running_mean), ("running_var", running_var)):
        _check_vector(op, name, v, c, x.shape)
    _check_vector(op, "weight", weight, c, x.shape)
    _check_vector(op, "bias", bias, c, x.shape)
    shape = _channel_shape(x)
    if training:
        n = x.size // max(c, 1)
        if n <= 1:
            raise ValueError(
                f"{op}: training needs more than 1 value per channel, got input {x.shape}"
            )
        xp = xp_of(x.data)
        w = weight if weight is not None else xp.ones(c, x.dtype)
        b = bias if bias is not None else xp.zeros(c, x.dtype)
        y = batch_norm_train(x, w, b, eps=float(eps))
        if running_mean is not None or running_var is not None:
            # the same statistics again (compiled plans fuse the two into one pass)
            with no_grad():
                mean, var = batch_moments(x)
                if running_mean is not None:
                    ops.assign(running_mean, running_mean * (1.0 - momentum) + mean * momentum)
                if running_var is not None:
                    unbiased = var * (n / (n - 1))
                    ops.assign(running_var, running_var * (1.0 - momentum) + unbiased * momentum)
        return y
    else:
        if running_mean is None or running_var is None:
            raise ValueError(
                f"{op}: evaluation (training=False) needs running_mean and running_var"
            )
        centred = x - ops.reshape(running_mean, shape)
        var = ops.reshape(running_var, shape)
    return _affine(centred * ops.rsqrt(var + eps), weight, bias, shape)


def layer_norm(
    input: ArrayLike,
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over the last ``len(normalized_shape)`` axes of ``input`` (which must equal
    ``normalized_shape``), then scale and shift elementwise by ``weight``/``bias`` of that
    shape."""
    x = _t(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or x.ndim < k or tuple(x.shape[x.ndim - k :]) != shape:
        raise ShapeError(f"layer_norm: input {x.shape} must end with normalized_shape {shape}")
    for name, v in (("weight", weight), ("bias", bias)):
        if v is not None and tuple(v.shape) != shape:
            raise ShapeError(f"layer_norm: {name} must have shape {shape}, got {tuple(v.shape)}")
    if weight is not None and bias is not None:  # the fused primitive, over one merged axis
        d = int(np.prod(shape, dtype=np.int64))
        lead = tuple(x.shape[: x.ndim - k])
        flat = (lambda t: ops.reshape(t, (d,))) if k > 1 else (lambda t: t)
        xf = ops.reshape(x, (*lead, d)) if k > 1 else x
        y = _fused_layer_norm(xf, flat(_t(weight)), flat(_t(bias)), eps=float(eps))
        return ops.reshape(y, x.shape) if k > 1 else y
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = ops.mean(x, axis=axes, keepdims=True)
    centred = x - mean
    var = ops.mean(centred * centred, axis=axes, keepdims=True)
    y = centred * ops.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def group_norm(
    input: ArrayLike,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Split the C channels of ``input (N, C, ...)`` into ``num_groups`` groups and normalise
    each group of each sample over its channels and positions; then a per-channel scale and
    shift."""
    x = _t(input)
    if x.ndim < 2:
        raise ShapeError(f"group_norm: input must be (N, C, ...), got shape {x.shape}")
    n, c = x.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ShapeError(
            f"group_norm: {c} channels of input {x.shape} do not split into {num_groups} groups"
        )
    _check_vector("group_norm", "weight", weight, c, x.shape)
    _check_vector("group_norm", "bias", bias, c, x.shape)
    g = ops.reshape(x, (n, num_groups, -1))
    mean = ops.mean(g, axis=2, keepdims=True)
    centred = g - mean
    var = ops.mean(centred * centred, axis=2, keepdims=True)
    y = ops.reshape(centred * ops.rsqrt(var + eps), x.shape)
    return _affine(y, weight, bias, _channel_shape(x))
