"""The seam between devices and kernels: ``kernels_for`` gives a forward the kernel namespace
of its arrays' device.

``backend.py`` knows devices and imports no kernel (a device names its family in
``Device.kernels``); the kernel namespaces import ``backend``; this module, above both, maps
the name to the namespace. A family other than the CPU's is imported on first use (CUDA's
imports ``numba.cuda``).
"""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np

from ..backend import DeviceError, device_kernels
from . import cpu

_NAMESPACES = {"cpu": cpu}


def kernels_for(*arrays):
    """The kernel namespace (``kernels/cpu``, ``kernels/cuda``, ...) of the device of the first
    array among ``arrays`` (numbers and None are passed over): the CPU's for a NumPy array, at
    the cost of one type test, and when there is no array."""
    for a in arrays:
        if type(a) is np.ndarray:
            return cpu
        name = device_kernels(a)
        if name is not None:
            ns = _NAMESPACES.get(name)
            return ns if ns is not None else _load(name)
    return cpu


def _load(name: str):
    if importlib.util.find_spec(f"{__package__}.{name}") is None:
        raise DeviceError(
            f"kernels_for: no kernel namespace {name!r} (a package of tapegrad/autodiff/kernels) "
            f"for a device whose Device.kernels names it; there are 'cpu' and 'cuda'"
        )
    ns = _NAMESPACES[name] = importlib.import_module(f"{__package__}.{name}")
    return ns
