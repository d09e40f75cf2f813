"""The error function and GELU on CUDA: CuPy's own erf (``cupyx.scipy.special``) where CuPy is
in use, else the values through the host's compiled erf and back (a stand-in device's arrays).
Signatures as the CPU namespace's (``kernels/cpu/special.py``)."""

from __future__ import annotations

import math

import numpy as np

from ...backend import copy_to_device, device_of, to_host
from ..cpu.special import erf as host_erf

_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _erf_of(x):
    try:
        from cupyx.scipy.special import erf as cupy_erf
    except ImportError:
        cupy_erf = None
    if cupy_erf is not None:
        import cupy

        if isinstance(x, cupy.ndarray):
            return cupy_erf(x)
    host = np.array(to_host(x), order="C")
    res = np.empty_like(host)
    host_erf(host, res)
    return copy_to_device(res, device_of(x))


def erf(x, out) -> None:
    """``out = erf(x)`` for float arrays of one shape and dtype."""
    out[...] = _erf_of(x)


def gelu_forward(x, out) -> None:
    """``out = x * Phi(x)``, the exact GELU."""
    out[...] = x * (_erf_of(x * _INV_SQRT2) + 1.0) * 0.5


def gelu_backward(g, x, out) -> None:
    """``out = g * (Phi(x) + x * phi(x))``, GELU's derivative times ``g``."""
    cdf = (_erf_of(x * _INV_SQRT2) + 1.0) * 0.5
    out[...] = g * (cdf + x * np.exp(x * x * -0.5) * _INV_SQRT_2PI)
