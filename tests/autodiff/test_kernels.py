"""The compiled kernels added for allocation-free plans equal their NumPy references."""

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu.bias import (
    add_channel_bias,
    add_channel_bias_reference,
    add_into,
    add_into_reference,
    add_taps,
    add_taps_reference,
)
from tapegrad.autodiff.kernels.cpu.selection import select, select_reference


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keep", [True, False])
def test_select_matches_reference_bit_for_bit(dtype, keep):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(7, 9)).astype(dtype)
    a[0, :3] = [np.nan, -0.0, np.inf]
    c = rng.uniform(size=a.shape) < 0.5
    out, ref = np.full(a.shape, 9, dtype), np.empty(a.shape, dtype)
    select(c, a, 0, keep, out)
    select_reference(c, a, 0, keep, ref)
    np.testing.assert_array_equal(out, ref)
    assert not np.signbit(out[c != keep]).any()  # the number, +0, where a is not kept


@pytest.mark.parametrize("n,o,k,length", [(1, 1, 1, 1), (3, 4, 3, 9), (2, 8, 5, 17)])
def test_add_taps_matches_reference_bit_for_bit(n, o, k, length):
    rng = np.random.default_rng(2)
    z = rng.normal(size=(k * o, n * (length + k - 1))).astype(np.float32)
    out, ref = np.full((n, o, length), 9, np.float32), np.empty((n, o, length), np.float32)
    add_taps(z, out)
    add_taps_reference(z, ref)
    np.testing.assert_array_equal(out, ref)
    # the definition, one entry: out[n, o, l] = sum_k z[k * O + o, n * L + l + k]
    width = length + k - 1
    want = sum(z[t * o + o - 1, (n - 1) * width + length - 1 + t] for t in range(k))
    np.testing.assert_allclose(out[n - 1, o - 1, length - 1], want, rtol=1e-6)


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
    from tapegrad.autodiff.kernels.cpu.fused import (
        relu_max_pool_backward_reference,
        relu_max_pool_forward_reference,
        relu_max_pool_planes_backward,
        relu_max_pool_planes_forward,
    )

    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(np.float32)
    x[0, 0, 0] = np.nan if x.size > 4 else x[0, 0, 0]
    oshape = (shape[0],) + tuple((n - k) // s + 1 for n, k, s in zip(shape[1:], kernel, stride))
    out, ref = np.empty(oshape, np.float32), np.empty(oshape, np.float32)
    arg, arg_ref = np.empty(oshape, np.uint8), np.empty(oshape, np.uint8)
    relu_max_pool_planes_forward(x, kernel[0], kernel[1], stride[0], stride[1], out, arg)
    relu_max_pool_forward_reference(x, kernel, stride, ref, arg_ref)
    np.testing.assert_array_equal(out, ref)
    positive = ref > 0
    np.testing.assert_array_equal(arg[positive], arg_ref[positive])  # where gradients flow
    g = rng.normal(size=oshape).astype(np.float32)
    gx, gx_ref = np.full(shape, 7, np.float32), np.empty(shape, np.float32)
    relu_max_pool_planes_backward(g, out, arg, *kernel, *stride, gx)
    relu_max_pool_backward_reference(g, ref, arg_ref, kernel, stride, gx_ref)
    if all(s >= k for s, k in zip(stride, kernel)):
        np.testing.assert_array_equal(gx, gx_ref)
    else:  # overlapping windows: the reference adds per offset, the kernel per window
        np.testing.assert_allclose(gx, gx_ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n,c", [(1, 1), (1, 7), (5, 3), (100, 10)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_row", [False, True])
def test_softmax_cross_entropy_kernels_match_reference(n, c, dtype, per_row):
    from tapegrad.autodiff.kernels.cpu import loss as K

    rng = np.random.default_rng(n * c)
    x = (rng.normal(size=(n, c)) * 20).astype(dtype)  # wide logits: exp would overflow unshifted
    t = rng.integers(0, c, n).astype(np.int32 if per_row else np.int64)
    p, per, p_ref, per_ref = (np.empty(s, dtype) for s in [(n, c), n, (n, c), n])
    total = K.softmax_ce_forward(x, t, p, per)
    total_ref = K.softmax_ce_forward_reference(x, t, p_ref, per_ref)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(p, p_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(per, per_ref, rtol=tol, atol=tol)
    assert total == pytest.approx(total_ref, rel=tol)
    k = rng.normal(size=n if per_row else 1).astype(dtype)
    gx, gx_ref = np.empty_like(x), np.empty_like(x)
    K.softmax_ce_backward(p, t, k, gx)
    K.softmax_ce_backward_reference(p, t, k, gx_ref)
    np.testing.assert_allclose(gx, gx_ref, rtol=tol, atol=tol)


def test_softmax_cross_entropy_kernel_refuses_out_of_range_ids():
    from tapegrad.autodiff.kernels.cpu.loss import softmax_ce_forward

    x = np.zeros((3, 4), np.float32)
    p, per = np.empty_like(x), np.empty(3, np.float32)
    for bad in (4, -1):
        with pytest.raises(IndexError, match="out of range"):
            softmax_ce_forward(x, np.array([0, bad, 1]), p, per)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (64,), (3, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bce_kernels_match_reference(shape, dtype):
    from tapegrad.autodiff.kernels.cpu import loss as K

    rng = np.random.default_rng(len(shape))
    x = (rng.normal(size=shape) * 30).astype(dtype)  # far into both tails
    t = rng.uniform(0, 1, shape).astype(dtype)
    sig, per, sig_ref, per_ref = (np.empty(shape, dtype) for _ in range(4))
    total = K.bce_forward(x, t, sig, per)
    total_ref = K.bce_forward_reference(x, t, sig_ref, per_ref)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(sig, sig_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(per, per_ref, rtol=tol, atol=tol)
    assert total == pytest.approx(total_ref, rel=tol, abs=tol)
    for k in (np.array([0.25], dtype), rng.normal(size=x.size).astype(dtype)):
        gx, gx_ref = np.empty_like(x), np.empty_like(x)
        K.bce_backward(sig, t, k, gx)
        K.bce_backward_reference(sig, t, k, gx_ref)
        np.testing.assert_allclose(gx, gx_ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(400, 64), (1, 5), (7, 3), (0, 4), (100, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_rows_matches_reference(shape, dtype):
    from tapegrad.autodiff.kernels.cpu.reduce import sum_rows, sum_rows_reference

    rng = np.random.default_rng(shape[0])
    x = (rng.normal(size=shape) * rng.uniform(0, 1e3, size=shape)).astype(dtype)
    out, ref = np.empty(shape[1], dtype), np.empty(shape[1], dtype)
    sum_rows(x, out)
    sum_rows_reference(x, ref)
    if shape[1] > 1:  # NumPy adds rows in order too: the same bits
        np.testing.assert_array_equal(out, ref)
    else:  # a single column NumPy sums pairwise
        np.testing.assert_allclose(out, ref, rtol=1e-5 if dtype == np.float32 else 1e-12)
    strided = np.asfortranarray(x)[::-1]  # any layout: the rows still add in order
    sum_rows(strided, out)
    np.testing.assert_allclose(
        out, x[::-1].sum(axis=0), rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-3
    )


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 3), (100, 128)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_relu_kernels_match_reference_bit_for_bit(shape, dtype):
    from tapegrad.autodiff.kernels.cpu import fused as K

    rng = np.random.default_rng(shape[1])
    x = rng.normal(size=shape).astype(dtype)
    b = rng.normal(size=shape[1]).astype(dtype)
    x.flat[0] = np.nan  # NaN passes through the ReLU, as np.maximum lets it
    out, ref = np.empty_like(x), np.empty_like(x)
    K.bias_relu_forward(x, b, out)
    K.bias_relu_forward_reference(x, b, ref)
    np.testing.assert_array_equal(out, ref)
    assert np.isnan(out.flat[0])
    g = rng.normal(size=shape).astype(dtype)
    gx, gx_ref = np.empty_like(x), np.empty_like(x)
    gb, gb_ref = np.empty_like(b), np.empty_like(b)
    K.bias_relu_backward(g, out, gx, gb)
    K.bias_relu_backward_reference(g, ref, gx_ref, gb_ref)
    np.testing.assert_array_equal(gx, gx_ref)
    np.testing.assert_array_equal(gb, gb_ref)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (100, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tanh", [True, False])
def test_rnn_backward_step_matches_reference_bit_for_bit(shape, dtype, tanh):
    from tapegrad.autodiff.kernels.cpu.recurrent import (
        rnn_backward_step,
        rnn_backward_step_reference,
    )

    rng = np.random.default_rng(shape[1])
    g, dh = (rng.normal(size=shape).astype(dtype) for _ in range(2))
    h = np.tanh(rng.normal(size=shape)).astype(dtype)
    h.flat[0] = 0  # relu's kink: no gradient
    dpre, dpre_ref = np.empty(shape, dtype), np.empty(shape, dtype)
    # dxp[t] as the scan sees it: one time step of a batch-major (N, T, H) buffer
    dxp, dxp_ref = (
        np.zeros((shape[0], 3, shape[1]), dtype),
        np.zeros((shape[0], 3, shape[1]), dtype),
    )
    rnn_backward_step(g, dh, h, tanh, dpre, dxp[:, 1])
    rnn_backward_step_reference(g, dh, h, tanh, dpre_ref, dxp_ref[:, 1])
    np.testing.assert_array_equal(dpre, dpre_ref)
    np.testing.assert_array_equal(dxp, dxp_ref)
