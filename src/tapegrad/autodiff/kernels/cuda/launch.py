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
    kernel[blocks(n), THREADS](*[arg(a) if hasattr(a, "shape") else a for a in args])
