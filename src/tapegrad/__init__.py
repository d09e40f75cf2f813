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
    DTypeError,
    GradcheckError,
    GraphError,
    ShapeError,
    Tensor,
    detect_anomaly,
    enable_grad,
    grad,
    gradcheck,
    is_grad_enabled,
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


from . import data, nn, optim  # noqa: E402
from .serialization import load, save  # noqa: E402

manual_seed = nn.init.manual_seed

__all__ = [
    "Tensor",
    "tensor",
    "zeros",
    "ones",
    *ops.__all__,
    "grad",
    "value_and_grad",
    "vjp",
    "gradcheck",
    "GradcheckError",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "ShapeError",
    "DTypeError",
    "GraphError",
    "detect_anomaly",
    "AnomalyError",
    "manual_seed",
    "nn",
    "optim",
    "data",
    "save",
    "load",
]
