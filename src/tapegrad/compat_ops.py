"""PyTorch's other top-level functions that training programs call, composed from tapegrad's
operations (so differentiable where PyTorch's are, and replayed by compiled steps):
``clamp``, ``unsqueeze``, ``randperm``, ``empty``, ``mm``, ``mv``, ``dot``, ``outer``,
``amax``/``amin``, ``movedim``, ``swapaxes``, ``ravel``, ``vstack``/``hstack``,
``nan_to_num``, ``count_nonzero``, ``logit``, ``var_mean``, ``allclose``, ``bernoulli``,
``normal``, and the constants ``inf``, ``nan``, ``pi``, ``e``. Re-exported by
``tapegrad/__init__.py``.
"""

from __future__ import annotations

import math

import numpy as np

from . import nn
from .autodiff import ops
from .autodiff.backend import float_dtype
from .autodiff.core.state import active_trace
from .autodiff.errors import ShapeError, TraceError
from .autodiff.tensor import Tensor
from .autodiff.tensor_torch import batch_matmul, narrow, t  # noqa: F401  (PyTorch's too)

inf, nan, pi, e = math.inf, math.nan, math.pi, math.e
Size = tuple  # a tensor's shape is a tuple; torch.Size(...) builds one


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def clamp(x, min=None, max=None) -> Tensor:  # noqa: A002  (PyTorch's names)
    """``x`` limited to ``[min, max]`` (either may be None)."""
    return ops.clip(x, min, max)


def clamp_min(x, min) -> Tensor:  # noqa: A002
    return ops.clip(x, min, None)


def clamp_max(x, max) -> Tensor:  # noqa: A002
    return ops.clip(x, None, max)


def unsqueeze(x, dim: int) -> Tensor:
    return ops.expand_dims(x, dim)


def randperm(n: int, *, generator=None, dtype=np.int64, device=None) -> Tensor:
    """A random permutation of ``0..n-1`` (int64), drawn from ``generator`` (default:
    ``nn.init``'s generator); a compiled step draws a new one on every call."""
    gen = generator if generator is not None else nn.init.default_generator()
    u = ops.random_draw(shape=(int(n),), dtype=np.float64, dist="uniform", rng=gen)
    perm = ops.argsort(u)
    return perm if np.dtype(dtype) == np.int64 else perm.to(dtype)


def empty(*shape, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of ``shape`` (zeros: tapegrad never hands out uninitialised memory)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    data = np.zeros(tuple(int(s) for s in shape), dtype=float_dtype(dtype))
    return Tensor(data, requires_grad=requires_grad, device=device)


def empty_like(x, dtype=None, requires_grad: bool = False) -> Tensor:
    from .creation import zeros_like

    return zeros_like(x, dtype=dtype, requires_grad=requires_grad)


def _check_rank(op: str, pairs) -> None:
    for x, rank in pairs:
        if _t(x).ndim != rank:
            shapes = [tuple(_t(a).shape) for a, _ in pairs]
            raise ShapeError(
                f"{op}: expects {[r for _, r in pairs]}-d tensors, got shapes {shapes}"
            )


def mm(a, b) -> Tensor:
    """Matrix product of two 2-d tensors."""
    _check_rank("mm", [(a, 2), (b, 2)])
    return ops.matmul(a, b)


def mv(a, v) -> Tensor:
    """Matrix-vector product."""
    _check_rank("mv", [(a, 2), (v, 1)])
    return ops.matmul(a, v)


def dot(a, b) -> Tensor:
    """Inner product of two 1-d tensors."""
    _check_rank("dot", [(a, 1), (b, 1)])
    return ops.sum(_t(a) * b)


def outer(a, b) -> Tensor:
    """``a[i] * b[j]`` of two 1-d tensors."""
    _check_rank("outer", [(a, 1), (b, 1)])
    return ops.reshape(a, (-1, 1)) * ops.reshape(b, (1, -1))


ger = outer


def amax(x, dim=None, keepdim: bool = False) -> Tensor:
    """The maximum over ``dim`` (an int or a tuple; all axes when None)."""
    return ops.max(x, dim, keepdim)


def amin(x, dim=None, keepdim: bool = False) -> Tensor:
    return ops.min(x, dim, keepdim)


def movedim(x, source, destination) -> Tensor:
    """Move axes ``source`` to positions ``destination`` (ints or sequences of them)."""
    x = _t(x)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    n = x.ndim
    src, dst = [s % n for s in src], [d % n for d in dst]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"movedim: source {source} and destination {destination} do not match")
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return ops.permute(x, tuple(order))


moveaxis = movedim


def swapaxes(x, axis0: int, axis1: int) -> Tensor:
    return _t(x).transpose(axis0, axis1)


swapdims = swapaxes


def ravel(x) -> Tensor:
    return ops.reshape(x, (-1,))


def vstack(tensors) -> Tensor:
    """Stack along the first axis (1-d tensors become rows)."""
    return ops.cat([t if _t(t).ndim > 1 else ops.reshape(t, (1, -1)) for t in tensors], 0)


def hstack(tensors) -> Tensor:
    """Join along the second axis (along the first for 1-d tensors)."""
    tensors = list(tensors)
    return ops.cat(tensors, 0 if _t(tensors[0]).ndim == 1 else 1)


def nan_to_num(x, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
    """NaNs to ``nan``, infinities to ``posinf``/``neginf`` (default: the dtype's extremes)."""
    x = _t(x)
    big = np.finfo(x.dtype).max if x.dtype.kind == "f" else None
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf

    def const(v):
        return Tensor(np.asarray(v, dtype=x.dtype))

    y = ops.where(ops.isnan(x), const(nan), x)
    y = ops.where(ops.isinf(x) & (x > 0), const(posinf), y)
    return ops.where(ops.isinf(x) & (x < 0), const(neginf), y)


def count_nonzero(x, dim=None) -> Tensor:
    """How many entries (over ``dim``) are nonzero; int64."""
    return ops.sum(ops.astype(_t(x) != 0, np.int64), dim)


def logit(x, eps: float | None = None) -> Tensor:
    """``log(x / (1 - x))``, with ``x`` first clamped to ``[eps, 1 - eps]`` when given."""
    x = _t(x) if eps is None else ops.clip(x, eps, 1 - eps)
    return ops.log(x / (1 - x))


def var_mean(x, dim=None, *, correction: int = 1, keepdim: bool = False, unbiased=None):
    """``(var, mean)`` over ``dim``."""
    if unbiased is not None:
        correction = int(bool(unbiased))
    return ops.var(x, dim, correction, keepdim), ops.mean(x, dim, keepdim)


def allclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every entry of ``a`` is close to ``b`` (a Python bool, as in PyTorch)."""
    return bool(ops.all(ops.isclose(_t(a), b, rtol=rtol, atol=atol, equal_nan=equal_nan)).item())


def bernoulli(p, *, generator=None) -> Tensor:
    """1 with probability ``p`` (entrywise), else 0, in ``p``'s dtype; not differentiable."""
    p = _t(p)
    gen = generator if generator is not None else nn.init.default_generator()
    u = ops.random_draw(shape=tuple(p.shape), dtype=p.dtype.type, dist="uniform", rng=gen)
    return ops.astype(u < p.detach(), p.dtype)


def normal(mean=0.0, std=1.0, size=None, *, generator=None) -> Tensor:
    """Samples ``mean + std * N(0, 1)``: of ``size`` for numbers, else of the broadcast shape of
    the tensors ``mean`` and ``std`` (differentiable in them)."""
    gen = generator if generator is not None else nn.init.default_generator()
    if size is None:
        shape = np.broadcast_shapes(np.shape(getattr(mean, "data", mean)),
                                    np.shape(getattr(std, "data", std)))  # fmt: skip
    else:
        shape = tuple(size)
    like = mean if isinstance(mean, Tensor) else std if isinstance(std, Tensor) else None
    dtype = like.dtype if like is not None else float_dtype(None)
    z = ops.random_draw(shape=tuple(shape), dtype=np.dtype(dtype).type, dist="normal", rng=gen)
    return z * std + mean


# -- PyTorch's signatures of functions tapegrad has with NumPy's (dim=, dims=, beta/alpha) --------
def _dim(name: str, dim, axis):
    """The axis from PyTorch's ``dim`` or NumPy's ``axis`` (given by keyword)."""
    return dim if axis is None else axis


def sort(input, dim: int = -1, descending: bool = False, stable: bool = False, *, axis=None):  # noqa: A002
    """``(values, indices)`` sorted along ``dim`` (ties keep their order either way)."""
    return ops.sort(input, _dim("sort", dim, axis), descending)


def argsort(input, dim: int = -1, descending: bool = False, stable: bool = False, *, axis=None):  # noqa: A002
    """The indices that sort ``input`` along ``dim`` (int64; ties keep their order either way)."""
    return ops.argsort(input, _dim("argsort", dim, axis), descending)


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, axis=None):  # noqa: A002
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along ``dim``."""
    return ops.topk(input, k, _dim("topk", dim, axis), largest, sorted)


def cumsum(input, dim=None, *, dtype=None, axis=None) -> Tensor:  # noqa: A002
    out = ops.cumsum(input if dtype is None else _t(input).to(dtype), _dim("cumsum", dim, axis))
    return out


def cumprod(input, dim=None, *, dtype=None, axis=None) -> Tensor:  # noqa: A002
    return ops.cumprod(input if dtype is None else _t(input).to(dtype), _dim("cumprod", dim, axis))


def prod(input, dim=None, keepdim: bool = False, *, dtype=None, axis=None, keepdims=None):  # noqa: A002
    x = input if dtype is None else _t(input).to(dtype)
    return ops.prod(x, _dim("prod", dim, axis), keepdim if keepdims is None else keepdims)


def flip(input, dims=None, *, axis=None) -> Tensor:  # noqa: A002
    """``input`` reversed along ``dims`` (an int or a sequence)."""
    return ops.flip(input, _dim("flip", dims, axis))


def where(condition, input=None, other=None):  # noqa: A002
    """``input`` where ``condition`` holds, else ``other``; with the condition alone, the
    indices of its nonzero entries, one tensor per axis (PyTorch's ``where(cond)``)."""
    if input is None and other is None:
        return ops.nonzero(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("where: give both input and other, or neither (the nonzero indices)")
    return ops.where(condition, input, other)


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * (mat1 @ mat2)`` (``input`` ignored when ``beta`` is 0)."""
    prod_ = ops.matmul(mat1, mat2)
    prod_ = prod_ if alpha == 1 else prod_ * alpha
    return prod_ if beta == 0 else prod_ + (input if beta == 1 else _t(input) * beta)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * bmm(batch1, batch2)``."""
    prod_ = batch_matmul(batch1, batch2)
    prod_ = prod_ if alpha == 1 else prod_ * alpha
    return prod_ if beta == 0 else prod_ + (input if beta == 1 else _t(input) * beta)


def trace(input) -> Tensor:  # noqa: A002
    """The sum of a matrix's main diagonal."""
    x = _t(input)
    if x.ndim != 2:
        raise ShapeError(f"trace: expects a matrix, got shape {tuple(x.shape)}")
    return ops.sum(ops.diagonal(x))


def cdist(x1, x2, p: float = 2.0, **kwargs) -> Tensor:
    """The ``p``-norm distances between the rows of ``x1 (..., P, M)`` and ``x2 (..., R, M)``:
    ``(..., P, R)`` (gradient 0 at a distance of 0, as PyTorch's)."""
    a, b = _t(x1), _t(x2)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"cdist: expects (..., P, M) and (..., R, M), got {a.shape} and {b.shape}")
    diff = ops.expand_dims(a, -2) - ops.expand_dims(b, -3)
    return ops.norm(diff, p, -1)


def kron(input, other) -> Tensor:  # noqa: A002
    """The Kronecker product: block ``(i, j, ...)`` is ``input[i, j, ...] * other``
    (the fewer axes padded in front with 1s)."""
    a, b = _t(input), _t(other)
    n = max(a.ndim, b.ndim)
    sa, sb = (1,) * (n - a.ndim) + tuple(a.shape), (1,) * (n - b.ndim) + tuple(b.shape)
    inter_a = tuple(v for s in sa for v in (s, 1))  # (a0, 1, a1, 1, ...)
    inter_b = tuple(v for s in sb for v in (1, s))  # (1, b0, 1, b1, ...)
    out = ops.reshape(a, inter_a) * ops.reshape(b, inter_b)
    return ops.reshape(out, tuple(x * y for x, y in zip(sa, sb)))


def _triangle_indices(which, row: int, col: int, offset: int, dtype) -> Tensor:
    rows, cols = which(int(row), int(offset), int(col))
    return Tensor(np.stack([rows, cols]).astype(dtype))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=np.int64, **kwargs) -> Tensor:
    """``(2, N)``: the row and column indices of the lower triangle of a ``row x col`` matrix
    (``offset`` diagonals above the main one included), row by row."""
    return _triangle_indices(np.tril_indices, row, col, offset, dtype)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=np.int64, **kwargs) -> Tensor:
    """``(2, N)``: the indices of the upper triangle (from ``offset``), row by row."""
    return _triangle_indices(np.triu_indices, row, col, offset, dtype)


# -- order statistics and counting ------------------------------------------------------------
def _take(x: Tensor, axis: int, k) -> Tensor:
    """``x``'s entries at position ``k`` (an int) along ``axis``, that axis removed."""
    index = (slice(None),) * (axis % x.ndim) + (k,)
    return x[index]


def median(input, dim=None, keepdim: bool = False):  # noqa: A002
    """The lower median (entry ``(n - 1) // 2`` in sorted order): of all entries when ``dim``
    is None, else ``(values, indices)`` along ``dim``, as PyTorch's."""
    x = _t(input)
    if dim is None:
        flat = ops.reshape(x, (-1,))
        return _take(ops.sort(flat, 0)[0], 0, (flat.shape[0] - 1) // 2)
    ordered = ops.sort(x, dim)  # (values, indices), a named pair
    k = (x.shape[dim] - 1) // 2
    v, i = _take(ordered[0], dim, k), _take(ordered[1], dim, k)
    if keepdim:
        v, i = ops.expand_dims(v, dim), ops.expand_dims(i, dim)
    return type(ordered)(v, i)


def quantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):  # noqa: A002
    """The ``q``-quantiles (a number, or a 1-d sequence/tensor giving a leading axis) over
    ``dim`` (all entries when None), interpolated linearly between the sorted entries as
    PyTorch's default; differentiable in ``input``."""
    if interpolation != "linear":
        raise NotImplementedError(f"quantile: interpolation={interpolation!r} (only 'linear')")
    x = _t(input)
    if dim is None:
        x, dim = ops.reshape(x, (-1,)), 0
    dim %= x.ndim
    qs = np.asarray(q.data if isinstance(q, Tensor) else q, np.float64)
    if qs.ndim > 1 or ((qs < 0) | (qs > 1)).any():
        raise ValueError(f"quantile: q must be a number or a 1-d sequence in [0, 1], got {q!r}")
    s = ops.sort(x, dim)[0]
    n = x.shape[dim]
    out = []
    for qv in np.atleast_1d(qs):
        pos = qv * (n - 1)
        lo, hi = int(np.floor(pos)), int(np.ceil(pos))
        a, b = _take(s, dim, lo), _take(s, dim, hi)
        v = a if hi == lo else a + (b - a) * float(pos - lo)
        out.append(ops.expand_dims(v, dim) if keepdim else v)
    return out[0] if qs.ndim == 0 else ops.stack(out, 0)


def _eager(name: str, x) -> np.ndarray:
    if active_trace() is not None:
        raise TraceError(
            f"{name} inside a compiled function: its result's size depends on the values; "
            f"call it outside the step"
        )
    return np.asarray(_t(x).numpy())


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """The distinct entries (sorted), with the inverse indices and counts when asked, as
    PyTorch's; not differentiable, eager only (the size depends on the values)."""
    a = _eager("unique", input)
    values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True, axis=dim)
    out = [Tensor(values)]
    if return_inverse:
        shape = a.shape if dim is None else (a.shape[dim],)
        out.append(Tensor(inverse.reshape(shape).astype(np.int64)))
    if return_counts:
        out.append(Tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(input, weights=None, minlength: int = 0) -> Tensor:  # noqa: A002
    """How often each value ``0..max`` occurs in the 1-d non-negative integer ``input``
    (weighted sums with ``weights``); eager only, as :func:`unique`."""
    a = _eager("bincount", input)
    if a.ndim != 1 or a.dtype.kind not in "iu" or (a < 0).any():
        raise ValueError(f"bincount: expects 1-d non-negative integers, got {a.dtype} {a.shape}")
    w = None if weights is None else _eager("bincount", weights)
    counts = np.bincount(a, w, int(minlength))
    return Tensor(counts if w is not None else counts.astype(np.int64))


__all__ = [
    "inf", "nan", "pi", "e", "Size", "clamp", "clamp_min", "clamp_max", "unsqueeze",
    "randperm", "empty", "empty_like", "mm", "mv", "dot", "outer", "ger", "amax", "amin",
    "movedim", "moveaxis", "swapaxes", "swapdims", "ravel", "vstack", "hstack", "nan_to_num",
    "count_nonzero", "logit", "var_mean", "allclose", "bernoulli", "normal", "narrow", "t",
    "sort", "topk", "cumsum", "cumprod", "prod", "flip", "where", "addmm", "baddbmm", "trace",
    "cdist", "kron", "tril_indices", "triu_indices", "median", "quantile", "unique",
    "bincount", "argsort",
]  # fmt: skip
