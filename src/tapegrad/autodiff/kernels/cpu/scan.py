"""The first-order linear recurrence ``y[i] = b[i] + a[i] * y[i - 1]`` (or, reversed,
``y[i] = b[i] + a[i] * y[i + 1]``), row after row of a 2-d array, every column at once.

It is what the gradients of the cumulative products, of ``logcumsumexp`` and of a product
scatter are made of (``primitives/scan.py``). NumPy has no ufunc for it; a Python loop over the
rows costs a few microseconds per row, this compiled loop a few nanoseconds per entry. Both do the
same multiply and add in the same order, so they give the same bits.
"""

from __future__ import annotations

import numpy as np


def linear_recurrence_reference(
    b: np.ndarray, a: np.ndarray, out: np.ndarray, reverse: bool
) -> None:
    """NumPy reference: ``out`` (n, m) from ``b`` and ``a`` (n, m); ``a``'s first row (last
    when ``reverse``) is never read, as it would multiply the value before the first."""
    n = b.shape[0]
    rows = range(n - 1, -1, -1) if reverse else range(n)
    prev = -1
    for i in rows:
        if prev < 0:
            out[i] = b[i]
        else:
            out[i] = b[i] + a[i] * out[prev]
        prev = i


try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; keep working without it
    numba = None

if numba is not None:
    from ..jit import cached_jit

    @cached_jit(boundscheck=False, nogil=True)
    def _recurrence_nb(b, a, out, reverse):  # pragma: no cover - compiled
        n, m = b.shape
        if n == 0:
            return
        first = n - 1 if reverse else 0
        step = -1 if reverse else 1
        for j in range(m):
            out[first, j] = b[first, j]
        i = first + step
        for _ in range(n - 1):
            for j in range(m):
                out[i, j] = b[i, j] + a[i, j] * out[i - step, j]
            i += step

    def linear_recurrence(b: np.ndarray, a: np.ndarray, out: np.ndarray, reverse: bool) -> None:
        """``out[i] = b[i] + a[i] * out[i -/+ 1]`` down (or up) the rows of C-contiguous 2-d
        arrays of one float dtype (compiled loop)."""
        _recurrence_nb(b, a, out, bool(reverse))

else:  # pragma: no cover
    linear_recurrence = linear_recurrence_reference
