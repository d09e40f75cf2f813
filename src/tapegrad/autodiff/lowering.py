"""Buffer-aware kernels for compiled plans: each primitive's forward and VJP rules rewritten to
write into buffers allocated once, so that replaying a plan allocates (almost) nothing.

A lowering receives the equation, its input arrays (all persistent: plan inputs, parameters,
constants, or outputs of other lowered equations) and the traced output (for shape and dtype),
and returns a :class:`Lowered`: the output array (a buffer, or a view of an input that stays
valid because inputs never move), a forward closure that refills it (None for views), and one
VJP closure per input that maps an output gradient to that input's gradient, written into a
buffer of its own. Each closure performs the same NumPy operations in the same order as the
primitive's eager rule, so compiled results match eager ones bit for bit. A primitive without a
lowering, or a case a lowering declines (returns None), runs through the generic path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import ShapeError
from .kernels import add_channel_bias, add_into, scatter_add_rows
from .kernels.loss import bce_backward, bce_forward, softmax_ce_backward, softmax_ce_forward
from .kernels.reduce import sum_rows
from .primitives.linalg import transposed_layout


class Lowered:
    __slots__ = ("out", "fwd", "vjps")

    def __init__(self, out: np.ndarray, fwd: Callable | None, vjps: list):
        self.out, self.fwd, self.vjps = out, fwd, vjps


def one_pass_vjps(needs, outs, backward) -> list:
    """VJP closures for a kernel whose one backward pass fills every input's gradient buffer
    (``outs``): the first input needing a gradient runs ``backward(g)``, the others hand their
    buffer out (the plan calls an equation's VJPs in input order)."""
    first = next((i for i, n in enumerate(needs) if n), None)

    def make_vjp(i):
        if i == first:

            def vjp(g):
                backward(g)
                return outs[i]
        else:

            def vjp(g):
                return outs[i]

        return vjp

    return [make_vjp(i) for i in range(len(outs))]


LOWERINGS: dict[str, Callable] = {}


def lowering(*names: str):
    def register(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn

    return register


def _view_of(v: np.ndarray, base: np.ndarray) -> bool:
    return v.size == 0 or np.shares_memory(v, base)


def make_unbroadcast(gshape: tuple, shape: tuple, dtype) -> Callable:
    """A closure summing a gradient of ``gshape`` down to ``shape`` into fixed buffers, in the
    same steps as :func:`backend.unbroadcast`."""
    if gshape == shape:
        return lambda g: g
    extra = len(gshape) - len(shape)
    if len(gshape) == 2 and tuple(shape) in ((gshape[1],), (1, gshape[1])):
        rows = np.empty(gshape[1], dtype)  # the bias case, as backend.unbroadcast does it
        rows_out = rows.reshape(shape)

        def sum_leading(g):
            sum_rows(g, rows)
            return rows_out

        return sum_leading
    lead = tuple(range(extra))
    mid_shape = gshape[extra:]
    buf1 = np.empty(mid_shape, dtype) if extra else None
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and mid_shape[i] != 1)
    buf2 = (
        np.empty(tuple(1 if i in axes else n for i, n in enumerate(mid_shape)), dtype)
        if axes
        else None
    )

    def unbroadcast(g):
        if extra:
            g = np.sum(g, axis=lead, out=buf1)
        if axes:
            g = np.sum(g, axis=axes, keepdims=True, out=buf2)
        return g.reshape(shape)

    return unbroadcast


# -- views ---------------------------------------------------------------------------------------
@lowering("reshape")
def _reshape(eq, xs, like):
    (x,) = xs
    shape = x.shape
    out = x.reshape(eq.attrs["shape"])
    if _view_of(out, x):
        return Lowered(out, None, [lambda g: g.reshape(shape)])
    # x is a non-contiguous view: copy it into a buffer each replay (no temporary), and hand
    # out views of that buffer
    buf = np.empty(like.shape, like.dtype)
    as_x = buf.reshape(shape)
    return Lowered(buf, lambda: np.copyto(as_x, x), [lambda g: g.reshape(shape)])


@lowering("permute")
def _permute(eq, xs, like):
    (x,) = xs
    axes = eq.attrs["axes"]
    inv = tuple(int(a) for a in np.argsort(axes))  # a tuple: np.transpose(g, ndarray) is 9x slower
    return Lowered(np.transpose(x, axes), None, [lambda g: g.transpose(inv)])


@lowering("broadcast_to")
def _broadcast_to(eq, xs, like):
    (x,) = xs
    return Lowered(
        np.broadcast_to(x, eq.attrs["shape"]),
        None,
        [make_unbroadcast(like.shape, x.shape, like.dtype)],
    )


@lowering("getitem")
def _getitem(eq, xs, like):
    (x,) = xs
    index = eq.attrs["index"]
    parts = index if isinstance(index, tuple) else (index,)
    if any(isinstance(p, np.ndarray) for p in parts):
        return None  # advanced indexing copies: generic path
    gx = np.empty(x.shape, like.dtype)

    def vjp(g):
        gx.fill(0)
        gx[index] = g
        return gx

    return Lowered(x[index], None, [vjp])


# -- elementwise ---------------------------------------------------------------------------------
def _buf(like):
    return np.empty(like.shape, like.dtype)


def _buf_in_layout(like):
    """A buffer in the memory layout of the traced output (an elementwise op on a transposed
    view, eager, gives a transposed result). Rules downstream choose by layout (the conv
    backward's direct kernel wants channels-last input), so the plan must keep eager's."""
    return np.empty_like(like)


def channel_view(shape: tuple, b_shape: tuple) -> tuple | None:
    """(P, Q, R) if an operand of ``b_shape`` broadcast to ``shape`` varies along one axis only
    (a bias: per feature or per channel), else None."""
    b = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    varying = [i for i, n in enumerate(b) if n != 1]
    if len(varying) != 1 or b[varying[0]] != shape[varying[0]]:
        return None
    q = varying[0]
    return (
        int(np.prod(shape[:q], dtype=np.int64)),
        shape[q],
        int(np.prod(shape[q + 1 :], dtype=np.int64)),
    )


@lowering("add", "sub", "mul", "div")
def _binary(eq, xs, like):
    x, y = xs
    name = eq.prim.name
    out = _buf_in_layout(like)
    if (
        name == "add"
        and x.shape == like.shape
        and x.flags.c_contiguous
        and out.flags.c_contiguous
        and y.ndim <= x.ndim
    ):
        pqr = channel_view(like.shape, y.shape)
        if pqr is not None:  # a bias add: a compiled loop, no iterator buffer
            x3, out3, yflat = x.reshape(pqr), out.reshape(pqr), y.reshape(-1)
            ub_y = make_unbroadcast(like.shape, y.shape, like.dtype)
            return Lowered(
                out, lambda: add_channel_bias(x3, yflat, out3), [lambda g: g, lambda g: ub_y(g)]
            )
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[name]
    ub = [make_unbroadcast(like.shape, a.shape, like.dtype) for a in (x, y)]
    full = [_buf(like), _buf(like)]

    def fwd():
        ufunc(x, y, out=out)

    if name == "add":
        vjps = [lambda g: ub[0](g), lambda g: ub[1](g)]
    elif name == "sub":
        vjps = [lambda g: ub[0](g), lambda g: ub[1](np.negative(g, out=full[1]))]
    elif name == "mul":
        vjps = [
            lambda g: ub[0](np.multiply(g, y, out=full[0])),
            lambda g: ub[1](np.multiply(g, x, out=full[1])),
        ]
    else:

        def vjp_y(g):
            t = np.negative(g, out=full[1])
            np.multiply(t, out, out=t)
            return ub[1](np.divide(t, y, out=t))

        vjps = [lambda g: ub[0](np.divide(g, y, out=full[0])), vjp_y]
    return Lowered(out, fwd, vjps)


@lowering("neg", "exp", "tanh", "relu", "sigmoid")
def _unary(eq, xs, like):
    (x,) = xs
    name = eq.prim.name
    out, gx, tmp = _buf_in_layout(like), _buf(like), _buf(like)
    if name == "neg":
        return Lowered(out, lambda: np.negative(x, out=out), [lambda g: np.negative(g, out=gx)])
    if name == "exp":
        return Lowered(out, lambda: np.exp(x, out=out), [lambda g: np.multiply(g, out, out=gx)])
    if name == "tanh":

        def vjp(g):
            np.multiply(out, out, out=tmp)
            np.subtract(1, tmp, out=tmp)
            return np.multiply(g, tmp, out=gx)

        return Lowered(out, lambda: np.tanh(x, out=out), [vjp])
    if name == "relu":
        # the mask in the float dtype: 0.0/1.0 multiply exactly like the eager bool mask, and
        # the product needs no casting buffer
        mask = np.empty(like.shape, like.dtype)
        zero = np.zeros((), like.dtype)

        def vjp(g):
            np.greater(x, 0, out=mask)
            return np.multiply(g, mask, out=gx)

        return Lowered(out, lambda: np.maximum(x, zero, out=out), [vjp])

    def fwd():  # sigmoid, as 0.5 * (1 + tanh(x / 2)) like the eager forward
        np.multiply(x, 0.5, out=out)
        np.tanh(out, out=out)
        np.add(out, 1, out=out)
        np.multiply(out, 0.5, out=out)

    def vjp(g):
        np.multiply(g, out, out=gx)
        np.subtract(1, out, out=tmp)
        return np.multiply(gx, tmp, out=gx)

    return Lowered(out, fwd, [vjp])


# -- reductions ------------------------------------------------------------------------------------
@lowering("sum", "mean")
def _sum_mean(eq, xs, like):
    (x,) = xs
    axis, keepdims = eq.attrs["axis"], eq.attrs["keepdims"]
    out = _buf(like)
    kshape = tuple(1 if i in axis else n for i, n in enumerate(x.shape))
    shape = x.shape
    if eq.prim.name == "sum":
        return Lowered(
            out,
            lambda: np.sum(x, axis=axis, keepdims=keepdims, out=out),
            [lambda g: np.broadcast_to(g.reshape(kshape), shape)],
        )
    count = max(int(np.prod([x.shape[a] for a in axis], dtype=np.int64)), 1)
    gbuf = _buf(like)
    return Lowered(
        out,
        lambda: np.mean(x, axis=axis, keepdims=keepdims, out=out),
        [lambda g: np.broadcast_to(np.divide(g, count, out=gbuf).reshape(kshape), shape)],
    )


# -- linear algebra ------------------------------------------------------------------------------
@lowering("matmul")
def _matmul(eq, xs, like):
    a, b = xs
    if a.ndim < 2 or b.ndim != 2:
        return None  # 1-d operands and batched right operands: generic path
    out = _buf(like)
    ga = np.empty(a.shape, like.dtype)
    bt = b.T
    at = np.swapaxes(a, -1, -2)
    if a.ndim == 2 and transposed_layout(b):  # the gradient in b's layout, as eager
        gbt = np.empty(b.shape[::-1], like.dtype)
        gb = gbt.T

        def vjp_b(g):
            np.matmul(g.T, a, out=gbt)
            return gb

    elif a.ndim == 2:
        gb = np.empty(b.shape, like.dtype)
        vjp_b = lambda g: np.matmul(at, g, out=gb)  # noqa: E731
    else:  # batch dims broadcast against a matrix: sum the per-batch products, as eager does
        tmp = np.empty(a.shape[:-2] + b.shape, like.dtype)
        gb = np.empty(b.shape, like.dtype)
        lead = tuple(range(a.ndim - 2))

        def vjp_b(g):
            np.matmul(at, g, out=tmp)
            return np.sum(tmp, axis=lead, out=gb)

    return Lowered(
        out, lambda: np.matmul(a, b, out=out), [lambda g: np.matmul(g, bt, out=ga), vjp_b]
    )


# -- neural-network primitives ---------------------------------------------------------------
@lowering("embedding")
def _embedding(eq, xs, like):
    weight, indices = xs
    out = _buf(like)
    gw = np.empty(weight.shape, like.dtype)
    flat_idx = indices.reshape(-1)
    if not _view_of(flat_idx, indices):
        return None
    v, d = weight.shape
    gbuf = np.empty(like.shape, like.dtype)
    g2 = gbuf.reshape(-1, d)
    idx = np.empty(indices.shape, np.intp)  # np.take converts other index types per call

    def fwd():
        # np.take buffers its output in mode="raise"; check the range here and take with "wrap"
        if flat_idx.size and (flat_idx.min() < 0 or flat_idx.max() >= v):
            bad = flat_idx[(flat_idx < 0) | (flat_idx >= v)][0]
            raise IndexError(f"embedding: index {bad} is out of range for a table of {v} rows")
        np.copyto(idx, indices)
        np.take(weight, idx, axis=0, out=out, mode="wrap")

    flat_intp = idx.reshape(-1)

    def vjp(g):
        np.copyto(gbuf, g)  # g may be a transposed view; the scatter wants rows
        gw.fill(0)
        scatter_add_rows(gw, flat_intp, g2)
        return gw

    return Lowered(out, fwd, [vjp, None])


@lowering("stack", "concatenate")
def _join(eq, xs, like):
    axis = eq.attrs["axis"]
    out = _buf(like)
    if eq.prim.name == "stack":
        fwd = lambda: np.stack(xs, axis=axis, out=out)  # noqa: E731
        lead = (slice(None),) * axis
        vjps = [lambda g, i=i: g[lead + (i,)] for i in range(len(xs))]
    else:
        fwd = lambda: np.concatenate(xs, axis=axis, out=out)  # noqa: E731
        bounds = np.cumsum([x.shape[axis] for x in xs])
        lead = (slice(None),) * axis
        vjps = [
            lambda g, lo=lo, hi=hi: g[lead + (slice(lo, hi),)]
            for lo, hi in zip([0, *bounds[:-1]], bounds)
        ]
    return Lowered(out, fwd, vjps)


@lowering("max_pool1d", "max_pool2d")
def _max_pool(eq, xs, like):
    from .kernels.pool import max_pool_backward, max_pool_forward, pool_arg_dtype

    (x,) = xs
    if not x.flags.c_contiguous:
        return None
    kernel, stride = eq.attrs["kernel"], eq.attrs["stride"]
    out = _buf(like)
    arg = np.empty(like.shape, pool_arg_dtype(kernel))
    gx = np.empty(x.shape, like.dtype)
    return Lowered(
        out,
        lambda: max_pool_forward(x, kernel, stride, out=out, arg=arg),
        [lambda g: max_pool_backward(np.ascontiguousarray(g), arg, x.shape, kernel, stride, gx=gx)],
    )


def _loss_multiplier(reduction: str, count: int, k: np.ndarray):
    """Writes the output gradient into ``k`` as the loss kernels take it (see kernels.loss)."""
    if reduction == "mean":
        return lambda g: np.divide(g, count, out=k)
    return lambda g: np.copyto(k, np.reshape(g, -1))


@lowering("softmax_cross_entropy")
def _cross_entropy(eq, xs, like):
    logits, target = xs
    reduction = eq.attrs["reduction"]
    if target.dtype.kind not in "iu" or logits.ndim != 2:
        return None  # probability targets: the generic rule
    n, c = logits.shape
    dt = logits.dtype
    p, per, gx = np.empty((n, c), dt), np.empty(n, dt), np.empty((n, c), dt)
    out = per if reduction == "none" else _buf(like)
    k = np.empty(n if reduction == "none" else 1, dt)
    scale = _loss_multiplier(reduction, n, k)
    count = max(n, 1)

    def fwd():  # the eager rule's kernel call, into buffers
        try:
            total = softmax_ce_forward(logits, target, p, per)
        except IndexError:
            bad = target[(target < 0) | (target >= c)][0]
            raise ShapeError(
                f"softmax_cross_entropy: class id {int(bad)} is out of range [0, {c}) for "
                f"logits {logits.shape}"
            ) from None
        if reduction != "none":
            out[...] = total / count if reduction == "mean" else total

    def vjp(g):
        scale(g)
        softmax_ce_backward(p, target, k, gx)
        return gx

    return Lowered(out, fwd, [vjp, None])


@lowering("bce_with_logits")
def _bce(eq, xs, like):
    logits, target = xs
    reduction = eq.attrs["reduction"]
    if eq.needs[1] or not (logits.flags.c_contiguous and target.flags.c_contiguous):
        return None
    dt = logits.dtype
    sig, per, gx = (np.empty(logits.shape, dt) for _ in range(3))
    out = per if reduction == "none" else _buf(like)
    k = np.empty(logits.size if reduction == "none" else 1, dt)
    scale = _loss_multiplier(reduction, logits.size, k)
    count = max(logits.size, 1)

    def fwd():
        total = bce_forward(logits, target, sig, per)
        if reduction != "none":
            out[...] = total / count if reduction == "mean" else total

    def vjp(g):
        scale(g)
        bce_backward(sig, target, k, gx)
        return gx

    return Lowered(out, fwd, [vjp, None])


@lowering("conv1d", "conv2d")
def _conv(eq, xs, like):
    from .primitives.nn import _offset_slices, _shifted

    x, w, *bias = xs
    stride, padding = eq.attrs["stride"], eq.attrs["padding"]
    dt = like.dtype
    n, o = like.shape[:2]
    out = _buf(like)
    if any(padding):
        xp = np.zeros(x.shape[:2] + tuple(s + 2 * p for s, p in zip(x.shape[2:], padding)), dt)
        interior = xp[
            (slice(None), slice(None))
            + tuple(slice(p, p + s) for p, s in zip(padding, x.shape[2:]))
        ]
        pad = lambda: np.copyto(interior, x)  # noqa: E731
    else:
        xp, interior, pad = x, x, None
    ksize = w.shape[2:]
    vjps: list = [None, None] + [None] * len(bias)
    if bias:
        b = bias[0]
        out3 = out.reshape(n, o, -1)
        gb = np.empty(b.shape, dt)
        baxes = (0,) + tuple(range(2, like.ndim))
        vjps[2] = lambda g: np.sum(g, axis=baxes, out=gb)
    if _shifted(x, w, stride):
        length = like.shape[2]
        tmp = np.empty(like.shape, dt)
        taps = [xp[:, :, k : k + length] for k in range(ksize[0])]
        # contiguous copies of the weight's taps (refreshed each call: the weight is updated in
        # place), so the matmuls get BLAS operands without copying them per call
        wk = [np.empty(w.shape[:2], dt) for _ in range(ksize[0])]

        def fwd():
            for k in range(len(wk)):
                np.copyto(wk[k], w[:, :, k])
            if pad:
                pad()
            np.matmul(wk[0], taps[0], out=out)
            for k in range(1, len(taps)):
                np.add(out, np.matmul(wk[k], taps[k], out=tmp), out=out)
            if bias:
                add_channel_bias(out3, b, out3)

        gxp = np.zeros(xp.shape, dt)
        gxtmp = np.empty((n, x.shape[1], length), dt)
        gx_view = gxp[:, :, padding[0] : padding[0] + x.shape[2]] if padding[0] else gxp

        def vjp_x(g):
            gxp.fill(0)
            for k in range(len(taps)):
                add_into(gxp[:, :, k : k + length], np.matmul(wk[k].T, g, out=gxtmp))
            return gx_view

        gw = np.empty(w.shape, dt)
        gwtmp = np.empty((n, o, x.shape[1]), dt)

        def vjp_w(g):
            for k in range(len(taps)):
                np.sum(np.matmul(g, taps[k].transpose(0, 2, 1), out=gwtmp), axis=0, out=gw[:, :, k])
            return gw

        vjps[0], vjps[1] = vjp_x, vjp_w
        return Lowered(out, fwd, _direct_conv_vjps(eq, x, w, bias, vjps))

    from numpy.lib.stride_tricks import as_strided

    out_sp = like.shape[2:]
    sp = xp.strides[2:]
    window = as_strided(
        xp,
        shape=x.shape[:2] + ksize + out_sp,
        strides=xp.strides[:2] + sp + tuple(a * s for a, s in zip(sp, stride)),
        writeable=False,
    )
    ck = x.shape[1] * int(np.prod(ksize))
    cols = np.empty((n, ck, int(np.prod(out_sp))), dt)
    cols_as_window = cols.reshape(window.shape)
    w2 = w.reshape(o, -1)
    out3 = out.reshape(n, o, -1)

    def fwd():
        if pad:
            pad()
        np.copyto(cols_as_window, window)
        np.matmul(w2, cols, out=out3)
        if bias:
            add_channel_bias(out3, b, out3)

    gcols = np.empty(cols.shape, dt)
    gxp = np.zeros(xp.shape, dt)
    gc = gcols.reshape((n, x.shape[1]) + ksize + out_sp)
    offsets = list(np.ndindex(*ksize))
    w2t = w2.T
    gx_view = gxp[
        (slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(padding, x.shape[2:]))
    ]

    def vjp_x(g):
        np.matmul(w2t, g.reshape(n, o, -1), out=gcols)
        gxp.fill(0)
        for offs in offsets:
            view = gxp[_offset_slices(offs, stride, out_sp)]
            np.add(view, gc[(slice(None), slice(None)) + offs], out=view)
        return gx_view

    gwtmp = np.empty((n, o, ck), dt)
    gw = np.empty(w.shape, dt)
    gw2 = gw.reshape(o, ck)
    cols_t = cols.transpose(0, 2, 1)

    def vjp_w(g):
        np.matmul(g.reshape(n, o, -1), cols_t, out=gwtmp)
        np.sum(gwtmp, axis=0, out=gw2)
        return gw

    vjps[0], vjps[1] = vjp_x, vjp_w
    return Lowered(out, fwd, _direct_conv_vjps(eq, x, w, bias, vjps))


def _direct_conv_vjps(eq, x, w, bias, blas_vjps: list) -> list:
    """The conv VJPs with the eager rule's choice between BLAS and the direct kernel: where
    ``direct_backward_applies``, each call counts g's nonzeros, and when sparse enough the first
    VJP asked for computes every needed gradient with ``kernels.conv.conv_backward`` (the
    others hand out its buffers), exactly as the eager rule does."""
    from .kernels.conv import conv_backward
    from .primitives.nn import direct_backward_applies, direct_backward_sparse

    if not direct_backward_applies(x, w, eq.attrs["stride"], eq.attrs["padding"]):
        return blas_vjps
    needs = eq.needs
    dt = w.dtype
    gx = np.empty_like(x) if needs[0] else None
    gw = np.empty(w.shape, dt) if needs[1] else None
    gb = np.empty(bias[0].shape, dt) if bias and needs[2] else None
    outs = [gx, gw, gb]
    first = next((i for i, need in enumerate(needs) if need), None)
    state = [False]

    def make(i):
        blas = blas_vjps[i]

        def vjp(g):
            if i == first:
                state[0] = direct_backward_sparse(g)
                if state[0]:
                    conv_backward(np.ascontiguousarray(g), x, w, gw, gb, gx)
            return outs[i] if state[0] else blas(g)

        return vjp

    return [make(i) for i in range(len(blas_vjps))]


def lower(eq, xs, like) -> Lowered | None:
    """The buffer-aware form of ``eq``, or None to keep it on the generic path."""
    fn = LOWERINGS.get(eq.prim.name)
    if fn is None:
        return None
    if any(not isinstance(x, np.ndarray) for x in xs):
        return None
    return fn(eq, xs, like)


# -- fusions: two equations, the first read only by the second, lowered as one -------------------
def lower_bias_relu(add_eq, relu_eq, xs, like) -> Lowered | None:
    """A Linear layer's bias add then ReLU: one pass each way (``kernels/fused.py``); the
    GEMM before it stays with BLAS."""
    from .kernels.fused import bias_relu_backward, bias_relu_forward

    x, b = xs
    if not (
        x.ndim == 2
        and b.shape == (x.shape[1],)
        and like.shape == x.shape
        and x.dtype == b.dtype == like.dtype
        and x.flags.c_contiguous
    ):
        return None
    out, gx, gb = _buf(like), _buf(like), np.empty(b.shape, like.dtype)
    return Lowered(
        out,
        lambda: bias_relu_forward(x, b, out),
        one_pass_vjps(add_eq.needs, (gx, gb), lambda g: bias_relu_backward(g, out, gx, gb)),
    )


def lower_relu_max_pool(relu_eq, pool_eq, xs, like) -> Lowered | None:
    """ReLU then max pooling as one fused kernel each way (see ``kernels/fused.py``)."""
    from .kernels import relu_max_pool_backward, relu_max_pool_forward
    from .kernels.pool import pool_arg_dtype

    (x,) = xs
    if not x.flags.c_contiguous or x.ndim not in (3, 4):
        return None
    kernel, stride = pool_eq.attrs["kernel"], pool_eq.attrs["stride"]
    k2, s2 = ((1,) + kernel, (1,) + stride) if len(kernel) == 1 else (kernel, stride)
    planes = (-1,) + ((1,) if x.ndim == 3 else ()) + x.shape[2:]
    out = _buf(like)
    arg = np.empty(like.shape, pool_arg_dtype(kernel))
    gx = np.empty(x.shape, like.dtype)
    xp, outp, argp, gxp = (
        a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:]) for a in (x, out, arg, gx)
    )
    assert xp.shape == x.reshape(planes).shape
    gbuf = _buf(like)
    gp = gbuf.reshape(outp.shape)

    def fwd():
        relu_max_pool_forward(xp, k2[0], k2[1], s2[0], s2[1], outp, argp)

    def vjp(g):
        np.copyto(gbuf, g)
        relu_max_pool_backward(gp, outp, argp, k2[1], s2[0], s2[1], gxp)
        return gx

    return Lowered(out, fwd, [vjp])


@lowering("rnn_scan")
def _rnn_scan(eq, xs, like):
    from .primitives.recurrent import rnn_scan_backward, rnn_scan_forward

    xp, whh, h0 = xs
    nl = eq.attrs["nonlinearity"]
    zero = eq.attrs.get("zero_h0", False)
    dt = like.dtype
    hs = _buf(like)
    dxp, dwhh = np.empty_like(xp, dtype=dt), np.empty(whh.shape, dt)
    dh, tmp = np.empty(h0.shape, dt), np.empty(whh.shape, dt)
    sf, sb = np.empty(h0.shape, dt), np.empty(h0.shape, dt)  # forward and backward scratch
    needs = eq.needs

    def backward(g):  # one pass backward through time computes every input's gradient
        rnn_scan_backward(g, hs, xp, whh, h0, nl, dxp, dwhh, dh, tmp, sb, needs, zero)

    return Lowered(
        hs,
        lambda: rnn_scan_forward(xp, whh, h0, nl, hs, sf, zero),
        one_pass_vjps(needs, (dxp, dwhh, dh), backward),
    )


@lowering("lstm_scan")
def _lstm_scan(eq, xs, like):
    from .primitives.recurrent import (
        in_layout_of,
        lstm_scan_backward,
        lstm_scan_buffers,
        lstm_scan_forward,
    )

    xp, whh, h0, c0 = xs
    dt = like.dtype
    out = _buf(like)
    act, tc, hw = lstm_scan_buffers(xp)
    dxp, dwhh, tmp = np.empty(xp.shape, dt), np.empty(whh.shape, dt), np.empty(whh.shape, dt)
    dh, dc = np.empty(h0.shape, dt), np.empty(c0.shape, dt)
    dx = in_layout_of(xp, dxp)  # as the eager VJP returns it
    needs = eq.needs

    def backward(g):
        lstm_scan_backward(g, out, act, tc, whh, h0, c0, dxp, dwhh, dh, dc, tmp, needs)
        if needs[0] and dx is not dxp:
            np.copyto(dx, dxp)

    return Lowered(
        out,
        lambda: lstm_scan_forward(xp, whh, h0, c0, out, act, tc, hw),
        one_pass_vjps(needs, (dx, dwhh, dh, dc), backward),
    )


@lowering("gru_scan")
def _gru_scan(eq, xs, like):
    from .primitives.recurrent import gru_scan_backward, gru_scan_buffers, gru_scan_forward

    xp, whh, bhh, h0 = xs
    dt = like.dtype
    hs = _buf(like)
    act, hw = gru_scan_buffers(xp)
    dxp, dhw = np.empty_like(xp, dtype=dt), np.empty(xp.shape, dt)  # as the eager VJP
    dwhh, tmp, dbhh = np.empty(whh.shape, dt), np.empty(whh.shape, dt), np.empty(bhh.shape, dt)
    dh, dhd = np.empty(h0.shape, dt), np.empty(h0.shape, dt)
    needs = eq.needs

    def backward(g):
        gru_scan_backward(g, hs, act, whh, h0, dxp, dhw, dwhh, dbhh, dh, dhd, tmp, needs)

    return Lowered(
        hs,
        lambda: gru_scan_forward(xp, whh, bhh, h0, hs, act, hw),
        one_pass_vjps(needs, (dxp, dwhh, dbhh, dh), backward),
    )


FUSIONS: dict[tuple[str, str], Callable] = {
    ("relu", "max_pool1d"): lower_relu_max_pool,
    ("relu", "max_pool2d"): lower_relu_max_pool,
    ("add", "relu"): lower_bias_relu,
}
"""(first, second) primitive pairs a plan lowers as one equation when the first's output is
read by the second alone: ``fn(first_eq, second_eq, first_inputs, second_out_like)``."""
