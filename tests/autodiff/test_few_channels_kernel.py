"""The few-channel convolution forward and weight gradient (``kernels/cpu/few_channels.py``)
against the columns' references over the geometries they take (one to fifteen channels,
padding on any side, windows that leave trailing rows and columns unread, 1x1 and non-square
windows); inf and NaN reach what they reach in the references; serial and parallel runs give
the same bits; a workspace holding other bytes changes nothing; the rule says which
convolutions they serve."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import by_image, few_channels

# (N, C, O, H, W, kernel, padding (top, left), output size)
GEOMETRIES = [
    (5, 1, 6, 28, 28, (3, 3), (0, 0), (26, 26)),  # seed-cnn's
    (3, 1, 16, 9, 8, (3, 3), (1, 1), (9, 8)),  # a ResNet stem's, "same"
    (4, 3, 5, 9, 7, (2, 3), (1, 2), (10, 9)),  # non-square, padding past the window
    (2, 15, 4, 6, 6, (3, 3), (1, 1), (4, 5)),  # trailing rows and columns never read
    (7, 8, 3, 5, 4, (1, 1), (0, 0), (5, 4)),  # 1x1
    (1, 2, 2, 3, 3, (3, 3), (2, 0), (5, 1)),  # more padding than image
    (2, 1, 2, 3, 3, (3, 3), (0, 4), (1, 7)),  # wider left padding than the image
]
TOL = {np.float32: 2e-6, np.float64: 1e-14}


def _case(geometry, dtype, seed=0):
    n, c, o, h, w, k, padding, out = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, *k)).astype(dtype)
    return x, wt, padding, (n, o, *out)


def _weight_case(geometry, dtype, seed=0):
    x, w, padding, shape = _case(geometry, dtype, seed)
    g = np.random.default_rng(seed + 100).standard_normal(shape).astype(dtype)
    g[g < 0.3] = 0  # mostly zeros, as ReLU and max pooling leave it
    return x, g, padding, w.shape


def _weight_reference(x, g, padding, w_shape):
    want = np.full(w_shape, np.nan, x.dtype)
    by_image.conv_image_weight_reference(x, g, want, (1, 1), padding, (1, 1))
    return want


def _reference(x, w, padding, shape):
    want = np.full(shape, np.nan, x.dtype)
    by_image.conv_image_forward_reference(x, w, want, (1, 1), padding, (1, 1))
    return want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_forward_matches_the_reference(geometry, dtype):
    x, w, padding, shape = _case(geometry, dtype)
    got = np.full(shape, np.nan, dtype)
    few_channels.conv_few_forward(x, w, got, padding)
    want = _reference(x, w, padding, shape)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * np.abs(want).max())


def test_inf_and_nan_reach_what_they_reach_in_the_reference():
    x, w, padding, shape = _case(GEOMETRIES[2], np.float32, seed=1)
    x[0, 1, 4, 6] = np.inf  # the last column: the wide rows wrap it into the next row's start
    x[1, 0, 0, 0] = np.nan
    x[2, 2, 8, 3] = -np.inf
    got = np.full(shape, 7.0, np.float32)
    few_channels.conv_few_forward(x, w, got, padding)
    want = _reference(x, w, padding, shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fine = np.isfinite(want)
    assert fine.sum() > want.size // 2
    np.testing.assert_allclose(got[fine], want[fine], rtol=0, atol=2e-6 * np.abs(want[fine]).max())


def _run(kernel, geometry, dtype, seed, scratch=None):
    """The forward (``res``) or the weight gradient (``gw``) of one case, computed."""
    if kernel == "forward":
        x, w, padding, shape = _case(geometry, dtype, seed)
        got = np.empty(shape, dtype)
        few_channels.conv_few_forward(x, w, got, padding, scratch)
        return got, _reference(x, w, padding, shape)
    x, g, padding, w_shape = _weight_case(geometry, dtype, seed)
    got = np.empty(w_shape, dtype)
    few_channels.conv_few_weight(x, g, got, padding, scratch)
    return got, _weight_reference(x, g, padding, w_shape)


@pytest.mark.parametrize("kernel", ["forward", "weight"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_serial_and_parallel_runs_give_the_same_bits(geometry, kernel, threads, monkeypatch):
    monkeypatch.setattr(few_channels, "PARALLEL_MIN_FLOPS", 0)  # small cases in parallel too
    runs = []
    for count in (1, 2):
        threads(count)
        runs.append(_run(kernel, geometry, np.float32, seed=2)[0])
    assert runs[0].tobytes() == runs[1].tobytes()


@pytest.mark.parametrize("kernel", ["forward", "weight"])
def test_a_workspace_holding_other_bytes_changes_nothing(kernel, monkeypatch):
    monkeypatch.setattr(few_channels, "PARALLEL_MIN_FLOPS", 0)
    kept = {}

    def scratch(key, shape):
        if key not in kept:
            kept[key] = np.full(shape, np.nan)  # garbage a plan's workspace may hold
        return kept[key]

    first, want = _run(kernel, GEOMETRIES[3], np.float64, 3, scratch)
    for a in kept.values():
        a.fill(1e300)
    second, _ = _run(kernel, GEOMETRIES[3], np.float64, 3, scratch)
    assert set(kept) == ({"few_xp", "few_z"} if kernel == "forward" else {"few_xs", "few_parts"})
    assert first.tobytes() == second.tobytes()
    np.testing.assert_allclose(first, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_weight_gradient_matches_the_reference(geometry, dtype):
    x, g, padding, w_shape = _weight_case(geometry, dtype)
    got = np.full(w_shape, np.nan, dtype)
    few_channels.conv_few_weight(x, g, got, padding)
    want = _weight_reference(x, g, padding, w_shape)
    # each entry a dot of OH*OW products (in vector lanes) summed over the images
    scale = np.einsum("noij->", np.abs(g)) * np.abs(x).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(dtype).eps * scale)


def test_the_weight_gradient_of_no_images_is_zero():
    x, g, padding, w_shape = _weight_case(GEOMETRIES[1], np.float32)
    got = np.full(w_shape, np.nan, np.float32)
    few_channels.conv_few_weight(x[:0], g[:0], got, padding)
    assert not got.any()


def test_inf_and_nan_reach_the_weight_gradient_where_they_reach_the_reference():
    x, g, padding, w_shape = _weight_case(GEOMETRIES[2], np.float64, seed=4)
    g[...] = np.abs(g) + 0.5  # every product counted: inf meets no zero
    x[0, 1, 4, 6] = np.inf
    x[1, 0, 0, 0] = np.nan
    got = np.full(w_shape, 7.0)
    few_channels.conv_few_weight(x, g, got, padding)
    want = _weight_reference(x, g, padding, w_shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isnan(want).any() and np.isinf(want).any()


def test_the_rule_takes_few_channels_at_stride_one_only():
    take = few_channels.conv_few_channels
    assert take(np.float32, 1, 1, 2, (1, 1), (1, 1))
    assert take(np.float64, 15, 1, 2, (1, 1), (1, 1))
    assert not take(np.float32, 16, 1, 2, (1, 1), (1, 1))  # the image-by-image products
    assert not take(np.float32, 3, 1, 2, (2, 2), (1, 1))
    assert not take(np.float32, 3, 1, 2, (1, 1), (2, 1))
    assert not take(np.float32, 3, 3, 2, (1, 1), (1, 1))  # grouped
    assert not take(np.float32, 3, 1, 1, (1,), (1,))  # 1-d
    assert not take(np.int32, 3, 1, 2, (1, 1), (1, 1))
