"""Activation layers, PyTorch's set with its arguments: thin modules over the engine's
elementwise and softmax functions and ``nn.functional``'s compositions. ``inplace=True`` is
accepted and computes out of place (the values are the same; tapegrad records a new tensor)."""

from __future__ import annotations

import warnings

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import float_dtype
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init as _init
from ..module import Module
from ..parameter import Parameter


class _Pointwise(Module):
    """An activation without parameters: ``forward`` applies ``_fn`` with the layer's
    arguments (named in ``_args``)."""

    _args: tuple[str, ...] = ()

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def _fn(self, x):
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self._fn(x)

    def extra_repr(self) -> str:
        parts = [f"{a}={getattr(self, a)!r}" for a in self._args]
        return ", ".join(parts + (["inplace=True"] if self.inplace else []))


def _simple(name: str, fn, doc: str) -> type:
    cls = type(name, (_Pointwise,), {"_fn": lambda self, x: fn(x), "__doc__": doc})
    cls.__module__ = __name__
    return cls


ReLU = _simple("ReLU", ops.relu, "``max(x, 0)``.")
Tanh = _simple("Tanh", ops.tanh, "``tanh(x)``.")
Sigmoid = _simple("Sigmoid", ops.sigmoid, "``1 / (1 + exp(-x))``.")
SiLU = _simple("SiLU", F.silu, "``x * sigmoid(x)`` (swish).")
Mish = _simple("Mish", F.mish, "``x * tanh(softplus(x))``.")
ReLU6 = _simple("ReLU6", F.relu6, "x clipped to [0, 6].")
Hardsigmoid = _simple("Hardsigmoid", F.hardsigmoid, "``clip(x / 6 + 1 / 2, 0, 1)``.")
Hardswish = _simple("Hardswish", F.hardswish, "``x * hardsigmoid(x)``.")
SELU = _simple("SELU", F.selu, "Self-normalising ELU (scale 1.0507..., alpha 1.6732...).")
Softsign = _simple("Softsign", F.softsign, "``x / (1 + |x|)``.")
Tanhshrink = _simple("Tanhshrink", F.tanhshrink, "``x - tanh(x)``.")
LogSigmoid = _simple("LogSigmoid", F.logsigmoid, "``log(sigmoid(x))``, stable.")


class Identity(Module):
    """Returns its input unchanged (a placeholder layer; arguments are ignored)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class GELU(_Pointwise):
    """``x * Phi(x)``, exact (``approximate="none"``) or with the tanh approximation."""

    _args = ("approximate",)

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def _fn(self, x):
        return F.gelu(x, self.approximate)


class LeakyReLU(_Pointwise):
    """x where x > 0, ``negative_slope * x`` elsewhere."""

    _args = ("negative_slope",)

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__(inplace)
        self.negative_slope = float(negative_slope)

    def _fn(self, x):
        return F.leaky_relu(x, self.negative_slope)


class ELU(_Pointwise):
    """x where x > 0, ``alpha * (exp(x) - 1)`` elsewhere."""

    _args = ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__(inplace)
        self.alpha = float(alpha)

    def _fn(self, x):
        return F.elu(x, self.alpha)


class CELU(ELU):
    """x where x > 0, ``alpha * (exp(x / alpha) - 1)`` elsewhere."""

    def _fn(self, x):
        return F.celu(x, self.alpha)


class Softplus(_Pointwise):
    """``log(1 + exp(beta * x)) / beta``; linear where ``beta * x > threshold``."""

    _args = ("beta", "threshold")

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = float(beta), float(threshold)

    def _fn(self, x):
        return F.softplus(x, self.beta, self.threshold)


class Hardtanh(_Pointwise):
    """x clipped to ``[min_val, max_val]``."""

    _args = ("min_val", "max_val")

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__(inplace)
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be above min_val ({min_val})")
        self.min_val, self.max_val = float(min_val), float(max_val)

    def _fn(self, x):
        return F.hardtanh(x, self.min_val, self.max_val)


class Softshrink(_Pointwise):
    """``x -+ lambd`` outside ``[-lambd, lambd]``, 0 inside."""

    _args = ("lambd",)

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = float(lambd)

    def _fn(self, x):
        return F.softshrink(x, self.lambd)


class Hardshrink(Softshrink):
    """``x`` outside ``[-lambd, lambd]``, 0 inside."""

    def _fn(self, x):
        return F.hardshrink(x, self.lambd)


class Threshold(_Pointwise):
    """``x`` where ``x > threshold``, ``value`` elsewhere."""

    _args = ("threshold", "value")

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__(inplace)
        self.threshold, self.value = float(threshold), float(value)

    def _fn(self, x):
        return F.threshold(x, self.threshold, self.value)


class GLU(_Pointwise):
    """``a * sigmoid(b)`` for the halves ``a, b`` of axis ``dim``."""

    _args = ("dim",)

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = int(dim)

    def _fn(self, x):
        return F.glu(x, self.dim)


class RReLU(_Pointwise):
    """Randomised leaky ReLU: slopes drawn from ``[lower, upper)`` per entry in training (from
    the layer's own generator, seeded by ``nn.init``'s), the mean slope in evaluation."""

    _args = ("lower", "upper")

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__(inplace)
        self.lower, self.upper = float(lower), float(upper)
        self.rng = np.random.default_rng(_init.default_generator().integers(2**63))

    def _fn(self, x):
        return F.rrelu(x, self.lower, self.upper, self.training, self.rng)


class PReLU(Module):
    """``x`` where ``x >= 0``, ``weight * x`` elsewhere, with a learned ``weight`` of
    ``num_parameters`` entries (1, or one per channel: axis 1), each starting at ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = int(num_parameters)
        self.weight = Parameter(np.full(self.num_parameters, init, dtype=float_dtype(dtype)))

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


def _softmax_dim(name: str, dim, ndim: int) -> int:
    """PyTorch's implicit softmax axis when ``dim`` is None (with its warning)."""
    if dim is not None:
        return dim
    warnings.warn(
        f"{name}: implicit dimension choice is deprecated; give dim=", UserWarning, stacklevel=3
    )
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """Softmax along ``dim`` (PyTorch's name; ``axis=`` too). The default is the last axis;
    ``dim=None`` makes PyTorch's implicit choice (axis 0 of 0-, 1- and 3-d input, else 1)
    with its warning."""

    def __init__(self, dim: int | None = -1, *, axis: int | None = None) -> None:
        super().__init__()
        if dim != -1 and axis is not None:
            raise TypeError(f"{type(self).__name__}: give dim or axis, not both")
        self.dim = dim if axis is None else int(axis)

    @property
    def axis(self):
        return self.dim

    def forward(self, x: Tensor) -> Tensor:
        return ops.softmax(x, _softmax_dim(type(self).__name__, self.dim, x.ndim))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """Log-softmax along ``dim``, computed stably."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.log_softmax(x, _softmax_dim("LogSoftmax", self.dim, x.ndim))


class Softmin(Softmax):
    """``softmax(-x)`` along ``dim``."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.softmax(-x, _softmax_dim("Softmin", self.dim, x.ndim))


class Softmax2d(Module):
    """Softmax over the channels of ``(N, C, H, W)`` or ``(C, H, W)`` input (axis -3)."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expects 3-d or 4-d input, got shape {tuple(x.shape)}")
        return ops.softmax(x, -3)
