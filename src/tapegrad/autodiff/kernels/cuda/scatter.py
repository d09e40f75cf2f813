"""Row scatter-add on CUDA (twin of ``kernels/cpu/scatter.py``): ``out[idx[i]] += src[i]``, one
thread per element, with atomic adds (repeated rows sum in an unspecified order)."""

from __future__ import annotations

from numba import cuda

from ...backend import xp_of
from .launch import jit, launch


@jit
def _scatter_add_rows(out, idx, src):  # pragma: no cover - compiled
    n, d = src.shape
    for k in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        i = k // d
        j = k % d
        cuda.atomic.add(out, (idx[i], j), src[i, j])


def scatter_add_rows(out, idx, src) -> None:
    """``out[idx[i], :] += src[i, :]`` for every i; ``idx`` holds ints in [0, V) (checked by
    the caller)."""
    if not src.flags.c_contiguous:
        src = xp_of(src).ascontiguousarray(src)
    launch(_scatter_add_rows, src.size, out, idx, src)
