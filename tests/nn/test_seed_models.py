"""The seed papers' architectures, built with Sequential: on one batch the loss and every
parameter gradient equal torch's for the same weights."""

from __future__ import annotations

import numpy as np
import torch
from nn_helpers import ATOL, RTOL, copy_from_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F


class LastState(nn.Module):
    """Pick the last hidden state out of a recurrent layer's (outputs, h_n) pair."""

    def forward(self, out_h):
        return out_h[1][0]


class TLastState(torch.nn.Module):
    def forward(self, out_h):
        return out_h[1][0]


class TPermute(torch.nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 1)


def _compare(ours, theirs, x, target, loss_ours, loss_theirs):
    copy_from_torch(ours, theirs)
    la = loss_ours(ours(tg.tensor(x) if x.dtype.kind == "f" else x), target)
    lb = loss_theirs(theirs(torch.from_numpy(x)), torch.from_numpy(target))
    np.testing.assert_allclose(la.item(), lb.item(), rtol=RTOL, atol=ATOL)
    la.backward()
    lb.backward()
    theirs_params = dict(theirs.named_parameters())  # the same names, recurrent ones too
    ours_params = dict(ours.named_parameters())
    assert list(ours_params) == list(theirs_params)
    for name, p in ours_params.items():
        g = theirs_params[name].grad.numpy()
        assert np.abs(g).max() > 0, name  # the batch reaches every parameter
        np.testing.assert_allclose(p.grad, g, rtol=RTOL, atol=ATOL, err_msg=name)


def _images(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, (n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, n)


def test_seed_cnn():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 3, bias=False),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(6 * 13 * 13, 84, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(84, 10, bias=False),
    )
    ours = nn.Sequential(
        nn.Conv2d(1, 6, 3, bias=False),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(6 * 13 * 13, 84, bias=False),
        nn.ReLU(),
        nn.Linear(84, 10, bias=False),
    )
    x, y = _images(16)
    _compare(ours, theirs, x, y, F.cross_entropy, torch.nn.functional.cross_entropy)


def test_seed_rnn():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Unflatten(1, (4, 196)),
        torch.nn.RNN(196, 64, batch_first=True),
        TLastState(),
        torch.nn.Linear(64, 10),
    )
    ours = nn.Sequential(
        nn.Reshape(4, 196), nn.RNN(196, 64, batch_first=True), LastState(), nn.Linear(64, 10)
    )
    x, y = _images(20, seed=1)
    _compare(
        ours, theirs, x.reshape(20, 784), y, F.cross_entropy, torch.nn.functional.cross_entropy
    )


def test_text_cnn():
    V, L = 300, 130
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Embedding(V, 50),
        TPermute(),
        torch.nn.Conv1d(50, 8, 3),
        torch.nn.ReLU(),
        torch.nn.MaxPool1d(8),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 16, 1),
    )
    ours = nn.Sequential(
        nn.Embedding(V, 50),
        nn.Permute(0, 2, 1),
        nn.Conv1d(50, 8, 3),
        nn.ReLU(),
        nn.MaxPool1d(8),
        nn.Flatten(),
        nn.Linear(8 * 16, 1),
    )
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, V, (6, L))
    y = rng.integers(0, 2, (6, 1)).astype(np.float32)
    _compare(
        ours,
        theirs,
        tokens,
        y,
        F.binary_cross_entropy_with_logits,
        torch.nn.functional.binary_cross_entropy_with_logits,
    )


def test_mlp():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Linear(784, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10)
    )
    ours = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 10))
    x, y = _images(32, seed=3)
    _compare(
        ours, theirs, x.reshape(32, 784), y, F.cross_entropy, torch.nn.functional.cross_entropy
    )
