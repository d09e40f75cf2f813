"""Tensors made from nothing: constants (``zeros``, ``arange``, ``eye``, ``one_hot``, ...) and
random draws (``randn``, ``rand``, ``randint``).

Shapes are given either way PyTorch users write them: ``zeros(2, 3)`` or ``zeros((2, 3))``.
Random draws come from a ``np.random.Generator`` (``rng=``, else ``nn.init``'s default generator,
which ``tg.manual_seed`` resets) through the primitive ``random_draw``, so a compiled step draws
afresh on every call (and draws the same numbers as eager code would); constants made inside a
compiled step are constants of its plan.
"""

from __future__ import annotations

import numpy as np

from .autodiff import ops
from .autodiff.backend import default_dtype, device_of, float_dtype, get_device, is_array
from .autodiff.core.state import active_trace
from .autodiff.errors import ShapeError
from .autodiff.plan import TraceError
from .autodiff.primitives.indexing import one_hot as _one_hot
from .autodiff.tensor import Tensor
from .nn import init as _nn_init


def _shape(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(n) for n in shape)


def zeros(*shape, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    return Tensor(np.zeros(_shape(shape), dtype=float_dtype(dtype)), requires_grad=requires_grad)


def ones(*shape, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones: ``ones(2, 3)`` or ``ones((2, 3))``."""
    return Tensor(np.ones(_shape(shape), dtype=float_dtype(dtype)), requires_grad=requires_grad)


def full(shape, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` (an int or a tuple) filled with ``fill_value``."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return Tensor(np.full(shape, fill_value, dtype=float_dtype(dtype)), requires_grad=requires_grad)


def _like(x):
    a = x.data if isinstance(x, Tensor) else x
    return a if is_array(a) else np.asarray(a)


def _device(x):
    """``x``'s device name when it is not the CPU (None there: the draws stay as they are)."""
    dev = device_of(_like(x))
    return None if dev.name == "cpu" else dev.name


def zeros_like(x, dtype=None, requires_grad: bool = False) -> Tensor:
    """Zeros shaped like ``x``, in its dtype unless ``dtype`` says otherwise."""
    return Tensor(np.zeros_like(_like(x), dtype=dtype), requires_grad=requires_grad)


def ones_like(x, dtype=None, requires_grad: bool = False) -> Tensor:
    """Ones shaped like ``x``, in its dtype unless ``dtype`` says otherwise."""
    return Tensor(np.ones_like(_like(x), dtype=dtype), requires_grad=requires_grad)


def full_like(x, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    """``fill_value`` shaped like ``x``, in its dtype unless ``dtype`` says otherwise."""
    return Tensor(np.full_like(_like(x), fill_value, dtype=dtype), requires_grad=requires_grad)


def arange(start, stop=None, step=1, dtype=None, *, requires_grad: bool = False) -> Tensor:
    """``start, start + step, ...`` below ``stop`` (``arange(n)``: 0..n-1). Integer arguments give
    int64, float ones float32, unless ``dtype`` says otherwise."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is None:
        whole = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dtype = np.int64 if whole else default_dtype()
    return Tensor(np.arange(start, stop, step, dtype=dtype), requires_grad=requires_grad)


def linspace(
    start: float, stop: float, num: int, dtype=None, *, requires_grad: bool = False
) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop``, both included."""
    if num < 0:
        raise ValueError(f"linspace: num must be >= 0, got {num}")
    dtype = float_dtype(dtype)
    values = np.linspace(start, stop, int(num), dtype=np.float64 if dtype.kind in "iu" else dtype)
    if dtype.kind in "iu":  # computed in float, then truncated toward zero, as PyTorch does
        values = values.astype(dtype)
    return Tensor(values, requires_grad=requires_grad)


def eye(n: int, m: int | None = None, dtype=None, *, requires_grad: bool = False) -> Tensor:
    """The ``n x m`` identity (``m`` defaults to ``n``)."""
    return Tensor(np.eye(n, m, dtype=float_dtype(dtype)), requires_grad=requires_grad)


def one_hot(indices, num_classes: int = -1, dtype=np.int64) -> Tensor:
    """``indices.shape + (num_classes,)``: 1 at each index, 0 elsewhere (int64 like PyTorch;
    ``dtype=np.float32`` for a float target). ``num_classes=-1``: the largest index + 1."""
    idx = np.asarray(indices.data if isinstance(indices, Tensor) else indices)
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"one_hot: indices must be integers, got dtype {idx.dtype}")
    if num_classes < 0:
        if active_trace() is not None:
            raise TraceError(
                "one_hot(num_classes=-1) inside a compiled function: the class count would be "
                "read from this call's values and frozen; pass num_classes"
            )
        num_classes = int(idx.max()) + 1 if idx.size else 0
    return _one_hot(indices, num_classes=int(num_classes), dtype=np.dtype(dtype))


# -- random draws ---------------------------------------------------------------------------------
def _draw(shape, dtype, dist, rng, device=None, **bounds) -> Tensor:
    dtype = float_dtype(dtype)
    kinds = "iu" if dist == "integers" else "f"
    if dtype.kind not in kinds or (dist != "integers" and dtype not in (np.float32, np.float64)):
        what = "integers" if dist == "integers" else "float32 or float64"
        raise TypeError(f"random samples here are {what}, not {dtype}")
    gen = rng if rng is not None else _nn_init.default_generator()
    if device is not None:
        bounds["device"] = get_device(device).name
    return ops.random_draw(shape=_shape(shape), dtype=dtype.type, dist=dist, rng=gen, **bounds)


def _leaf(t: Tensor, requires_grad: bool) -> Tensor:
    """PyTorch's ``requires_grad=`` of its factory functions: ``t`` made a leaf that does."""
    return t.requires_grad_(True) if requires_grad else t


def randn(
    *shape,
    dtype=None,
    rng: np.random.Generator | None = None,
    device=None,
    requires_grad: bool = False,
    generator: np.random.Generator | None = None,
):
    """Standard-normal samples, ``randn(2, 3)`` or ``randn((2, 3))``, drawn from ``rng``
    (PyTorch's name: ``generator``; ``nn.init``'s default generator when None) on the host and
    put on ``device``. A compiled step draws afresh on every call."""
    rng = generator if rng is None else rng
    return _leaf(_draw(shape, dtype, "normal", rng, device), requires_grad)


def rand(
    *shape,
    dtype=None,
    rng: np.random.Generator | None = None,
    device=None,
    requires_grad: bool = False,
    generator: np.random.Generator | None = None,
):
    """Uniform samples on [0, 1); see :func:`randn`."""
    rng = generator if rng is None else rng
    return _leaf(_draw(shape, dtype, "uniform", rng, device), requires_grad)


def randint(
    low: int,
    high=None,
    shape=None,
    dtype=np.int64,
    rng: np.random.Generator | None = None,
    *,
    size=None,
    generator: np.random.Generator | None = None,
) -> Tensor:
    """Integers uniform in [low, high) of ``shape`` (an int or a tuple); see :func:`randn`.
    PyTorch's forms work too: ``randint(high, size)``, ``randint(low, high, size=...)``,
    ``generator=`` for ``rng=``."""
    if size is not None:
        if shape is not None:
            raise TypeError("randint: give shape or size, not both")
        shape = size
    if shape is None:
        if high is None or isinstance(high, (int, np.integer)):
            raise TypeError("randint: missing the shape (randint(low, high, shape))")
        low, high, shape = 0, low, high  # PyTorch's randint(high, size)
    rng = generator if rng is None else rng
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be above low ({low})")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return _draw((shape,), dtype, "integers", rng, low=int(low), high=int(high))


def _float_dtype(x):
    dtype = _like(x).dtype
    return dtype if dtype.kind == "f" else default_dtype()


def randn_like(
    x, rng: np.random.Generator | None = None, *, dtype=None, requires_grad: bool = False
) -> Tensor:
    """Standard-normal samples shaped like ``x``, in its float dtype; see :func:`randn`."""
    dtype = _float_dtype(x) if dtype is None else dtype
    draw = _draw((np.shape(_like(x)),), dtype, "normal", rng, _device(x))
    return _leaf(draw, requires_grad)


def rand_like(
    x, rng: np.random.Generator | None = None, *, dtype=None, requires_grad: bool = False
) -> Tensor:
    """Uniform samples on [0, 1) shaped like ``x``; see :func:`randn`."""
    dtype = _float_dtype(x) if dtype is None else dtype
    draw = _draw((np.shape(_like(x)),), dtype, "uniform", rng, _device(x))
    return _leaf(draw, requires_grad)
