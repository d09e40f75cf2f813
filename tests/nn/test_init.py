"""Initialisers: in place, right bounds/statistics, reproducible with a seed, and the layers'
documented defaults."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import init


def _t(shape, dtype=np.float32):
    return tg.tensor(np.full(shape, np.nan, dtype=dtype))


def test_fans_follow_out_in_kernel_layout():
    assert init.calculate_fans((10, 4)) == (4, 10)
    assert init.calculate_fans((6, 3, 5, 5)) == (75, 150)
    with pytest.raises(ValueError, match="2 dimensions"):
        init.calculate_fans((5,))


def test_in_place_and_dtype_kept():
    t = _t((3, 4))
    buf = t.data
    assert init.zeros_(t) is t and t.data is buf and np.all(buf == 0)
    init.ones_(t)
    assert np.all(buf == 1) and buf.dtype == np.float32
    init.constant_(t, 2.5)
    assert np.all(buf == 2.5)
    with pytest.raises(TypeError, match="Tensor"):
        init.zeros_(np.zeros(3))


_B_XAVIER = math.sqrt(6 / 500)
_B_XAVIER_GAIN2 = 2.0 * math.sqrt(6 / (30 * 3 + 20 * 3))
_B_KAIMING = math.sqrt(2) * math.sqrt(3 / 300)


@pytest.mark.parametrize(
    "fn, shape, lo, hi",
    [
        (lambda t, r: init.uniform_(t, -0.3, 0.7, rng=r), (200, 300), -0.3, 0.7),
        (lambda t, r: init.xavier_uniform_(t, rng=r), (200, 300), -_B_XAVIER, _B_XAVIER),
        (
            lambda t, r: init.xavier_uniform_(t, gain=2.0, rng=r),
            (20, 30, 3),
            -_B_XAVIER_GAIN2,
            _B_XAVIER_GAIN2,
        ),
        (
            lambda t, r: init.kaiming_uniform_(t, nonlinearity="relu", rng=r),
            (200, 300),
            -_B_KAIMING,
            _B_KAIMING,
        ),
    ],
)
def test_uniform_family_bounds_and_spread(fn, shape, lo, hi):
    t = _t(shape)
    fn(t, np.random.default_rng(0))
    x = t.data
    assert x.min() >= lo and x.max() <= hi
    # a uniform sample reaches close to both ends and has the uniform's variance
    width = hi - lo
    assert x.min() < lo + 0.01 * width and x.max() > hi - 0.01 * width
    np.testing.assert_allclose(x.var(), width**2 / 12, rtol=0.05)


@pytest.mark.parametrize(
    "fn, std",
    [
        (lambda t, r: init.normal_(t, 1.0, 0.5, rng=r), 0.5),
        (lambda t, r: init.xavier_normal_(t, rng=r), math.sqrt(2 / 500)),
        (
            lambda t, r: init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu", rng=r),
            math.sqrt(2 / 200),
        ),
        (lambda t, r: init.kaiming_normal_(t, a=0.2, rng=r), math.sqrt(2 / 1.04 / 300)),
    ],
)
def test_normal_family_statistics(fn, std):
    t = _t((200, 300))
    fn(t, np.random.default_rng(1))
    np.testing.assert_allclose(t.data.std(), std, rtol=0.02)


def test_gain_values():
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu", 0.0) == pytest.approx(math.sqrt(2))
    with pytest.raises(ValueError, match="unknown"):
        init.calculate_gain("swish")


def test_default_generator_is_seedable():
    init.manual_seed(7)
    a = init.normal_(_t((5,))).data.copy()
    init.manual_seed(7)
    b = init.normal_(_t((5,))).data.copy()
    c = init.normal_(_t((5,))).data.copy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)
    with pytest.raises(TypeError, match="Generator"):
        init.normal_(_t((2,)), rng=np.random.RandomState(0))


def test_layer_defaults_xavier_weights_zero_biases():
    # Linear and Conv: PyTorch's initialisation by default (tests/nn/test_torch_modules.py);
    # init="glorot" is the Xavier weight and zero bias the seed presets use
    rng = np.random.default_rng(0)
    lin = nn.Linear(300, 200, rng=rng, init="glorot")
    b = math.sqrt(6 / 500)
    assert np.abs(lin.weight.data).max() <= b and np.abs(lin.weight.data).max() > 0.99 * b
    assert np.all(lin.bias.data == 0)
    conv = nn.Conv2d(4, 8, 5, rng=rng, init="glorot")
    b = math.sqrt(6 / (4 * 25 + 8 * 25))
    assert np.abs(conv.weight.data).max() <= b and np.all(conv.bias.data == 0)
    lstm = nn.LSTM(30, 20, rng=rng)
    b = math.sqrt(6 / 50)  # per gate block (20, 30)
    for k in range(4):
        blk = lstm.weight_ih_l0.data[20 * k : 20 * (k + 1)]
        assert np.abs(blk).max() <= b and np.abs(blk).max() > 0.9 * b
    assert np.all(lstm.bias_ih_l0.data == 0) and np.all(lstm.bias_hh_l0.data == 0)
    emb = nn.Embedding(1000, 50, rng=rng)  # the exception: unit-normal rows
    w = emb.weight.data
    assert abs(w.mean()) < 0.01 and abs(w.std() - 1.0) < 0.01
