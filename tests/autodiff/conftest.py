"""Fixtures of the autodiff tests."""

from __future__ import annotations

import numba
import numpy as np
import pytest


@pytest.fixture
def threads():
    """``threads(n)`` sets numba's thread count (at most its pool's); restored after the test."""
    before = numba.get_num_threads()
    yield lambda n: numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(before)


@pytest.fixture
def leftover_workspace():
    """``(scratch, kept)``: a plan's workspace as kernels see it, ``scratch(key, shape)`` the
    same buffer per key (first filled with NaN), and ``refill(value)`` writing ``value`` over
    every kept buffer (the bytes another step would leave)."""
    kept: dict = {}

    def scratch(key, shape, dtype=np.float64):
        a = kept.get(key)
        if a is None or a.shape != tuple(shape):
            a = kept[key] = np.full(shape, np.nan, dtype)
        return a

    def refill(value):
        for buf in kept.values():
            buf.fill(value)

    scratch.kept, scratch.refill = kept, refill
    return scratch
