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


@pytest.mark.parametrize(
    "shape,kernel,stride",
    [
        ((6, 26, 26), (2, 2), (2, 2)),
        ((3, 7, 9), (3, 2), (2, 1)),
        ((5, 1, 128), (1, 8), (1, 8)),
        ((1, 1, 1), (1, 1), (1, 1)),
    ],
)
def test_fused_relu_max_pool_matches_reference(shape, kernel, stride):
    from tapegrad.autodiff.kernels import (
        relu_max_pool_backward,
        relu_max_pool_backward_reference,
        relu_max_pool_forward,
        relu_max_pool_forward_reference,
    )

    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(np.float32)
    x[0, 0, 0] = np.nan if x.size > 4 else x[0, 0, 0]
    oshape = (shape[0],) + tuple((n - k) // s + 1 for n, k, s in zip(shape[1:], kernel, stride))
    out, ref = np.empty(oshape, np.float32), np.empty(oshape, np.float32)
    arg, arg_ref = np.empty(oshape, np.uint8), np.empty(oshape, np.uint8)
    relu_max_pool_forward(x, kernel[0], kernel[1], stride[0], stride[1], out, arg)
    relu_max_pool_forward_reference(x, kernel, stride, ref, arg_ref)
    np.testing.assert_array_equal(out, ref)
    positive = ref > 0
    np.testing.assert_array_equal(arg[positive], arg_ref[positive])  # where gradients flow
    g = rng.normal(size=oshape).astype(np.float32)
    gx, gx_ref = np.full(shape, 7, np.float32), np.empty(shape, np.float32)
    relu_max_pool_backward(g, out, arg, kernel[1], stride[0], stride[1], gx)
    relu_max_pool_backward_reference(g, ref, arg_ref, kernel, stride, gx_ref)
    if all(s >= k for s, k in zip(stride, kernel)):
        np.testing.assert_array_equal(gx, gx_ref)
    else:  # overlapping windows: the reference adds per offset, the kernel per window
        np.testing.assert_allclose(gx, gx_ref, rtol=1e-6, atol=1e-6)
