"""RNN, LSTM and GRU against torch (forward, input, state and every parameter gradient), and
float64 gradchecks of the cells and of short sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_helpers import compare_with_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F

N, T, I, H = 3, 6, 5, 4


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _torch_and_ours(kind, bias=True, batch_first=True, nonlinearity="tanh"):
    torch.manual_seed(0)
    if kind == "RNN":
        th = torch.nn.RNN(I, H, nonlinearity=nonlinearity, bias=bias, batch_first=batch_first)
        ours = nn.RNN(I, H, nonlinearity=nonlinearity, bias=bias, batch_first=batch_first)
    else:
        th = getattr(torch.nn, kind)(I, H, bias=bias, batch_first=batch_first)
        ours = getattr(nn, kind)(I, H, bias=bias, batch_first=batch_first)
    # torch initialises biases non-zero, which exercises them; scale weights up a little so
    # the gates leave their linear regime
    with torch.no_grad():
        for p in th.parameters():
            p.mul_(2.0)
    return ours, th


CASES = [
    ("RNN", True, True, "tanh"),
    ("RNN", True, True, "relu"),
    ("RNN", False, False, "tanh"),
    ("LSTM", True, True, None),
    ("LSTM", False, False, None),
    ("GRU", True, True, None),
    ("GRU", False, True, None),
    ("GRU", True, False, None),
]


@pytest.mark.parametrize("kind, bias, batch_first, nonlin", CASES)
@pytest.mark.parametrize("with_state", [False, True])
def test_matches_torch(kind, bias, batch_first, nonlin, with_state):
    ours, th = _torch_and_ours(kind, bias, batch_first, nonlin or "tanh")
    x = _x((N, T, I) if batch_first else (T, N, I))
    inputs = [x]
    if with_state:
        inputs.append(_x((N, H), seed=1))
        if kind == "LSTM":
            inputs.append(_x((N, H), seed=2))

    if kind == "LSTM":

        def run_ours(m, x, *s):
            out, (h, c) = m(x, tuple(s) if s else None)
            return out, h, c

        def run_theirs(m, x, *s):
            out, (h, c) = m(x, tuple(t[None] for t in s) if s else None)
            return out, h[0], c[0]
    else:

        def run_ours(m, x, *s):
            return m(x, *s)

        def run_theirs(m, x, *s):
            out, h = m(x, *(t[None] for t in s))
            return out, h[0]

    compare_with_torch(ours, th, inputs, run_ours, run_theirs)


def test_last_output_is_last_state_and_shapes():
    for kind in ("RNN", "GRU", "LSTM"):
        m = getattr(nn, kind)(I, H)
        out, last = m(tg.tensor(_x((N, T, I))))
        h = last[0] if kind == "LSTM" else last
        assert out.shape == (N, T, H) and h.shape == (N, H)
        np.testing.assert_array_equal(out.data[:, -1], h.data)


def test_long_sequence_matches_torch():
    ours, th = _torch_and_ours("LSTM")
    compare_with_torch(
        ours,
        th,
        [_x((2, 40, I))],
        lambda m, x: m(x)[0],
        lambda m, x: m(x)[0],
    )


def test_bad_shapes_name_the_layer():
    rnn = nn.RNN(I, H)
    with pytest.raises(tg.ShapeError, match=r"RNN\(5, 4.*\(N, T, 5\).*\(3, 6, 7\)"):
        rnn(tg.tensor(_x((N, T, 7))))
    with pytest.raises(tg.ShapeError, match=r"RNN.*\(N, T, 5\).*\(6, 5\)"):
        rnn(tg.tensor(_x((T, I))))
    with pytest.raises(tg.ShapeError, match=r"h0 of shape \(3, 4\).*\(1, 3, 4\)"):
        rnn(tg.tensor(_x((N, T, I))), tg.tensor(_x((1, N, H))))
    with pytest.raises(tg.ShapeError, match=r"c0 of shape \(3, 4\).*\(3, 5\)"):
        nn.LSTM(I, H)(tg.tensor(_x((N, T, I))), (tg.tensor(_x((N, H))), tg.tensor(_x((N, 5)))))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(I, H, nonlinearity="sigmoid")


# -- float64 gradchecks --------------------------------------------------------------------------
def _w(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape) * 0.5


def test_gradcheck_lstm_cell():
    n, i, h = 2, 3, 2
    args = [_w((n, i), 0), _w((n, h), 1), _w((n, h), 2), _w((4 * h, i), 3), _w((4 * h, h), 4)]
    args += [_w((4 * h,), 5), _w((4 * h,), 6)]

    def f(x, h0, c0, wih, whh, bih, bhh):
        h1, c1 = F.lstm_cell(x, (h0, c0), wih, whh, bih, bhh)
        return tg.concatenate([h1, c1], axis=1)

    tg.gradcheck(f, *args)


def test_gradcheck_gru_cell():
    n, i, h = 2, 3, 2
    args = [_w((n, i), 0), _w((n, h), 1), _w((3 * h, i), 3), _w((3 * h, h), 4)]
    args += [_w((3 * h,), 5), _w((3 * h,), 6)]
    tg.gradcheck(F.gru_cell, *args)


def test_gradcheck_rnn_cell():
    args = [_w((2, 3), 0), _w((2, 2), 1), _w((2, 3), 3), _w((2, 2), 4), _w((2,), 5), _w((2,), 6)]
    tg.gradcheck(F.rnn_cell, *args)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_gradcheck_sequences_with_and_without_state(kind):
    g = {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    n, t, i, h = 2, 5, 3, 2
    base = [_w((n, t, i), 0), _w((g * h, i), 1), _w((g * h, h), 2), _w((g * h,), 3)]
    base.append(_w((g * h,), 4))

    def f(x, wih, whh, bih, bhh, *state):
        if kind == "lstm":
            out, (hT, cT) = F.lstm(x, wih, whh, bih, bhh, tuple(state) if state else None)
            return tg.concatenate([tg.flatten(out, 1), hT, cT], axis=1)
        out, hT = getattr(F, kind)(x, wih, whh, bih, bhh, *state)
        return tg.concatenate([tg.flatten(out, 1), hT], axis=1)

    tg.gradcheck(f, *base)
    states = [_w((n, h), 5)] + ([_w((n, h), 6)] if kind == "lstm" else [])
    tg.gradcheck(f, *base, *states)
