"""Dropout masks from Philox4x32-10 (``kernels/cpu/random.py``): the published known answers,
the compiled kernel against the array reference, the same mask at any thread count and in any
buffer layout, and the drop rate."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import random as R
from tapegrad.autodiff.primitives.elementwise import _dropout_mask

# Random123's kat_vectors for philox4x32 with 10 rounds: counter (4 words), key (2), output (4)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@numba.njit
def _compiled_philox(c0, c1, c2, c3, k0, k1):
    return R._philox(c0, c1, c2, c3, k0, k1)


@pytest.mark.parametrize(("ctr", "key", "want"), KAT)
def test_philox_gives_the_published_answers(ctr, key, want):
    words = R.philox4x32_reference(*(np.array([c], np.uint64) for c in ctr), *key)
    assert tuple(int(w[0]) for w in words) == want
    compiled = _compiled_philox(*(np.uint64(c) for c in ctr), *(np.uint64(k) for k in key))
    assert tuple(int(w) for w in compiled) == want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 4, 7, 1000, 65536 * 4 + 5])
def test_the_kernel_draws_the_references_mask(dtype, n):
    threshold = int(np.ceil(0.3 * 2**32))
    got, want = np.full(n, np.nan, dtype), np.full(n, np.nan, dtype)
    R.dropout_mask(0x1234, 0xABCDEF01, threshold, dtype(1 / 0.7), got)
    R.dropout_mask_reference(0x1234, 0xABCDEF01, threshold, dtype(1 / 0.7), want)
    assert np.array_equal(got, want)
    assert set(np.unique(got)) <= {dtype(0), dtype(1 / 0.7)}


def test_the_same_mask_at_any_thread_count():
    x = np.empty((3, 65536 + 7), np.float32)
    before = numba.get_num_threads()
    masks = []
    try:
        for threads in sorted({1, before}):
            numba.set_num_threads(threads)
            out = np.empty_like(x)
            R.dropout_mask(5, 6, 2**31, np.float32(2.0), out)
            masks.append(out)
    finally:
        numba.set_num_threads(before)
    assert all(np.array_equal(m, masks[0]) for m in masks)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_drop_rate_is_p_and_entries_look_independent(p):
    mask = _dropout_mask(np.ones((1000, 1000), np.float32), p, np.random.default_rng(7))
    n = mask.size
    dropped = mask == 0
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(dropped.mean() - p) < 5 * sigma
    assert np.allclose(mask[~dropped], 1 / (1 - p))
    # neighbours (within a counter's four words and across counters) are uncorrelated
    flat = dropped.reshape(-1).astype(np.float64)
    for lag in (1, 2, 3, 4, 5, 1000):
        r = np.corrcoef(flat[:-lag], flat[lag:])[0, 1]
        assert abs(r) < 5 / np.sqrt(n), (lag, r)


def test_each_call_draws_a_new_key_from_the_generator():
    rng = np.random.default_rng(3)
    x = np.ones((64, 64), np.float32)
    a, b = _dropout_mask(x, 0.5, rng), _dropout_mask(x, 0.5, rng)
    assert not np.array_equal(a, b)
    again = np.random.default_rng(3)
    assert np.array_equal(_dropout_mask(x, 0.5, again), a)


def test_a_strided_buffer_holds_the_same_mask():
    """A compiled plan may hand a transposed buffer: the entries keep the array's own order."""
    x = np.ones((300, 200), np.float32)
    plain = _dropout_mask(x, 0.25, np.random.default_rng(11))
    buf = np.empty((200, 300), np.float32).T
    got = _dropout_mask(x, 0.25, np.random.default_rng(11), out=buf)
    assert got is buf and np.array_equal(buf, plain)


def test_float64_masks_for_other_dtypes_and_p_edges():
    rng = np.random.default_rng(0)
    assert _dropout_mask(np.ones(10, np.float16), 0.5, rng).dtype == np.float64
    assert np.all(_dropout_mask(np.ones(100, np.float32), 0.0, rng) == 1)
    assert np.all(_dropout_mask(np.ones(100, np.float32), 1.0, rng) == 0)
