"""A tiny regression problem computed by tapegrad and by torch from the same initial values."""

from __future__ import annotations

import numpy as np


def make_problem(dtype=np.float32, seed=0):
    """Inputs, targets and initial parameters (W, b, and a scale vector) as ndarrays."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(16, 5)).astype(dtype)
    Y = rng.normal(size=(16, 3)).astype(dtype)
    init = [
        rng.normal(scale=0.5, size=(5, 3)).astype(dtype),
        rng.normal(scale=0.1, size=(3,)).astype(dtype),
        rng.uniform(0.5, 1.5, size=(3,)).astype(dtype),
    ]
    return X, Y, init


def tg_loss(params, X, Y):
    import tapegrad as tg

    W, b, s = params
    pred = (tg.tensor(X) @ W + b).tanh() * s
    return ((pred - tg.tensor(Y)) ** 2).mean()


def torch_loss(params, X, Y):
    import torch

    W, b, s = params
    pred = torch.tanh(torch.from_numpy(X) @ W + b) * s
    return ((pred - torch.from_numpy(Y)) ** 2).mean()
