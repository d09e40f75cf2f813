"""``select``: ``out = where(c == keep, a, s)`` for a bool array ``c``, an array ``a`` of its
shape and a number ``s`` - the VJPs of ReLU and ``where`` (``where(x > 0, g, 0)``).

NumPy's ``copyto(out, a, where=c)`` after a fill takes two passes and ~4 ns an element; a
product with the bool mask casts through the buffered iterator (32 KiB a call). The compiled
loop is one branch-free pass that allocates nothing.
"""

from __future__ import annotations

import numpy as np


def select_reference(c: np.ndarray, a: np.ndarray, s, keep: bool, out: np.ndarray) -> None:
    np.copyto(out, s)
    np.copyto(out, a, where=c if keep else ~c)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    @cached_jit(boundscheck=False, nogil=True)
    def _select(c, a, s, keep, out):  # pragma: no cover - compiled
        for i in range(out.size):
            out[i] = a[i] if c[i] == keep else s

    def select(c: np.ndarray, a: np.ndarray, s, keep: bool, out: np.ndarray) -> None:
        """``out = where(c == keep, a, s)``; ``c``, ``a``, ``out`` of one shape, C-contiguous."""
        _select(c.reshape(-1), a.reshape(-1), out.dtype.type(s), keep, out.reshape(-1))

else:  # pragma: no cover
    select = select_reference
