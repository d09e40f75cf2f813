"""Dropout masks from a counter-based generator, Philox4x32-10, over numba's threads.

A mask drawn element by element from a NumPy generator is a serial pass (the generator's state
moves with every draw) followed by a comparison and a scaling: ~2 ns an element, about 8% of a
small transformer's step. A counter-based generator computes entry ``i``'s random word from
``(key, i)`` alone, so any thread computes any block of the mask, in one pass that writes the
mask itself, and the mask does not depend on how the work is split.

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC11) turns a 128-bit counter and a 64-bit key into four 32-bit words by ten rounds of two
32 x 32 -> 64-bit products (high halves xored with the other words and the key, the key bumped
by Weyl constants between rounds); it passes TestU01's BigCrush, and the tests check it against
the published known-answer vectors. Entry ``i`` of a mask takes word ``i % 4`` of the counter
``(i // 4 low, i // 4 high, 0, 0)``; the key is two 32-bit words drawn from the caller's
generator for each mask. The entry is kept (``scale``) where its word is at least
``threshold = ceil(p 2^32)``, else 0: probability ``p`` of a drop to within 2^-32.

``dropout_mask_reference`` computes the same masks with array operations (NumPy's, or CuPy's on
a GPU), so every device draws the same masks from the same key.
"""

from __future__ import annotations

import numpy as np

from ...backend import xp_of

M0, M1 = 0xD2511F53, 0xCD9E8D57  # the round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the key's Weyl increments
_LOW = 0xFFFFFFFF
_ROUNDS = 10
_CHUNK = 1 << 14  # counters per parallel chunk (64K entries)
_PARALLEL_MIN = 1 << 16


def philox4x32_reference(c0, c1, c2, c3, k0: int, k1: int):
    """The four output words of Philox4x32-10 for counters given as uint64 arrays of 32-bit
    words (array operations)."""
    xp = xp_of(c0)
    m0, m1, low = xp.uint64(M0), xp.uint64(M1), xp.uint64(_LOW)
    for r in range(_ROUNDS):
        ka = xp.uint64((k0 + r * W0) & _LOW)
        kb = xp.uint64((k1 + r * W1) & _LOW)
        p0, p1 = c0 * m0, c2 * m1
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ ka, p1 & low, (p0 >> 32) ^ c3 ^ kb, p0 & low
    return c0, c1, c2, c3


def dropout_mask_reference(k0: int, k1: int, threshold: int, scale, out) -> None:
    """``out`` (C-contiguous, float) <- ``scale`` where entry i's Philox word is at least
    ``threshold``, else 0."""
    xp = xp_of(out)
    n = out.size
    j = xp.arange((n + 3) // 4, dtype=np.uint64)
    zero = xp.zeros_like(j)
    words = philox4x32_reference(j & xp.uint64(_LOW), j >> xp.uint64(32), zero, zero, k0, k1)
    flat = xp.stack(words, axis=1).reshape(-1)[:n]
    out.reshape(-1)[...] = xp.where(flat >= xp.uint64(threshold), out.dtype.type(scale), 0)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit

    @cached_jit(inline="always", nogil=True)
    def _philox(c0, c1, c2, c3, k0, k1):  # pragma: no cover - compiled
        """Philox4x32-10 on uint64 words holding 32 bits each."""
        for _ in range(_ROUNDS):
            p0 = np.uint64(M0) * c0
            p1 = np.uint64(M1) * c2
            c0, c1, c2, c3 = (
                (p1 >> np.uint64(32)) ^ c1 ^ k0,
                p1 & np.uint64(_LOW),
                (p0 >> np.uint64(32)) ^ c3 ^ k1,
                p0 & np.uint64(_LOW),
            )
            k0 = (k0 + np.uint64(W0)) & np.uint64(_LOW)
            k1 = (k1 + np.uint64(W1)) & np.uint64(_LOW)
        return c0, c1, c2, c3

    @cached_jit(nogil=True)
    def _mask_range(out, k0, k1, threshold, scale, lo, hi):  # pragma: no cover - compiled
        """Entries of counters ``lo..hi`` (four entries each) of the flat ``out``."""
        k0, k1, t = np.uint64(k0), np.uint64(k1), np.uint64(threshold)
        zero, keep = out.dtype.type(0), out.dtype.type(scale)
        n = out.size
        full = min(hi, n // 4)
        view = out[4 * lo : 4 * full]  # from 0 up: indices LLVM can vectorise over
        for j in range(full - lo):
            c = np.uint64(lo + j)
            w0, w1, w2, w3 = _philox(
                c & np.uint64(_LOW), c >> np.uint64(32), np.uint64(0), np.uint64(0), k0, k1
            )
            view[4 * j] = keep if w0 >= t else zero
            view[4 * j + 1] = keep if w1 >= t else zero
            view[4 * j + 2] = keep if w2 >= t else zero
            view[4 * j + 3] = keep if w3 >= t else zero
        if hi > full and 4 * full < n:  # the last counter's first n % 4 words
            c = np.uint64(full)
            words = _philox(
                c & np.uint64(_LOW), c >> np.uint64(32), np.uint64(0), np.uint64(0), k0, k1
            )
            for q in range(n - 4 * full):
                out[4 * full + q] = keep if words[q] >= t else zero

    @cached_jit(nogil=True, parallel=True)
    def _mask_parallel(out, k0, k1, threshold, scale):  # pragma: no cover - compiled
        counters = (out.size + 3) // 4
        for c in numba.prange((counters + _CHUNK - 1) // _CHUNK):
            _mask_range(out, k0, k1, threshold, scale, c * _CHUNK, min(counters, (c + 1) * _CHUNK))

    def dropout_mask(k0: int, k1: int, threshold: int, scale, out: np.ndarray) -> None:
        """``out`` (C-contiguous, float) <- ``scale`` where entry i's Philox word is at least
        ``threshold``, else 0 (see the module)."""
        flat = out.reshape(-1)
        if numba.get_num_threads() > 1 and flat.size >= _PARALLEL_MIN:
            _mask_parallel(flat, k0, k1, threshold, float(scale))
        else:
            _mask_range(flat, k0, k1, threshold, float(scale), 0, (flat.size + 3) // 4)

else:  # pragma: no cover
    dropout_mask = dropout_mask_reference
