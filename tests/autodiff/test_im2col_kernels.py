"""The compiled im2col/col2im kernels against their NumPy references, bit for bit."""

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import columns as K
from tapegrad.autodiff.primitives.conv import out_size

GEOMETRIES = [  # (N, C, H, W, KH, KW, stride, padding (top, left, bottom, right), dilation)
    (2, 3, 7, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (3, 2, 9, 8, 3, 2, (2, 2), (0, 1, 2, 0), (1, 1)),
    (1, 4, 10, 10, 3, 3, (2, 3), (2, 2, 2, 2), (2, 1)),
    (2, 1, 1, 12, 1, 5, (1, 2), (0, 2, 0, 1), (1, 2)),  # a 1-d convolution as height 1
]


@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_and_col2im_match_their_references(geo, dtype):
    n, c, h, w, kh, kw, stride, (pt, pl, pb, pr), dil = geo
    oh = out_size(h, kh, stride[0], pt, pb, dil[0])
    ow = out_size(w, kw, stride[1], pl, pr, dil[1])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    got = np.full((c, kh, kw, n, oh, ow), np.nan, dtype)
    want = np.full_like(got, np.nan)
    K.im2col(x, got, stride, (pt, pl), dil)
    K.im2col_reference(x, want, stride, (pt, pl), dil)
    np.testing.assert_array_equal(got, want)

    g = rng.standard_normal(got.shape).astype(dtype)
    gx = np.full_like(x, np.nan)
    gx_ref = np.full_like(x, np.nan)
    K.col2im(g, gx, stride, (pt, pl), dil)
    K.col2im_reference(g, gx_ref, stride, (pt, pl), dil)
    np.testing.assert_array_equal(gx, gx_ref)
    # the adjoint: <im2col(x), g> == <x, col2im(g)>
    np.testing.assert_allclose(np.vdot(got, g), np.vdot(x, gx), rtol=1e-4)


def test_col2im_writes_into_a_strided_gradient():
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 5))
    cols = np.empty((3, 3, 3, 2, 5, 5))
    K.im2col(x, cols, (1, 1), (1, 1), (1, 1))
    gx = np.empty((2, 5, 5, 3)).transpose(0, 3, 1, 2)  # channels-last memory
    ref = np.empty((2, 3, 5, 5))
    K.col2im(cols, gx, (1, 1), (1, 1), (1, 1))
    K.col2im_reference(cols, ref, (1, 1), (1, 1), (1, 1))
    np.testing.assert_array_equal(gx, ref)
