"""Fixtures of the optimiser tests."""

import numba
import pytest

from tapegrad.autodiff.kernels.cpu import optim


@pytest.fixture(params=["serial", "parallel"])
def blocks(request, monkeypatch):
    """The update's blocks on the calling thread, or over two of numba's threads."""
    if request.param == "parallel":
        if numba.config.NUMBA_NUM_THREADS < 2:
            pytest.skip("numba has one thread here")
        before = numba.get_num_threads()
        monkeypatch.setattr(optim, "_PARALLEL_SIZE", 0)
        numba.set_num_threads(2)
        yield
        numba.set_num_threads(before)
    else:
        monkeypatch.setattr(optim, "_PARALLEL_SIZE", 1 << 62)
        yield
