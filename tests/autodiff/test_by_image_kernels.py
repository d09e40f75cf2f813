"""The image-by-image convolution kernels (``kernels/cpu/by_image.py``) against their NumPy
references, over the geometries they take (strides, asymmetric padding, dilation, 1x1, windows
that leave trailing rows unread, images taken a few at a time); serial and parallel runs give
the same bits; a plan's workspace holding other bytes changes nothing; OpenBLAS's thread count
is restored; the rule says which convolutions they serve."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import by_image, gemm

pytestmark = pytest.mark.skipif(not gemm.AVAILABLE, reason="NumPy's BLAS is no ILP64 OpenBLAS")

# (N, C, O, H, W, kernel, stride, padding (top, left; bottom/right as the output size says),
#  dilation, output size)
GEOMETRIES = [
    (5, 16, 8, 9, 8, (3, 3), (1, 1), (1, 1), (1, 1), (9, 8)),  # "same", stride 1
    (3, 16, 5, 9, 9, (2, 3), (3, 2), (2, 0), (1, 1), (4, 3)),  # trailing columns never read
    (4, 16, 6, 7, 10, (3, 2), (2, 1), (0, 1), (2, 3), (2, 9)),  # dilation, stride (2, 1)
    (37, 16, 4, 6, 6, (1, 1), (2, 2), (0, 0), (1, 1), (3, 3)),  # 1x1 strided, many chunks
    (23, 17, 3, 5, 4, (3, 3), (1, 1), (1, 1), (1, 1), (5, 4)),  # small: images in groups
    (2, 16, 3, 4, 5, (2, 2), (1, 1), (2, 1), (2, 1), (5, 4)),  # padding past the window
]
TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _case(geometry, dtype, seed=0):
    n, c, o, h, w, k, stride, padding, dilation, out = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, *k)).astype(dtype)
    g = rng.standard_normal((n, o, *out)).astype(dtype)
    return x, wt, g, (stride, padding, dilation)


def _run(x, w, g, geo, scratch=None, kernels=by_image):
    res = np.full(g.shape, np.nan, x.dtype)
    gx, gw = np.full(x.shape, np.nan, x.dtype), np.full(w.shape, np.nan, x.dtype)
    if kernels is by_image:
        by_image.conv_image_forward(x, w, res, *geo, scratch)
        by_image.conv_image_input(g, w, gx, *geo, scratch)
        by_image.conv_image_weight(x, g, gw, *geo, scratch)
    else:
        by_image.conv_image_forward_reference(x, w, res, *geo)
        by_image.conv_image_input_reference(g, w, gx, *geo)
        by_image.conv_image_weight_reference(x, g, gw, *geo)
    return res, gx, gw


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_kernels_match_the_references(geometry, dtype):
    x, w, g, geo = _case(geometry, dtype)
    for got, want in zip(_run(x, w, g, geo), _run(x, w, g, geo, kernels=None)):
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * scale)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_serial_and_parallel_runs_give_the_same_bits(geometry, threads, monkeypatch):
    monkeypatch.setattr(by_image, "PARALLEL_MIN_SIZE", 0)  # these small cases in parallel too
    x, w, g, geo = _case(geometry, np.float32, seed=1)
    threads(1)
    serial = _run(x, w, g, geo)
    threads(2)
    parallel = _run(x, w, g, geo)
    for a, b in zip(serial, parallel):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize(
    ("geometry", "keys"),
    [(GEOMETRIES[0], {"img_rows"}), (GEOMETRIES[1], {"img_gcols"})],  # stride 1, strided
)
def test_a_workspace_holding_other_bytes_changes_nothing(geometry, keys, leftover_workspace):
    x, w, g, geo = _case(geometry, np.float64, seed=2)
    scratch = leftover_workspace
    fresh = _run(x, w, g, geo)
    for _ in range(2):
        scratch.refill(np.inf)
        for a, b in zip(fresh, _run(x, w, g, geo, scratch)):
            assert a.tobytes() == b.tobytes()
    assert {"img_xp", "img_cols", "img_gxp", "img_parts"} | keys <= set(scratch.kept)


def test_an_inf_in_the_input_gives_the_references_gradients():
    # stride 1: each column row runs into the entries past the output's width, which must not
    # meet the inf (0 * inf would put NaN where the reference has inf or a number)
    x, w, g, geo = _case(GEOMETRIES[0], np.float64, seed=3)
    x[1, 3, 4, 7] = np.inf
    w[2, 5, 0, 1] = -np.inf
    with np.errstate(invalid="ignore"):
        got, want = _run(x, w, g, geo), _run(x, w, g, geo, kernels=None)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
        finite = np.isfinite(b)
        np.testing.assert_allclose(a[finite], b[finite], rtol=1e-12, atol=1e-10)


def test_openblas_keeps_its_thread_count():
    setter, getter = gemm._THREADS
    before = getter()
    try:
        setter(2)
        x, w, g, geo = _case(GEOMETRIES[0], np.float32)
        _run(x, w, g, geo)
        assert getter() == 2
    finally:
        setter(before)


def test_the_rule():
    assert by_image.conv_by_image(np.float32, 16, 1, 2)
    assert by_image.conv_by_image(np.dtype("float64"), 64, 1, 2)
    assert not by_image.conv_by_image(np.float32, 8, 1, 2)  # few channels: per-sample products
    assert not by_image.conv_by_image(np.float32, 16, 2, 2)  # grouped
    assert not by_image.conv_by_image(np.float32, 16, 1, 1)  # 1-d
    assert not by_image.conv_by_image(np.float16, 16, 1, 2)
    assert not by_image.conv_by_image(np.int64, 16, 1, 2)
