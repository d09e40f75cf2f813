"""The pairs (``kernels/cpu/pool.py``: 2x2 windows at stride 2 over planes of even width, in a
row pass and a window pass, or for float32 a row pair at a time in 512-bit vectors,
``microkernels.pool_pairs``) against the NumPy references, bit for bit, both paths: plain and
with ReLU, float32 and float64, ties (the first offset, row-major), a trailing row no window
reads, rows of several vectors and a part of one, NaN (each window's first), inf, -0.0, planes
in many chunks; serial and parallel runs give the same bits; buffers holding other bytes change
nothing; the rule says which pools take them."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import pool

# (M, H, W) planes: seed-cnn's, a trailing row, one window, no planes, many chunks, a row of
# 16 + 4 windows (a vector and part of one)
SHAPES = [(600, 26, 26), (7, 9, 6), (3, 2, 2), (0, 4, 4), (64, 32, 32), (5, 6, 40)]


@pytest.fixture(params=["vectors", "pairs"])
def path(request, monkeypatch):
    """Both float32 paths: a row pair in 512-bit vectors (where numba compiles for AVX-512;
    elsewhere LLVM splits its vectors, the same arithmetic) and the two passes."""
    monkeypatch.setattr(pool, "WIDE", request.param == "vectors")
    return request.param


def _planes(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    if shape[0] and shape[1] >= 4 and shape[2] >= 4:
        x[:, :, 3] = x[:, :, 2]  # ties along a row: the first column's offset
        x[:, 1, :] = x[:, 0, :]  # ties down a column: the first row's
        x[::2, 2:4, 0:2] = 0.5  # a whole window tied
    return x


def _reference_forward(x, relu):
    m, h, w = x.shape
    out = np.empty((m, h // 2, w // 2), x.dtype)
    arg = np.empty(out.shape, np.uint8)
    pool.max_pool_forward_reference(np.maximum(x, 0) if relu else x, (2, 2), (2, 2), out, arg)
    return out, arg


def _reference_backward(g, arg, out, x_shape, relu):
    gx = np.zeros(x_shape, g.dtype)
    pool.max_pool_backward_reference(
        np.where(out > 0, g, 0) if relu else g, arg, (2, 2), (2, 2), gx
    )
    return gx


def _forward(x, relu, scratch=None):
    m, h, w = x.shape
    out = np.full((m, h // 2, w // 2), 7, x.dtype)
    arg = np.full(out.shape, 9, np.uint8)
    pool.pool_planes_forward(x, out, arg, (2, 2), (2, 2), (1, 1), relu, scratch)
    return out, arg


def _backward(g, arg, out, x_shape, relu, scratch=None):
    gx = np.full(x_shape, 3, g.dtype)  # every entry must be written
    pool.pool_planes_backward(g, arg, out, gx, (2, 2), (2, 2), (1, 1), relu, scratch)
    return gx


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_pairs_match_the_references_bit_for_bit(shape, dtype, relu, path):
    assert pool.pairs_apply((2, 2), (2, 2), (1, 1), shape[2])
    x = _planes(shape, dtype)
    out, arg = _forward(x, relu)
    want, want_arg = _reference_forward(x, relu)
    _same_bits(out, want)
    _same_bits(arg, want_arg)
    g = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
    g.reshape(-1)[::5] = -0.0  # 0 + -0.0 is +0.0 in the reference
    _same_bits(_backward(g, arg, out, shape, relu), _reference_backward(g, arg, out, shape, relu))


@pytest.mark.parametrize("relu", [True, False])
def test_nan_inf_and_negative_zero_reach_what_they_reach_in_the_references(relu, monkeypatch, path):
    monkeypatch.setattr(pool, "PAIRS_CHUNK", 64)  # one plane a chunk: NaN redone chunk by chunk
    x = _planes((40, 10, 12), np.float32, seed=2)
    x[0, 1, 1] = np.nan  # the window's last entry
    x[1, 0, 1] = x[1, 1, 0] = np.nan  # two: the first (row-major) is the maximum
    x[2, 5, 2] = np.nan  # second row, first column
    x[35, 9, 11] = np.nan  # in a later chunk's planes
    x[3, 0:2, 0:2] = -np.inf
    x[4, 0, 0] = np.inf
    x[5, 2:4, 2:4] = -0.0
    x[6, 2:4, 2:4] = [[-0.0, 0.0], [0.0, -0.0]]
    out, arg = _forward(x, relu)
    want, want_arg = _reference_forward(x, relu)
    _same_bits(out, want)
    _same_bits(arg, want_arg)
    g = np.random.default_rng(3).standard_normal(out.shape).astype(np.float32)
    g[7, 0, 0] = np.nan
    got = _backward(g, arg, out, x.shape, relu)
    _same_bits(got, _reference_backward(g, arg, out, x.shape, relu))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_serial_and_parallel_runs_give_the_same_bits(threads, dtype, path):
    x = _planes((300, 26, 26), dtype, seed=4)
    g = np.random.default_rng(5).standard_normal((300, 13, 13)).astype(dtype)
    runs = []
    for n in (1, 2):
        threads(n)
        out, arg = _forward(x, True)
        runs.append((out, arg, _backward(g, arg, out, x.shape, True)))
    for a, b in zip(*runs):
        _same_bits(a, b)


def test_buffers_holding_other_bytes_change_nothing(path):
    kept = {}

    def scratch(key, shape, dtype):  # a plan's workspace: the same arrays call after call
        if key not in kept:
            kept[key] = np.empty(shape, dtype)
            kept[key].view(np.uint8)[...] = 0xFF  # NaN floats, bools neither 0 nor 1
        assert kept[key].shape == tuple(shape) and kept[key].dtype == dtype
        return kept[key]

    x = _planes((50, 8, 10), np.float32, seed=6)
    g = np.random.default_rng(7).standard_normal((50, 4, 5)).astype(np.float32)
    for _ in range(2):
        out, arg = _forward(x, True, scratch)
        _same_bits(out, _reference_forward(x, True)[0])
        gx = _backward(g, arg, out, x.shape, True, scratch)
        _same_bits(gx, _reference_backward(g, arg, out, x.shape, True))
    # the two passes' row buffers; the vectors' one pass needs none
    assert set(kept) == (
        {"pairs_nan"} if path == "vectors" else {"pairs_v", "pairs_low", "pairs_nan"}
    )


def test_the_rule_takes_2x2_windows_at_stride_2_over_even_widths_only():
    assert pool.pairs_apply((2, 2), (2, 2), (1, 1), 26)
    assert not pool.pairs_apply((2, 2), (2, 2), (1, 1), 27)  # the window loops: still exact
    assert not pool.pairs_apply((2, 2), (1, 1), (1, 1), 26)
    assert not pool.pairs_apply((3, 3), (2, 2), (1, 1), 26)
    assert not pool.pairs_apply((2, 2), (2, 2), (2, 2), 26)
    assert not pool.pairs_apply((1, 2), (1, 2), (1, 1), 26)  # 1-d pooling's planes


def test_odd_widths_go_to_the_window_loops_with_the_same_results():
    x = _planes((9, 8, 9), np.float32, seed=8)
    x[0, 0:2, 0:2] = -np.inf  # relu's maximum is 0 (the window loops once gave -inf - -inf)
    out, arg = _forward(x, True)
    want, want_arg = _reference_forward(x, True)
    _same_bits(out, want)
    _same_bits(arg, want_arg)
