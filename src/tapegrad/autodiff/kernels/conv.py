"""Direct convolution kernels, alone and fused with ReLU and max pooling (numba, serial).

Scope: stride-1 convolution without padding (cross-correlation), x (N, C, H, W) with weight
(O, C, KH, KW) and an optional bias (O,); 1-d convolution is the H = 1 case. Pooling windows
(PH, PW) with strides at least as large (windows never overlap), floor mode, as the max-pool
primitive. Other cases stay on the im2col + BLAS path of ``primitives/nn.py``.

Arithmetic order, shared by every kernel here so their results agree bit for bit:

* forward: each output plane starts at 0 and receives ``w[o, c, a, b] * x[n, c, i+a, j+b]`` for
  (c, a, b) in row-major order (the inner loop runs along the output row, which vectorises),
  then the bias is added;
* backward: output positions (n, o, i, j) are visited in row-major order, a zero output
  gradient is skipped (it contributes nothing, not even where x is inf or NaN), and each
  position adds ``g`` to the bias gradient, ``g * x`` to the weight gradient and ``g * w`` to
  the input gradient.

The fused forward computes each (n, o) plane into a scratch row block and pools it at once
(ReLU folded into the max as in ``kernels/fused.py``); the conv output is never stored. The
fused backward visits only each window's argmax position (where the output is positive), in
the same row-major order, since the gradient of ReLU + max pooling is zero everywhere else:
with non-overlapping windows it is exactly the plain backward applied to the dense gradient
that the separate ReLU and max-pool rules produce.

Loops are serial (see ``kernels/fused.py`` for why numba's parallel loops are not used).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .pool import max_pool_backward_reference, max_pool_forward_reference, pool_arg_dtype

__all__ = [
    "conv_forward",
    "conv_backward",
    "conv_forward_reference",
    "conv_backward_reference",
    "conv2d_relu_max_pool_forward",
    "conv2d_relu_max_pool_backward",
    "conv2d_relu_max_pool_forward_reference",
    "conv2d_relu_max_pool_backward_reference",
    "conv1d_relu_max_pool_forward",
    "conv1d_relu_max_pool_backward",
    "conv1d_relu_max_pool_forward_reference",
    "conv1d_relu_max_pool_backward_reference",
    "fusable_pool",
]


def fusable_pool(kernel: tuple, stride: tuple) -> bool:
    """Whether the fused kernels handle this pooling: windows that never overlap."""
    return all(s >= k for k, s in zip(kernel, stride))


def _as2d(a: np.ndarray | None) -> np.ndarray | None:
    """(N, C, L) as an (N, C, 1, L) view; 4-d arrays unchanged."""
    return a[:, :, None, :] if a is not None and a.ndim == 3 else a


# -- plain-NumPy references --------------------------------------------------------------------
def _windows(x: np.ndarray, ksize: tuple) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) read-only view of the stride-1 windows of x (N, C, H, W)."""
    return np.lib.stride_tricks.sliding_window_view(x, ksize, axis=(2, 3))


def conv_forward_reference(x, w, bias, out) -> None:
    """Reference for :func:`conv_forward`: one einsum over the window view."""
    x4, w4, out4 = _as2d(x), _as2d(w), _as2d(out)
    out4[...] = np.einsum("ncijab,ocab->noij", _windows(x4, w4.shape[2:]), w4)
    if bias is not None:
        out4 += bias.reshape(-1, 1, 1)


def conv_backward_reference(g, x, w, gw, gb, gx) -> None:
    """Reference for :func:`conv_backward` (dense: zeros are multiplied, not skipped)."""
    g4, x4, w4 = _as2d(g), _as2d(x), _as2d(w)
    kh, kw = w4.shape[2:]
    oh, ow = g4.shape[2:]
    if gw is not None:
        _as2d(gw)[...] = np.einsum("noij,ncijab->ocab", g4, _windows(x4, (kh, kw)))
    if gb is not None:
        gb[...] = g4.sum(axis=(0, 2, 3))
    if gx is not None:
        gx4 = _as2d(gx)
        gx4[...] = 0
        for a in range(kh):
            for b in range(kw):
                gx4[:, :, a : a + oh, b : b + ow] += np.einsum("noij,oc->ncij", g4, w4[:, :, a, b])


def _pool_out_shape(shape: tuple, kernel: tuple, stride: tuple) -> tuple:
    return tuple((n - k) // s + 1 for n, k, s in zip(shape, kernel, stride))


def _fused_forward_reference(x, w, bias, kernel, stride, out, arg) -> None:
    x4 = _as2d(x)
    w4 = _as2d(w)
    n, o = x4.shape[0], w4.shape[0]
    conv_shape = (n, o, x4.shape[2] - w4.shape[2] + 1, x4.shape[3] - w4.shape[3] + 1)
    y = np.empty(conv_shape, x.dtype)
    conv_forward_reference(x4, w4, bias, y)
    planes = np.maximum(y, 0).reshape((-1,) + conv_shape[2:])
    out4, arg4 = _as2d(out), _as2d(arg)
    max_pool_forward_reference(
        planes,
        kernel,
        stride,
        out4.reshape((-1,) + out4.shape[2:]),
        arg4.reshape((-1,) + arg4.shape[2:]),
    )


def _fused_backward_reference(g, x, w, out, arg, kernel, stride, gw, gb, gx) -> None:
    g4, x4, w4, out4, arg4 = (_as2d(a) for a in (g, x, w, out, arg))
    conv_shape = g4.shape[:2] + (x4.shape[2] - w4.shape[2] + 1, x4.shape[3] - w4.shape[3] + 1)
    gy = np.zeros(conv_shape, g.dtype)
    flat = (-1,) + conv_shape[2:]
    max_pool_backward_reference(
        np.where(out4 > 0, g4, 0).reshape((-1,) + g4.shape[2:]),
        arg4.reshape((-1,) + g4.shape[2:]),
        kernel,
        stride,
        gy.reshape(flat),
    )
    conv_backward_reference(gy, x4, w4, _as2d(gw), gb, _as2d(gx))


def conv2d_relu_max_pool_forward_reference(x, w, bias, kernel, stride, out, arg) -> None:
    """Reference for :func:`conv2d_relu_max_pool_forward`: conv, ``np.maximum(., 0)``, then the
    max-pool reference."""
    _fused_forward_reference(x, w, bias, kernel, stride, out, arg)


def conv2d_relu_max_pool_backward_reference(g, x, w, out, arg, kernel, stride, gw, gb, gx) -> None:
    """Reference for :func:`conv2d_relu_max_pool_backward`: the pool and ReLU gradients routed
    into a dense conv-output gradient, then the dense conv backward reference."""
    _fused_backward_reference(g, x, w, out, arg, kernel, stride, gw, gb, gx)


def conv1d_relu_max_pool_forward_reference(x, w, bias, kernel, stride, out, arg) -> None:
    """Reference for :func:`conv1d_relu_max_pool_forward` (1-d kernel and stride: (K,))."""
    _fused_forward_reference(x, w, bias, (1,) + tuple(kernel), (1,) + tuple(stride), out, arg)


def conv1d_relu_max_pool_backward_reference(g, x, w, out, arg, kernel, stride, gw, gb, gx) -> None:
    """Reference for :func:`conv1d_relu_max_pool_backward`."""
    _fused_backward_reference(
        g, x, w, out, arg, (1,) + tuple(kernel), (1,) + tuple(stride), gw, gb, gx
    )


# -- compiled kernels ----------------------------------------------------------------------------
try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from .pool import window_max

    _jit = numba.njit(cache=True, boundscheck=False, nogil=True)
    _inline = numba.njit(cache=True, boundscheck=False, nogil=True, inline="always")

    @_inline
    def _conv_plane(x, w, bias, has_bias, n, o, plane):  # pragma: no cover - compiled
        """plane (OH, OW) = conv of sample n with filter o, in the module's summation order."""
        oh, ow = plane.shape
        for i in range(oh):
            for j in range(ow):
                plane[i, j] = 0
        for c in range(w.shape[1]):
            for a in range(w.shape[2]):
                for b in range(w.shape[3]):
                    wv = w[o, c, a, b]
                    for i in range(oh):
                        for j in range(ow):
                            plane[i, j] += wv * x[n, c, i + a, j + b]
        if has_bias:
            bv = bias[o]
            for i in range(oh):
                for j in range(ow):
                    plane[i, j] += bv

    @_inline
    def _scatter(gv, base, o, rx, rw, run, xf, ws, gws, gxf, need_w, need_x):  # pragma: no cover
        """Add output position ``base``'s gradient ``gv`` (filter o) to the weight and input
        gradients: one contiguous axpy per run of the window (slices keep the loops free of
        negative-index checks, so they vectorise)."""
        # the order of the runs does not matter: each target entry gets one term here
        if need_w:
            for r in range(rx.shape[0]):
                dst, src = gws[o, rw[r] : rw[r] + run], xf[base + rx[r] : base + rx[r] + run]
                for t in range(run):
                    dst[t] += gv * src[t]
        if need_x:
            for r in range(rx.shape[0]):
                dst, src = gxf[base + rx[r] : base + rx[r] + run], ws[o, rw[r] : rw[r] + run]
                for t in range(run):
                    dst[t] += gv * src[t]

    @_inline
    def _zero_grads(need_w, need_b, need_x, gws, gb, gxf):  # pragma: no cover - compiled
        if need_w:
            gws[:] = 0
        if need_b:
            gb[:] = 0
        if need_x:
            gxf[:] = 0

    @_jit
    def _conv_fwd(x, w, bias, has_bias, out):  # pragma: no cover - compiled
        for n in range(x.shape[0]):
            for o in range(w.shape[0]):
                _conv_plane(x, w, bias, has_bias, n, o, out[n, o])

    @_jit
    def _conv_bwd(
        g, xf, xs, rx, rw, run, ws, need_w, need_b, need_x, gws, gb, gxf
    ):  # pragma: no cover - compiled
        _zero_grads(need_w, need_b, need_x, gws, gb, gxf)
        for n in range(g.shape[0]):
            for o in range(g.shape[1]):
                for i in range(g.shape[2]):
                    for j in range(g.shape[3]):
                        gv = g[n, o, i, j]
                        if gv != 0:
                            if need_b:
                                gb[o] += gv
                            base = n * xs[0] + i * xs[2] + j * xs[3]
                            _scatter(gv, base, o, rx, rw, run, xf, ws, gws, gxf, need_w, need_x)

    @_jit
    def _fused_fwd(x, w, bias, has_bias, kh, kw, sh, sw, plane, out, arg):  # pragma: no cover
        ph, pw = out.shape[2], out.shape[3]
        for n in range(x.shape[0]):
            for o in range(w.shape[0]):
                _conv_plane(x, w, bias, has_bias, n, o, plane[0])
                for i in range(ph):
                    for j in range(pw):
                        best, bi = window_max(plane, 0, i * sh, j * sw, kh, kw)
                        if best <= 0:  # relu is 0 over the whole window: no gradient flows
                            best = best - best
                            bi = 0
                        out[n, o, i, j] = best
                        arg[n, o, i, j] = bi

    @_jit
    def _fused_bwd(
        g, out, arg, kh, kw, sh, sw, xf, xs, rx, rw, run, ws, need_w, need_b, need_x, gws, gb, gxf
    ):  # pragma: no cover - compiled
        _zero_grads(need_w, need_b, need_x, gws, gb, gxf)
        ph, pw = out.shape[2], out.shape[3]
        for n in range(g.shape[0]):
            for o in range(g.shape[1]):
                for pi in range(ph):
                    # the argmax rows of this band of windows, top to bottom: row-major order
                    for a in range(kh):
                        for pj in range(pw):
                            q = arg[n, o, pi, pj]
                            if q // kw != a or not out[n, o, pi, pj] > 0:
                                continue
                            gv = g[n, o, pi, pj]
                            if gv != 0:
                                if need_b:
                                    gb[o] += gv
                                i, j = pi * sh + a, pj * sw + q % kw
                                base = n * xs[0] + i * xs[2] + j * xs[3]
                                _scatter(gv, base, o, rx, rw, run, xf, ws, gws, gxf, need_w, need_x)


def _channels_last(x4: np.ndarray) -> bool:
    """Whether x (N, C, H, W) is a view of a contiguous (N, H, W, C) array (the text CNN's
    permuted embedding output)."""
    return x4.shape[1] > 1 and x4.transpose(0, 2, 3, 1).flags.c_contiguous


def direct_layout_ok(x: np.ndarray, w: np.ndarray) -> bool:
    """x is channels-last with windows of at least 16 contiguous values (see
    ``primitives.nn.direct_backward_applies``)."""
    x4, w4 = _as2d(x), _as2d(w)
    return x4.ndim == 4 and _channels_last(x4) and w4.shape[1] * w4.shape[3] >= 16


def _flat(a4: np.ndarray, cl: bool) -> np.ndarray:
    """The memory of a contiguous NCHW (or, if ``cl``, NHWC) array as a 1-d view."""
    return (a4.transpose(0, 2, 3, 1) if cl else a4).reshape(-1)


def _backward_call(kernel, lead: tuple, g, x, w, gw, gb, gx) -> None:
    """Lay x, w and the gradients out as runs of contiguous memory and call ``kernel``.

    A window of x is a set of runs that are contiguous in memory: for NCHW input each (c, a)
    row piece of length KW, for channels-last input each row a of KW * C values. The weight
    (and its gradient) is laid out the same way, so every run is one contiguous axpy.
    """
    x4, w4 = _as2d(x), _as2d(w)
    cl = _channels_last(x4)
    if not cl and not x4.flags.c_contiguous:
        x4 = np.ascontiguousarray(x4)
    o, c, kh, kw = w4.shape
    xs = np.array(x4.strides, np.intp) // x4.itemsize
    if cl:
        run = kw * c
        rx = np.arange(kh, dtype=np.intp) * xs[2]
        rw = np.arange(kh, dtype=np.intp) * run
        ws = np.ascontiguousarray(w4.transpose(0, 2, 3, 1)).reshape(o, -1)
    else:
        run = kw
        ca = np.arange(c * kh, dtype=np.intp)
        rx = (ca // kh) * xs[1] + (ca % kh) * xs[2]
        rw = ca * kw
        ws = np.ascontiguousarray(w4).reshape(o, -1)
    gws = np.empty(ws.shape, g.dtype) if gw is not None else np.empty((0, 0), g.dtype)
    gx4 = _as2d(gx) if gx is not None else None
    direct = gx4 is not None and gx4.strides == x4.strides and gx4.shape == x4.shape
    gxs = gx4 if direct else (np.empty_like(x4) if gx is not None else None)
    gxf = _flat(gxs, cl) if gxs is not None else np.empty(0, g.dtype)
    kernel(
        *lead,
        _flat(x4, cl),
        xs,
        rx,
        rw,
        run,
        ws,
        gw is not None,
        gb is not None,
        gx is not None,
        gws,
        np.empty(0, g.dtype) if gb is None else gb,
        gxf,
    )
    if gw is not None:
        shaped = gws.reshape(o, kh, kw, c).transpose(0, 3, 1, 2) if cl else gws.reshape(w4.shape)
        np.copyto(_as2d(gw), shaped)
    if gx is not None and not direct:
        np.copyto(gx4, gxs)


def _bias_args(bias, dtype):
    return (np.zeros(0, dtype), False) if bias is None else (bias, True)


def conv_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> None:
    """Stride-1, unpadded convolution of x (N, C, [H,] W) with w (O, C, [KH,] KW) (+ bias (O,))
    into ``out`` (N, O, [OH,] OW), in the module's summation order. x may be any strided view."""
    _check_shapes("conv_forward", x, w, bias, conv_out=out)
    if numba is None:  # pragma: no cover
        conv_forward_reference(x, w, bias, out)
        return
    b, has_bias = _bias_args(bias, x.dtype)
    _conv_fwd(_as2d(x), _as2d(w), b, has_bias, _as2d(out))


def conv_backward(
    g: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    gw: np.ndarray | None,
    gb: np.ndarray | None,
    gx: np.ndarray | None,
) -> None:
    """Gradients of :func:`conv_forward` for the output gradient g: the weight's into ``gw``,
    the bias's into ``gb``, the input's into ``gx`` (each skipped when None). Zero entries of g
    are skipped, so a gradient that ReLU and pooling made sparse costs only its nonzeros."""
    _check_shapes("conv_backward", x, w, conv_out=g, grads=(gw, gb, gx))
    if numba is None:  # pragma: no cover
        conv_backward_reference(g, x, w, gw, gb, gx)
        return
    _backward_call(_conv_bwd, (_as2d(g),), g, x, w, gw, gb, gx)


def _fused_forward(x, w, bias, kernel, stride, out, arg) -> None:
    x4, w4 = _as2d(x), _as2d(w)
    oh, ow = x4.shape[2] - w4.shape[2] + 1, x4.shape[3] - w4.shape[3] + 1
    plane = np.empty((1, oh, ow), x.dtype)
    b, has_bias = _bias_args(bias, x.dtype)
    _fused_fwd(x4, w4, b, has_bias, *kernel, *stride, plane, _as2d(out), _as2d(arg))


def _fused_backward(g, x, w, out, arg, kernel, stride, gw, gb, gx) -> None:
    lead = (_as2d(g), _as2d(out), _as2d(arg), *kernel, *stride)
    _backward_call(_fused_bwd, lead, g, x, w, gw, gb, gx)


def _check_shapes(op: str, x, w, bias=None, *, conv_out=None, pooled=(), grads=()) -> None:
    """The loops below run without bounds checks: every array's shape is checked first.
    ``conv_out``: an array shaped like the convolution's output; ``pooled``: arrays shaped like
    the pooled output (``kernel``/``stride`` given as the last two); ``grads``: (gw, gb, gx)."""
    x4, w4 = _as2d(x), _as2d(w)
    if x.ndim != w.ndim or x.ndim not in (3, 4) or x4.shape[1] != w4.shape[1]:
        raise ShapeError(f"{op}: input {x.shape} and weight {w.shape} do not fit")
    conv = (x4.shape[0], w4.shape[0], x4.shape[2] - w4.shape[2] + 1, x4.shape[3] - w4.shape[3] + 1)
    if conv[2] < 1 or conv[3] < 1:
        raise ShapeError(f"{op}: weight {w.shape} is larger than input {x.shape}")
    if bias is not None and bias.shape != (w4.shape[0],):
        raise ShapeError(f"{op}: bias must have shape ({w4.shape[0]},), got {bias.shape}")
    if conv_out is not None and _as2d(conv_out).shape != conv:
        raise ShapeError(f"{op}: output/gradient {conv_out.shape} should be {conv[: x.ndim]}")
    if pooled:
        *arrays, kernel, stride = pooled
        want = conv[:2] + _pool_out_shape(conv[2:], tuple(kernel)[-2:], tuple(stride)[-2:])
        for a in arrays:
            if _as2d(a).shape != want:
                raise ShapeError(f"{op}: pooled array {a.shape} should be {want[: x.ndim]}")
    gw, gb, gx = grads or (None, None, None)
    for name, a, shape in (("gw", gw, w.shape), ("gb", gb, (w4.shape[0],)), ("gx", gx, x.shape)):
        if a is not None and a.shape != shape:
            raise ShapeError(f"{op}: {name} must have shape {shape}, got {a.shape}")


def _check_pool(op: str, kernel: tuple, stride: tuple) -> None:
    if not fusable_pool(kernel, stride):
        raise ValueError(f"{op}: pooling windows {kernel} overlap at stride {stride}")


def conv2d_relu_max_pool_forward(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    kernel: tuple,
    stride: tuple,
    out: np.ndarray,
    arg: np.ndarray,
) -> None:
    """``max_pool2d(relu(conv2d(x, w, bias)), kernel, stride)`` into ``out`` (N, O, PH, PW),
    with each window's argmax offset (row-major, the first at ties, 0 where the output is 0)
    into ``arg`` (``pool_arg_dtype(kernel)``). Stride-1 unpadded conv; windows must not overlap.
    """
    _check_pool("conv2d_relu_max_pool_forward", kernel, stride)
    _check_shapes("conv2d_relu_max_pool_forward", x, w, bias, pooled=(out, arg, kernel, stride))
    if numba is None:  # pragma: no cover
        conv2d_relu_max_pool_forward_reference(x, w, bias, kernel, stride, out, arg)
        return
    _fused_forward(x, w, bias, tuple(kernel), tuple(stride), out, arg)


def conv2d_relu_max_pool_backward(
    g: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    out: np.ndarray,
    arg: np.ndarray,
    kernel: tuple,
    stride: tuple,
    gw: np.ndarray | None,
    gb: np.ndarray | None,
    gx: np.ndarray | None,
) -> None:
    """Gradients of :func:`conv2d_relu_max_pool_forward` for the pooled-output gradient g, from
    its ``out`` and ``arg``: into ``gw``, ``gb``, ``gx`` (each skipped when None)."""
    _check_pool("conv2d_relu_max_pool_backward", kernel, stride)
    _check_shapes(
        "conv2d_relu_max_pool_backward",
        x,
        w,
        pooled=(g, out, arg, kernel, stride),
        grads=(gw, gb, gx),
    )
    if numba is None:  # pragma: no cover
        conv2d_relu_max_pool_backward_reference(g, x, w, out, arg, kernel, stride, gw, gb, gx)
        return
    _fused_backward(g, x, w, out, arg, tuple(kernel), tuple(stride), gw, gb, gx)


def conv1d_relu_max_pool_forward(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    kernel: tuple,
    stride: tuple,
    out: np.ndarray,
    arg: np.ndarray,
) -> None:
    """1-d :func:`conv2d_relu_max_pool_forward`: x (N, C, L) (any strided view), w (O, C, K),
    kernel and stride (K,) pairs of the pooling, out and arg (N, O, P)."""
    k2, s2 = (1,) + tuple(kernel), (1,) + tuple(stride)
    _check_pool("conv1d_relu_max_pool_forward", k2, s2)
    _check_shapes("conv1d_relu_max_pool_forward", x, w, bias, pooled=(out, arg, k2, s2))
    if numba is None:  # pragma: no cover
        conv1d_relu_max_pool_forward_reference(x, w, bias, kernel, stride, out, arg)
        return
    _fused_forward(x, w, bias, k2, s2, out, arg)


def conv1d_relu_max_pool_backward(
    g: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    out: np.ndarray,
    arg: np.ndarray,
    kernel: tuple,
    stride: tuple,
    gw: np.ndarray | None,
    gb: np.ndarray | None,
    gx: np.ndarray | None,
) -> None:
    """Gradients of :func:`conv1d_relu_max_pool_forward` (see the 2-d form)."""
    k2, s2 = (1,) + tuple(kernel), (1,) + tuple(stride)
    _check_pool("conv1d_relu_max_pool_backward", k2, s2)
    _check_shapes(
        "conv1d_relu_max_pool_backward", x, w, pooled=(g, out, arg, k2, s2), grads=(gw, gb, gx)
    )
    if numba is None:  # pragma: no cover
        conv1d_relu_max_pool_backward_reference(g, x, w, out, arg, kernel, stride, gw, gb, gx)
        return
    _fused_backward(g, x, w, out, arg, k2, s2, gw, gb, gx)


def fused_buffers(x_shape: tuple, w_shape: tuple, kernel: tuple, stride: tuple, dtype):
    """Fresh ``(out, arg)`` buffers for the fused forward of these shapes (1-d or 2-d)."""
    conv = tuple(n - k + 1 for n, k in zip(x_shape[2:], w_shape[2:]))
    shape = (x_shape[0], w_shape[0]) + _pool_out_shape(conv, kernel, stride)
    return np.empty(shape, dtype), np.empty(shape, pool_arg_dtype(tuple(kernel)))
