"""Weight initialisers, in place on a Tensor, with one seedable default generator.

Every function takes ``rng: np.random.Generator | None``; ``None`` means the module-level default
generator, which :func:`manual_seed` resets. Layers draw their initial weights (and a Dropout
layer its own mask generator) from that default generator when built without ``rng=``, so

    nn.init.manual_seed(0); a = build_model()
    nn.init.manual_seed(0); b = build_model()

gives two models with identical weights and identical dropout masks.

Fans follow the usual convention for a weight of shape ``(out, in, *kernel)``:
``fan_in = in * prod(kernel)``, ``fan_out = out * prod(kernel)``.
"""

from __future__ import annotations

import math

import numpy as np

from ..autodiff.tensor import Tensor

_default_rng: np.random.Generator = np.random.default_rng()


def manual_seed(seed: int) -> np.random.Generator:
    """Reset the default generator to ``np.random.default_rng(seed)`` and return it."""
    global _default_rng
    _default_rng = np.random.default_rng(seed)
    return _default_rng


def default_generator() -> np.random.Generator:
    """The generator used when an initialiser or layer gets ``rng=None``."""
    return _default_rng


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    if rng is None:
        return _default_rng
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"init: rng must be a numpy.random.Generator or None, got {type(rng)}")
    return rng


def _fill(tensor: Tensor, values) -> Tensor:
    """Write ``values`` into the tensor's array in place (cast to its dtype)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"init: expected a tapegrad Tensor, got {type(tensor).__name__}")
    np.copyto(tensor.data, values, casting="unsafe")
    return tensor


def calculate_fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of shape ``(out, in, *kernel)`` (at least 2-D)."""
    if len(shape) < 2:
        raise ValueError(f"init: fans need a weight of at least 2 dimensions, got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str = "linear", param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (scales Xavier/Kaiming bounds)."""
    if nonlinearity in ("linear", "identity", "sigmoid", "conv1d", "conv2d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope**2))
    if nonlinearity == "selu":
        return 0.75
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")


def uniform_(
    tensor: Tensor, a: float = 0.0, b: float = 1.0, rng: np.random.Generator | None = None
) -> Tensor:
    """Fill with draws from U(a, b)."""
    return _fill(tensor, _rng(rng).uniform(a, b, size=tensor.shape))


def normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, rng: np.random.Generator | None = None
) -> Tensor:
    """Fill with draws from N(mean, std^2)."""
    return _fill(tensor, _rng(rng).normal(mean, std, size=tensor.shape))


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0."""
    return _fill(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1."""
    return _fill(tensor, 1.0)


def constant_(tensor: Tensor, value: float) -> Tensor:
    """Fill with ``value``."""
    return _fill(tensor, value)


def xavier_uniform_(
    tensor: Tensor, gain: float = 1.0, rng: np.random.Generator | None = None
) -> Tensor:
    """Glorot/Xavier uniform: U(-b, b) with ``b = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = calculate_fans(tensor.shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, rng)


def xavier_normal_(
    tensor: Tensor, gain: float = 1.0, rng: np.random.Generator | None = None
) -> Tensor:
    """Glorot/Xavier normal: N(0, s^2) with ``s = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = calculate_fans(tensor.shape)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), rng)


def _kaiming_std(shape, a, mode, nonlinearity) -> float:
    fan_in, fan_out = calculate_fans(shape)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    rng: np.random.Generator | None = None,
) -> Tensor:
    """He/Kaiming uniform: U(-b, b), ``b = gain * sqrt(3 / fan)`` (``a``: leaky-ReLU slope)."""
    bound = math.sqrt(3.0) * _kaiming_std(tensor.shape, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, rng)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    rng: np.random.Generator | None = None,
) -> Tensor:
    """He/Kaiming normal: N(0, s^2), ``s = gain / sqrt(fan)``."""
    return normal_(tensor, 0.0, _kaiming_std(tensor.shape, a, mode, nonlinearity), rng)


__all__ = [
    "manual_seed",
    "default_generator",
    "calculate_fans",
    "calculate_gain",
    "uniform_",
    "normal_",
    "zeros_",
    "ones_",
    "constant_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "trunc_normal_",
    "orthogonal_",
    "eye_",
    "layer_init_",
]


LAYER_INITS = ("pytorch", "glorot")


def layer_init_(
    weight: Tensor, bias: Tensor | None, scheme: str = "pytorch", rng=None, owner: str = "layer"
) -> None:
    """Initialise a ``Linear``/``Conv``/``ConvTranspose`` layer's weight and bias by
    ``scheme``: ``"pytorch"`` (the default, PyTorch's: ``kaiming_uniform_(a=sqrt(5))``, i.e.
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from the same range) or ``"glorot"`` (the
    seed models': Xavier/Glorot uniform weight, zero bias). Weight first, then bias, from
    ``rng``."""
    if scheme not in LAYER_INITS:
        raise ValueError(f"{owner}: init must be one of {LAYER_INITS}, got {scheme!r}")
    if scheme == "glorot":
        xavier_uniform_(weight, rng=rng)
        if bias is not None:
            zeros_(bias)
        return
    kaiming_uniform_(weight, a=math.sqrt(5), rng=rng)
    if bias is not None:
        fan_in = calculate_fans(weight.shape)[0]
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        uniform_(bias, -bound, bound, rng)


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    rng: np.random.Generator | None = None,
    generator: np.random.Generator | None = None,
) -> Tensor:
    """N(mean, std^2) truncated to ``[a, b]`` (absolute bounds, as PyTorch's), by redrawing
    the samples that fall outside."""
    if not a < b:
        raise ValueError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    gen = _rng(rng if rng is not None else generator)
    values = gen.normal(mean, std, size=tensor.shape)
    bad = (values < a) | (values > b)
    for _ in range(1000):
        if not bad.any():
            break
        values[bad] = gen.normal(mean, std, size=int(bad.sum()))
        bad = (values < a) | (values > b)
    else:
        raise ValueError(f"trunc_normal_: [{a}, {b}] is too far in the tails of N({mean}, {std}^2)")
    return _fill(tensor, values)


def orthogonal_(tensor: Tensor, gain: float = 1.0, rng: np.random.Generator | None = None):
    """A (semi-)orthogonal matrix (rows of the flattened ``(shape[0], -1)`` view orthonormal,
    or columns when there are more rows), times ``gain``: PyTorch's QR construction."""
    if len(tensor.shape) < 2:
        raise ValueError(f"orthogonal_: needs at least 2 dimensions, got shape {tensor.shape}")
    rows = tensor.shape[0]
    cols = int(np.prod(tensor.shape)) // rows
    flat = _rng(rng).normal(size=(rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(tensor.shape))


def eye_(tensor: Tensor) -> Tensor:
    """The identity (ones on the diagonal) of a 2-d tensor."""
    if len(tensor.shape) != 2:
        raise ValueError(f"eye_: needs a 2-d tensor, got shape {tensor.shape}")
    return _fill(tensor, np.eye(*tensor.shape))


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """PyTorch's private helper, which custom layers' ``reset_parameters`` call."""
    return calculate_fans(tuple(tensor.shape))
