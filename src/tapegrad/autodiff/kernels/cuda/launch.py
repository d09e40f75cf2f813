"""Launch helpers shared by the CUDA kernels: grid sizes and the arrays a launch is given."""

from __future__ import annotations

import numba
from numba import cuda

from ...backend import device_of

SIMULATED = bool(numba.config.ENABLE_CUDASIM)
"""Running in numba's CUDA simulator (each thread a Python thread: tiny grids there)."""

THREADS = 4 if SIMULATED else 256
"""Threads per block (kernels loop with a grid stride, so any grid is correct)."""
MAX_BLOCKS = 2 if SIMULATED else 65535

jit = cuda.jit


def blocks(n: int) -> int:
    """Blocks for ``n`` independent work items (at least one)."""
    return max(1, min(MAX_BLOCKS, (n + THREADS - 1) // THREADS))


def arg(a):
    """What a launch is given for the device array ``a`` (see ``backend.Device.kernel_arg``)."""
    return device_of(a).kernel_arg(a)


def launch(kernel, n: int, *args) -> None:
    """Run ``kernel`` over ``n`` work items; array arguments are converted by :func:`arg`."""
    args = [arg(a) if hasattr(a, "shape") else a for a in args]
    if SIMULATED:
        _simulate(kernel, n, args)
        return
    kernel[blocks(n), THREADS](*args)


def _simulate(kernel, n: int, args: list) -> None:
    """The simulator copies arrays whole and cannot take strided views (a real launch reads
    their strides): give it contiguous copies and write them back."""
    import numpy as np

    strided = [
        (k, a) for k, a in enumerate(args) if isinstance(a, np.ndarray) and not a.flags.c_contiguous
    ]
    for k, a in strided:
        args[k] = np.ascontiguousarray(a)
    kernel[blocks(n), THREADS](*args)
    for k, a in strided:
        if a.flags.writeable:
            a[...] = args[k]
