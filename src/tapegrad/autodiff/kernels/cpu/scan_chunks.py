"""What the recurrent scans' kernels share (``elman.py``, ``gated.py``): the batch's
rows in fixed chunks, each run through every time step by one of numba's threads, each step's
recurrent product a single-threaded OpenBLAS call from the kernel (``gemm.py``).

A row of a recurrent state depends only on the same row a step earlier, and so does its gradient,
so the chunks never meet. A batch of N rows makes ``ceil(N / ROWS)`` chunks whatever the thread
count, so serial and parallel runs give the same bits.
"""

from __future__ import annotations

import numpy as np

from ...backend import xp_of
from . import gemm as _gemm

ROWS = 64  # rows at most in a chunk
PARALLEL_MIN_SIZE = 1 << 12  # from how many state entries (T * N * H) the chunks go parallel


def scan_rows(dtype) -> bool:
    """Whether this CPU runs a recurrent scan in row chunks: float32 or float64, NumPy's BLAS an
    ILP64 OpenBLAS (the kernels call it from numba's threads)."""
    return _gemm.AVAILABLE and np.dtype(dtype) in (np.float32, np.float64)


def chunks_of(n: int) -> int:
    """How many chunks a batch of ``n`` rows makes."""
    return -(-n // ROWS)


def buffer(scratch, key: str, shape: tuple, like):
    """A temporary from ``scratch(key, shape)`` (a plan's workspace), or a new array."""
    return xp_of(like).empty(shape, like.dtype) if scratch is None else scratch(key, shape)


def rows_of_transpose(scratch, key: str, whh, like):
    """``whh.T`` stored by rows (a workspace buffer refilled every call: the weight is updated in
    place). OpenBLAS took 7.3 us for (100, 64) @ (64, 64) so against 10.6 us through the
    transposed view (two threads, float32)."""
    whh_t = buffer(scratch, key, whh.shape[::-1], like)
    np.copyto(whh_t, whh.T)
    return whh_t


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None and _gemm.AVAILABLE:
    from ..jit import cached_jit
    from .loops import threaded

    JIT = dict(boundscheck=False, nogil=True, error_model="numpy")

    @cached_jit(inline="always", **JIT)
    def rows(n, chunks, i):  # pragma: no cover - compiled
        """The rows [r0, r1) of chunk ``i`` of ``chunks`` over ``n``."""
        return i * n // chunks, (i + 1) * n // chunks

    def run_chunks(loops, states, *args) -> None:
        """Run ``loops`` (split_loops' serial and parallel loops of a chunk body taking
        ``(*args, chunks, i)``) over the chunks of ``states``' (T, N, H) rows, OpenBLAS held to
        one thread so that each chunk's products run on its own thread."""
        serial, parallel = loops
        chunks = chunks_of(states.shape[1])
        run = parallel if threaded(chunks, states.size, PARALLEL_MIN_SIZE) else serial
        with _gemm.one_blas_thread():
            run(chunks, *args, chunks)
