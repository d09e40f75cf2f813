"""The linear recurrence ``y[i] = b[i] + a[i] * y[i -/+ 1]`` on CUDA (twin of
``kernels/cpu/scan.py``): one thread per column walks the rows in order (the same operations in the
same order as the CPU loop)."""

from __future__ import annotations

from numba import cuda

from .launch import jit, launch


@jit
def _recurrence(b, a, out, reverse):  # pragma: no cover - compiled
    n, m = b.shape
    for j in range(cuda.grid(1), m, cuda.gridsize(1)):
        if n == 0:
            continue
        i = n - 1 if reverse else 0
        step = -1 if reverse else 1
        out[i, j] = b[i, j]
        for _ in range(n - 1):
            i += step
            out[i, j] = b[i, j] + a[i, j] * out[i - step, j]


def linear_recurrence(b, a, out, reverse: bool) -> None:
    """``out[i] = b[i] + a[i] * out[i -/+ 1]`` down (or up) the rows of 2-d arrays."""
    launch(_recurrence, b.shape[1], b, a, out, bool(reverse))
