"""Which kernel family a forward calls for its arrays: the seam between devices and kernels.

``backend.py`` knows devices and imports no kernel; the kernel families import ``backend``;
this module, above both, maps a device's ``kernels`` name to its family.
"""

from __future__ import annotations

import numpy as np

from ..backend import device_kernels


def cuda_kernels(*arrays):
    """The CUDA kernel module when the first device array among ``arrays`` lives on a device
    whose forwards call CUDA kernels; None on the CPU (call the numba CPU kernel)."""
    for a in arrays:
        if type(a) is np.ndarray:
            continue
        if device_kernels(a) == "cuda":
            from . import cuda  # imported on first use: it needs numba.cuda

            return cuda
    return None
