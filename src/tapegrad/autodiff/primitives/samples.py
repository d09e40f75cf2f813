"""Helpers that build the test samples primitives declare (see ``registry.Sample``).

Values are float64 and kept away from the kinks of non-smooth functions (relu, abs, max ties,
clip bounds), so that central finite differences are a fair judge of the VJP rules.
"""

from __future__ import annotations

import numpy as np

from .registry import Sample

UNARY_SHAPES = [(), (1,), (5,), (2, 3), (2, 1, 4), (0, 3)]
BROADCAST_PAIRS = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((3,), (2, 3)),
    ((2, 1), (1, 3)),
    ((), (2, 2)),
    ((2, 2), ()),
    ((4, 1, 3), (2, 1)),
    ((1,), (2, 3)),
    ((0, 3), (1, 3)),
]


def values(rng: np.random.Generator, shape, lo=-2.0, hi=2.0, gap=0.0) -> np.ndarray:
    """Uniform float64 values in [lo, hi]; with ``gap``, magnitudes >= ``gap`` (kinks at 0)."""
    x = rng.uniform(lo, hi, size=shape)
    if gap:
        x = np.where(x >= 0, x + gap, x - gap)
    return np.asarray(x, dtype=np.float64)


def distinct(rng: np.random.Generator, shape) -> np.ndarray:
    """Values with no ties anywhere (for max/min and pooling), spaced at least 0.05 apart."""
    n = int(np.prod(shape, dtype=np.int64))
    return (rng.permutation(n) * 0.05 - n * 0.025).reshape(shape).astype(np.float64)


def unary(lo=-2.0, hi=2.0, gap=0.0, shapes=UNARY_SHAPES):
    def make(rng):
        return [Sample((values(rng, s, lo, hi, gap),)) for s in shapes]

    return make


def binary(lo=-2.0, hi=2.0, lo2=None, hi2=None, gap=0.0, pairs=BROADCAST_PAIRS):
    lo2 = lo if lo2 is None else lo2
    hi2 = hi if hi2 is None else hi2

    def make(rng):
        return [
            Sample((values(rng, a, lo, hi, gap), values(rng, b, lo2, hi2, gap))) for a, b in pairs
        ]

    return make
