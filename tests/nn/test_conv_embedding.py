"""Convolutions, pooling and Embedding against torch, and their shape errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_helpers import compare_with_torch

import tapegrad as tg
from tapegrad import nn


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "c_in, c_out, k, stride, padding, bias, length",
    [
        (3, 4, 3, 1, 0, True, 11),
        (3, 4, 3, 2, 1, True, 12),
        (2, 5, 4, 3, 2, False, 13),
        (1, 2, 1, 1, 0, True, 5),
    ],
)
def test_conv1d(c_in, c_out, k, stride, padding, bias, length):
    torch.manual_seed(0)
    th = torch.nn.Conv1d(c_in, c_out, k, stride=stride, padding=padding, bias=bias)
    ours = nn.Conv1d(c_in, c_out, k, stride=stride, padding=padding, bias=bias)
    compare_with_torch(ours, th, [_x((2, c_in, length))])


@pytest.mark.parametrize(
    "c_in, c_out, k, stride, padding, bias, hw",
    [
        (1, 6, 3, 1, 0, False, (9, 9)),
        (3, 4, 3, 2, 1, True, (8, 7)),
        (2, 3, (3, 2), (2, 1), (1, 0), True, (7, 6)),
        (2, 2, (1, 3), 1, (0, 2), False, (4, 5)),
    ],
)
def test_conv2d(c_in, c_out, k, stride, padding, bias, hw):
    torch.manual_seed(0)
    th = torch.nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding, bias=bias)
    ours = nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding, bias=bias)
    compare_with_torch(ours, th, [_x((2, c_in, *hw))])


@pytest.mark.parametrize(
    "k, stride, length", [(2, None, 9), (3, None, 11), (3, 2, 10), (8, 8, 128)]
)
def test_max_pool1d(k, stride, length):
    x = _x((2, 3, length))
    compare_with_torch(nn.MaxPool1d(k, stride), torch.nn.MaxPool1d(k, stride), [x])


@pytest.mark.parametrize(
    "k, stride, hw",
    [(2, None, (7, 9)), (3, None, (11, 10)), ((2, 3), (1, 2), (5, 7)), (2, 1, (4, 4))],
)
def test_max_pool2d(k, stride, hw):
    x = _x((2, 3, *hw))
    compare_with_torch(nn.MaxPool2d(k, stride), torch.nn.MaxPool2d(k, stride), [x])


def test_embedding_repeated_indices_accumulate():
    torch.manual_seed(0)
    th = torch.nn.Embedding(7, 4)
    ours = nn.Embedding(7, 4)
    idx = np.array([[1, 3, 3, 0], [3, 6, 1, 1]], dtype=np.int64)
    compare_with_torch(ours, th, [idx])
    # row 3 appears three times: its gradient is the sum of three output gradients
    w = ours.weight
    w.grad = None
    ours(idx).sum().backward()
    np.testing.assert_array_equal(w.grad[3], 3.0)
    np.testing.assert_array_equal(w.grad[2], 0.0)


def test_embedding_frozen_and_pretrained():
    table = _x((5, 3))
    emb = nn.Embedding.from_pretrained(table)
    assert emb.weight.dtype == np.float32 and not emb.weight.requires_grad
    assert emb.weight.data is not table
    np.testing.assert_array_equal(emb(np.array([4, 0])).data, table[[4, 0]])
    assert not emb(np.array([1])).requires_grad
    assert "weight" in emb.state_dict() and repr(emb) == "Embedding(5, 3, trainable=False)"
    trainable = nn.Embedding.from_pretrained(table, freeze=False)
    trainable(np.array([[1, 1]])).sum().backward()
    np.testing.assert_array_equal(trainable.weight.grad[1], 2.0)
    assert not nn.Embedding(4, 2, trainable=False).weight.requires_grad


def test_embedding_bad_indices():
    emb = nn.Embedding(5, 3)
    with pytest.raises(IndexError, match=r"Embedding\(5, 3\).*index 5.*0\.\.4"):
        emb(np.array([0, 5]))
    with pytest.raises(IndexError, match="index -1"):
        emb(np.array([-1]))
    with pytest.raises(TypeError, match="integers"):
        emb(np.array([0.0, 1.0]))


def test_conv_and_pool_shape_errors_name_layer():
    conv = nn.Conv2d(1, 6, 3, bias=False)
    with pytest.raises(tg.ShapeError, match=r"Conv2d\(1, 6.*\(N, 1, H, W\), got \(2, 3, 28, 28\)"):
        conv(tg.tensor(_x((2, 3, 28, 28))))
    with pytest.raises(tg.ShapeError, match=r"Conv2d.*\(N, 1, H, W\), got \(28, 28\)"):
        conv(tg.tensor(_x((28, 28))))
    with pytest.raises(tg.ShapeError, match=r"Conv2d.*kernel \(3, 3\).*\(1, 1, 2, 5\)"):
        conv(tg.tensor(_x((1, 1, 2, 5))))
    with pytest.raises(tg.ShapeError, match=r"Conv1d\(50, 8.*\(N, 50, L\), got \(4, 130, 50\)"):
        nn.Conv1d(50, 8, 3)(tg.tensor(_x((4, 130, 50))))
    with pytest.raises(tg.ShapeError, match=r"MaxPool1d\(kernel_size=8.*\(2, 3, 5\)"):
        nn.MaxPool1d(8)(tg.tensor(_x((2, 3, 5))))
    with pytest.raises(tg.ShapeError, match=r"MaxPool2d.*\(N, C, H, W\), got \(3, 4, 4\)"):
        nn.MaxPool2d(2)(tg.tensor(_x((3, 4, 4))))
