"""The compiled kernels added for allocation-free plans equal their NumPy references."""

import numpy as np
import pytest

from tapegrad.autodiff.kernels import (
    add_channel_bias,
    add_channel_bias_reference,
    add_into,
    add_into_reference,
)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (100, 84, 1), (2, 6, 169)])
def test_add_channel_bias_matches_reference(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    b = rng.normal(size=shape[1]).astype(np.float32)
    out, ref = np.empty_like(x), np.empty_like(x)
    add_channel_bias(x, b, out)
    add_channel_bias_reference(x, b, ref)
    np.testing.assert_array_equal(out, ref)
    add_channel_bias(x, b, x)  # in place
    np.testing.assert_array_equal(x, ref)


@pytest.mark.parametrize("width", [1, 3])
def test_add_into_strided_window_matches_reference(width):
    rng = np.random.default_rng(1)
    base, base_ref = (np.zeros((4, 5, 9 + width), np.float64) for _ in range(2))
    src = rng.normal(size=(4, 5, 9))
    for k in range(width):
        add_into(base[:, :, k : k + 9], src)
        add_into_reference(base_ref[:, :, k : k + 9], src)
    np.testing.assert_array_equal(base, base_ref)
