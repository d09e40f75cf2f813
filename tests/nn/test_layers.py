"""Feed-forward layers against torch (values, input and parameter gradients), layer shape
errors, and Dropout's statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_helpers import compare_with_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- Linear, activations, shape layers ------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 5), (2, 3, 5), (5,)])
def test_linear(bias, shape):
    torch.manual_seed(0)
    compare_with_torch(nn.Linear(5, 4, bias=bias), torch.nn.Linear(5, 4, bias=bias), [_x(shape)])


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
        (nn.Identity(), torch.nn.Identity()),
        (nn.Softmax(), torch.nn.Softmax(dim=-1)),
        (nn.Softmax(axis=1), torch.nn.Softmax(dim=1)),
        (nn.LogSoftmax(), torch.nn.LogSoftmax(dim=-1)),
        (nn.LogSoftmax(axis=0), torch.nn.LogSoftmax(dim=0)),
        (nn.Flatten(), torch.nn.Flatten()),
        (nn.Flatten(2), torch.nn.Flatten(2)),
    ],
    ids=lambda m: repr(m),
)
def test_parameterless_layers(ours, theirs):
    compare_with_torch(ours, theirs, [_x((3, 4, 2, 5))])


def test_permute_and_reshape():
    x = _x((2, 3, 4))

    class TPermute(torch.nn.Module):
        def forward(self, x):
            return x.permute(0, 2, 1)

    class TReshape(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0], 4, -1)

    compare_with_torch(nn.Permute(0, 2, 1), TPermute(), [x])
    compare_with_torch(nn.Reshape(4, -1), TReshape(), [x])
    assert nn.Reshape(12)(tg.tensor(x)).shape == (2, 12)
    assert repr(nn.Permute(0, 2, 1)) == "Permute(0, 2, 1)"
    with pytest.raises(tg.ShapeError, match=r"Permute\(0, 2, 1\).*rank 3.*\(2, 12\)"):
        nn.Permute(0, 2, 1)(tg.tensor(x.reshape(2, 12)))
    with pytest.raises(tg.ShapeError, match=r"Reshape\(5, -1\).*\(2, 3, 4\)"):
        nn.Reshape(5, -1)(tg.tensor(x))
    with pytest.raises(ValueError, match="permutation"):
        nn.Permute(0, 2, 2)


def test_linear_shape_error_names_layer_and_shapes():
    with pytest.raises(tg.ShapeError, match=r"Linear\(in_features=5.*\(\.\.\., 5\).*\(7, 4\)"):
        nn.Linear(5, 3)(tg.tensor(_x((7, 4))))


def test_functional_linear_matches_module():
    lin = nn.Linear(5, 4)
    x = tg.tensor(_x((3, 5)))
    np.testing.assert_array_equal(F.linear(x, lin.weight, lin.bias).data, lin(x).data)


# -- Dropout ---------------------------------------------------------------------------------------
def test_dropout_train_statistics_and_gradient():
    d = nn.Dropout(0.3, rng=np.random.default_rng(0))
    x = tg.tensor(np.ones((200, 500), np.float32), requires_grad=True)
    y = d(x)
    kept = y.data != 0
    assert abs(kept.mean() - 0.7) < 0.005
    np.testing.assert_allclose(y.data[kept], 1 / 0.7, rtol=1e-6)
    assert abs(y.data.mean() - 1.0) < 0.01  # inverted scaling keeps the expectation
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, y.data)  # d/dx of mask*x*scale is mask*scale
    y2 = d(x)
    assert not np.array_equal(y2.data, y.data)  # a fresh mask each call


def test_dropout_eval_is_identity_and_edge_probabilities():
    x = tg.tensor(_x((4, 6)))
    d = nn.Dropout(0.5).eval()
    assert d(x) is x
    np.testing.assert_array_equal(nn.Dropout(0.0)(x).data, x.data)
    np.testing.assert_array_equal(nn.Dropout(1.0)(x).data, 0.0)
    assert F.dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match="p must be"):
        nn.Dropout(1.5)


def test_dropout_seeded_masks_repeat_and_float64_kept():
    a = nn.Dropout(0.5, rng=np.random.default_rng(3))
    b = nn.Dropout(0.5, rng=np.random.default_rng(3))
    x = tg.tensor(np.ones((10, 10)))
    ya, yb = a(x), b(x)
    assert ya.dtype == np.float64
    np.testing.assert_array_equal(ya.data, yb.data)
