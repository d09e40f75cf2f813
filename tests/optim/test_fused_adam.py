"""The fused Adam loop equals the NumPy form of the update bit for bit, its blocks run on one
thread or over numba's."""

import itertools

import numba
import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import optim
from tapegrad.autodiff.kernels.cpu.optim import adam_update


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


@pytest.mark.parametrize(
    "dtype,amsgrad,wd,decoupled",
    list(itertools.product((np.float32, np.float64), (False, True), (0.0, 0.01), (False, True))),
)
def test_fused_adam_equals_the_numpy_form(dtype, amsgrad, wd, decoupled, blocks):
    rng = np.random.default_rng(0)
    p = rng.normal(size=(517, 9)).astype(dtype)  # more than one 2048-element block, odd sizes
    g = rng.normal(size=p.shape).astype(dtype)
    g.flat[3] = np.nan  # NaN flows through both forms alike
    states = [np.abs(rng.normal(size=p.shape)).astype(dtype) for _ in range(3)]
    fused = [a.copy() for a in (p, *states)]
    plain = [a.copy() for a in (p, *states)]
    scratch = (np.empty_like(p), np.empty_like(p))
    g_f = np.asfortranarray(g)  # not C-contiguous: the NumPy form runs
    kw = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=wd, decoupled=decoupled)
    for step in (1, 2, 3):
        for (q, m, v, vmax), grad in ((fused, g), (plain, g_f)):
            adam_update(q, grad, m, v, vmax if amsgrad else None, scratch, step=step, **kw)
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(fused[0], p)  # it did update
