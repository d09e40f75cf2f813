"""The window loops (``kernels/cpu/pool.py``: ``window_kernels``, one compiled pair per window
geometry, the planes split over numba's threads, and the generic pair a geometry's first calls
take, the geometry an argument) against the NumPy references, bit for bit, the two pairs
against each other, and the same bits at one thread and two: 1-d windows of 8 (the text
CNN's), overlapping 3x3 windows at stride 2 and dilated ones, with and without ReLU, NaN and
-inf in the planes; and the dispatch from the generic pair to a geometry's own."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import pool

# (planes (M, H, W), kernel, stride, dilation)
GEOMETRIES = [
    ((512, 1, 128), (1, 8), (1, 8), (1, 1)),
    ((37, 9, 11), (3, 3), (2, 2), (1, 1)),
    ((5, 10, 10), (2, 2), (3, 3), (2, 2)),
]


def _planes(shape, dtype):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    x[3, 0, :4] = np.nan  # the first window's maximum: its first NaN
    x[4] = -np.inf  # a plane ReLU turns to zeros
    return x


@pytest.fixture(params=["own", "generic"])
def loops(request):
    """Which pair of window loops the test runs."""
    return request.param


def _pair(geometry, loops):
    _, kernel, stride, dilation = geometry
    if loops == "own":
        return pool.window_kernels(*kernel, *stride, *dilation)
    geo = (*kernel, *stride, *dilation)
    return (
        lambda x, out, arg, relu: pool._forward_any(x, out, arg, relu, *geo),
        lambda g, arg, out, gx, relu: pool._backward_any(g, arg, out, gx, relu, *geo),
    )


def _windows(geometry, dtype, relu, loops="own"):
    shape, kernel, stride, dilation = geometry
    forward, backward = _pair(geometry, loops)
    x = _planes(shape, dtype)
    oh = (shape[1] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (shape[2] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    out = np.full((shape[0], oh, ow), 7, dtype)
    arg = np.full(out.shape, 9, np.uint8)
    forward(x, out, arg, relu)
    g = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
    gx = np.full(shape, 5, dtype)
    backward(g, arg, out, gx, relu)
    return x, g, out, arg, gx


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_window_loops_match_the_references(geometry, dtype, relu, loops):
    _, kernel, stride, dilation = geometry
    x, g, out, arg, gx = _windows(geometry, dtype, relu, loops)
    want, want_arg = np.empty_like(out), np.empty_like(arg)
    seen = np.maximum(x, 0) if relu else x
    pool.max_pool_forward_reference(seen, kernel, stride, want, want_arg, dilation)
    want_arg[want != want] = arg[want != want]  # NaN windows: checked below, not by the reference
    if relu:
        want_arg[~(want > 0) & (want == want)] = 0  # relu's zero: offset 0
    _same_bits(out, want)
    _same_bits(arg, want_arg)
    assert np.isnan(out[3, 0, 0]) and arg[3, 0, 0] == 0
    want_gx = np.zeros_like(gx)
    taken = np.where(out > 0, g, 0) if relu else g
    pool.max_pool_backward_reference(taken, arg, kernel, stride, want_gx, dilation)
    if all(k * d <= s for k, s, d in zip(kernel, stride, dilation)):
        _same_bits(gx, want_gx)  # each entry in one window at most: one addition
    else:  # overlapping windows: the loops add window by window, the reference offset by offset
        np.testing.assert_allclose(gx, want_gx, rtol=1e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_window_loops_give_the_same_bits_on_one_thread_and_two(geometry, threads):
    runs = []
    for n in (1, 2):
        threads(n)
        runs.append(_windows(geometry, np.float32, True)[2:])
    for a, b in zip(*runs):
        _same_bits(a, b)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_generic_loops_give_the_geometrys_own_bits(geometry, relu):
    """Overlapping windows too, whose gradients the reference sums in another order."""
    for a, b in zip(
        _windows(geometry, np.float64, relu), _windows(geometry, np.float64, relu, "generic")
    ):
        _same_bits(a, b)


def test_a_geometry_takes_the_generic_loops_until_it_has_pooled_enough(monkeypatch):
    """A geometry (each direction) takes the generic pair until it has pooled SPECIALISE_AFTER
    windows, then its own; the output is the same bits throughout."""
    monkeypatch.setattr(pool, "_window_work", {})
    monkeypatch.setattr(pool, "SPECIALISE_AFTER", 100)  # 36 windows a call: 3 calls generic
    taken = []
    own = pool.window_kernels

    def watched(*geometry):
        taken.append(geometry)
        return own(*geometry)

    monkeypatch.setattr(pool, "window_kernels", watched)
    x = _planes((6, 7, 9), np.float32)
    outs = []
    for _ in range(5):
        out, arg = np.empty((6, 2, 3), np.float32), np.empty((6, 2, 3), np.uint8)
        pool.pool_planes_forward(x, out, arg, (3, 3), (3, 3), (1, 1), True)
        gx = np.empty_like(x)
        pool.pool_planes_backward(out, arg, out, gx, (3, 3), (3, 3), (1, 1), True)
        outs.append((out, arg, gx))
    assert taken == [(3, 3, 3, 3, 1, 1)] * 4  # calls 4 and 5, forward and backward
    for run in outs[1:]:
        for a, b in zip(outs[0], run):
            _same_bits(a, b)
