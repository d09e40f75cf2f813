"""The seam between devices and kernels: ``kernels_for`` gives a forward the kernel namespace
of its arrays' device.

``backend.py`` knows devices and imports no kernel (a device names its family in
``Device.kernels``); the kernel namespaces import ``backend``; this module, above both, maps
the name to the namespace. A family other than the CPU's is imported on first use (CUDA's
imports ``numba.cuda``).
"""

from __future__ import annotations

import importlib

import numpy as np

from ..backend import device_kernels
from . import cpu

_NAMESPACES = {"cpu": cpu}


def kernels_for(*arrays):
    """The kernel namespace (``kernels/cpu``, ``kernels/cuda``, ...) of the first device array
    among ``arrays`` that is not a NumPy array; the CPU's when there is none."""
    for a in arrays:
        if type(a) is np.ndarray:
            return cpu
        name = device_kernels(a)
        if name is not None:
            ns = _NAMESPACES.get(name)
            return ns if ns is not None else _load(name)
    return cpu


def _load(name: str):
    ns = _NAMESPACES[name] = importlib.import_module(f"{__package__}.{name}")
    return ns
