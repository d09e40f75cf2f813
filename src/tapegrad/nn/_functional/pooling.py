"""Average pooling, adaptive average pooling and resizing (``interpolate``).

All of them act on each spatial axis separately, so each is built from per-axis pieces that
depend only on shapes:

- pooling sums windows with a 0/1 *window matrix* ``A (out, in)`` per axis (``x @ A.T`` along
  the last axis, ``A @ x`` along the one before: two BLAS products, padding handled by leaving
  the padded positions out of ``A``), then divides by the window sizes. Windows that tile the
  axis exactly (``kernel_size == stride``, no padding) take a reshape and a mean instead.
- ``interpolate`` gathers source rows per axis with integer index arrays (nearest) or blends
  two gathered rows with per-position weights (linear), computing the source coordinates in
  the input's precision the way PyTorch's CPU kernels do, so indices agree exactly.

The index arrays, weights and matrices are constants of a compiled plan (they depend on the
shapes alone); the data flows through tapegrad operations, so gradients come for free.
"""

from __future__ import annotations

import math

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import beside
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor

ArrayLike = Tensor | np.ndarray


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _tuple(op: str, name: str, v, d: int, minimum: int) -> tuple[int, ...]:
    t = (v,) * d if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) == 1 and d > 1:
        t = t * d
    if len(t) != d or not all(isinstance(a, (int, np.integer)) and a >= minimum for a in t):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or {d} of them, got {v!r}")
    return tuple(int(a) for a in t)


def _check_input(op: str, x: Tensor, d: int) -> None:
    if x.ndim not in (d + 1, d + 2):
        layout = {1: "(N, C, L)", 2: "(N, C, H, W)"}.get(d, "(N, C, D, H, W)")
        raise ShapeError(f"{op}: input must be {layout} (or without N), got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: input must be floating point, got dtype {x.dtype}")


# -- average pooling ---------------------------------------------------------------------------
def _pool_windows(size: int, k: int, s: int, p: int, ceil_mode: bool, op: str):
    """Per output position along one axis: the clipped window [lo, hi) inside the input, and
    the window's length counting padding (``count_include_pad``) and without it."""
    span = size + 2 * p - k
    if span < 0:
        raise ShapeError(f"{op}: kernel {k} is larger than the padded input ({size} + 2*{p})")
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside
        out -= 1
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    with_pad = end - start
    lo, hi = np.maximum(start, 0), np.minimum(end, size)
    return lo, hi, with_pad, hi - lo


def _window_matrix(lo, hi, size: int, dtype) -> np.ndarray:
    pos = np.arange(size)
    return ((pos >= lo[:, None]) & (pos < hi[:, None])).astype(dtype)


def _sum_windows(x: Tensor, mats: list[np.ndarray]) -> Tensor:
    """Apply one window matrix per trailing axis: the last with ``x @ A.T``, the one before
    with ``A @ x``."""
    y = ops.matmul(x, beside(x, np.ascontiguousarray(mats[-1].T)))
    if len(mats) >= 2:
        y = ops.matmul(beside(x, mats[-2]), y)
    if len(mats) == 3:  # the depth axis: (..., D, H * W) from the left
        lead, (h, w) = y.shape[:-3], y.shape[-2:]
        y = ops.matmul(beside(x, mats[0]), ops.reshape(y, (*lead, y.shape[-3], h * w)))
        y = ops.reshape(y, (*lead, mats[0].shape[0], h, w))
    return y


def _avg_pool(op, x, d, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor):
    x = _t(x)
    if x.dtype.kind in "iu":  # PyTorch's integer mean: the float one truncated toward zero
        if x.dtype != np.int64:  # PyTorch averages int64 only
            from ...autodiff.errors import DTypeNotImplemented

            raise DTypeNotImplemented(f"{op}: integers must be int64, got {x.dtype}")
        args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)
        out = _avg_pool(op, x.detach().astype(np.float64), d, *args)
        return Tensor(np.trunc(out.data).astype(x.dtype))
    _check_input(op, x, d)
    k = _tuple(op, "kernel_size", kernel_size, d, 1)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else None
    s = s or _tuple(op, "stride", stride, d, 1)
    p = _tuple(op, "padding", padding, d, 0)
    if any(2 * pi > ki for pi, ki in zip(p, k)):
        raise ValueError(f"{op}: padding {p} must be at most half of kernel_size {k}")
    if divisor is not None and (int(divisor) != divisor or divisor == 0):
        raise ValueError(f"{op}: divisor_override must be a nonzero int, got {divisor!r}")
    sizes = x.shape[-d:]
    wins = [_pool_windows(n, ki, si, pi, ceil_mode, op) for n, ki, si, pi in zip(sizes, k, s, p)]
    outs = tuple(len(w[0]) for w in wins)
    if all(pi == 0 for pi in p) and k == s and divisor is None:
        # windows tile the axes exactly (a short last window only under ceil_mode)
        if all(o * ki == n for o, ki, n in zip(outs, k, sizes)):
            return _tiled_mean(x, d, k, outs)
        if not ceil_mode:
            cut = (Ellipsis,) + tuple(slice(0, o * ki) for o, ki in zip(outs, k))
            return _tiled_mean(x[cut], d, k, outs)
    mats = [_window_matrix(lo, hi, n, x.dtype) for (lo, hi, _, _), n in zip(wins, sizes)]
    if divisor is not None:
        div = np.full(outs, float(divisor))
    else:
        counts = [w[2] if count_include_pad else w[3] for w in wins]
        div = counts[0].astype(np.float64)
        for more in counts[1:]:
            div = np.multiply.outer(div, more)
    return _sum_windows(x, mats) / beside(x, div.astype(x.dtype))


def _tiled_mean(x: Tensor, d: int, k: tuple, outs: tuple) -> Tensor:
    lead = x.shape[:-d]
    split = lead + tuple(v for o, ki in zip(outs, k) for v in (o, ki))
    axes = tuple(len(lead) + 2 * i + 1 for i in range(d))
    return ops.mean(ops.reshape(x, split), axis=axes)


def avg_pool1d(
    input: ArrayLike,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over windows of ``kernel_size`` along L of ``input (N, C, L)``; ``stride``
    defaults to ``kernel_size``; ``padding`` zeros on both sides (at most half the kernel),
    counted in the divisor when ``count_include_pad``; ``ceil_mode`` keeps a last partial
    window (the output length rounds up)."""
    return _avg_pool(
        "avg_pool1d", input, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None
    )


def avg_pool3d(
    input: ArrayLike,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Mean over ``kernel_size`` windows of ``input (N, C, D, H, W)``: :func:`avg_pool1d` on
    the three axes (kernel, stride, padding an int or a triple)."""
    return _avg_pool(
        "avg_pool3d",
        input,
        3,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def avg_pool2d(
    input: ArrayLike,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Mean over ``kernel_size`` windows of ``input (N, C, H, W)``: :func:`avg_pool1d` on both
    axes (kernel, stride, padding an int or a pair); ``divisor_override`` divides every
    window's sum by that number instead of its size."""
    return _avg_pool(
        "avg_pool2d",
        input,
        2,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def _adaptive(op: str, x, d: int, output_size) -> Tensor:
    x = _t(x)
    _check_input(op, x, d)
    sizes = x.shape[-d:]
    req = (output_size,) * d if isinstance(output_size, (int, np.integer)) else tuple(output_size)
    if len(req) == 1 and d > 1:
        req = req * d
    if len(req) != d:
        raise ValueError(f"{op}: output_size must be an int or {d} of them, got {output_size!r}")
    outs = tuple(n if o is None else int(o) for o, n in zip(req, sizes))
    if any(o < 1 for o in outs) or any(n == 0 for n in sizes):
        raise ShapeError(f"{op}: output size {outs} from input {x.shape}: sizes must be >= 1")
    if all(n % o == 0 for n, o in zip(sizes, outs)):
        return _tiled_mean(x, d, tuple(n // o for n, o in zip(sizes, outs)), outs)
    mats, counts = [], []
    for n, o in zip(sizes, outs):
        i = np.arange(o)
        lo, hi = (i * n) // o, -((-(i + 1) * n) // o)  # floor(i n / o), ceil((i+1) n / o)
        mats.append(_window_matrix(lo, hi, n, x.dtype))
        counts.append((hi - lo).astype(np.float64))
    div = counts[0] if d == 1 else np.multiply.outer(counts[0], counts[1])
    return _sum_windows(x, mats) / beside(x, div.astype(x.dtype))


def adaptive_avg_pool1d(input: ArrayLike, output_size) -> Tensor:
    """Average pooling of ``input (N, C, L)`` to length ``output_size``: output position i
    averages ``[floor(i L / out), ceil((i + 1) L / out))``."""
    return _adaptive("adaptive_avg_pool1d", input, 1, output_size)


def adaptive_avg_pool2d(input: ArrayLike, output_size) -> Tensor:
    """Average pooling of ``input (N, C, H, W)`` to ``output_size`` (an int, a pair, or None
    for an axis to keep); windows as in :func:`adaptive_avg_pool1d` on each axis."""
    return _adaptive("adaptive_avg_pool2d", input, 2, output_size)


# -- interpolate -------------------------------------------------------------------------------
_MODES = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2, "trilinear": 3}


def _output_sizes(op, sizes, size, scale_factor, d):
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        outs = (size,) * d if isinstance(size, (int, np.integer)) else tuple(size)
        if len(outs) != d or not all(int(o) == o and o >= 1 for o in outs):
            raise ValueError(f"{op}: size must be {d} positive int(s) for this input, got {size!r}")
        return tuple(int(o) for o in outs), (None,) * d
    scales = (scale_factor,) * d if np.isscalar(scale_factor) else tuple(scale_factor)
    if len(scales) != d or not all(s > 0 for s in scales):
        raise ValueError(
            f"{op}: scale_factor must be {d} positive number(s) for this input, got "
            f"{scale_factor!r}"
        )
    outs = tuple(int(math.floor(n * float(s))) for n, s in zip(sizes, scales))
    if any(o < 1 for o in outs):
        raise ShapeError(f"{op}: scale_factor {scale_factor} makes an empty output from {sizes}")
    return outs, tuple(float(s) for s in scales)


def _nearest_index(n_in: int, n_out: int, scale, exact: bool) -> np.ndarray:
    """Source index of every output position (single precision, as PyTorch computes it)."""
    dst = np.arange(n_out)
    if not exact and n_out == n_in:
        return dst
    if not exact and n_out == 2 * n_in:
        return dst >> 1
    f = np.float32(1.0 / scale) if scale is not None else np.float32(n_in) / np.float32(n_out)
    pos = dst.astype(np.float32) + (np.float32(0.5) if exact else np.float32(0))
    return np.minimum(np.floor(pos * f).astype(np.int64), n_in - 1)


def _linear_weights(n_in: int, n_out: int, scale, align_corners: bool, dtype):
    """Per output position: the two source indices and their weights (in ``dtype``'s
    precision: source coordinates are computed as PyTorch computes them)."""
    t = np.dtype(dtype).type
    dst = np.arange(n_out).astype(dtype)
    if align_corners:
        ratio = t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
        src = ratio * dst
    else:
        ratio = t(1.0 / scale) if scale is not None else t(n_in) / t(n_out)
        src = np.maximum(ratio * (dst + t(0.5)) - t(0.5), t(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < n_in - 1)
    w1 = np.clip(src - i0.astype(dtype), t(0), t(1)).astype(dtype)
    w0 = (t(1) - w1).astype(dtype)
    return i0, i1, w0, w1


def _take(x: Tensor, axis: int, index: np.ndarray) -> Tensor:
    return x[(slice(None),) * axis + (beside(x, index),)]


def interpolate(
    input: ArrayLike,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> Tensor:
    """Resize the spatial axes of ``input`` (``(N, C, L)`` or ``(N, C, H, W)``) to ``size``,
    or by ``scale_factor`` (output ``floor(in * scale)``).

    ``mode``: "nearest" (source ``floor(dst * in / out)``), "nearest-exact"
    (``floor((dst + 0.5) * in / out)``), "linear" (3-D input) or "bilinear" (4-D input),
    which blend the two nearest source positions; ``align_corners=True`` maps the corner
    samples onto each other, False (the default) the corners of the pixel areas. A given
    ``scale_factor`` is used for the coordinates unless ``recompute_scale_factor`` (then
    ``in / out`` is).
    """
    x = _t(input)
    op = "interpolate"
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {sorted(_MODES)}, got {mode!r}")
    d = _MODES[mode] or x.ndim - 2
    if x.ndim - 2 not in (1, 2, 3) or x.ndim - 2 != d:
        want = {1: "3-D (N, C, L)", 2: "4-D (N, C, H, W)", 3: "5-D (N, C, D, H, W)"}.get(
            _MODES[mode], "3-D, 4-D or 5-D"
        )
        raise ShapeError(f"{op}: mode {mode!r} takes {want} input, got shape {x.shape}")
    if x.dtype.kind != "f" and not (x.dtype == np.uint8 and _MODES[mode] is None):
        from ...autodiff.errors import DTypeNotImplemented  # PyTorch: nearest of uint8 only

        raise DTypeNotImplemented(f"{op}: input must be floating point, got dtype {x.dtype}")
    if _MODES[mode] is None and align_corners is not None:
        raise ValueError(f"{op}: align_corners applies to the linear modes only, not {mode!r}")
    sizes = x.shape[2:]
    outs, scales = _output_sizes(op, sizes, size, scale_factor, d)
    if recompute_scale_factor:
        scales = (None,) * d
    y = x
    for k in reversed(range(d)):  # the last axis first, as PyTorch's separable kernels do
        axis, n_in, n_out = 2 + k, sizes[k], outs[k]
        if _MODES[mode] is None:
            idx = _nearest_index(n_in, n_out, scales[k], mode == "nearest-exact")
            if not np.array_equal(idx, np.arange(n_in)):
                y = _take(y, axis, idx)
            continue
        i0, i1, w0, w1 = _linear_weights(n_in, n_out, scales[k], bool(align_corners), x.dtype)
        shape = (n_out,) + (1,) * (y.ndim - axis - 1)
        w0, w1 = beside(x, w0.reshape(shape)), beside(x, w1.reshape(shape))
        y = _take(y, axis, i0) * w0 + _take(y, axis, i1) * w1
    return y
