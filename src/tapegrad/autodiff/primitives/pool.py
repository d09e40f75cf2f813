"""Max pooling of (N, C, L) sequences and (N, C, H, W) images, with stride, padding (implicit
-inf), dilation and ceil mode, PyTorch's indices, and max unpooling.

A compiled loop (``kernels/cpu/pool.py``, its CUDA twin ``kernels/cuda/pool.py``) keeps each
window's maximum and the offset that holds it (the first one at ties, NaN counting as the
maximum); that offset map is what the forward saves, and the backward (``max_pool_backward``)
routes the gradient with. Its VJP gathers at the same offsets (``max_pool_gather``), whose VJP
is the backward again, so max pooling is twice differentiable. Padding and ceil mode are a -inf
border around the input (per side, computed by the public functions), in a buffer the kernel
reads.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..backend import is_array, xp_of
from ..errors import ShapeError
from ..kernels.dispatch import kernels_for
from . import samples as S
from .args import plain
from .conv import _check_float, _check_rank, _interior, _padded_shape, _tuple_arg
from .registry import Sample, kernel_scratch, primitive, run, scratch


def _any(padding) -> bool:
    return any(lo or hi for lo, hi in padding)


def _pool_fwd(x, kernel, stride, padding, dilation, out=None, ws=None):
    """(out, arg): each window's maximum and its offset in the window."""
    xp = x
    if _any(padding):
        xp = scratch(ws, "xp", _padded_shape(x.shape, padding), x.dtype, like=x)
        xp.fill(-np.inf)
        np.copyto(xp[_interior(padding, x.shape)], x)
    fn = kernels_for(x).max_pool_forward
    scr = kernel_scratch(ws, x)
    if out is None:
        return fn(xp, kernel, stride, dilation=dilation, scratch=scr)
    return fn(xp, kernel, stride, out=out[0], arg=out[1], dilation=dilation, scratch=scr)


def _geo(kernel, stride, padding, dilation) -> dict:
    return dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation)


def _pool_vjp(g, out, x, kernel, stride, padding, dilation, aux):
    geo = _geo(kernel, stride, padding, dilation)
    return run(_max_pool_backward, g, aux[0], x_shape=x.shape, **geo)


def _positions(arg, kernel, stride, dilation):
    """For each output position of (N*C, out...) planes: the plane and the (row, column) of the
    (padded) input entry its window's maximum came from."""
    k2, s2, d2 = (
        ((1,) + kernel, (1,) + stride, (1,) + dilation)
        if len(kernel) == 1
        else (
            kernel,
            stride,
            dilation,
        )
    )
    a = arg.reshape((-1,) + ((1,) if arg.ndim == 3 else ()) + arg.shape[2:]).astype(np.intp)
    xp = xp_of(arg)
    rows = xp.arange(a.shape[1])[:, None] * s2[0] + (a // k2[1]) * d2[0]
    cols = xp.arange(a.shape[2])[None, :] * s2[1] + (a % k2[1]) * d2[1]
    return xp.arange(a.shape[0])[:, None, None], rows, cols


def _planes_of(a: np.ndarray) -> np.ndarray:
    return a.reshape((-1,) + ((1,) if a.ndim == 3 else ()) + a.shape[2:])


def _pool_gather_fwd(h, arg, kernel, stride, padding, dilation):
    hp = np.pad(h, [(0, 0), (0, 0)] + list(padding)) if _any(padding) else h
    return _planes_of(hp)[_positions(arg, kernel, stride, dilation)].reshape(arg.shape)


def _pool_backward_fwd(g, arg, x_shape, kernel, stride, padding, dilation, out=None, ws=None):
    fn = kernels_for(g).max_pool_backward
    scr = kernel_scratch(ws, g)
    if not _any(padding):
        return fn(g, arg, x_shape, kernel, stride, gx=out, dilation=dilation, scratch=scr)
    gxp = scratch(ws, "gxp", _padded_shape(x_shape, padding), g.dtype, like=g)
    fn(g, arg, gxp.shape, kernel, stride, gx=gxp, dilation=dilation, scratch=scr)
    gx = xp_of(g).empty(x_shape, g.dtype) if out is None else out
    np.copyto(gx, gxp[_interior(padding, x_shape)])
    return gx


def _pool_backward_reference(g, arg, x_shape, kernel, stride, padding, dilation):
    gxp = np.zeros(_padded_shape(tuple(x_shape), padding))
    m, rows, cols = _positions(arg, kernel, stride, dilation)
    np.add.at(_planes_of(gxp), (m, rows, cols), g.reshape(rows.shape))
    return gxp[_interior(padding, tuple(x_shape))]


def _pool_gather_reference(h, arg, kernel, stride, padding, dilation):
    hp = np.pad(h, [(0, 0), (0, 0)] + list(padding))
    d = h.ndim - 2
    out = np.empty(arg.shape)
    for idx in np.ndindex(*arg.shape):
        q = int(arg[idx])
        offs = (q // kernel[-1], q % kernel[-1]) if d == 2 else (q,)
        src = idx[:2] + tuple(idx[2 + i] * stride[i] + offs[i] * dilation[i] for i in range(d))
        out[idx] = hp[src]
    return out


def _pool_reference(x, kernel, stride, padding, dilation):
    xp = np.pad(x, [(0, 0), (0, 0)] + list(padding), constant_values=-np.inf)
    d = x.ndim - 2
    reach = tuple(dl * (k - 1) + 1 for dl, k in zip(dilation, kernel))
    out_shape = tuple((xp.shape[2 + i] - reach[i]) // stride[i] + 1 for i in range(d))
    out = np.empty(x.shape[:2] + out_shape, dtype=x.dtype)
    for pos in itertools.product(*(range(n) for n in out_shape)):
        window = xp[
            (slice(None), slice(None))
            + tuple(
                slice(pos[i] * stride[i], pos[i] * stride[i] + reach[i], dilation[i])
                for i in range(d)
            )
        ]
        out[(slice(None), slice(None)) + pos] = window.reshape(x.shape[:2] + (-1,)).max(axis=-1)
    return out


def _pool_cases(d):
    # (x shape, kernel, stride, padding pairs, dilation)
    z1, z2 = ((0, 0),), ((0, 0), (0, 0))
    return {
        1: [
            ((2, 3, 8), (2,), (2,), z1, (1,)),
            ((1, 2, 9), (3,), (2,), z1, (1,)),
            ((2, 1, 7), (3,), (3,), z1, (1,)),
            ((1, 1, 5), (5,), (5,), z1, (1,)),
            ((2, 2, 10), (2,), (3,), z1, (1,)),
            ((2, 2, 9), (3,), (2,), ((1, 2),), (2,)),  # padding, ceil, dilation
        ],
        2: [
            ((2, 3, 6, 6), (2, 2), (2, 2), z2, (1, 1)),
            ((1, 2, 7, 9), (3, 3), (2, 2), z2, (1, 1)),
            ((2, 1, 5, 7), (2, 3), (2, 3), z2, (1, 1)),
            ((1, 1, 4, 4), (4, 4), (4, 4), z2, (1, 1)),
            ((2, 2, 7, 8), (2, 2), (3, 1), z2, (1, 1)),
            ((1, 2, 7, 6), (3, 2), (2, 2), ((1, 1), (1, 1)), (1, 2)),
        ],
    }[d]


def _pool_samples(d):
    def build(rng):
        return [
            Sample((S.distinct(rng, xs),), _geo(k, s, p, dl)) for xs, k, s, p, dl in _pool_cases(d)
        ]

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
    doc="Max over length-K windows of (N, C, L) with a stride, -inf padding per side and "
    "dilation; the gradient goes to the first maximum of each window.",
)
_max_pool2d = primitive(
    "max_pool2d",
    _pool_fwd,
    (_pool_vjp,),
    reference=_pool_reference,
    samples=_pool_samples(2),
    aux=True,
    doc="Max over KH x KW windows of (N, C, H, W) with a stride, -inf padding per side and "
    "dilation; the gradient goes to the first maximum of each window.",
)
_max_pool_backward = primitive(
    "max_pool_backward",
    _pool_backward_fwd,
    (
        lambda h, out, g, arg, x_shape, **geo: run(_max_pool_gather, h, arg, **geo),
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
        lambda g, out, h, arg, **geo: run(_max_pool_backward, g, arg, x_shape=h.shape, **geo),
        None,
    ),
    reference=_pool_gather_reference,
    samples=lambda rng: [
        Sample(
            (S.values(rng, a.attrs["x_shape"]), a.args[1]),
            {k: v for k, v in a.attrs.items() if k != "x_shape"},
        )
        for a in _pool_grad_samples(rng)
    ],
    doc="Each window's entry at its maximum's offset (``arg``): the VJP of max_pool_backward, "
    "which is its own VJP in turn, so max pooling is twice differentiable.",
)


def _indices_fwd(x, kernel, stride, padding, dilation, ws=None):
    """PyTorch's indices: each window maximum's position in its (unpadded) input plane."""
    _, arg = _pool_fwd(x, kernel, stride, padding, dilation, ws=ws)
    _, rows, cols = _positions(arg, kernel, stride, dilation)
    width = x.shape[-1]
    rows = rows - (padding[0][0] if len(kernel) == 2 else 0)
    cols = cols - padding[-1][0]
    return (rows * width + cols).reshape(arg.shape).astype(np.int64)


def _indices_reference(x, kernel, stride, padding, dilation):
    out = _pool_reference(x, kernel, stride, padding, dilation)
    planes, flat = _planes_of(x).reshape(x.shape[0] * x.shape[1], -1), out.reshape(-1)
    res = np.array(
        [
            int(np.flatnonzero(planes[i // (out.size // planes.shape[0])] == v)[0])
            for i, v in enumerate(flat)
        ]
    )
    return res.reshape(out.shape)


max_pool_indices = primitive(
    "max_pool_indices",
    _indices_fwd,
    None,
    reference=_indices_reference,
    samples=lambda rng: _pool_samples(1)(rng) + _pool_samples(2)(rng),
    doc="Where each window's maximum sits in its input plane (flat, int64): the indices "
    "max_pool(..., return_indices=True) returns and max_unpool takes. Not differentiable.",
)


def _pool_args(op, d, x, kernel_size, stride, padding, dilation, ceil_mode) -> tuple:
    xa = _check_float(op, "x", x)
    _check_rank(op, "x", xa, d + 2, "(N, C, L)" if d == 1 else "(N, C, H, W)")
    kernel = _tuple_arg(op, "kernel_size", kernel_size, d, 1)
    stride = kernel if stride is None else _tuple_arg(op, "stride", stride, d, 1)
    pad = _tuple_arg(op, "padding", padding, d, 0)
    dilation = _tuple_arg(op, "dilation", dilation, d, 1)
    if any(2 * p > k for p, k in zip(pad, kernel)):
        raise ShapeError(f"{op}: padding {pad} must be at most half the kernel size {kernel}")
    pairs = []
    for n, k, s, p, dl in zip(xa.shape[2:], kernel, stride, pad, dilation):
        span = n + 2 * p - dl * (k - 1) - 1
        if span < 0:
            padded = tuple(m + 2 * q for m, q in zip(xa.shape[2:], pad))
            raise ShapeError(
                f"{op}: kernel {kernel} (dilation {dilation}) is larger than the padded input "
                f"{padded} (x {xa.shape}, padding {pad})"
            )
        count = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (count - 1) * s >= n + p:  # the last window must start inside
            count -= 1
        # -inf padding after: p, or more where ceil mode keeps a last window reaching further
        # (the kernel's floor count over the padded input is then exactly ``count``)
        pairs.append((p, max(p, (count - 1) * s + dl * (k - 1) + 1 - n - p)))
    return _geo(kernel, stride, tuple(pairs), dilation)


def _max_pool(op, prim, d, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    geo = _pool_args(op, d, x, kernel_size, stride, padding, dilation, ceil_mode)
    out = prim(x, **geo)
    return (out, max_pool_indices(x, **geo)) if return_indices else out


def max_pool1d(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """Max pooling of (N, C, L) over windows of ``kernel_size`` (stride defaults to it), with
    -inf ``padding`` on both sides, ``dilation``, ``ceil_mode`` (keep a last partial window) and
    ``return_indices`` (also each maximum's position, for :func:`max_unpool1d`)."""
    return _max_pool(
        "max_pool1d",
        _max_pool1d,
        1,
        x,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        return_indices,
    )


def max_pool2d(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """Max pooling of (N, C, H, W); kernel, stride, padding and dilation an int or a pair
    (stride defaults to the kernel); floor mode unless ``ceil_mode``; ``return_indices`` as
    PyTorch (flat positions within each input plane)."""
    return _max_pool(
        "max_pool2d",
        _max_pool2d,
        2,
        x,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        return_indices,
    )


def _unpool_fwd(x, indices, size, out=None):
    """Each value of x at its index of a zero (N, C, prod(size)) plane, as (N, C, *size)."""
    n, c = x.shape[:2]
    res = xp_of(x).zeros((n, c) + tuple(size), x.dtype) if out is None else out
    if out is not None:
        res.fill(0)
    np.put_along_axis(res.reshape(n, c, -1), indices.reshape(n, c, -1), x.reshape(n, c, -1), 2)
    return res


def _unpool_vjp(g, out, x, indices, size):
    from .indexing import _gather

    n, c = x.shape[:2]
    flat = run(_gather, g.reshape((n, c, -1)), indices.reshape((n, c, -1)), axis=2)
    return flat.reshape(x.shape)


def _unpool_samples(rng):
    out = []
    for d in (1, 2):
        for s in _pool_samples(d)(rng):
            (x,) = s.args
            idx = _indices_fwd(x, **s.attrs)
            flat = idx.reshape(idx.shape[0] * idx.shape[1], -1)
            if all(len(set(row)) == len(row) for row in flat.tolist()):
                # overlapping windows can pick one entry twice: unpooling then writes it twice
                # (equal values, when they come from max pooling), and the VJP, as PyTorch's,
                # gives each its gradient, which finite differences of other values would not
                out.append(Sample((S.values(rng, idx.shape), idx), {"size": x.shape[2:]}))
    return out


def _unpool_reference(x, indices, size):
    n, c = x.shape[:2]
    res = np.zeros((n * c, int(np.prod(size))))
    for k, (row, idx) in enumerate(zip(x.reshape(n * c, -1), indices.reshape(n * c, -1))):
        res[k, idx] = row
    return res.reshape((n, c) + tuple(size))


_max_unpool = primitive(
    "max_unpool",
    _unpool_fwd,
    (_unpool_vjp, None),
    reference=_unpool_reference,
    samples=_unpool_samples,
    doc="Max unpooling: each value at its max-pool index of a zero output; its VJP gathers at "
    "those indices (every window that picked an entry gets its gradient, as in PyTorch).",
)


def _unpool(op, d, x, indices, kernel_size, stride, padding, output_size):
    xa = _check_float(op, "x", x)
    _check_rank(op, "x", xa, d + 2, "(N, C, L)" if d == 1 else "(N, C, H, W)")
    ia = plain(indices)
    ia = ia if is_array(ia) else np.asarray(ia)
    if ia.shape != xa.shape or ia.dtype.kind not in "iu":
        raise ShapeError(
            f"{op}: indices must be integers of the input's shape {xa.shape}, got {ia.dtype} "
            f"{ia.shape}"
        )
    kernel = _tuple_arg(op, "kernel_size", kernel_size, d, 1)
    stride = kernel if stride is None else _tuple_arg(op, "stride", stride, d, 1)
    pad = _tuple_arg(op, "padding", padding, d, 0)
    size = tuple((n - 1) * s - 2 * p + k for n, s, p, k in zip(xa.shape[2:], stride, pad, kernel))
    if output_size is not None:
        size = tuple(int(v) for v in tuple(output_size)[-d:])
    if ia.size and (ia.min() < 0 or ia.max() >= int(np.prod(size))):
        raise ShapeError(f"{op}: an index is out of range for the output size {size}")
    return _max_unpool(x, indices, size=size)


def max_unpool1d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of max_pool1d: each value of x at its ``indices`` position of a zero
    (N, C, L_out) array (L_out from the pooling's geometry, or ``output_size``); differentiable
    in x."""
    return _unpool("max_unpool1d", 1, x, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of max_pool2d: each value of x at its ``indices`` position of a zero
    (N, C, H_out, W_out) array; differentiable in x."""
    return _unpool("max_unpool2d", 2, x, indices, kernel_size, stride, padding, output_size)
