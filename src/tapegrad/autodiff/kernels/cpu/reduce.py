"""Summing the rows of a matrix: the adjoint of broadcasting along leading axes (a bias's
gradient). For a C-ordered matrix NumPy adds row after row too, but through its reduction
machinery, which costs 12 us for a (400, 64) gradient where this loop takes 4 us; both add in
the same order, so the results are the same bits. (For a column-major matrix NumPy sums each
column pairwise and the bits differ; this loop adds rows in order whatever the layout, which is
what keeps eager and compiled gradients equal: both call it.)
"""

from __future__ import annotations

import numpy as np


def sum_rows_reference(x: np.ndarray, out: np.ndarray) -> None:
    np.sum(x, axis=0, out=out)


def add_chunks_reference(parts: np.ndarray) -> None:
    for k in range(1, parts.shape[0]):
        np.add(parts[0], parts[k], out=parts[0])


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    @cached_jit(boundscheck=False, nogil=True)
    def sum_rows(x, out):  # pragma: no cover - compiled
        """``out[j] = sum_i x[i, j]`` for a 2-d ``x``, adding rows in order."""
        for j in range(x.shape[1]):
            out[j] = x[0, j] if x.shape[0] else 0
        for i in range(1, x.shape[0]):
            for j in range(x.shape[1]):
                out[j] += x[i, j]

    @cached_jit(boundscheck=False, nogil=True)
    def _add_chunks(flat):  # pragma: no cover - compiled
        for k in range(1, flat.shape[0]):
            for e in range(flat.shape[1]):
                flat[0, e] += flat[k, e]

    def add_chunks(parts: np.ndarray) -> None:
        """``parts[0] += parts[k]`` for k = 1, 2, ... in order, for a contiguous ``parts`` (K,
        ...): the chunks' sums of a kernel split over threads, added in chunk order (the same
        bits on any thread count), in one compiled call rather than one NumPy call a chunk
        (16 chunks: ~18 us of calls)."""
        _add_chunks(parts.reshape(parts.shape[0], -1))

else:  # pragma: no cover
    sum_rows = sum_rows_reference
    add_chunks = add_chunks_reference
