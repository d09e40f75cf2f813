"""Neural-network primitives: convolution, max pooling, embedding and the fused losses.

Layouts follow the usual deep-learning conventions: (N, C, L) sequences and (N, C, H, W) images,
weights (O, C, *kernel), and convolution is cross-correlation. Every forward is vectorised over
the batch; the only Python loops run over kernel offsets.

* Convolution: im2col through a strided view of the padded input, copied once into
  ``cols`` (N, C*prod(K), prod(out)) and multiplied by the flattened weight with one batched
  BLAS matmul. ``cols`` is saved (``aux``) for the weight gradient; the input gradient is
  ``W^T @ g`` folded back (col2im) by adding strided slices, one per kernel offset. 1-d
  convolution at stride 1 skips im2col: one matmul per kernel tap on shifted views (faster, see
  ``_shifted``). The bias is fused: added in place to the output, its gradient a sum of ``g``.
  For a stride-1, unpadded conv of a channels-last input (the text CNN's permuted embedding)
  whose output gradient is at most a quarter nonzero (ReLU + max pooling), the backward is the
  direct kernel ``kernels.conv.conv_backward`` instead, which only visits the nonzeros.
* Max pooling: a compiled loop (``kernels.pool``) keeps each window's maximum and the offset
  that holds it (the first one at ties); that offset map is the ``aux`` the backward routes the
  gradient with.
* Embedding: a row gather forward; the backward scatter-adds the output gradient into a zero
  table with a compiled loop (``kernels.scatter``), so repeated indices accumulate.
* Losses: softmax cross-entropy (class ids or probability targets) from a max-subtracted
  log-sum-exp, saving the softmax for the (softmax - target) backward; binary cross-entropy on
  logits as ``max(x, 0) - x*t + log1p(exp(-|x|))``, saving the sigmoid. Class-id
  cross-entropy and BCE run as one compiled loop each way (``kernels.loss``), the same calls
  compiled plans make.

The public wrappers check shapes, ranks, dtypes and ranges and raise :class:`ShapeError` naming
the op, the expected and the actual values; the primitives assume checked input.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..backend import as_strided, asarray, cuda_kernels, is_array, xp_of
from ..errors import DTypeError, ShapeError
from ..kernels import (
    add_channel_bias,
    add_into,
    max_pool_backward,
    max_pool_forward,
    scatter_add_rows,
)
from ..kernels.loss import bce_backward, bce_forward, softmax_ce_backward, softmax_ce_forward
from . import samples as S
from .elementwise import sigmoid
from .reduce import _logsumexp, _softmax, _sum
from .registry import Sample, differentiating, primitive, run, scratch

__all__ = [
    "conv1d",
    "conv2d",
    "max_pool1d",
    "max_pool2d",
    "embedding",
    "softmax_cross_entropy",
    "bce_with_logits",
]

_REDUCTIONS = ("mean", "sum", "none")


def _data(x):
    return x.data if hasattr(x, "requires_grad") else x


def _offset_slices(offsets, stride, out_shape) -> tuple:
    """Index of the elements that kernel offset ``offsets`` meets at every output position."""
    return (slice(None), slice(None)) + tuple(
        slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offsets, stride, out_shape)
    )


# -- convolution -----------------------------------------------------------------------------
def _padded(x: np.ndarray, padding: tuple, buf: np.ndarray | None) -> np.ndarray:
    """x with zero padding (x itself when there is none), written into ``buf`` when given."""
    if not any(padding):
        return x
    shape = x.shape[:2] + tuple(n + 2 * p for n, p in zip(x.shape[2:], padding))
    xp = xp_of(x).zeros(shape, dtype=x.dtype) if buf is None else buf
    if buf is not None:
        xp.fill(0)  # a plan's buffer may hold another value's bytes
    np.copyto(xp[_interior(padding, x.shape)], x)
    return xp


def _interior(padding: tuple, shape: tuple) -> tuple:
    return (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(padding, shape[2:]))


def _windows(xp: np.ndarray, ksize: tuple, stride: tuple, out_shape: tuple) -> np.ndarray:
    """The (N, C, *K, *out) strided view of every window of the padded input."""
    sp = xp.strides[2:]
    return as_strided(
        xp,
        shape=xp.shape[:2] + ksize + out_shape,
        strides=xp.strides[:2] + sp + tuple(a * st for a, st in zip(sp, stride)),
    )


def _shifted(x, w, stride) -> bool:
    # 1-d, stride 1: each kernel tap k is a plain matmul with the view xp[:, :, k:k+L'] (a valid
    # BLAS operand, rows just longer than L'), so no im2col copy is needed, and the backward
    # adds K (N, C, L') products instead of folding a K-times larger column gradient. Measured
    # on the text-CNN shape (64, 50, 130) * (8, 50, 3): forward 0.24 ms against 0.33 ms,
    # backward 0.95 ms against 1.6 ms.
    return x.ndim == 3 and stride == (1,)


def _taps(w: np.ndarray, ws) -> np.ndarray:
    """Contiguous copies of the weight's taps (K, O, C): BLAS operands without a per-call copy
    inside matmul (the weight is updated in place, so they are refreshed every call)."""
    wk = scratch(ws, "taps", (w.shape[2],) + w.shape[:2], w.dtype, like=w)
    np.copyto(wk, np.moveaxis(w, 2, 0))
    return wk


def _conv_fwd(x, w, *bias, stride, padding, out=None, ws=None):
    """(out, *saved): saved is the padded input (1-d, stride 1, padded), the im2col columns
    (N, C*prod(K), prod(out)) otherwise, or nothing (1-d, stride 1, unpadded: x itself)."""
    res, saved = (None, None) if out is None else (out[0], out[1] if len(out) > 1 else None)
    n, o = x.shape[0], w.shape[0]
    if _shifted(x, w, stride):
        xp = _padded(x, padding, saved)
        length = xp.shape[2] - w.shape[2] + 1
        wk = _taps(w, ws)
        res = np.matmul(wk[0], xp[:, :, :length], out=res)
        tmp = scratch(ws, "tmp", res.shape, res.dtype, like=x)
        for k in range(1, w.shape[2]):
            np.add(res, np.matmul(wk[k], xp[:, :, k : k + length], out=tmp), out=res)
        kept = (xp,) if any(padding) else ()
    else:
        buf = None
        if any(padding) and ws is not None:
            shape = x.shape[:2] + tuple(s + 2 * p for s, p in zip(x.shape[2:], padding))
            buf = ws.array("xp", shape, x.dtype)
        xp = _padded(x, padding, buf)
        ksize = w.shape[2:]
        out_shape = tuple((s - k) // st + 1 for s, k, st in zip(xp.shape[2:], ksize, stride))
        window = _windows(xp, ksize, stride, out_shape)
        cols = (
            saved
            if saved is not None
            else xp_of(x).empty((n, x.shape[1] * math.prod(ksize), math.prod(out_shape)), x.dtype)
        )
        np.copyto(cols.reshape(window.shape), window)
        if res is None:
            res = xp_of(x).empty((n, o) + out_shape, x.dtype)
        np.matmul(w.reshape(o, -1), cols, out=res.reshape(n, o, -1))
        kept = (cols,)
    if bias:
        r3 = res.reshape(n, o, -1)
        kernels = cuda_kernels(x)
        (kernels.add_channel_bias if kernels else add_channel_bias)(r3, bias[0], r3)
    return (res, *kept)


def direct_backward_applies(x, w, stride, padding) -> bool:
    """Whether a conv's gradient may go through the direct kernel (``kernels/conv.py``): stride
    1, no padding, and a channels-last input (the text CNN's permuted embedding output), whose
    windows are long contiguous runs (KW * C >= 16) the kernel's loops vectorise over."""
    from ..kernels.conv import direct_layout_ok

    return (
        type(x) is np.ndarray  # a CPU kernel: on a GPU the matmul path serves every conv
        and all(s == 1 for s in stride)
        and not any(padding)
        and direct_layout_ok(x, w)
    )


def direct_backward_sparse(g) -> bool:
    """The per-call half of the choice: the direct kernel skips zero entries of g, so it wins
    when at most a quarter are nonzero (ReLU + max pooling leave 1/KW of them; measured on the
    text-CNN shape: 0.36 ms at 1/8 nonzero, 2.1 ms dense, against 1.1 ms with BLAS)."""
    return 4 * np.count_nonzero(g) <= g.size


def _conv_vjp(g, out, needs, x, w, *bias, stride, padding, aux):
    wanted = (needs[0], needs[1], bool(bias) and needs[2])
    got = iter(run(conv_backward, g, x, w, *aux, stride=stride, padding=padding, needs=wanted))
    return [next(got) if need else None for need in wanted[: 2 + len(bias)]]


def _conv_backward_fwd(g, x, w, *saved, stride, padding, needs, out=None, ws=None):
    """The input, weight and bias gradients that ``needs`` asks for, in that order. The input
    gradient comes in x's memory layout. Where ``direct_backward_applies`` and g is sparse
    enough (checked on every call), one pass of the direct kernel computes them all;
    otherwise BLAS: per-tap products (1-d, stride 1) or col2im of ``W^T g``."""
    n, o = g.shape[:2]
    outs = iter(out if out is not None else ())
    xp = xp_of(g)
    gx = (next(outs, None) if out is not None else np.empty_like(x)) if needs[0] else None
    gw = (next(outs, None) if out is not None else xp.empty(w.shape, g.dtype)) if needs[1] else None
    gb = (next(outs, None) if out is not None else xp.empty(o, g.dtype)) if needs[2] else None
    grads = tuple(a for a in (gx, gw, gb) if a is not None)
    if direct_backward_applies(x, w, stride, padding) and direct_backward_sparse(g):
        from ..kernels.conv import conv_backward as direct

        direct(np.ascontiguousarray(g), x, w, gw, gb, gx)
        return grads
    if gb is not None:
        np.sum(g, axis=(0,) + tuple(range(2, g.ndim)), out=gb)
    # the input gradient, accumulated into a zeroed (padded) buffer
    target = None
    if gx is not None:
        if any(padding):
            shape = x.shape[:2] + tuple(s + 2 * p for s, p in zip(x.shape[2:], padding))
            target = scratch(ws, "gxp", shape, g.dtype, like=g)
        else:
            target = gx
        target.fill(0)
    if _shifted(x, w, stride):
        xp = saved[0] if saved else x
        length = g.shape[2]
        wk = _taps(w, ws)
        if gx is not None:
            tmp = scratch(ws, "gxtmp", (n, x.shape[1], length), g.dtype, like=g)
            kernels = cuda_kernels(g)
            for k in range(w.shape[2]):
                (kernels.add_into if kernels else add_into)(
                    target[:, :, k : k + length], np.matmul(wk[k].T, g, out=tmp)
                )
        if gw is not None:
            tmp = scratch(ws, "gwtmp", (n, o, x.shape[1]), g.dtype, like=g)
            for k in range(w.shape[2]):
                np.sum(
                    np.matmul(g, xp[:, :, k : k + length].transpose(0, 2, 1), out=tmp),
                    axis=0,
                    out=gw[:, :, k],
                )
    else:
        (cols,) = saved
        g2 = g.reshape(n, o, -1)
        if gx is not None:
            gcols = np.matmul(
                w.reshape(o, -1).T, g2, out=scratch(ws, "gcols", cols.shape, g.dtype, like=g)
            )
            ksize, out_shape = w.shape[2:], g.shape[2:]
            gc = gcols.reshape((n, x.shape[1]) + ksize + out_shape)
            for offs in itertools.product(*(range(k) for k in ksize)):
                view = target[_offset_slices(offs, stride, out_shape)]
                np.add(view, gc[(slice(None), slice(None)) + offs], out=view)
        if gw is not None:
            tmp = scratch(ws, "gwtmp", (n, o, cols.shape[1]), g.dtype, like=g)
            np.matmul(g2, cols.transpose(0, 2, 1), out=tmp)
            np.sum(tmp, axis=0, out=gw.reshape(o, -1))
    if gx is not None and target is not gx:
        np.copyto(gx, target[_interior(padding, x.shape)])
    return grads


def _conv_reference(x, w, *bias, stride, padding):
    # Direct definition: pad with np.pad, then one einsum per output position.
    d = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    ksize = w.shape[2:]
    out_shape = tuple((xp.shape[2 + i] - ksize[i]) // stride[i] + 1 for i in range(d))
    out = np.zeros((x.shape[0], w.shape[0]) + out_shape, dtype=x.dtype)
    letters = "abc"[:d]
    spec = f"nc{letters},oc{letters}->no"
    for pos in itertools.product(*(range(n) for n in out_shape)):
        window = xp[
            (slice(None), slice(None))
            + tuple(slice(pos[i] * stride[i], pos[i] * stride[i] + ksize[i]) for i in range(d))
        ]
        out[(slice(None), slice(None)) + pos] = np.einsum(spec, window, w)
        if bias:
            out[(slice(None), slice(None)) + pos] += bias[0]
    return out


def _conv_samples(d):
    # (x shape, weight shape, bias?, stride, padding)
    cases = {
        1: [
            ((2, 3, 7), (4, 3, 3), True, (1,), (0,)),
            ((1, 2, 9), (3, 2, 4), False, (2,), (1,)),
            ((3, 1, 5), (2, 1, 5), True, (1,), (0,)),
            ((2, 4, 8), (1, 4, 2), True, (3,), (2,)),
            ((1, 1, 1), (2, 1, 3), False, (1,), (1,)),
        ],
        2: [
            ((2, 3, 5, 6), (4, 3, 3, 3), True, (1, 1), (0, 0)),
            ((1, 2, 7, 9), (3, 2, 3, 2), False, (2, 2), (1, 1)),
            ((2, 1, 6, 5), (2, 1, 2, 3), True, (2, 1), (0, 1)),
            ((1, 3, 4, 4), (2, 3, 4, 4), True, (1, 1), (0, 0)),
            ((2, 2, 5, 5), (1, 2, 1, 1), False, (3, 2), (2, 0)),
        ],
    }[d]

    def build(rng):
        out = []
        for xs, ws, has_bias, stride, padding in cases:
            args = (S.values(rng, xs), S.values(rng, ws))
            if has_bias:
                args += (S.values(rng, (ws[0],)),)
            out.append(Sample(args, {"stride": stride, "padding": padding}))
        return out

    return build


_conv1d = primitive(
    "conv1d",
    _conv_fwd,
    _conv_vjp,
    reference=_conv_reference,
    samples=_conv_samples(1),
    aux=True,
    higher_order=False,
    doc="1-d cross-correlation of (N, C, L) with (O, C, K) (+ bias (O,)), with stride and zero "
    "padding; one matmul per kernel tap at stride 1, im2col + one batched matmul otherwise.",
)
_conv2d = primitive(
    "conv2d",
    _conv_fwd,
    _conv_vjp,
    reference=_conv_reference,
    samples=_conv_samples(2),
    aux=True,
    higher_order=False,
    doc="2-d cross-correlation of (N, C, H, W) with (O, C, KH, KW) (+ bias (O,)), with stride "
    "and zero padding; im2col + one batched matmul.",
)


def _conv_backward_reference(g, x, w, *saved, stride, padding, needs):
    # Direct definition: every output position's window adds g * w to the input gradient and
    # g * window to the weight gradient.
    d = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    gxp, gw = np.zeros_like(xp), np.zeros_like(w)
    ksize = w.shape[2:]
    for pos in itertools.product(*(range(n) for n in g.shape[2:])):
        win = (slice(None), slice(None)) + tuple(
            slice(pos[i] * stride[i], pos[i] * stride[i] + ksize[i]) for i in range(d)
        )
        gp = g[(slice(None), slice(None)) + pos]  # (N, O)
        gxp[win] += np.einsum("no,oc...->nc...", gp, w)
        gw += np.einsum("no,nc...->oc...", gp, xp[win])
    grads = (gxp[_interior(padding, x.shape)], gw, g.sum(axis=(0,) + tuple(range(2, g.ndim))))
    return tuple(a for a, need in zip(grads, needs) if need)


def _conv_backward_samples(rng):
    out = []
    for d in (1, 2):
        for sample in _conv_samples(d)(rng):
            x, w, *b = sample.args
            y, *saved = _conv_fwd(x, w, *b, **sample.attrs)
            g = S.values(rng, y.shape)
            for needs in [(True, True, bool(b)), (False, True, False), (True, False, bool(b))]:
                out.append(Sample((g, x, w, *saved), {**sample.attrs, "needs": needs}))
    # the direct kernel: a channels-last input and a gradient at most a quarter nonzero
    x = np.ascontiguousarray(S.values(rng, (2, 9, 8))).transpose(0, 2, 1)  # (N, C=8, L=9)
    w = S.values(rng, (3, 8, 3))
    g = S.values(rng, (2, 3, 7)) * (rng.uniform(size=(2, 3, 7)) < 0.2)
    out.append(Sample((g, x, w), {"stride": (1,), "padding": (0,), "needs": (True,) * 3}))
    return out


conv_backward = primitive(
    "conv_backward",
    _conv_backward_fwd,
    None,
    reference=_conv_backward_reference,
    samples=_conv_backward_samples,
    doc="The convolutions' fused backward kernel: their input, weight and bias gradients (the "
    "ones ``needs`` names) from the output gradient and the forward's saved arrays. Not "
    "differentiable: convolutions are first-order only.",
)


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


def _conv(op: str, prim, d: int, x, weight, bias, stride, padding):
    xa, wa = _check_float(op, "x", x), _check_float(op, "weight", weight)
    spatial = ("L",) if d == 1 else ("H", "W")
    _check_rank(op, "x", xa, d + 2, "(N, C, " + ", ".join(spatial) + ")")
    _check_rank(op, "weight", wa, d + 2, "(O, C, " + ", ".join("K" + s for s in spatial) + ")")
    if xa.shape[1] != wa.shape[1]:
        raise ShapeError(
            f"{op}: weight {wa.shape} expects {wa.shape[1]} input channels, x {xa.shape} has "
            f"{xa.shape[1]}"
        )
    stride = _tuple_arg(op, "stride", stride, d, 1)
    padding = _tuple_arg(op, "padding", padding, d, 0)
    ksize = wa.shape[2:]
    padded = tuple(n + 2 * p for n, p in zip(xa.shape[2:], padding))
    if any(k > n for k, n in zip(ksize, padded)) or 0 in ksize:
        raise ShapeError(
            f"{op}: kernel {ksize} does not fit the padded input {padded} (x {xa.shape}, "
            f"padding {padding})"
        )
    args = (x, weight)
    if bias is not None:
        ba = _check_float(op, "bias", bias)
        if ba.shape != (wa.shape[0],):
            raise ShapeError(
                f"{op}: bias must have shape ({wa.shape[0]},) (one per output channel), got "
                f"{ba.shape}"
            )
        args += (bias,)
    return prim(*args, stride=stride, padding=padding)


def conv1d(x, weight, bias=None, stride=1, padding=0):
    """1-d convolution (cross-correlation): x (N, C, L), weight (O, C, K), bias (O,) or None.

    Returns (N, O, Lout) with ``Lout = (L + 2*padding - K) // stride + 1``; zero padding.
    """
    return _conv("conv1d", _conv1d, 1, x, weight, bias, stride, padding)


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-d convolution (cross-correlation): x (N, C, H, W), weight (O, C, KH, KW), bias (O,).

    ``stride`` and ``padding`` are an int or an (h, w) pair; zero padding. Returns
    (N, O, Hout, Wout) with ``Hout = (H + 2*ph - KH) // sh + 1`` (and likewise for W).
    """
    return _conv("conv2d", _conv2d, 2, x, weight, bias, stride, padding)


# -- max pooling -----------------------------------------------------------------------------
def _pool_fwd(x, kernel, stride, out=None):
    """(out, arg): each window's maximum and its offset in the window (see ``kernels.pool``)."""
    fn = cuda_kernels(x).max_pool_forward if cuda_kernels(x) else max_pool_forward
    if out is None:
        return fn(x, kernel, stride)
    return fn(x, kernel, stride, out=out[0], arg=out[1])


def _pool_vjp(g, out, x, kernel, stride, aux):
    return run(_max_pool_backward, g, aux[0], x_shape=x.shape, kernel=kernel, stride=stride)


def _pool_geometry(arg, kernel, stride):
    """For each output position of (N, C, *out) planes: the plane and the (row, column) of the
    input entry its window's maximum came from."""
    k2, s2 = ((1,) + kernel, (1,) + stride) if len(kernel) == 1 else (kernel, stride)
    xp = xp_of(arg)
    a = arg.reshape((-1,) + ((1,) if arg.ndim == 3 else ()) + arg.shape[2:]).astype(np.intp)
    rows = xp.arange(a.shape[1])[:, None] * s2[0] + a // k2[1]
    cols = xp.arange(a.shape[2])[None, :] * s2[1] + a % k2[1]
    return xp.arange(a.shape[0])[:, None, None], rows, cols


def _pool_gather_fwd(h, arg, kernel, stride):
    planes = h.reshape((-1,) + ((1,) if h.ndim == 3 else ()) + h.shape[2:])
    return planes[_pool_geometry(arg, kernel, stride)].reshape(arg.shape)


def _pool_backward_fwd(g, arg, x_shape, kernel, stride, out=None):
    fn = cuda_kernels(g).max_pool_backward if cuda_kernels(g) else max_pool_backward
    return fn(g, arg, x_shape, kernel, stride, gx=out)


def _pool_backward_reference(g, arg, x_shape, kernel, stride):
    gx = np.zeros(x_shape)
    planes = gx.reshape((-1,) + ((1,) if len(x_shape) == 3 else ()) + tuple(x_shape[2:]))
    m, rows, cols = _pool_geometry(arg, kernel, stride)
    np.add.at(planes, (m, rows, cols), g.reshape(rows.shape))
    return gx


def _pool_reference(x, kernel, stride):
    d = x.ndim - 2
    out_shape = tuple((x.shape[2 + i] - kernel[i]) // stride[i] + 1 for i in range(d))
    out = np.empty(x.shape[:2] + out_shape, dtype=x.dtype)
    for pos in itertools.product(*(range(n) for n in out_shape)):
        window = x[
            (slice(None), slice(None))
            + tuple(slice(pos[i] * stride[i], pos[i] * stride[i] + kernel[i]) for i in range(d))
        ]
        out[(slice(None), slice(None)) + pos] = window.reshape(x.shape[:2] + (-1,)).max(axis=-1)
    return out


def _pool_samples(d):
    cases = {
        1: [
            ((2, 3, 8), (2,), (2,)),
            ((1, 2, 9), (3,), (2,)),
            ((2, 1, 7), (3,), (3,)),
            ((1, 1, 5), (5,), (5,)),
            ((2, 2, 10), (2,), (3,)),
        ],
        2: [
            ((2, 3, 6, 6), (2, 2), (2, 2)),
            ((1, 2, 7, 9), (3, 3), (2, 2)),
            ((2, 1, 5, 7), (2, 3), (2, 3)),
            ((1, 1, 4, 4), (4, 4), (4, 4)),
            ((2, 2, 7, 8), (2, 2), (3, 1)),
        ],
    }[d]

    def build(rng):
        return [Sample((S.distinct(rng, xs),), {"kernel": k, "stride": s}) for xs, k, s in cases]

    return build


def _pool_grad_samples(rng):
    out = []
    for d in (1, 2):
        for sample in _pool_samples(d)(rng):
            (x,) = sample.args
            y, arg = _pool_fwd(x, **sample.attrs)
            out.append(Sample((S.values(rng, y.shape), arg), {"x_shape": x.shape, **sample.attrs}))
    return out


_max_pool1d = primitive(
    "max_pool1d",
    _pool_fwd,
    (_pool_vjp,),
    reference=_pool_reference,
    samples=_pool_samples(1),
    aux=True,
    doc="Max over length-K windows of (N, C, L) with a stride; the gradient goes to the first "
    "maximum of each window.",
)
_max_pool2d = primitive(
    "max_pool2d",
    _pool_fwd,
    (_pool_vjp,),
    reference=_pool_reference,
    samples=_pool_samples(2),
    aux=True,
    doc="Max over KH x KW windows of (N, C, H, W) with a stride; the gradient goes to the first "
    "maximum of each window.",
)
_max_pool_backward = primitive(
    "max_pool_backward",
    _pool_backward_fwd,
    (
        lambda h, out, g, arg, x_shape, kernel, stride: run(
            _max_pool_gather, h, arg, kernel=kernel, stride=stride
        ),
        None,
    ),
    reference=_pool_backward_reference,
    samples=_pool_grad_samples,
    doc="Max pooling's VJP: each output gradient added at its window's maximum (``arg``, the "
    "forward's offsets) in a zero array of the input's shape; its VJP gathers.",
)
_max_pool_gather = primitive(
    "max_pool_gather",
    _pool_gather_fwd,
    (
        lambda g, out, h, arg, kernel, stride: run(
            _max_pool_backward, g, arg, x_shape=h.shape, kernel=kernel, stride=stride
        ),
        None,
    ),
    reference=lambda h, arg, kernel, stride: _pool_gather_reference(h, arg, kernel, stride),
    samples=lambda rng: [
        Sample(
            (S.values(rng, a.attrs["x_shape"]), a.args[1]),
            {k: a.attrs[k] for k in ("kernel", "stride")},
        )
        for a in _pool_grad_samples(rng)
    ],
    doc="Each window's entry at its maximum's offset (``arg``): the VJP of max_pool_backward, "
    "which is its own VJP in turn, so max pooling is twice differentiable.",
)


def _pool_gather_reference(h, arg, kernel, stride):
    d = h.ndim - 2
    out = np.empty(arg.shape)
    for idx in np.ndindex(*arg.shape):
        q = int(arg[idx])
        offs = (q // kernel[-1], q % kernel[-1]) if d == 2 else (q,)
        src = idx[:2] + tuple(idx[2 + i] * stride[i] + offs[i] for i in range(d))
        out[idx] = h[src]
    return out


def _pool(op: str, prim, d: int, x, kernel_size, stride):
    xa = _check_float(op, "x", x)
    _check_rank(op, "x", xa, d + 2, "(N, C, L)" if d == 1 else "(N, C, H, W)")
    kernel = _tuple_arg(op, "kernel_size", kernel_size, d, 1)
    stride = kernel if stride is None else _tuple_arg(op, "stride", stride, d, 1)
    if any(k > n for k, n in zip(kernel, xa.shape[2:])):
        raise ShapeError(
            f"{op}: kernel {kernel} is larger than the input {xa.shape[2:]} (x {xa.shape})"
        )
    return prim(x, kernel=kernel, stride=stride)


def max_pool1d(x, kernel_size, stride=None):
    """Max pooling of (N, C, L) over windows of ``kernel_size`` (stride defaults to it; floor)."""
    return _pool("max_pool1d", _max_pool1d, 1, x, kernel_size, stride)


def max_pool2d(x, kernel_size, stride=None):
    """Max pooling of (N, C, H, W); kernel and stride an int or a pair (stride defaults to the
    kernel); windows that do not fit are dropped (floor mode)."""
    return _pool("max_pool2d", _max_pool2d, 2, x, kernel_size, stride)


# -- embedding -------------------------------------------------------------------------------
def _copied(buf: np.ndarray, a: np.ndarray) -> np.ndarray:
    np.copyto(buf, a)
    return buf


def _embedding_fwd(weight, indices, out=None, ws=None):
    v = weight.shape[0]
    if indices.size:
        lo, hi = indices.min(), indices.max()
        if lo < 0 or hi >= v:
            bad = lo if lo < 0 else hi
            raise IndexError(
                f"embedding: index {int(bad)} is out of range for a table of {v} rows "
                f"(V={v}; valid: 0..{v - 1})"
            )
    if out is None:
        return np.take(weight, indices, axis=0)
    # into a buffer: np.take converts other index types, and buffers in mode="raise" (the
    # range is checked above), on every call
    idx = _copied(scratch(ws, "idx", indices.shape, np.intp, like=indices), indices)
    if type(weight) is not np.ndarray:  # a device's take has no mode (it wraps)
        return xp_of(weight).take(weight, idx, axis=0, out=out)
    return np.take(weight, idx, axis=0, out=out, mode="wrap")


def _embedding_backward_fwd(g, indices, rows, out=None, ws=None):
    d = g.shape[-1]
    gw = xp_of(g).zeros((rows, d), dtype=g.dtype) if out is None else out
    if out is not None:
        gw.fill(0)
    if not g.flags.c_contiguous:  # the scatter reads rows: a contiguous copy first
        g = _copied(scratch(ws, "g", g.shape, g.dtype, like=g), g)
    if indices.dtype != np.intp:  # the loop takes intp ids (converted once per call)
        indices = _copied(scratch(ws, "idx", indices.shape, np.intp, like=g), indices)
    kernels = cuda_kernels(g)
    (kernels.scatter_add_rows if kernels else scatter_add_rows)(
        gw, indices.reshape(-1), g.reshape(-1, d)
    )
    return gw


def _embedding_vjp(g, out, weight, indices):
    return run(_embedding_backward, g, indices, rows=weight.shape[0])


def _embedding_reference(weight, indices):
    onehot = (indices[..., None] == np.arange(weight.shape[0])).astype(weight.dtype)
    return onehot @ weight


def _embedding_samples(rng):
    return [
        Sample(
            (S.values(rng, (6, 3)), np.array([0, 2, 2, 5, 0])),
        ),
        Sample(
            (S.values(rng, (5, 4)), np.array([[1, 1, 1], [4, 0, 1]])),
        ),
        Sample(
            (S.values(rng, (3, 2)), np.array(2)),
        ),
        Sample(
            (S.values(rng, (4, 1)), np.zeros((2, 0), dtype=np.int64)),
        ),
        Sample(
            (S.values(rng, (7, 3)), np.array([[[6], [3]], [[3], [6]]], dtype=np.int32)),
        ),
    ]


_embedding = primitive(
    "embedding",
    _embedding_fwd,
    (_embedding_vjp, None),
    reference=_embedding_reference,
    samples=_embedding_samples,
    doc="Rows of the (V, D) table at integer indices of any shape; the VJP is "
    "embedding_backward (a scatter-add: repeated indices accumulate). Indices are not "
    "differentiable.",
)
_embedding_backward = primitive(
    "embedding_backward",
    _embedding_backward_fwd,
    (lambda g, out, h, indices, rows: run(_embedding, g, indices), None),
    reference=lambda h, indices, rows: (
        (indices.reshape(-1, 1) == np.arange(rows)).astype(h.dtype).T @ h.reshape(-1, h.shape[-1])
    ),
    samples=lambda rng: [
        Sample((S.values(rng, (5, 3)), np.array([0, 2, 2, 5, 0])), {"rows": 6}),
        Sample((S.values(rng, (2, 3, 4)), np.array([[1, 1, 1], [4, 0, 1]])), {"rows": 5}),
    ],
    doc="embedding's VJP: the (rows, D) table of h's rows added at their indices (a compiled "
    "scatter-add); its own VJP gathers, so embeddings are twice differentiable.",
)


def embedding(weight, indices):
    """Look up rows of ``weight`` (V, D) at ``indices`` (int array or Tensor, any shape).

    Returns ``indices.shape + (D,)``. Indices must lie in [0, V).
    """
    wa = _check_float("embedding", "weight", weight)
    _check_rank("embedding", "weight", wa, 2, "(V, D)")
    idx = _data(indices)
    if not is_array(idx):
        idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"embedding: indices must be an integer array, got dtype {idx.dtype}")
    return _embedding(weight, idx)  # the forward checks the range (on every compiled call too)


# -- losses ----------------------------------------------------------------------------------
def _plain(a):
    """The array of a Tensor (class ids arrive as one inside a recorded rule)."""
    return a.data if hasattr(a, "requires_grad") else a


def _scale(g, reduction: str, count: int):
    """The output gradient as a multiplier of per-element gradients."""
    if reduction == "mean":
        return g / max(count, 1)
    return g


def _loss_out(total: float, per, reduction: str, count: int, res):
    """The loss from the kernels' float64 sum ``total`` of the per-element losses ``per``:
    ``per`` itself, or the mean or sum (written into the 0-d ``res`` when given)."""
    if reduction == "none":
        return per
    value = total / max(count, 1) if reduction == "mean" else total
    if res is None:
        return asarray(value, per.dtype, like=per)
    res[...] = value
    return res


def _multiplier(g, reduction: str, count: int, ws) -> np.ndarray:
    """The output gradient as the loss kernels take it: (1,), or one value per sample."""
    k = scratch(ws, "k", (g.size,), g.dtype, like=g)
    if reduction == "mean":
        return np.divide(np.reshape(g, -1), max(count, 1), out=k)
    np.copyto(k, np.reshape(g, -1))
    return k


def _ce_fwd(logits, target, reduction, out=None, ws=None):
    """(loss, softmax): class ids through the compiled kernel, probabilities through NumPy."""
    res, p = (None, None) if out is None else out
    n, c = logits.shape
    if target.dtype.kind in "iu":
        p = xp_of(logits).empty(logits.shape, logits.dtype) if p is None else p
        per = (
            res
            if reduction == "none" and res is not None
            else scratch(ws, "per", (n,), p.dtype, like=logits)
        )
        kernels = cuda_kernels(logits)
        try:
            total = (kernels.softmax_ce_forward if kernels else softmax_ce_forward)(
                logits, target, p, per
            )
        except IndexError:
            bad = target[(target < 0) | (target >= c)][0]
            raise ShapeError(
                f"softmax_cross_entropy: class id {int(bad)} is out of range [0, {c}) for "
                f"logits {logits.shape}"
            ) from None
        return _loss_out(total, per, reduction, n, res), p
    m = np.max(logits, axis=1, keepdims=True)
    z = logits - m
    e = np.exp(z)
    s = np.sum(e, axis=1, keepdims=True)
    e /= s
    z -= np.log(s)  # log-softmax
    loss = -np.sum(target * z, axis=1)
    if reduction != "none":
        total = np.sum(loss)
        loss = asarray(
            total / max(n, 1) if reduction == "mean" else total, logits.dtype, like=logits
        )
    if out is None:
        return loss, e
    np.copyto(res, loss)
    np.copyto(p, e)
    return res, p


def _ce_vjp_logits(g, out, logits, target, reduction, aux):
    # the forward's softmax; recomputed when a gradient graph is built, so that its own
    # dependence on the logits is differentiated too
    p = run(_softmax, logits, axis=1) if differentiating(g) else aux[0]
    return run(_ce_grad, p, target, g, reduction=reduction)


def _ce_grad_fwd(p, target, g, reduction, out=None, ws=None):
    if target.dtype.kind in "iu":
        gx = xp_of(p).empty(p.shape, p.dtype) if out is None else out
        kernels = cuda_kernels(p)
        (kernels.softmax_ce_backward if kernels else softmax_ce_backward)(
            p, target, _multiplier(g, reduction, len(p), ws), gx
        )
        return gx
    k = _scale(g, reduction, p.shape[0])
    gx = p * np.sum(target, axis=1, keepdims=True)
    gx -= target
    gx *= k[:, None] if reduction == "none" else k
    if out is None:
        return gx
    np.copyto(out, gx)
    return out


def _ce_grad_vjps():
    """ce_grad = (p * sum(t) - t) * k(g) row by row: its VJPs for p, t and g. Class ids enter
    as a one-hot constant."""

    def parts(p, target, g, reduction):
        t = target
        if t.dtype.kind in "iu":
            t = xp_of(_plain(p)).eye(p.shape[1], dtype=p.dtype)[_plain(t)]
        k = _scale(g, reduction, p.shape[0])
        k = k.reshape((-1, 1)) if reduction == "none" else k
        return t, _row_sum(t), k

    def dp(h, out, p, target, g, reduction):
        _, total, k = parts(p, target, g, reduction)
        return h * total * k

    def dt(h, out, p, target, g, reduction):
        if target.dtype.kind != "f":
            return None
        _, _, k = parts(p, target, g, reduction)
        return (_row_sum(p * h) - h) * k

    def dg(h, out, p, target, g, reduction):
        t, total, _ = parts(p, target, g, reduction)
        e = _row_sum(h * (p * total - t))  # (N, 1)
        if reduction == "none":
            return e.reshape((-1,))
        e = _sum_all(e)
        return e / max(p.shape[0], 1) if reduction == "mean" else e

    return (dp, dt, dg)


def _ce_vjp_target(g, out, logits, target, reduction, aux):
    if target.dtype.kind != "f":
        return None
    lse = _lse_rows(logits)
    k = _scale(g, reduction, logits.shape[0])
    return (lse - logits) * (k.reshape((-1, 1)) if reduction == "none" else k)  # -log_softmax


def _reduce_reference(loss, reduction):
    if reduction == "mean":
        return np.mean(loss)
    return np.sum(loss) if reduction == "sum" else loss


def _ce_reference(logits, target, reduction):
    logp = np.log(np.exp(logits) / np.sum(np.exp(logits), axis=1, keepdims=True))
    if target.dtype.kind in "iu":
        t = np.eye(logits.shape[1], dtype=logits.dtype)[target]
    else:
        t = target
    return _reduce_reference(-np.einsum("nc,nc->n", t, logp), reduction)


def _ce_samples(rng):
    out = []
    for r in _REDUCTIONS:
        out.append(Sample((S.values(rng, (4, 3), -3, 3), np.array([0, 2, 1, 2])), {"reduction": r}))
        probs = rng.uniform(0.1, 1.0, size=(3, 5))
        probs /= probs.sum(axis=1, keepdims=True)
        out.append(Sample((S.values(rng, (3, 5), -3, 3), probs), {"reduction": r}))
    out.append(
        Sample((S.values(rng, (1, 2)), np.array([1], dtype=np.int32)), {"reduction": "mean"})
    )
    out.append(Sample((S.values(rng, (2, 4)), np.eye(4)[[3, 0]]), {"reduction": "sum"}))
    return out


def _ce_grad_reference(p, target, g, reduction):
    t = np.eye(p.shape[1])[target] if target.dtype.kind in "iu" else target
    k = np.asarray(g) / (p.shape[0] if reduction == "mean" else 1)
    k = k.reshape(-1, 1) if reduction == "none" else k
    return (p * t.sum(axis=1, keepdims=True) - t) * k


def _ce_grad_samples(rng):
    out = []
    for r, gv in [("mean", np.asarray(1.3)), ("sum", np.asarray(-0.6)), ("none", None)]:
        x = S.values(rng, (4, 3), -3, 3)
        probs = rng.uniform(0.1, 1.0, (4, 3))
        probs /= probs.sum(axis=1, keepdims=True)
        g = S.values(rng, (4,)) if gv is None else gv
        p = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
        for t in (np.array([0, 2, 1, 2]), probs):
            out.append(Sample((p, t, g), {"reduction": r}))
    return out


_ce_grad = primitive(
    "ce_grad",
    _ce_grad_fwd,
    _ce_grad_vjps(),
    reference=_ce_grad_reference,
    samples=_ce_grad_samples,
    doc="softmax_cross_entropy's VJP for the logits from the forward's softmax p: "
    "(p * sum(t) - t) * g (scaled by the reduction), one compiled loop for class ids; "
    "differentiable in p, probability targets and g.",
)
_softmax_cross_entropy = primitive(
    "softmax_cross_entropy",
    _ce_fwd,
    (_ce_vjp_logits, _ce_vjp_target),
    reference=_ce_reference,
    samples=_ce_samples,
    aux=True,
    doc="Cross-entropy of softmax(logits) (N, C) against class ids (N,) or probabilities (N, C), "
    "fused and stable; the logits' VJP is (softmax * sum(target) - target) scaled.",
)


def softmax_cross_entropy(logits, target, reduction: str = "mean"):
    """Cross-entropy between softmax(logits) and ``target``.

    ``logits`` (N, C); ``target`` either int class ids (N,) in [0, C), or float probabilities
    (N, C) (one-hot or soft labels, differentiable). ``reduction``: "mean" (over N), "sum", or
    "none" (per-sample losses (N,)).
    """
    op = "softmax_cross_entropy"
    la = _check_float(op, "logits", logits)
    _check_rank(op, "logits", la, 2, "(N, C)")
    _check_reduction(op, reduction)
    n, c = la.shape
    ta = _data(target)
    if not is_array(ta):
        ta = np.asarray(ta)
        target = ta
    if ta.dtype.kind in "iu":
        if ta.shape != (n,):
            raise ShapeError(
                f"{op}: class-id target must have shape ({n},) for logits {la.shape}, "
                f"got {ta.shape}"
            )
        if n:
            lo, hi = ta.min(), ta.max()
            if lo < 0 or hi >= c:
                bad = lo if lo < 0 else hi
                raise ShapeError(
                    f"{op}: class id {int(bad)} is out of range [0, {c}) for logits {la.shape}"
                )
    elif ta.dtype.kind == "f":
        if ta.shape != la.shape:
            raise ShapeError(
                f"{op}: probability target must have the logits' shape {la.shape}, got {ta.shape}"
            )
    else:
        raise ShapeError(
            f"{op}: target must be int class ids or float probabilities, got dtype {ta.dtype}"
        )
    return _softmax_cross_entropy(logits, target, reduction=reduction)


def _bce_fwd(logits, target, reduction, out=None, ws=None):
    """(loss, sigmoid(logits)), one compiled loop."""
    res, sig = (None, None) if out is None else out
    xp = xp_of(logits)
    if sig is None:
        sig = xp.empty(logits.shape, logits.dtype)
    if reduction == "none":
        per = xp.empty(logits.shape, logits.dtype) if res is None else res
    else:
        per = scratch(ws, "per", logits.shape, logits.dtype, like=logits)
    kernels = cuda_kernels(logits)
    total = (kernels.bce_forward if kernels else bce_forward)(logits, target, sig, per)
    return _loss_out(total, per, reduction, per.size, res), sig


def _bce_vjp_logits(g, out, logits, target, reduction, aux):
    sig = run(sigmoid, logits) if differentiating(g) else aux[0]  # as in _ce_vjp_logits
    return run(_bce_grad, sig, target, g, reduction=reduction)


def _bce_grad_fwd(sig, target, g, reduction, out=None, ws=None):
    gx = xp_of(sig).empty(sig.shape, sig.dtype) if out is None else out
    kernels = cuda_kernels(sig)
    (kernels.bce_backward if kernels else bce_backward)(
        sig, target, _multiplier(g, reduction, sig.size, ws), gx
    )
    return gx


def _bce_grad_vjps():
    """bce_grad = (sig - t) * k(g): its VJPs for sig, t and g."""

    def dsig(h, out, sig, target, g, reduction):
        return h * _scale(g, reduction, sig.size)

    def dt(h, out, sig, target, g, reduction):
        return -h * _scale(g, reduction, sig.size)

    def dg(h, out, sig, target, g, reduction):
        e = h * (sig - target)
        if reduction == "none":
            return e
        total = _sum_all(e)
        return total / max(sig.size, 1) if reduction == "mean" else total

    return (dsig, dt, dg)


def _bce_vjp_target(g, out, logits, target, reduction, aux):
    return -logits * _scale(g, reduction, logits.size)


def _bce_reference(logits, target, reduction):
    p = 1 / (1 + np.exp(-logits))
    return _reduce_reference(-(target * np.log(p) + (1 - target) * np.log(1 - p)), reduction)


def _bce_samples(rng):
    out = []
    for r in _REDUCTIONS:
        for shape in [(5, 1), (2, 3, 4), ()]:
            out.append(
                Sample((S.values(rng, shape, -4, 4), rng.uniform(0, 1, shape)), {"reduction": r})
            )
    out.append(
        Sample((S.values(rng, (6,), -4, 4), np.array([0.0, 1, 1, 0, 1, 0])), {"reduction": "mean"})
    )
    return out


_bce_grad = primitive(
    "bce_grad",
    _bce_grad_fwd,
    _bce_grad_vjps(),
    reference=lambda sig, target, g, reduction: (
        (sig - target) * (np.asarray(g) / (sig.size if reduction == "mean" else 1))
    ),
    samples=lambda rng: [
        Sample((1 / (1 + np.exp(-x)), t, np.asarray(gv)), {"reduction": r})
        for r, x, t, gv in [
            ("mean", S.values(rng, (4, 1), -3, 3), rng.uniform(0, 1, (4, 1)), 1.3),
            ("sum", S.values(rng, (2, 3), -3, 3), rng.uniform(0, 1, (2, 3)), -0.7),
            ("none", S.values(rng, (5,), -3, 3), rng.uniform(0, 1, (5,)), S.values(rng, (5,))),
        ]
    ],
    doc="bce_with_logits' VJP for the logits from the forward's sigmoid s: (s - t) * g (scaled "
    "by the reduction), one compiled loop; differentiable in s, t and g.",
)
_bce_with_logits = primitive(
    "bce_with_logits",
    _bce_fwd,
    (_bce_vjp_logits, _bce_vjp_target),
    reference=_bce_reference,
    samples=_bce_samples,
    aux=True,
    doc="Binary cross-entropy of sigmoid(logits) against targets in [0, 1], fused and stable: "
    "max(x, 0) - x*t + log1p(exp(-|x|)); the logits' VJP is sigmoid(x) - t.",
)


def _check_reduction(op: str, reduction) -> None:
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def bce_with_logits(logits, target, reduction: str = "mean"):
    """Binary cross-entropy between sigmoid(logits) and ``target`` (same shape, values in [0, 1]).

    ``reduction``: "mean" (over all elements), "sum", or "none" (elementwise).
    """
    op = "bce_with_logits"
    la = _check_float(op, "logits", logits)
    _check_reduction(op, reduction)
    ta = _data(target)
    if not is_array(ta) or ta.dtype.kind != "f":
        ta = asarray(ta, la.dtype, like=la)
        target = ta
    if ta.shape != la.shape:
        raise ShapeError(f"{op}: target must have the logits' shape {la.shape}, got {ta.shape}")
    return _bce_with_logits(logits, target, reduction=reduction)


def _row_sum(x):
    return run(_sum, x, axis=(1,), keepdims=True)


def _sum_all(x):
    return run(_sum, x, axis=tuple(range(x.ndim)), keepdims=False)


def _lse_rows(x):
    return run(_logsumexp, x, axis=(1,), keepdims=True)
