"""3-D convolution and pooling of ``(N, C, D, H, W)``, composed from the 2-D and 1-D operations
(so gradients, second-order included, come from theirs):

- ``conv3d``: one ``conv2d`` per kernel depth tap over the depth slices it meets, summed;
- ``conv_transpose3d``: one ``conv_transpose2d`` per depth tap, spread along depth with the
  stride and summed, then cropped by the padding;
- ``max_pool3d``: max is separable: ``max_pool2d`` over (H, W), then ``max_pool1d`` over D
  (ties go to the first maximum in (d, h, w) order, as PyTorch's).
"""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.errors import DTypeError, ShapeError
from ...autodiff.tensor import Tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _triple(op: str, name: str, v, minimum: int) -> tuple:
    t = (v,) * 3 if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) != 3 or not all(isinstance(a, (int, np.integer)) and a >= minimum for a in t):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or 3 of them, got {v!r}")
    return tuple(int(a) for a in t)


def _pad_pairs(op: str, padding, kernel: tuple, dilation: tuple) -> tuple:
    """Padding as three (before, after) pairs: from an int, a triple, pairs or 'same'/'valid'."""
    if padding == "valid":
        return ((0, 0),) * 3
    if padding == "same":
        total = [dl * (k - 1) for dl, k in zip(dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in total)
    if not isinstance(padding, (int, np.integer)) and all(isinstance(p, tuple) for p in padding):
        return tuple((int(lo), int(hi)) for lo, hi in padding)
    return tuple((p, p) for p in _triple(op, "padding", padding, 0))


def _same_dtype(op: str, x: Tensor, w: Tensor) -> None:
    if x.dtype != w.dtype:
        raise DTypeError(
            f"{op}: input {x.dtype} and weight {w.dtype} differ; like PyTorch, {op} does not "
            "promote: cast one with .to() or .astype()"
        )


def _batched(op: str, x: Tensor) -> tuple[Tensor, bool]:
    """x as (N, C, D, H, W), and whether it came without N."""
    if x.ndim not in (4, 5):
        raise ShapeError(f"{op}: input must be (N, C, D, H, W) or (C, D, H, W), got {x.shape}")
    return (x[None], True) if x.ndim == 4 else (x, False)


def _depth_last_to_channels(y: Tensor, n: int, depth: int) -> Tensor:
    """(N * depth, O, H, W) -> (N, O, depth, H, W)."""
    y = ops.reshape(y, (n, depth, *y.shape[1:]))
    return ops.transpose(y, (0, 2, 1, 3, 4))


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """3-D convolution: ``x (N, C, D, H, W)``, ``weight (O, C/groups, KD, KH, KW)``; stride,
    padding, dilation: an int or a triple (padding also pairs, ``'same'``, ``'valid'``)."""
    op = "conv3d"
    x, unbatched = _batched(op, _t(x))
    w = _t(weight)
    _same_dtype(op, x, w)
    if w.ndim != 5:
        raise ShapeError(f"{op}: weight must be (O, C/groups, KD, KH, KW), got {w.shape}")
    s, dl = _triple(op, "stride", stride, 1), _triple(op, "dilation", dilation, 1)
    pads = _pad_pairs(op, padding, w.shape[2:], dl)
    if padding == "same" and s != (1, 1, 1):
        raise ValueError(f"{op}: padding='same' needs stride 1, got {s}")
    if x.shape[1] != w.shape[1] * groups:
        raise ShapeError(
            f"{op}: input {x.shape} has {x.shape[1]} channels, weight {w.shape} with "
            f"groups={groups} takes {w.shape[1] * groups}"
        )
    if any(pads[0]):
        x = ops.pad(x, ((0, 0), (0, 0), pads[0], (0, 0), (0, 0)))
    n, kd = x.shape[0], w.shape[2]
    depth = (x.shape[2] - dl[0] * (kd - 1) - 1) // s[0] + 1
    if depth < 1:
        raise ShapeError(f"{op}: kernel {w.shape[2:]} is deeper than the padded input {x.shape}")
    y = None
    for k in range(kd):
        start = k * dl[0]
        xs = x[:, :, start : start + s[0] * (depth - 1) + 1 : s[0]]
        xs = ops.reshape(
            ops.transpose(xs, (0, 2, 1, 3, 4)), (n * depth, *xs.shape[1:2], *xs.shape[3:])
        )
        part = ops.conv2d(xs, w[:, :, k], None, s[1:], pads[1:], dl[1:], groups)
        y = part if y is None else y + part
    y = _depth_last_to_channels(y, n, depth)
    if bias is not None:
        y = y + ops.reshape(_t(bias), (1, -1, 1, 1, 1))
    return y[0] if unbatched else y


def conv_transpose3d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
) -> Tensor:
    """Transposed 3-D convolution, PyTorch's arguments: ``weight (C_in, C_out/groups, KD, KH,
    KW)``; output depth ``(D - 1) * stride - 2 * padding + dilation * (KD - 1) + 1 +
    output_padding`` (and so for H, W)."""
    op = "conv_transpose3d"
    x, unbatched = _batched(op, _t(x))
    w = _t(weight)
    _same_dtype(op, x, w)
    if w.ndim != 5 or w.shape[0] != x.shape[1]:
        raise ShapeError(
            f"{op}: weight must be (C_in={x.shape[1]}, C_out/groups, KD, KH, KW), got {w.shape}"
        )
    s, dl = _triple(op, "stride", stride, 1), _triple(op, "dilation", dilation, 1)
    p, extra = _triple(op, "padding", padding, 0), _triple(op, "output_padding", output_padding, 0)
    n, depth, kd = x.shape[0], x.shape[2], w.shape[2]
    xs = ops.reshape(ops.transpose(x, (0, 2, 1, 3, 4)), (n * depth, x.shape[1], *x.shape[3:]))
    spread = (depth - 1) * s[0] + 1
    full = spread + dl[0] * (kd - 1) + extra[0]
    y = None
    for k in range(kd):
        part = ops.conv_transpose2d(xs, w[:, :, k], None, s[1:], p[1:], extra[1:], groups, dl[1:])
        part = ops.reshape(part, (n, depth, 1, *part.shape[1:]))
        if s[0] > 1:  # stride zeros between the depth slices
            part = ops.pad(part, ((0, 0), (0, 0), (0, s[0] - 1), (0, 0), (0, 0), (0, 0)))
        part = ops.reshape(part, (n, depth * s[0], *part.shape[3:]))[:, :spread]
        before = k * dl[0]
        part = ops.pad(part, ((0, 0), (before, full - before - spread), (0, 0), (0, 0), (0, 0)))
        y = part if y is None else y + part
    out_depth = full - 2 * p[0]
    if out_depth < 1:
        raise ShapeError(f"{op}: padding {p} leaves no output depth for input {x.shape}")
    y = ops.transpose(y[:, p[0] : p[0] + out_depth], (0, 2, 1, 3, 4))
    if bias is not None:
        y = y + ops.reshape(_t(bias), (1, -1, 1, 1, 1))
    return y[0] if unbatched else y


def max_pool3d(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """Max over ``kernel_size`` windows of ``x (N, C, D, H, W)``; ``stride`` defaults to the
    kernel; -inf padding, dilation, ceil_mode and ``return_indices`` (flat positions in each
    D*H*W input volume) as PyTorch."""
    op = "max_pool3d"
    x, unbatched = _batched(op, _t(x))
    k = _triple(op, "kernel_size", kernel_size, 1)
    s = k if stride is None else _triple(op, "stride", stride, 1)
    p, dl = _triple(op, "padding", padding, 0), _triple(op, "dilation", dilation, 1)
    n, c, d, h, w = x.shape
    planes = ops.reshape(x, (n, c * d, h, w))
    first = ops.max_pool2d(planes, k[1:], s[1:], p[1:], dl[1:], ceil_mode, return_indices)
    first, idx_hw = first if return_indices else (first, None)
    h2, w2 = first.shape[2:]
    rows = ops.reshape(ops.transpose(ops.reshape(first, (n, c, d, h2 * w2)), (0, 1, 3, 2)),
                       (n, c * h2 * w2, d))  # fmt: skip
    second = ops.max_pool1d(rows, k[0], s[0], p[0], dl[0], ceil_mode, return_indices)
    second, idx_d = second if return_indices else (second, None)
    d2 = second.shape[-1]
    y = ops.transpose(ops.reshape(second, (n, c, h2, w2, d2)), (0, 1, 4, 2, 3))
    if not return_indices:
        return y[0] if unbatched else y
    # the winning depth of each output, then the (h, w) position the first pass chose there
    dz = ops.transpose(ops.reshape(idx_d, (n, c, h2, w2, d2)), (0, 1, 4, 2, 3))
    hw = ops.gather(ops.reshape(idx_hw, (n, c, d, h2, w2)), 2, dz)
    idx = dz * (h * w) + hw
    return (y[0], idx[0]) if unbatched else (y, idx)
