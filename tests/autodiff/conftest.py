"""Fixtures of the autodiff tests."""

from __future__ import annotations

import numba
import pytest


@pytest.fixture
def threads():
    """``threads(n)`` sets numba's thread count (at most its pool's); restored after the test."""
    before = numba.get_num_threads()
    yield lambda n: numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(before)
