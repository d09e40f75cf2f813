"""The rows of a matrix summed on CUDA (twin of ``kernels/cpu/reduce.py``): one thread per column
adds the rows in order, as the CPU loop does, so both give the same bits."""

from __future__ import annotations

from numba import cuda

from .launch import jit, launch


@jit
def _sum_rows(x, out):  # pragma: no cover - compiled
    n, m = x.shape
    for j in range(cuda.grid(1), m, cuda.gridsize(1)):
        if n == 0:
            out[j] = 0
            continue
        acc = x[0, j]
        for i in range(1, n):
            acc += x[i, j]
        out[j] = acc


def sum_rows(x, out) -> None:
    """``out[j] = sum_i x[i, j]`` for a 2-d ``x``, adding rows in order."""
    launch(_sum_rows, x.shape[1], x, out)
