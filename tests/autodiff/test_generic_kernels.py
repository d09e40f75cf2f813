"""The array-generic kernels (``kernels/generic.py``, what a device without a kernel of its own
binds) against the CPU kernels' NumPy references, on NumPy arrays (they run any array module's
arrays the same way)."""

import numpy as np
import pytest

from tapegrad.autodiff.kernels import generic
from tapegrad.autodiff.kernels.cpu import columns, conv, norm, selection


@pytest.mark.parametrize("shape", [(2, 3, 9), (2, 3, 6, 7)])
def test_conv_backward_matches_the_reference(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape)
    w = rng.normal(size=(4, shape[1]) + (3,) * (len(shape) - 2))
    g = rng.normal(size=(shape[0], 4) + tuple(n - 2 for n in shape[2:]))
    got = [np.empty_like(w), np.empty(4), np.empty_like(x)]
    want = [np.empty_like(w), np.empty(4), np.empty_like(x)]
    generic.conv_backward(g, x, w, *got)
    conv.conv_backward_reference(g, x, w, *want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert not generic.direct_layout_ok(x, w)


def test_im2col_and_col2im_match_the_references():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 7, 6))
    geo = ((2, 1), (1, 2), (1, 2))  # stride, padding (top, left), dilation
    cols = (3, 3, 2, 2, 4, 4)  # (C, KH, KW, N, OH, OW)
    got, want = np.full(cols, np.nan), np.full(cols, np.nan)
    generic.im2col(x, got, *geo)
    columns.im2col_reference(x, want, *geo)
    np.testing.assert_array_equal(got, want)
    gx, gx_ref = np.empty_like(x), np.empty_like(x)
    generic.col2im(want, gx, *geo)
    columns.col2im_reference(want, gx_ref, *geo)
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-12, atol=1e-12)
    assert not generic.im2col_whole_batch(64, 2)


def test_rows_and_selection_match_the_references():
    rng = np.random.default_rng(2)
    x, g = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    w, b = rng.normal(size=7), rng.normal(size=7)
    got = [np.empty_like(x), np.empty(5), np.empty(5)]
    want = [np.empty_like(x), np.empty(5), np.empty(5)]
    generic.layer_norm_forward(x, w, b, 1e-5, *got)
    norm.layer_norm_forward_reference(x, w, b, 1e-5, *want)
    for a, c in zip(got, want):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    mean, rstd = want[1:]
    got = [np.empty_like(x), np.empty(7), np.empty(7)]
    want = [np.empty_like(x), np.empty(7), np.empty(7)]
    generic.layer_norm_backward(g, x, w, mean, rstd, *got)
    norm.layer_norm_backward_reference(g, x, w, mean, rstd, *want)
    for a, c in zip(got, want):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    y = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    a, c = np.empty_like(x), np.empty_like(x)
    generic.softmax_backward(g, y, a)
    norm.softmax_backward_reference(g, y, c)
    np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    mask = x > 0
    for keep in (True, False):
        a, c = np.empty_like(x), np.empty_like(x)
        generic.select(mask, g, 0.5, keep, a)
        selection.select_reference(mask, g, 0.5, keep, c)
        np.testing.assert_array_equal(a, c)
