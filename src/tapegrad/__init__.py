"""tapegrad: reverse-mode automatic differentiation on NumPy, for training neural networks.

>>> import numpy as np, tapegrad as tg
>>> w = tg.tensor(np.ones((2, 2)), requires_grad=True)
>>> (w * w).sum().backward(); w.grad
array([[2., 2.],
       [2., 2.]])
"""

from __future__ import annotations

from .blas import prefer_avx512, set_idle_threads

prefer_avx512()  # before NumPy loads OpenBLAS: its AVX-512 kernels where the CPU has them
set_idle_threads()  # and before numba's pool starts: its idle workers spin briefly, then sleep

from .autodiff import (
    AnomalyError,
    CompiledFunction,
    CustomOp,
    DeviceError,
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
from .autodiff.ops import *  # noqa: F403  (every operation: tg.exp, tg.matmul, ...)
from .version import __version__  # noqa: F401


def tensor(data, requires_grad: bool = False, dtype=None, device=None) -> Tensor:
    """A Tensor from an ndarray (its dtype kept), a list or a number (float32 by default), on
    ``device`` (``"cpu"``, ``"cuda"``; default: where ``data`` is, the CPU for host data)."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


# The sub-packages, and PyTorch's names (issue 26): the namespaces autograd, func and
# utils.data, the default dtype, threads, devices, more functions (compat, compat_ops) and the
# dtypes as attributes (dtypes: not in __all__, where float, int and bool would shadow the
# builtins of `from tapegrad import *`)
from . import autograd, cuda, data, func, linalg, nn, optim, utils  # noqa: E402
from .autodiff.graph import no_grad as inference_mode  # noqa: E402
from .autograd import set_grad_enabled  # noqa: E402
from .compat import *  # noqa: E402, F403
from .compat import __all__ as _compat_names  # noqa: E402
from .compat_ops import *  # noqa: E402, F403
from .compat_ops import __all__ as _compat_ops  # noqa: E402
from .creation import (  # noqa: E402
    arange,
    eye,
    full,
    full_like,
    linspace,
    one_hot,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    zeros,
    zeros_like,
)
from .dtypes import *  # noqa: E402, F403
from .serialization import load_object as load  # noqa: E402
from .serialization import save_object as save  # noqa: E402

manual_seed = nn.init.manual_seed

__all__ = [
    "Tensor",
    "tensor",
    "DeviceError",
    "zeros",
    "ones",
    "randn",
    "rand",
    "randn_like",
    "rand_like",
    "randint",
    "zeros_like",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "linspace",
    "eye",
    "one_hot",
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
    "cuda",
    "optim",
    "data",
    "save",
    "load",
    "autograd",
    "func",
    "linalg",
    "utils",
    "inference_mode",
    "set_grad_enabled",
    *_compat_names,
    *(n for n in _compat_ops if n not in ("inf", "nan", "pi", "e", "Size")),
]
