"""Matrix multiplication, batched and broadcasting like ``np.matmul``."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..kernels.dispatch import kernels_for
from . import samples as S
from .args import plain
from .registry import Sample, primitive, run
from .shape import _permute, sum_to


def _as_matrices(a, b, g):
    """View 1-D operands and the gradient as matrices, so one rule serves every case."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = g2[..., None, :] if b.ndim > 1 else g2[None]
    if b.ndim == 1:
        g2 = g2[..., None]
    return a2, b2, g2


def _swap_last(m):
    """The matrices of ``m`` transposed (a view)."""
    axes = tuple(range(m.ndim - 2)) + (m.ndim - 1, m.ndim - 2)
    return run(_permute, m, axes=axes)


def _vjp_a(g, out, a, b):
    a2, b2, g2 = _as_matrices(a, b, g)
    return _sum_to(run(matmul, g2, _swap_last(b2)), a2.shape).reshape(a.shape)


def _sum_to(g, shape):
    return g if g.shape == tuple(shape) else run(sum_to, g, shape=shape)


def transposed_layout(b) -> bool:
    """True for a matrix stored column-major (a transposed view, as ``W.T`` in a Linear
    layer). Its gradient is then computed as ``(g^T a)^T`` so that it comes out in the same
    layout: the transposing VJP hands the weight a C-ordered gradient, copied at memory speed
    instead of element by element across rows (75 us against 10 us for a 784 x 128 weight)."""
    return b.ndim == 2 and b.flags.f_contiguous and not b.flags.c_contiguous


def _vjp_b(g, out, a, b):
    if b.ndim == 2 and a.ndim >= 3:
        # a weight broadcast over a batch: fold the batch into the rows, one GEMM with the
        # batch in its inner dimension instead of a GEMM per matrix and a sum over the batch
        a, g = a.reshape((-1, a.shape[-1])), g.reshape((-1, g.shape[-1]))
    if a.ndim == 2 and transposed_layout(plain(b)):
        return _swap_last(run(matmul, _swap_last(g), a))  # (g^T a)^T: b's own layout
    a2, b2, g2 = _as_matrices(a, b, g)
    return _sum_to(run(matmul, _swap_last(a2), g2), b2.shape).reshape(b.shape)


def _samples(rng):
    pairs = [
        ((2, 3), (3, 4)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((3,), (3,)),
        ((5, 2, 3), (3, 4)),
        ((5, 2, 3), (5, 3, 1)),
        ((2, 1, 2, 3), (4, 3, 2)),
        ((1, 3), (3, 1)),
        ((0, 3), (3, 2)),
        ((2, 0), (0, 3)),
    ]
    return [Sample((S.values(rng, a), S.values(rng, b))) for a, b in pairs]


def _matmul(a, b, out=None):
    ka = a.shape[-1] if a.ndim else None
    kb = (b.shape[0] if b.ndim == 1 else b.shape[-2]) if b.ndim else None
    if ka is None or kb is None:
        raise ShapeError(
            f"matmul: operands must have at least one dimension, got shapes {a.shape} and {b.shape}"
        )
    if ka != kb:
        raise ShapeError(
            f"matmul: shapes {a.shape} and {b.shape} do not fit: the last dim of the "
            f"first ({ka}) must equal the {'first' if b.ndim == 1 else 'second-to-last'}"
            f" dim of the second ({kb})"
        )
    if a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b, out=out)
    if out is None:
        if type(a) is not np.ndarray or type(b) is not np.ndarray:
            return np.matmul(a, b)
        batch = () if a.ndim == b.ndim == 2 else _batch(a.shape[:-2], b.shape[:-2])
        dtype = a.dtype if a.dtype == b.dtype else np.result_type(a, b)
        out = np.empty((*batch, a.shape[-2], b.shape[-1]), dtype)
    return matmul_into(a, b, out)


def _batch(a_batch, b_batch):
    try:
        return np.broadcast_shapes(a_batch, b_batch)
    except ValueError:
        raise ShapeError(
            f"matmul: the batch dimensions {a_batch} and {b_batch} of the operands do not broadcast"
        ) from None


def matmul_into(a, b, out):
    """``out[...] = a @ b`` (operands of two or more dimensions) on the kernels of their device:
    on the CPU, large products over numba's threads (``kernels/cpu/products.py``); returns out
    (a new array where ``out`` is None)."""
    if out is None:
        return _matmul(a, b)
    return kernels_for(a, b).matmul(a, b, out)


def _bind(a, b, out):
    """A plan's product, bound once to its arrays (``kernels/cpu/products.bind_matmul``);
    None (the forward each call) for a 1-D operand or shapes the forward would refuse."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        return None
    return kernels_for(a, b).bind_matmul(a, b, out)


matmul = primitive(
    "matmul",
    _matmul,
    (_vjp_a, _vjp_b),
    reference=lambda a, b: _reference(a, b),
    samples=_samples,
    bind=_bind,
    doc="Matrix product a @ b with NumPy's batching and 1-D rules.",
)


def _reference(a, b):
    """Loop-free but independent of np.matmul: broadcast then sum products."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    out = np.sum(a2[..., :, :, None] * b2[..., None, :, :], axis=-2)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out
