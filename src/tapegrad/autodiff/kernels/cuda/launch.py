"""Launch helpers shared by the CUDA kernels: grid sizes and the arrays a launch is given."""

from __future__ import annotations

import importlib

import numba
import numpy as np
from numba import cuda

from ...backend import device_of

SIMULATED = bool(numba.config.ENABLE_CUDASIM)
"""Running in numba's CUDA simulator (each thread a Python thread: tiny grids there)."""

REMOVED_NUMPY_ALIASES = {"row_stack": "vstack"}
"""NumPy names that numba-cuda (0.30.4, the newest, on 2026-11-27) still registers overloads
for, but that NumPy 2.5 removed: the alias and the function it named."""


def with_removed_numpy_aliases(load, numpy=np) -> None:
    """Call ``load`` with each alias of :data:`REMOVED_NUMPY_ALIASES` that ``numpy`` lacks bound
    to the function it named, then take the aliases away again. numba-cuda's array registry
    reads ``np.row_stack`` when the first kernel compiles; under NumPy 2.5 every kernel launch
    failed with "module 'numpy' has no attribute 'row_stack'" (seen on an H200, numba-cuda
    0.30.4, NumPy 2.5.2), so the registry is loaded here, at import, with the alias in place."""
    missing = [name for name in REMOVED_NUMPY_ALIASES if not hasattr(numpy, name)]
    for name in missing:
        setattr(numpy, name, getattr(numpy, REMOVED_NUMPY_ALIASES[name]))
    try:
        load()
    finally:
        for name in missing:
            delattr(numpy, name)


def _load_array_registry() -> None:
    try:
        importlib.import_module("numba.cuda.np.arrayobj")
    except ModuleNotFoundError:  # numba's own CUDA target (no numba-cuda) has no such module
        pass


if not SIMULATED and not all(hasattr(np, name) for name in REMOVED_NUMPY_ALIASES):
    with_removed_numpy_aliases(_load_array_registry)

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
    strided = [
        (k, a) for k, a in enumerate(args) if type(a) is np.ndarray and not a.flags.c_contiguous
    ]
    if not strided:
        kernel[blocks(n), THREADS](*args)
        return
    # host arrays (tests give kernels NumPy arrays): the simulator copies arrays whole and cannot
    # take strided views, and numba-cuda 0.30.4 refuses to copy one to the GPU ("Buffer size is
    # too small for the layout"); give both contiguous copies and write them back
    for k, a in strided:
        args[k] = np.ascontiguousarray(a)
    kernel[blocks(n), THREADS](*args)
    for k, a in strided:
        if a.flags.writeable:
            a[...] = args[k]
