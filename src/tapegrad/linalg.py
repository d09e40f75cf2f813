"""PyTorch's ``torch.linalg`` norms: ``vector_norm``, ``matrix_norm`` and ``norm``, composed
of tapegrad's reductions (so differentiable, twice too, and compiled like any operation).
tapegrad has no matrix factorisations (``inv``, ``det``, ``svd``, ...)."""

from __future__ import annotations

import numpy as np

from .autodiff import ops
from .autodiff.errors import ShapeError
from .autodiff.tensor import Tensor

__all__ = ["vector_norm", "matrix_norm", "norm"]


def _t(x, dtype) -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor(x)
    return x if dtype is None else x.to(dtype)


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The ``ord``-norm of the entries over ``dim`` (an int, a tuple, or None: all): 2, 1,
    inf, -inf, 0 (the count of nonzero entries) or any p > 0."""
    x = _t(x, dtype)
    if ord == 0:
        return ops.sum(ops.astype(x != 0, x.dtype), dim, keepdim)
    return ops.norm(x, ord, dim, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The matrix norm over the two axes ``dim``: ``"fro"`` (Frobenius), 1 / -1 (the largest
    / smallest column sum of absolute values) or inf / -inf (the same over rows)."""
    A = _t(A, dtype)
    if len(dim) != 2 or A.ndim < 2:
        raise ShapeError(
            f"matrix_norm: expects two axes of a tensor of at least 2, got dim {dim} and "
            f"shape {tuple(A.shape)}"
        )
    rows, cols = (d % A.ndim for d in dim)
    if ord == "fro":
        return ops.norm(A, 2, (rows, cols), keepdim)
    if ord not in (1, -1, np.inf, -np.inf):
        raise ValueError(f"matrix_norm: ord must be 'fro', 1, -1, inf or -inf, got {ord!r}")
    summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
    sums = ops.sum(ops.absolute(A), summed, True)
    out = ops.max(sums, other, True) if ord > 0 else ops.min(sums, other, True)
    return out if keepdim else ops.squeeze(out, tuple(sorted((rows, cols))))


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """A vector norm over one axis (or of a 1-d tensor), a matrix norm over two (or of a
    2-d tensor); with neither ``ord`` nor ``dim``, the 2-norm of all entries."""
    A = _t(A, dtype)
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None:
        if dim is not None and len(dim) == 2:
            return matrix_norm(A, "fro", dim, keepdim)
        return vector_norm(A, 2, dim, keepdim)
    if dim is None:
        if A.ndim not in (1, 2):
            raise ShapeError(
                f"norm: with ord={ord!r} and no dim the input must be 1-d or 2-d, "
                f"got {tuple(A.shape)}"
            )
        dim = tuple(range(A.ndim))
    if len(dim) == 1:
        return vector_norm(A, ord, dim, keepdim)
    return matrix_norm(A, ord, dim, keepdim)
