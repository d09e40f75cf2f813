"""tapegrad: reverse-mode automatic differentiation on NumPy, for training neural networks.

>>> import numpy as np, tapegrad as tg
>>> w = tg.tensor(np.ones((2, 2)), requires_grad=True)
>>> (w * w).sum().backward(); w.grad
array([[2., 2.],
       [2., 2.]])
"""

from __future__ import annotations

import numpy as np

from .autodiff import (
    AnomalyError,
    CompiledFunction,
    CustomOp,
    DTypeError,
    GradcheckError,
    GraphError,
    IndexOutOfRange,
    ShapeError,
    Tensor,
    TraceError,
    checkpoint,
    compile,
    custom_op,
    detect_anomaly,
    effect,
    enable_grad,
    grad,
    gradcheck,
    gradients,
    hessian,
    hvp,
    is_grad_enabled,
    jacobian,
    jvp,
    no_grad,
    ops,
    value_and_grad,
    vjp,
)
from .autodiff.backend import DEFAULT_DTYPE
from .autodiff.ops import *  # noqa: F403  (every operation: tg.exp, tg.matmul, ...)

__version__ = "0.1.0"


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """A Tensor from an ndarray (its dtype kept), a list or a number (float32 by default)."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def zeros(shape, dtype=DEFAULT_DTYPE, requires_grad: bool = False) -> Tensor:
    return Tensor(np.zeros(shape, dtype=dtype), requires_grad=requires_grad)


def ones(shape, dtype=DEFAULT_DTYPE, requires_grad: bool = False) -> Tensor:
    return Tensor(np.ones(shape, dtype=dtype), requires_grad=requires_grad)


def _draw(shape, dtype, dist, rng) -> Tensor:
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"random samples are float32 or float64, not {dtype}")
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    gen = rng if rng is not None else nn.init.default_generator()
    return ops.random_draw(shape=tuple(int(n) for n in shape), dtype=dtype.type, dist=dist, rng=gen)


def randn(*shape, dtype=DEFAULT_DTYPE, rng: np.random.Generator | None = None) -> Tensor:
    """Standard-normal samples, ``randn(2, 3)`` or ``randn((2, 3))``, drawn from ``rng``
    (``nn.init``'s default generator when None). A compiled step draws afresh on every call."""
    return _draw(shape, dtype, "normal", rng)


def rand(*shape, dtype=DEFAULT_DTYPE, rng: np.random.Generator | None = None) -> Tensor:
    """Uniform samples on [0, 1); see :func:`randn`."""
    return _draw(shape, dtype, "uniform", rng)


def randn_like(x, rng: np.random.Generator | None = None) -> Tensor:
    """Standard-normal samples shaped like ``x``, in its float dtype; see :func:`randn`."""
    return _draw(np.shape(x.data if isinstance(x, Tensor) else x), _float_dtype(x), "normal", rng)


def rand_like(x, rng: np.random.Generator | None = None) -> Tensor:
    """Uniform samples on [0, 1) shaped like ``x``; see :func:`randn`."""
    return _draw(np.shape(x.data if isinstance(x, Tensor) else x), _float_dtype(x), "uniform", rng)


def _float_dtype(x):
    dtype = np.asarray(x.data if isinstance(x, Tensor) else x).dtype
    return dtype if dtype.kind == "f" else DEFAULT_DTYPE


from . import data, nn, optim  # noqa: E402
from .serialization import load, save  # noqa: E402

manual_seed = nn.init.manual_seed

__all__ = [
    "Tensor",
    "tensor",
    "zeros",
    "ones",
    "randn",
    "rand",
    "randn_like",
    "rand_like",
    "effect",
    *ops.__all__,
    "grad",
    "value_and_grad",
    "vjp",
    "gradients",
    "hvp",
    "hessian",
    "jacobian",
    "jvp",
    "gradcheck",
    "GradcheckError",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "ShapeError",
    "IndexOutOfRange",
    "DTypeError",
    "GraphError",
    "detect_anomaly",
    "AnomalyError",
    "compile",
    "checkpoint",
    "CompiledFunction",
    "custom_op",
    "CustomOp",
    "TraceError",
    "manual_seed",
    "nn",
    "optim",
    "data",
    "save",
    "load",
]
