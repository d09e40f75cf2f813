"""Kernels that split their channels over numba's threads give the bits of their serial loops.

im2col/col2im and BatchNorm's three kernels each have a serial and a parallel loop over the
channels (``prange``), picked by size and thread count; every channel is computed whole by one
thread, so the two must agree exactly whatever the thread count. Each pair runs here on the same
inputs, with the parallel loop forced (numba's threads are at least 2 here), and is compared
bit for bit, beside the NumPy reference."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import batch_norm as bn
from tapegrad.autodiff.kernels.cpu import columns as ic


@pytest.fixture(autouse=True)
def two_threads():
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", [((1, 1), (1, 1), (1, 1)), ((2, 2), (0, 1), (1, 2))])
def test_im2col_col2im_parallel_equal_serial(dtype, geometry):
    stride, padding, dilation = geometry
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 9, 8)).astype(dtype)
    kh = kw = 3
    oh = (9 + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (8 + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    shape = (5, kh, kw, 3, oh, ow)
    serial, parallel, ref = (np.full(shape, np.nan, dtype) for _ in range(3))
    ic._im2col(5, x, serial, *stride, *padding, *dilation)
    ic._im2col_parallel(5, x, parallel, *stride, *padding, *dilation)
    ic.im2col_reference(x, ref, stride, padding, dilation)
    assert serial.tobytes() == parallel.tobytes()
    np.testing.assert_array_equal(serial, ref)

    g = rng.standard_normal(shape).astype(dtype)
    gs, gp, gr = (np.full(x.shape, np.nan, dtype) for _ in range(3))
    ic._col2im(5, g, gs, *stride, *padding, *dilation)
    ic._col2im_parallel(5, g, gp, *stride, *padding, *dilation)
    ic.col2im_reference(g, gr, stride, padding, dilation)
    assert gs.tobytes() == gp.tobytes()
    np.testing.assert_array_equal(gs, gr)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_kernels_parallel_equal_serial(dtype):
    rng = np.random.default_rng(1)
    n, c, s = 4, 7, 33  # an odd row
    x = (rng.standard_normal((n, c, s)) * 2 + 0.5).astype(dtype)
    g = rng.standard_normal((n, c, s)).astype(dtype)
    w, b = rng.uniform(0.5, 1.5, c).astype(dtype), rng.standard_normal(c).astype(dtype)

    def outputs(kind):
        accs = np.full((numba.config.NUMBA_NUM_THREADS, 2, s), np.nan)  # each thread's rows
        mean, var = np.empty(c, dtype), np.empty(c, dtype)
        getattr(bn, f"_stats_{kind}")(c, x, mean, var, accs)
        y, m2, rstd, v2 = np.empty_like(x), *(np.empty(c, dtype) for _ in range(3))
        getattr(bn, f"_forward_{kind}")(c, x, w, b, 1e-5, y, m2, rstd, v2, accs, False)
        gx, gw, gb = np.empty_like(x), np.empty(c, dtype), np.empty(c, dtype)
        getattr(bn, f"_backward_{kind}")(c, g, x, w, m2, rstd, gx, gw, gb, accs, g, False)
        fused = np.empty_like(x), np.empty_like(x), np.empty(c, dtype), np.empty(c, dtype)
        stats = (np.empty(c, dtype) for _ in range(3))
        getattr(bn, f"_forward_{kind}")(c, x, w, b, 1e-5, fused[0], *stats, accs, True)
        getattr(bn, f"_backward_{kind}")(c, g, x, w, m2, rstd, *fused[1:], accs, fused[0], True)
        return mean, var, y, m2, rstd, v2, gx, gw, gb, *fused

    for a, p in zip(outputs("serial"), outputs("parallel"), strict=True):
        assert a.tobytes() == p.tobytes()
    mean, var, y, _, rstd, _, gx, gw, gb, ry, rgx, rgw, rgb = outputs("serial")
    # the fused ReLU: its output and ReLU's VJP ahead of the backward, bit for bit
    assert ry.tobytes() == np.where((y > 0) | (y != y), y, 0).astype(dtype).tobytes()
    masked = [np.empty_like(x), np.empty(c, dtype), np.empty(c, dtype)]
    accs = np.empty((1, 2, s))
    bn._backward_serial(c, np.where(ry > 0, g, 0).astype(dtype), x, w, mean, rstd, *masked,
                        accs, g, False)  # fmt: skip
    for got, want in zip((rgx, rgw, rgb), masked):
        assert got.tobytes() == want.tobytes()
    y_ref, m_ref, r_ref, v_ref = np.empty_like(x), *(np.empty(c, dtype) for _ in range(3))
    bn.batch_norm_forward_reference(x, w, b, 1e-5, y_ref, m_ref, r_ref, v_ref)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(var, v_ref, rtol=tol)
    gx_ref, gw_ref, gb_ref = np.empty_like(x), np.empty(c, dtype), np.empty(c, dtype)
    bn.batch_norm_backward_reference(g, x, w, mean, rstd, gx_ref, gw_ref, gb_ref)
    np.testing.assert_allclose(gx, gx_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(gw, gw_ref, rtol=tol, atol=tol * s * n)
    np.testing.assert_allclose(gb, gb_ref, rtol=tol, atol=tol * s * n)


def test_large_inputs_take_the_parallel_loop():
    """The size rule: from PARALLEL_MIN_SIZE entries and two threads, the parallel loops."""
    if numba.get_num_threads() < 2:
        pytest.skip("numba has one thread on this machine")
    big = np.zeros((2, ic.PARALLEL_MIN_SIZE // 2), np.float32)
    small = np.zeros((2, 8), np.float32)
    assert ic._threaded(big) and not ic._threaded(small)
    assert bn._threaded(big[None]) and not bn._threaded(small[None])
    numba.set_num_threads(1)
    assert not ic._threaded(big) and not bn._threaded(big[None])
