"""Row scatter-add: ``out[idx[i]] += src[i]`` for every i, repeated rows accumulating.

This is the embedding's backward pass. ``np.add.at`` does it correctly but about 35x slower than
a compiled loop (8320 rows of 50 floats into a (20000, 50) table: 4 ms against 0.1 ms), and the
NumPy alternatives (``bincount`` per column, sort + ``add.reduceat``) are 2-3x slower than
``add.at``'s fast path or accumulate in float64. The loop adds in index order, exactly like
``np.add.at``, so both give bit-identical results.
"""

from __future__ import annotations

import numpy as np


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

    def scatter_add_rows(out: np.ndarray, idx: np.ndarray, src: np.ndarray) -> None:
        """``out[idx[i], :] += src[i, :]`` for every i, in order (compiled loop).

        ``out`` (V, D) and ``src`` (n, D) share a float dtype; ``idx`` (n,) holds ints in [0, V).
        The caller checks the range: the compiled loop does not.
        """
        if not src.flags.c_contiguous:
            src = np.ascontiguousarray(src)
        if idx.dtype != np.intp or not idx.flags.c_contiguous:
            idx = np.ascontiguousarray(idx, dtype=np.intp)
        _scatter_add_rows_nb(out, idx, src)

else:  # pragma: no cover
    scatter_add_rows = scatter_add_rows_reference
