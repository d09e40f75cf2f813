"""Dropout2d (whole channels, fresh masks on every compiled replay, identity in evaluation)
and Embedding's padding_idx (no gradient to that row) against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from nn_helpers import compare_fn_with_torch, compare_with_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F


def test_dropout2d_zeroes_whole_channels_and_scales_the_rest():
    drop = nn.Dropout2d(0.4, rng=np.random.default_rng(0))
    x = tg.tensor(np.ones((50, 40, 3, 2), np.float32))
    y = drop(x).data
    per_channel = y.reshape(50, 40, -1)
    assert np.all((per_channel == 0).all(axis=2) | (per_channel == np.float32(1 / 0.6)).all(axis=2))
    kept = (per_channel[..., 0] != 0).mean()
    assert abs(kept - 0.6) < 0.03  # 2000 channels: 3.2 standard deviations
    y3 = F.dropout2d(tg.tensor(np.ones((8, 30, 5))), 0.5, rng=np.random.default_rng(1)).data
    assert np.all(np.ptp(y3, axis=2) == 0)  # (N, C, L): one draw per channel
    drop.eval()
    np.testing.assert_array_equal(drop(x).data, x.data)


def test_dropout2d_gradient_is_the_mask_and_compiled_draws_afresh():
    drop = nn.Dropout2d(0.5, rng=np.random.default_rng(0))
    x = tg.tensor(np.ones((4, 6, 2, 2)), requires_grad=True)
    y = drop(x)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, y.data)
    w = tg.tensor(np.ones((1, 6, 1, 1), np.float32), requires_grad=True)
    eager = nn.Dropout2d(0.5, rng=np.random.default_rng(5))
    comp = nn.Dropout2d(0.5, rng=np.random.default_rng(5))

    def f(d, x):
        w.grad = None
        loss = (d(x * w) * x).sum()
        loss.backward()
        return loss

    compiled = tg.compile(lambda x: f(comp, x))
    xs = np.ones((4, 6, 2, 2), np.float32)
    seen = set()
    for _ in range(4):
        e = f(eager, tg.tensor(xs)).item()
        ge = w.grad.copy()
        c = compiled(xs).item()
        assert e == c
        np.testing.assert_array_equal(w.grad, ge)
        seen.add(c)
    assert len(seen) > 1  # a new mask every call


def test_dropout2d_errors_and_extremes():
    # a 2-D input warns and drops entries, as PyTorch does (tests/test_torch_namespace.py)
    with pytest.raises(
        tg.ShapeError, match=r"Dropout2d\(p=0.5\).*\(N, C, H, W\).*\(3, 4, 1, 1, 2\)"
    ):
        nn.Dropout2d()(tg.tensor(np.ones((3, 4, 1, 1, 2), np.float32)))
    with pytest.raises(ValueError, match="p must be in"):
        F.dropout2d(np.ones((1, 1, 1)), 1.5)
    x = tg.tensor(np.ones((2, 3, 4), np.float32))
    assert np.all(F.dropout2d(x, 1.0).data == 0) and F.dropout2d(x, 0.0) is x


@pytest.mark.parametrize("padding_idx", [0, 3, -1])
def test_embedding_padding_idx_matches_torch(padding_idx):
    torch.manual_seed(0)
    th = torch.nn.Embedding(6, 4, padding_idx=padding_idx)
    ours = nn.Embedding(6, 4, padding_idx=padding_idx)
    assert np.all(ours.weight.data[padding_idx] == 0)  # starts at zero, as torch's
    with torch.no_grad():
        th.weight[padding_idx] = 0.7  # a non-zero padding row is looked up as it is
    idx = np.array([[0, 3, 5, 3], [5, 1, 0, 0]])
    compare_with_torch(ours, th, [idx])
    assert np.all(ours.weight.grad[padding_idx] == 0)
    w0 = np.random.default_rng(0).standard_normal((6, 4))
    compare_fn_with_torch(
        lambda w: F.embedding(idx, w, padding_idx=padding_idx),
        lambda w: TF.embedding(torch.tensor(idx), w, padding_idx=padding_idx),
        [w0],
    )
    # finite differences of the other rows (the padding row's gradient is zero by definition,
    # not its derivative): only positions away from the padding index carry a gradient
    keep = (idx != padding_idx % 6)[..., None]
    tg.gradcheck(lambda w: F.embedding(idx, w, padding_idx=padding_idx) * keep, w0)


def test_embedding_padding_idx_compiled_and_pretrained():
    emb = nn.Embedding.from_pretrained(np.arange(12.0).reshape(4, 3), freeze=False, padding_idx=1)
    assert emb.padding_idx == 1 and emb.weight.data[1, 0] == 3.0  # values kept

    @tg.compile
    def f(i):
        emb.weight.grad = None
        loss = (emb(i) ** 2).sum()
        loss.backward()
        return loss

    for idx in ([[1, 2]], [[1, 1]], [[0, 3]]):
        idx = np.array(idx)
        loss = f(idx).item()
        grad = emb.weight.grad.copy()
        emb.weight.grad = None
        want = (emb(idx) ** 2).sum()
        want.backward()
        assert loss == want.item()
        np.testing.assert_array_equal(grad, emb.weight.grad)
        assert np.all(grad[1] == 0)
    assert repr(emb) == "Embedding(4, 3, padding_idx=1)"
    with pytest.raises(ValueError, match=r"padding_idx must be within \[-4, 4\), got 4"):
        nn.Embedding(4, 3, padding_idx=4)
