"""The embedding's row kernels: the gather ``out[i] = table[idx[i]]`` (its forward) and the
scatter-add ``out[idx[i]] += src[i]`` for every i, repeated rows accumulating (its backward).

The gather copies ranges of rows on numba's threads: the text CNN's 8,320 rows of 50 floats,
28-42 us at two threads against 42-61 for ``np.take`` (which also wants intp ids). The
scatter-add stays one loop: split over two threads by the rows it writes (each thread the ids
of its own blocks of rows, found without a branch: the same bits) it took 69-103 us against
50-55 for the loop (Zen 4, 2026-12-08). Both take int32 or int64 ids as they are.

``np.add.at`` does the scatter-add correctly but about 35x slower than a compiled loop (8320
rows of 50 floats into a (20000, 50) table: 4 ms against 0.1 ms), and the NumPy alternatives
(``bincount`` per column, sort + ``add.reduceat``) are 2-3x slower than ``add.at``'s fast path
or accumulate in float64. The loop adds in index order, exactly like ``np.add.at``, so both
give bit-identical results.
"""

from __future__ import annotations

import numpy as np

# rows (times their width) from which the gather's ranges go to numba's threads, and its ranges
PARALLEL_MIN_SIZE = 1 << 15
GATHER_PARTS = 8


def gather_rows_reference(table: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """NumPy reference: ``out[i, :] = table[idx[i], :]``; table (V, D), idx (n,), out (n, D)."""
    np.take(table, idx, axis=0, out=out)


def scatter_add_rows_reference(out: np.ndarray, idx: np.ndarray, src: np.ndarray) -> None:
    """NumPy reference: ``out[idx[i], :] += src[i, :]`` in order; out (V, D), src (n, D)."""
    np.add.at(out, idx, src)


try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; keep working without it
    numba = None

if numba is not None:
    from ..jit import cached_jit

    @cached_jit(boundscheck=False, nogil=True)
    def _scatter_add_rows_nb(out, idx, src):  # pragma: no cover - compiled
        d = src.shape[1]
        for i in range(idx.shape[0]):
            r = idx[i]
            for j in range(d):
                out[r, j] += src[i, j]

    @cached_jit(boundscheck=False, nogil=True)
    def _gather_part(table, idx, out, parts, k):  # pragma: no cover - compiled
        """Rows [k n / parts, (k + 1) n / parts) of the gather."""
        n, d = out.shape
        for i in range(k * n // parts, (k + 1) * n // parts):
            r = idx[i]
            for j in range(d):
                out[i, j] = table[r, j]

    from .loops import split_loops, threaded

    _gather, _gather_parallel = split_loops(_gather_part, boundscheck=False, nogil=True)

    def _rows_ready(idx: np.ndarray, rows: np.ndarray):
        """idx as contiguous ints numba takes (int32 and int64 as they are), rows contiguous."""
        if idx.dtype not in (np.int32, np.int64) or not idx.flags.c_contiguous:
            idx = np.ascontiguousarray(idx, dtype=np.intp)
        return idx, rows if rows.flags.c_contiguous else np.ascontiguousarray(rows)

    def gather_rows(table: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        """``out[i, :] = table[idx[i], :]`` for every i (compiled; ranges of rows on numba's
        threads). ``table`` (V, D) and ``out`` (n, D) share a dtype, ``out`` contiguous;
        ``idx`` (n,) holds ints in [0, V): the caller checks the range, the loop does not."""
        idx, table = _rows_ready(idx, table)
        parallel = threaded(GATHER_PARTS, out.size, PARALLEL_MIN_SIZE)
        (_gather_parallel if parallel else _gather)(GATHER_PARTS, table, idx, out, GATHER_PARTS)

    def scatter_add_rows(out: np.ndarray, idx: np.ndarray, src: np.ndarray) -> None:
        """``out[idx[i], :] += src[i, :]`` for every i, in order (compiled loop).

        ``out`` (V, D) and ``src`` (n, D) share a float dtype; ``idx`` (n,) holds ints in [0, V).
        The caller checks the range: the compiled loop does not.
        """
        idx, src = _rows_ready(idx, src)
        _scatter_add_rows_nb(out, idx, src)

else:  # pragma: no cover
    gather_rows = gather_rows_reference
    scatter_add_rows = scatter_add_rows_reference
