"""Convolutions (cross-correlation) of (N, C, L) sequences and (N, C, H, W) images with stride,
zero padding (per side, so asymmetric and ``'same'`` padding too), dilation and groups; their
transposes; their gradients.

Three primitives, each linear in each input, whose VJPs are written with one another, so a
convolution is differentiable to any order:

* ``conv(x, w[, b]) -> y``, weight (O, C/G, *K);
* ``conv_transpose(y, w[, b]) -> x``: the adjoint of ``conv`` in x (``conv_transpose1d/2d``);
* ``conv_weight(x, y) -> w``: the adjoint of ``conv`` in w.

Every gradient of a convolution, first order or higher, eager or compiled, is these adjoint
primitives (the bias's a sum): speed lives in their forwards. ``conv_weight`` reads the columns
(or padded input) conv's forward saved instead of recomputing them, and for the text CNN's
channels-last input with a sparse gradient (ReLU + max pooling) runs the direct kernel
(the namespace's ``conv_backward``, which visits only the gradient's nonzeros).

How they compute: im2col into ``cols``, then products with the flattened weight, in one of two
layouts chosen per shape (``conv_layout.py``: one batched product per sample for few input
channels, such as seed-cnn's single one; one GEMM over the whole batch from 16 channels per
group); ``cols`` is saved for the weight gradient. 1-d convolution at stride 1 without dilation
or groups skips im2col: one matmul per kernel tap on shifted views, or, for a channels-last
input, one GEMM of every tap with every input row whose products are then added at their
shifts. The input gradient is ``W^T @ g`` folded back (col2im). The bias is added in place.
"""

from __future__ import annotations

import numpy as np

from ..backend import is_array, xp_of
from ..errors import DTypeError, ShapeError
from ..kernels.dispatch import kernels_for
from . import conv_layout as L
from . import samples as S
from .args import plain
from .conv_reference import _conv_backward_reference, _conv_reference
from .linalg import matmul_into
from .registry import Sample, kernel_scratch, primitive, run, scratch


# -- geometry ----------------------------------------------------------------------------------
def out_size(size, k, stride, lo, hi, dilation) -> int:
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


_padded_shape, _interior = L.padded_shape, L.interior  # pool.py pads the same way


def _shifted(x, stride, dilation, groups) -> bool:
    # 1-d, stride 1: each kernel tap k is a plain matmul with the view xp[:, :, k:k+L'] (a valid
    # BLAS operand, rows just longer than L'), so no im2col copy is needed, and the backward
    # adds K (N, C, L') products instead of folding a K-times larger column gradient. Measured
    # on the text-CNN shape (64, 50, 130) * (8, 50, 3): forward 0.24 ms against 0.33 ms,
    # backward 0.95 ms against 1.6 ms.
    return x.ndim == 3 and stride == (1,) and dilation == (1,) and groups == 1


def _rows(x, padding) -> bool:
    """x (N, C, L) is a view of a contiguous (N, L, C) array (the text CNN's permuted embedding
    output) and unpadded: its (N * L, C) rows are one GEMM operand. Measured on the
    text-CNN shape (64, 50, 130) * (8, 50, 3), forward: 354 us per-tap, 206 us (1 thread) /
    131 us (2 threads) as one GEMM plus ``add_taps``."""
    return (
        x.shape[1] > 1
        and x.transpose(0, 2, 1).flags.c_contiguous
        and not any(lo or hi for lo, hi in padding)
    )


def _taps(w: np.ndarray, ws) -> np.ndarray:
    """Contiguous copies of the weight's taps (K, O, C): BLAS operands without a per-call copy
    inside matmul (the weight is updated in place, so they are refreshed every call)."""
    wk = scratch(ws, "taps", (w.shape[2],) + w.shape[:2], w.dtype, like=w)
    np.copyto(wk, np.moveaxis(w, 2, 0))
    return wk


def _channel_bias(r3, b) -> None:
    """``r3 += b[None, :, None]`` in place, by the compiled kernel of r3's device."""
    kernels_for(r3).add_channel_bias(r3, b, r3)


# -- conv --------------------------------------------------------------------------------------
def _conv_fwd(x, w, *bias, stride, padding, dilation, groups, out=None, ws=None):
    """(out, *saved): saved is the padded input (1-d, stride 1, padded), the im2col columns
    in the layout ``whole_batch`` picks for the shape otherwise, or nothing (1-d, stride 1,
    unpadded: x itself; or convolved image by image, ``L.by_image``, whose columns never
    outlive their image). ``conv_weight`` reads them back."""
    res, saved = (None, None) if out is None else (out[0], out[1] if len(out) > 1 else None)
    n, o = x.shape[0], w.shape[0]
    if _shifted(x, stride, dilation, groups) and _rows(x, padding):
        # channels-last input: the device's direct blocks where they take it (each image
        # turned channels-first as it is copied), else every tap's product at every position
        # in one GEMM, then the taps added at their shifts (one large product, not N small ones)
        k, length = w.shape[2], x.shape[2] - w.shape[2] + 1
        if res is None:
            res = xp_of(x).empty((n, o, length), x.dtype)
        if not kernels_for(x).conv_rows_forward(x, w, res, kernel_scratch(ws, x)):
            wk = _taps(w, ws).reshape(k * o, x.shape[1])
            z = scratch(ws, "z", (k * o, n * x.shape[2]), x.dtype, like=x)
            matmul_into(wk, x.transpose(0, 2, 1).reshape(-1, x.shape[1]).T, z)
            kernels_for(z).add_taps(z, res)
        kept = ()
    elif _shifted(x, stride, dilation, groups):
        xp = L.padded(x, padding, saved)
        length = xp.shape[2] - w.shape[2] + 1
        wk = _taps(w, ws)
        res = matmul_into(wk[0], xp[:, :, :length], res)
        tmp = scratch(ws, "tmp", res.shape, res.dtype, like=x)
        for k in range(1, w.shape[2]):
            np.add(res, matmul_into(wk[k], xp[:, :, k : k + length], tmp), out=res)
        kept = (xp,) if xp is not x else ()
    else:
        ksize = w.shape[2:]
        out_shape = tuple(
            out_size(s, k, st, lo, hi, d)
            for s, k, st, (lo, hi), d in zip(x.shape[2:], ksize, stride, padding, dilation)
        )
        if res is None:
            res = xp_of(x).empty((n, o) + out_shape, x.dtype)
        if L.by_image(x, w, groups) and res.flags.c_contiguous:
            kernels_for(x).conv_image_forward(
                x, w, res, stride, L.tops(padding), dilation, kernel_scratch(ws, x)
            )
            kept = ()
        elif L.few_channels(x, w, groups, stride, dilation) and res.flags.c_contiguous:
            kernels_for(x).conv_few_forward(x, w, res, L.tops(padding), kernel_scratch(ws, x))
            kept = ()
        else:
            batch = L.whole_batch(x, w.shape[1], len(ksize))
            if saved is None:
                saved = xp_of(x).empty(L.cols_shape(batch, x.shape, ksize, out_shape), x.dtype)
            cols = L.fill_cols(batch, x, ksize, stride, padding, dilation, out_shape, saved, ws)
            L.forward_product(batch, w, cols, res, groups, ws)
            kept = (cols,)
    if bias:
        r3 = res.reshape(n, o, -1)
        _channel_bias(r3, bias[0])
    return (res, *kept)


def _geometry(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("stride", "padding", "dilation", "groups")}


def _channels_last(x) -> bool:
    """Whether x (N, C, *spatial) is a view of a contiguous (N, *spatial, C) array (its
    gradient is then laid out so, where the direct kernel can write it)."""
    a = _data(x)
    return a.shape[1] > 1 and np.moveaxis(a, 1, -1).flags.c_contiguous


def _channel_sums(g):
    """The bias's gradient: g (N, C, *spatial) summed over the batch first (NumPy adds whole
    contiguous images), then over each channel's positions: 2-4x faster than NumPy's one
    reduction over (0, 2, ...) (text-cnn's (64, 8, 128): 26 -> 11 us; seed-cnn's (100, 6, 26,
    26): 82 -> 35; (128, 64, 14, 14): 407 -> 180)."""
    return g.sum(axis=0).sum(axis=tuple(range(1, g.ndim - 1)))


def _conv_vjp(g, out, needs, x, w, *bias, stride, padding, dilation, groups, aux):
    # One gradient in every mode: the adjoint primitives, whose forwards are the fast kernels.
    # ``aux`` (the columns or padded input the forward saved) is what conv_weight would
    # otherwise recompute from x.
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    grads = [
        run(conv_transpose, g, w, size=x.shape[2:], channels_last=_channels_last(x), **geo)
        if needs[0]
        else None,
        run(conv_weight, x, g, *aux, ksize=w.shape[2:], **geo) if needs[1] else None,
        _channel_sums(g) if bias and needs[2] else None,
    ]
    return grads[: 2 + len(bias)]


def _conv_cases(d):
    # (x shape, weight shape, bias?, stride, padding pairs, dilation, groups)
    one, two = ((0, 0),), ((0, 0), (0, 0))
    return {
        1: [
            ((2, 3, 7), (4, 3, 3), True, (1,), one, (1,), 1),
            ((1, 2, 9), (3, 2, 4), False, (2,), ((1, 1),), (1,), 1),
            ((3, 1, 5), (2, 1, 5), True, (1,), one, (1,), 1),
            ((2, 4, 8), (1, 4, 2), True, (3,), ((2, 2),), (1,), 1),
            ((1, 1, 1), (2, 1, 3), False, (1,), ((1, 1),), (1,), 1),
            ((2, 4, 9), (6, 2, 3), True, (1,), ((2, 0),), (2,), 2),  # groups, dilation
            ((1, 3, 8), (3, 1, 2), False, (1,), ((0, 1),), (1,), 3),  # depthwise, 'same'
            ((1, 16, 7), (2, 16, 3), False, (2,), ((1, 1),), (1,), 1),  # whole-batch layout
        ],
        2: [
            ((2, 3, 5, 6), (4, 3, 3, 3), True, (1, 1), two, (1, 1), 1),
            ((1, 2, 7, 9), (3, 2, 3, 2), False, (2, 2), ((1, 1), (1, 1)), (1, 1), 1),
            ((2, 1, 6, 5), (2, 1, 2, 3), True, (2, 1), ((0, 0), (1, 1)), (1, 1), 1),
            ((1, 3, 4, 4), (2, 3, 4, 4), True, (1, 1), two, (1, 1), 1),
            ((2, 2, 5, 5), (1, 2, 1, 1), False, (3, 2), ((2, 2), (0, 0)), (1, 1), 1),
            ((1, 4, 7, 6), (4, 2, 2, 3), True, (1, 2), ((1, 0), (0, 2)), (2, 1), 2),
            # 16 input channels: the whole-batch layout
            ((1, 16, 4, 3), (2, 16, 2, 2), True, (1, 1), ((1, 0), (0, 1)), (1, 1), 1),
        ],
    }[d]


def _conv_samples(d):
    def build(rng):
        out = []
        for xs, ws, has_bias, stride, padding, dilation, groups in _conv_cases(d):
            args = (S.values(rng, xs), S.values(rng, ws))
            if has_bias:
                args += (S.values(rng, (ws[0],)),)
            attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
            out.append(Sample(args, attrs))
        return out

    return build


_conv1d = primitive(
    "conv1d",
    _conv_fwd,
    _conv_vjp,
    reference=_conv_reference,
    samples=_conv_samples(1),
    aux=True,
    doc="1-d cross-correlation of (N, C, L) with (O, C/G, K) (+ bias (O,)), with stride, zero "
    "padding per side, dilation and groups; one matmul per kernel tap at stride 1, im2col + "
    "batched matmuls otherwise.",
)
_conv2d = primitive(
    "conv2d",
    _conv_fwd,
    _conv_vjp,
    reference=_conv_reference,
    samples=_conv_samples(2),
    aux=True,
    doc="2-d cross-correlation of (N, C, H, W) with (O, C/G, KH, KW) (+ bias (O,)), with "
    "stride, zero padding per side, dilation and groups; im2col + batched matmuls.",
)


# -- the direct kernel's choice -------------------------------------------------------------------
def direct_backward_applies(x, w, stride, padding, dilation=None, groups=1) -> bool:
    """Whether a conv's weight gradient may go through the direct kernel (``conv_backward`` of
    x's kernel namespace; ``kernels/cpu/conv.py``): stride 1, no padding, dilation or groups,
    and a layout the namespace's ``direct_layout_ok`` takes (on the CPU a channels-last input,
    the text CNN's permuted embedding output, whose windows are long contiguous runs, KW * C >=
    16, the kernel's loops vectorise over; a device without the kernel takes none)."""
    return (
        all(s == 1 for s in stride)
        and not any(lo or hi for lo, hi in padding)
        and (dilation is None or all(d == 1 for d in dilation))
        and groups == 1
        and kernels_for(x).direct_layout_ok(x, w)
    )


def direct_backward_sparse(g) -> bool:
    """The per-call half of the choice: the direct kernel skips zero entries of g, so it wins
    when at most a quarter are nonzero (ReLU + max pooling leave 1/KW of them; measured on the
    text-CNN shape: 0.36 ms at 1/8 nonzero, 2.1 ms dense, against 1.1 ms with BLAS)."""
    return 4 * np.count_nonzero(g) <= g.size


# -- the transpose and the weight gradient: differentiable -----------------------------------------
def _conv_transpose_fwd(
    y, w, *bias, size, stride, padding, dilation, groups, channels_last=False, out=None, ws=None
):
    """x of spatial ``size`` with ``conv(x, w)``'s adjoint applied to y: col2im(W^T y), or for a
    1-d stride-1 convolution one product per kernel tap added at its shift. ``channels_last``
    (a conv's input gradient where that input was channels-last, the text CNN's permuted
    embeddings): the result laid out so, and a sparse y through the direct kernel."""
    n = y.shape[0]
    c = w.shape[1] * groups
    shape = (n, c) + tuple(size)
    if out is not None:
        res = out
    elif channels_last:
        last = xp_of(y).empty((n,) + tuple(size) + (c,), y.dtype)
        res = last.transpose((0, last.ndim - 1) + tuple(range(1, last.ndim - 1)))
    else:
        res = xp_of(y).empty(shape, y.dtype)
    if (
        channels_last
        and direct_backward_applies(res, w, stride, padding, dilation, groups)
        and direct_backward_sparse(y)
    ):
        # res stands for the input's layout (the kernel reads x only for the weight gradient)
        kernels_for(y).conv_backward(
            xp_of(y).ascontiguousarray(y), res, w, None, None, res, kernel_scratch(ws, y)
        )
    elif _shifted(y, stride, dilation, groups):
        pads = any(lo or hi for lo, hi in padding)
        target = scratch(ws, "xp", L.padded_shape(shape, padding), y.dtype, like=y) if pads else res
        target.fill(0)
        length = y.shape[2]
        wk = _taps(w, ws)
        tmp = scratch(ws, "gxtmp", (n, c, length), y.dtype, like=y)
        add_into = kernels_for(y).add_into
        for k in range(w.shape[2]):
            add_into(target[:, :, k : k + length], matmul_into(wk[k].T, y, tmp))
        if target is not res:
            np.copyto(res, target[L.interior(padding, shape)])
    elif L.by_image(y, w, groups) and res.flags.c_contiguous:
        kernels_for(y).conv_image_input(
            y, w, res, stride, L.tops(padding), dilation, kernel_scratch(ws, y)
        )
    else:
        batch = L.whole_batch(y, w.shape[1], len(size))
        L.input_product(batch, y, w, res, stride, padding, dilation, groups, ws)
    if bias and res.flags.c_contiguous:
        _channel_bias(res.reshape(n, c, -1), bias[0])
    elif bias:
        np.add(res, bias[0].reshape((c,) + (1,) * len(size)), out=res)
    return res


def _conv_transpose_vjps():
    def dy(h, out, y, w, *bias, size, stride, padding, dilation, groups, **_):
        return run(
            _conv_for(y), h, w, stride=stride, padding=padding, dilation=dilation, groups=groups
        )

    def dw(h, out, y, w, *bias, size, stride, padding, dilation, groups, **_):
        return run(
            conv_weight,
            h,
            y,
            ksize=w.shape[2:],
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )

    def db(h, out, y, w, *bias, size, stride, padding, dilation, groups, **_):
        return _channel_sums(h)

    return (dy, dw, db)


def _conv_for(a):
    return _conv1d if a.ndim == 3 else _conv2d


def _conv_weight_fwd(x, g, *saved, ksize, stride, padding, dilation, groups, out=None, ws=None):
    """The weight's gradient of ``conv(x, w)`` for the output gradient g (O, C/G, *ksize).
    ``saved``: what conv's forward saved for this x (its columns, or its padded input), which
    saves computing them again; it must be that, and is not differentiated (x is)."""
    o = g.shape[1]
    gw = xp_of(g).empty((o, x.shape[1] // groups) + tuple(ksize), g.dtype) if out is None else out
    if direct_backward_applies(x, gw, stride, padding, dilation, groups) and direct_backward_sparse(
        g
    ):
        kernels_for(g).conv_backward(
            xp_of(g).ascontiguousarray(g),
            x,
            gw,  # the weight's shape (the kernel reads the weight only for the input gradient)
            gw,
            None,
            None,
            kernel_scratch(ws, g),
        )
        return gw
    if _shifted(x, stride, dilation, groups):
        xp = saved[0] if saved else L.padded(x, padding, None)
        length = g.shape[2]
        tmp = scratch(ws, "gwtmp", (g.shape[0], o, x.shape[1]), g.dtype, like=g)
        for k in range(ksize[0]):
            np.sum(
                matmul_into(g, xp[:, :, k : k + length].transpose(0, 2, 1), tmp),
                axis=0,
                out=gw[:, :, k],
            )
        return gw
    if L.by_image(x, gw, groups) and gw.flags.c_contiguous:
        kernels_for(g).conv_image_weight(
            x, g, gw, stride, L.tops(padding), dilation, kernel_scratch(ws, g)
        )
        return gw
    if L.few_channels(x, gw, groups, stride, dilation):
        kernels_for(g).conv_few_weight(x, g, gw, L.tops(padding), kernel_scratch(ws, g))
        return gw
    batch = L.whole_batch(x, x.shape[1] // groups, len(ksize))
    if saved:
        (cols,) = saved
    else:
        shape = L.cols_shape(batch, x.shape, ksize, g.shape[2:])
        cols = scratch(ws, "cols", shape, x.dtype, like=x)
        L.fill_cols(batch, x, ksize, stride, padding, dilation, g.shape[2:], cols, ws)
    L.weight_product(batch, g, cols, gw, groups, ws)
    return gw


def _conv_weight_vjps():
    def dx(h, out, x, g, *saved, ksize, stride, padding, dilation, groups):
        return run(
            conv_transpose,
            g,
            h,
            size=x.shape[2:],
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )

    def dg(h, out, x, g, *saved, ksize, stride, padding, dilation, groups):
        return run(
            _conv_for(x), x, h, stride=stride, padding=padding, dilation=dilation, groups=groups
        )

    return (dx, dg)


def _adjoint_samples(rng, which):
    out = []
    for d in (1, 2):
        for xs, ws, has_bias, stride, padding, dilation, groups in _conv_cases(d):
            geo = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
            x, w = S.values(rng, xs), S.values(rng, ws)
            y_shape = (
                (xs[0], ws[0])
                + tuple(  # the forward's output, not run (no kernel compiles)
                    out_size(n, k, s, lo, hi, dl)
                    for n, k, s, (lo, hi), dl in zip(xs[2:], ws[2:], stride, padding, dilation)
                )
            )
            if which == "transpose":
                args = (S.values(rng, y_shape), w) + (
                    (S.values(rng, (xs[1],)),) if has_bias else ()
                )
                out.append(Sample(args, {"size": xs[2:], **geo}))
            else:
                out.append(Sample((x, S.values(rng, y_shape)), {"ksize": ws[2:], **geo}))
    # the direct kernel: a channels-last input (C * KW >= 16) and a gradient at most a quarter
    # nonzero; the transpose laid out channels-last
    x = np.ascontiguousarray(S.values(rng, (2, 9, 8))).transpose(0, 2, 1)  # (N, C=8, L=9)
    g = S.values(rng, (2, 3, 7)) * (rng.uniform(size=(2, 3, 7)) < 0.2)
    geo = dict(stride=(1,), padding=((0, 0),), dilation=(1,), groups=1)
    if which == "transpose":
        attrs = {"size": (9,), "channels_last": True, **geo}
        out.append(Sample((g, S.values(rng, (3, 8, 3)), S.values(rng, (8,))), attrs))
    else:
        out.append(Sample((x, g), {"ksize": (3,), **geo}))
    return out


def _conv_transpose_reference(
    y, w, *bias, size, stride, padding, dilation, groups, channels_last=False
):
    n = y.shape[0]
    x_shape = (n, w.shape[1] * groups) + tuple(size)
    (gx,) = _conv_backward_reference(
        y,
        np.zeros(x_shape),
        w,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        needs=(True, False, False),
    )
    if bias:
        gx = gx + bias[0].reshape((-1,) + (1,) * len(size))
    return gx


def _conv_weight_reference(x, g, ksize, stride, padding, dilation, groups):
    w = np.zeros((g.shape[1], x.shape[1] // groups) + tuple(ksize))
    (gw,) = _conv_backward_reference(
        g,
        x,
        w,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        needs=(False, True, False),
    )
    return gw


conv_transpose = primitive(
    "conv_transpose",
    _conv_transpose_fwd,
    _conv_transpose_vjps(),
    reference=_conv_transpose_reference,
    samples=lambda rng: _adjoint_samples(rng, "transpose"),
    doc="The transposed convolution (the adjoint of conv in its input): y (N, O, *out) with a "
    "conv weight (O, C/G, *K) (+ bias (C,)) to (N, C, *size); its VJPs are conv and "
    "conv_weight.",
)
conv_weight = primitive(
    "conv_weight",
    _conv_weight_fwd,
    _conv_weight_vjps(),
    reference=_conv_weight_reference,
    samples=lambda rng: _adjoint_samples(rng, "weight"),
    doc="A convolution's weight gradient (the adjoint of conv in its weight) from its input x "
    "and output gradient g; its VJPs are conv_transpose and conv.",
)


# -- the public functions ---------------------------------------------------------------------
def _data(x):
    return plain(x)


def _tuple_arg(op: str, name: str, value, d: int, minimum: int) -> tuple:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value),) * d
    else:
        try:
            value = tuple(value)
        except TypeError:
            value = None
        if (
            value is None
            or len(value) != d
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)
        ):
            want = "an int" if d == 1 else f"an int or a tuple of {d} ints"
            raise ShapeError(f"{op}: {name} must be {want}, got {value!r}")
        value = tuple(int(v) for v in value)
    if any(v < minimum for v in value):
        raise ShapeError(f"{op}: {name} must be >= {minimum}, got {value}")
    return value


def _check_float(op: str, name: str, a) -> np.ndarray:
    a = _data(a)
    if not is_array(a) or a.dtype.kind != "f":
        got = a.dtype if is_array(a) else type(a).__name__
        raise DTypeError(f"{op}: {name} must be a float array or Tensor, got {got}")
    return a


def _check_rank(op: str, name: str, a: np.ndarray, rank: int, layout: str) -> None:
    if a.ndim != rank:
        raise ShapeError(f"{op}: {name} must have rank {rank} {layout}, got shape {a.shape}")


def _padding_pairs(op: str, padding, d: int, ksize, stride, dilation) -> tuple:
    """PyTorch's padding argument (an int, one int per dimension, 'valid' or 'same') or one
    (before, after) pair per dimension, as pairs."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * d
        if padding != "same":
            raise ShapeError(f"{op}: padding must be 'valid', 'same' or ints, got {padding!r}")
        if any(s != 1 for s in stride):
            raise ShapeError(f"{op}: padding='same' needs stride 1, got stride {stride}")
        total = [dl * (k - 1) for dl, k in zip(dilation, ksize)]
        return tuple((t // 2, t - t // 2) for t in total)  # the odd one on the far side
    if (
        isinstance(padding, (tuple, list))
        and padding
        and all(isinstance(p, (tuple, list)) for p in padding)
    ):
        pairs = tuple(tuple(int(v) for v in p) for p in padding)
        if len(pairs) != d or any(len(p) != 2 or min(p) < 0 for p in pairs):
            raise ShapeError(
                f"{op}: padding pairs must be {d} (before, after) pairs >= 0, got {padding!r}"
            )
        return pairs
    return tuple((p, p) for p in _tuple_arg(op, "padding", padding, d, 0))


def _layout(d: int, weight: bool) -> str:
    spatial = ("L",) if d == 1 else ("H", "W")
    if weight:
        return "(O, C/groups, " + ", ".join("K" + s for s in spatial) + ")"
    return "(N, C, " + ", ".join(spatial) + ")"


def _bias_arg(op, bias, channels):
    if bias is None:
        return ()
    ba = _check_float(op, "bias", bias)
    if ba.shape != (channels,):
        raise ShapeError(
            f"{op}: bias must have shape ({channels},) (one per output channel), got {ba.shape}"
        )
    return (bias,)


def _conv(op: str, d: int, x, weight, bias, stride, padding, dilation, groups):
    xa, wa = _check_float(op, "x", x), _check_float(op, "weight", weight)
    _check_rank(op, "x", xa, d + 2, _layout(d, False))
    _check_rank(op, "weight", wa, d + 2, _layout(d, True))
    groups = int(groups)
    if groups < 1 or xa.shape[1] % groups or wa.shape[0] % groups:
        raise ShapeError(
            f"{op}: groups={groups} must divide the input channels ({xa.shape[1]}) and the "
            f"output channels ({wa.shape[0]})"
        )
    if xa.shape[1] != wa.shape[1] * groups:
        raise ShapeError(
            f"{op}: weight {wa.shape} with groups={groups} expects {wa.shape[1] * groups} input "
            f"channels, x {xa.shape} has {xa.shape[1]}"
        )
    stride = _tuple_arg(op, "stride", stride, d, 1)
    dilation = _tuple_arg(op, "dilation", dilation, d, 1)
    ksize = wa.shape[2:]
    padding = _padding_pairs(op, padding, d, ksize, stride, dilation)
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(xa.shape[2:], padding))
    reach = tuple(dl * (k - 1) + 1 for dl, k in zip(dilation, ksize))
    if any(r > n for r, n in zip(reach, padded)) or 0 in ksize:
        raise ShapeError(
            f"{op}: kernel {ksize} (dilation {dilation}) does not fit the padded input "
            f"{padded} (x {xa.shape}, padding {padding})"
        )
    prim = _conv1d if d == 1 else _conv2d
    args = (x, weight) + _bias_arg(op, bias, wa.shape[0])
    return prim(*args, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution (cross-correlation): x (N, C, L), weight (O, C/groups, K), bias (O,).

    ``padding``: an int, ``'valid'``, ``'same'`` (stride 1; an odd total puts the extra zero
    after) or a ((before, after),) pair. Returns (N, O, Lout) with
    ``Lout = (L + before + after - dilation*(K-1) - 1) // stride + 1``.
    """
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution (cross-correlation): x (N, C, H, W), weight (O, C/groups, KH, KW),
    bias (O,). ``stride``, ``dilation``: an int or an (h, w) pair; ``padding`` an int, a pair,
    ``'valid'``, ``'same'`` or ((top, bottom), (left, right)); zero padding."""
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(op, d, x, weight, bias, stride, padding, output_padding, groups, dilation):
    xa, wa = _check_float(op, "x", x), _check_float(op, "weight", weight)
    _check_rank(op, "x", xa, d + 2, _layout(d, False))
    _check_rank(op, "weight", wa, d + 2, "(C_in, C_out/groups, *K)")
    groups = int(groups)
    if groups < 1 or wa.shape[0] % groups:
        raise ShapeError(f"{op}: groups={groups} must divide the input channels ({wa.shape[0]})")
    if xa.shape[1] != wa.shape[0]:
        raise ShapeError(
            f"{op}: weight {wa.shape} expects {wa.shape[0]} input channels, x {xa.shape} has "
            f"{xa.shape[1]}"
        )
    stride = _tuple_arg(op, "stride", stride, d, 1)
    dilation = _tuple_arg(op, "dilation", dilation, d, 1)
    pad = _tuple_arg(op, "padding", padding, d, 0)
    extra = _tuple_arg(op, "output_padding", output_padding, d, 0)
    if any(e >= max(s, dl) for e, s, dl in zip(extra, stride, dilation)):
        raise ShapeError(
            f"{op}: output_padding {extra} must be smaller than the stride {stride} or the "
            f"dilation {dilation}"
        )
    ksize = wa.shape[2:]
    size = tuple(
        (n - 1) * s - 2 * p + dl * (k - 1) + e + 1
        for n, s, p, dl, k, e in zip(xa.shape[2:], stride, pad, dilation, ksize, extra)
    )
    if any(n < 1 for n in size):
        raise ShapeError(f"{op}: the output would have size {size} (x {xa.shape}, padding {pad})")
    args = (x, weight) + _bias_arg(op, bias, wa.shape[1] * groups)
    return conv_transpose(
        *args,
        size=size,
        stride=stride,
        padding=tuple((p, p) for p in pad),
        dilation=dilation,
        groups=groups,
    )


def conv_transpose1d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """Transposed 1-d convolution: x (N, C_in, L), weight (C_in, C_out/groups, K), bias
    (C_out,); output length ``(L-1)*stride - 2*padding + dilation*(K-1) + output_padding + 1``
    (PyTorch's arguments and weight layout). The adjoint of conv1d in its input."""
    return _conv_transpose(
        "conv_transpose1d", 1, x, weight, bias, stride, padding, output_padding, groups, dilation
    )


def conv_transpose2d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """Transposed 2-d convolution: x (N, C_in, H, W), weight (C_in, C_out/groups, KH, KW),
    bias (C_out,); PyTorch's arguments, output sizes and weight layout."""
    return _conv_transpose(
        "conv_transpose2d", 2, x, weight, bias, stride, padding, output_padding, groups, dilation
    )
