"""Average pooling, adaptive average pooling and interpolate (nearest, nearest-exact, linear,
bilinear with and without align_corners) and their layers against torch (values and input
gradients, float64 and float32), eager == compiled bit for bit, float64 gradchecks, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from nn_helpers import assert_compiled_equals_eager, compare_fn_with_torch, compare_with_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F


def _x(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


POOL2D = [
    {"kernel_size": 2},
    {"kernel_size": 3},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 1)},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    {"kernel_size": 2, "stride": 3, "ceil_mode": True, "count_include_pad": False},
    {"kernel_size": 3, "padding": 1, "divisor_override": 5},
]


@pytest.mark.parametrize("kw", POOL2D, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_avg_pool2d_matches_torch(kw, dtype):
    compare_fn_with_torch(
        lambda x: F.avg_pool2d(x, **kw),
        lambda x: TF.avg_pool2d(x, **kw),
        [_x((2, 3, 7, 9), dtype=dtype)],
    )
    compare_with_torch(nn.AvgPool2d(**kw), torch.nn.AvgPool2d(**kw), [_x((3, 8, 6), 1, np.float32)])


@pytest.mark.parametrize(
    "kw",
    [
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 1},
        {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True},
        {"kernel_size": 3, "padding": 1, "count_include_pad": False},
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_avg_pool1d_matches_torch(kw, dtype):
    compare_fn_with_torch(
        lambda x: F.avg_pool1d(x, **kw),
        lambda x: TF.avg_pool1d(x, **kw),
        [_x((2, 3, 11), dtype=dtype)],
    )
    compare_with_torch(
        nn.AvgPool1d(**kw), torch.nn.AvgPool1d(**kw), [_x((2, 4, 10), 1, np.float32)]
    )


@pytest.mark.parametrize("size", [1, 3, (4, 5), (None, 2), 7, (2, None)], ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adaptive_avg_pool2d_matches_torch(size, dtype):
    compare_fn_with_torch(
        lambda x: F.adaptive_avg_pool2d(x, size),
        lambda x: TF.adaptive_avg_pool2d(x, size),
        [_x((2, 3, 7, 9), dtype=dtype)],
    )
    compare_with_torch(
        nn.AdaptiveAvgPool2d(size),
        torch.nn.AdaptiveAvgPool2d(size),
        [_x((2, 3, 8, 10), 1, np.float32)],
    )


@pytest.mark.parametrize("size", [1, 4, 5, 13])
def test_adaptive_avg_pool1d_matches_torch(size):
    compare_fn_with_torch(
        lambda x: F.adaptive_avg_pool1d(x, size),
        lambda x: TF.adaptive_avg_pool1d(x, size),
        [_x((2, 3, 13))],
    )
    compare_with_torch(
        nn.AdaptiveAvgPool1d(size),
        torch.nn.AdaptiveAvgPool1d(size),
        [_x((2, 3, 13), 1, np.float32)],
    )


RESIZE = [
    ({"scale_factor": 2}, 4),
    ({"scale_factor": 3}, 4),
    ({"size": (5, 13)}, 4),
    ({"scale_factor": (0.5, 1.7)}, 4),
    ({"size": (11, 20), "mode": "nearest-exact"}, 4),
    ({"scale_factor": 1.7, "mode": "bilinear"}, 4),
    ({"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True}, 4),
    ({"size": (3, 4), "mode": "bilinear"}, 4),
    ({"size": (14, 18), "mode": "bilinear", "align_corners": True}, 4),
    ({"scale_factor": (2.3, 0.6), "mode": "bilinear", "align_corners": True}, 4),
    ({"size": 1, "mode": "bilinear", "align_corners": True}, 4),
    ({"scale_factor": 2.5}, 3),
    ({"size": 17, "mode": "linear"}, 3),
    ({"size": 4, "mode": "linear", "align_corners": True}, 3),
]


@pytest.mark.parametrize("kw, rank", RESIZE, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interpolate_matches_torch(kw, rank, dtype):
    shape = (2, 3, 7, 9)[:rank]
    compare_fn_with_torch(
        lambda x: F.interpolate(x, **kw),
        lambda x: TF.interpolate(x, **kw),
        [_x(shape, dtype=dtype)],
    )
    compare_with_torch(nn.Upsample(**kw), torch.nn.Upsample(**kw), [_x(shape, 1, np.float32)])


def test_compiled_equals_eager():
    w = tg.tensor(_x((1, 3, 1, 1), dtype=np.float32), requires_grad=True)

    def f(x):
        y = F.avg_pool2d(x * w, 3, 2, 1, ceil_mode=True) + F.adaptive_avg_pool2d(x * w, (4, 5))
        y = F.interpolate(y, scale_factor=2, mode="bilinear") + F.interpolate(y, size=(8, 10))
        return (y * y).mean() + (
            F.avg_pool1d(F.adaptive_avg_pool1d(x[:, :, 0] * w[..., 0], 5), 2) ** 2
        ).sum()

    calls = [[_x((2, 3, 7, 9), k, np.float32)] for k in range(3)]
    assert_compiled_equals_eager(f, [w], calls)


def test_gradchecks():
    x = _x((2, 2, 5, 6))
    tg.gradcheck(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x)
    tg.gradcheck(lambda x: F.adaptive_avg_pool2d(x, (3, 4)), x)
    tg.gradcheck(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), x)
    tg.gradcheck(lambda x: F.interpolate(x, size=(7, 4)), x)


def test_errors():
    x = tg.tensor(_x((2, 3, 4, 4)))
    with pytest.raises(tg.ShapeError, match=r"avg_pool2d: input must be \(N, C, H, W\).*\(4, 4\)"):
        F.avg_pool2d(tg.tensor(_x((4, 4))), 2)
    with pytest.raises(ValueError, match=r"padding \(2, 2\) must be at most half"):
        F.avg_pool2d(x, 3, padding=2)
    with pytest.raises(tg.ShapeError, match="kernel 5 is larger than the padded input"):
        F.avg_pool2d(x, 5)
    with pytest.raises(tg.ShapeError, match=r"AvgPool1d.*\(N, C, L\) or \(C, L\).*\(2, 3, 4, 4\)"):
        nn.AvgPool1d(2)(x)
    with pytest.raises(ValueError, match="mode must be one of"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(tg.ShapeError, match=r"'linear' takes 3-D .*\(2, 3, 4, 4\)"):
        F.interpolate(x, scale_factor=2, mode="linear")
    with pytest.raises(ValueError, match="align_corners applies to the linear modes"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        nn.Upsample()
    with pytest.raises(ValueError, match="output_size"):
        F.adaptive_avg_pool2d(x, (1, 2, 3))
