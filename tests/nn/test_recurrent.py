"""RNN, LSTM and GRU (stacked, bidirectional, batch-first or time-major, unbatched) and the
RNNCell/LSTMCell/GRUCell against torch with torch's own weights (outputs, final states, input,
state and every parameter gradient, float32 and float64); PyTorch's positional arguments and
state_dict names; inter-layer dropout; eager == compiled bit for bit; float64 gradchecks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_helpers import compare_with_torch, train_eager_and_compiled

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.nn import functional as F

N, T, I, H = 3, 6, 5, 4


def _x(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _pair(kind, dtype=np.float32, **kw):
    """torch's layer and ours, ours holding torch's weights (scaled up a little so the gates
    leave their linear regime; torch's biases are non-zero, which exercises them)."""
    torch.manual_seed(0)
    th = getattr(torch.nn, kind)(I, H, **kw)
    ours = getattr(nn, kind)(I, H, **kw, dtype=dtype)
    if dtype == np.float64:
        th = th.double()
    with torch.no_grad():
        for p in th.parameters():
            p.mul_(2.0)
    return ours, th


def _runners(kind):
    if kind == "LSTM":

        def run(m, x, *s):
            out, (h, c) = m(x, tuple(s) if s else None)
            return out, h, c

        return run, run

    def run(m, x, *s):
        return m(x, *s)

    return run, run


CONFIGS = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
    ("RNN", {"bias": False, "batch_first": True, "bidirectional": True}),
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"num_layers": 3, "batch_first": True, "bias": False}),
    ("GRU", {"batch_first": True}),
    ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {"bias": False, "num_layers": 2}),
]


@pytest.mark.parametrize("kind, kw", CONFIGS, ids=lambda v: str(v))
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_torch(kind, kw, with_state, dtype):
    ours, th = _pair(kind, dtype, **kw)
    bf = kw.get("batch_first", False)
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    inputs = [_x((N, T, I) if bf else (T, N, I), dtype=dtype)]
    if with_state:
        inputs.append(_x((layers, N, H), seed=1, dtype=dtype))
        if kind == "LSTM":
            inputs.append(_x((layers, N, H), seed=2, dtype=dtype))
    run_ours, run_theirs = _runners(kind)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-9, "atol": 1e-11}
    compare_with_torch(ours, th, inputs, run_ours, run_theirs, **tol)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_unbatched_input_matches_torch(kind):
    ours, th = _pair(kind, num_layers=2, bidirectional=True, batch_first=True)
    inputs = [_x((T, I)), _x((4, H), seed=1)]
    if kind == "LSTM":
        inputs.append(_x((4, H), seed=2))
    compare_with_torch(ours, th, inputs, *_runners(kind))


def test_state_dict_names_are_torchs_and_torch_weights_load():
    for kind in ("RNN", "LSTM", "GRU"):
        ours, th = _pair(kind, num_layers=2, bidirectional=True)
        assert list(ours.state_dict()) == list(th.state_dict())
        assert "weight_ih_l1_reverse" in ours.state_dict()
        assert ours.weight_ih_l1.shape == (th.weight_ih_l1.shape[0], 2 * H)
        ours.load_state_dict({k: v.numpy() for k, v in th.state_dict().items()})
        np.testing.assert_array_equal(ours.bias_hh_l1_reverse.data, th.bias_hh_l1_reverse.detach())
    # the names tapegrad's single-layer layers had before load into layer 0
    lstm = nn.LSTM(I, H)
    old = {
        n: np.full(getattr(lstm, n + "_l0").shape, 0.5, np.float32)
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    }
    lstm.load_state_dict(old)
    np.testing.assert_array_equal(lstm.weight_hh_l0.data, 0.5)


def test_positional_arguments_are_pytorchs():
    lstm = nn.LSTM(10, 20, 2)  # formerly a one-layer LSTM with bias=2
    assert lstm.num_layers == 2 and lstm.bias and not lstm.batch_first
    assert nn.GRU(10, 20, 1, False).bias is False
    rnn = nn.RNN(10, 20, 3, "relu", True, True, 0.25, True)
    assert (rnn.num_layers, rnn.nonlinearity, rnn.batch_first, rnn.dropout) == (
        3,
        "relu",
        True,
        0.25,
    )
    assert rnn.bidirectional and len(list(rnn.parameters())) == 3 * 2 * 4
    with pytest.raises(TypeError, match=r"LSTM: bias must be True or False, got 0.5"):
        nn.LSTM(10, 20, 2, 0.5)  # dropout given where bias stands
    with pytest.raises(ValueError, match="num_layers must be an int >= 1"):
        nn.GRU(10, 20, 0)
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(10, 20, proj_size=5)
    assert (
        repr(nn.LSTM(10, 20, 2, batch_first=True)) == "LSTM(10, 20, num_layers=2, batch_first=True)"
    )


def test_time_major_by_default_and_states_carry_the_layer_axis():
    lstm = nn.LSTM(I, H, num_layers=2, bidirectional=True)
    out, (h, c) = lstm(tg.tensor(_x((T, N, I))))
    assert out.shape == (T, N, 2 * H) and h.shape == c.shape == (4, N, H)
    # the last layer's forward state is its output at the last step, the reverse one's at 0
    np.testing.assert_array_equal(out.data[-1, :, :H], h.data[2])
    np.testing.assert_array_equal(out.data[0, :, H:], h.data[3])
    gru = nn.GRU(I, H, batch_first=True)
    out, h = gru(tg.tensor(_x((N, T, I))))
    assert out.shape == (N, T, H) and h.shape == (1, N, H)
    np.testing.assert_array_equal(out.data[:, -1], h.data[0])


def test_bad_shapes_name_the_layer():
    rnn = nn.RNN(I, H)
    with pytest.raises(tg.ShapeError, match=r"RNN\(5, 4\).*\(T, N, 5\).*\(3, 6, 7\)"):
        rnn(tg.tensor(_x((N, T, 7))))
    with pytest.raises(tg.ShapeError, match=r"RNN.*\(T, N, 5\).*\(6,\)"):
        rnn(tg.tensor(_x((T,))))
    with pytest.raises(tg.ShapeError, match=r"h0 of shape \(1, 6, 4\).*got \(6, 4\)"):
        rnn(tg.tensor(_x((N, T, I))), tg.tensor(_x((T, H))))
    lstm = nn.LSTM(I, H, 2, batch_first=True)
    with pytest.raises(tg.ShapeError, match=r"c0 of shape \(2, 3, 4\).*\(1, 3, 4\)"):
        lstm(tg.tensor(_x((N, T, I))), (tg.tensor(_x((2, N, H))), tg.tensor(_x((1, N, H)))))
    with pytest.raises(TypeError, match="pair"):
        lstm(tg.tensor(_x((N, T, I))), tg.tensor(_x((2, N, H))))
    with pytest.raises(tg.ShapeError, match="no time steps"):
        lstm(tg.tensor(_x((N, 0, I))))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(I, H, nonlinearity="sigmoid")


# -- inter-layer dropout ---------------------------------------------------------------------------
def test_dropout_between_layers_matches_torch_at_the_extremes():
    # p = 1 zeroes the first layer's outputs in training: deterministic, so torch must agree
    ours, th = _pair("GRU", num_layers=2, dropout=1.0)
    compare_with_torch(ours, th, [_x((T, N, I))])
    ours.eval(), th.eval()
    compare_with_torch(ours, th, [_x((T, N, I))])


def test_dropout_between_layers_is_active_in_training_only():
    lstm = nn.LSTM(I, H, 2, dropout=0.5, rng=np.random.default_rng(0))
    x = tg.tensor(_x((T, N, I)))
    a, b = lstm(x)[0].data, lstm(x)[0].data
    assert not np.array_equal(a, b)  # fresh masks
    lstm.eval()
    np.testing.assert_array_equal(lstm(x)[0].data, lstm(x)[0].data)
    with pytest.warns(UserWarning, match="only one"):
        single = nn.LSTM(I, H, 1, dropout=0.5)  # one layer: nothing between layers to drop
    np.testing.assert_array_equal(single(x)[0].data, single(x)[0].data)


# -- compiled ----------------------------------------------------------------------------------
class _Tagger(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(I, H, num_layers=2, bidirectional=True, dropout=0.3)
        self.head = nn.Linear(2 * H, 3)

    def forward(self, x):
        out, _ = self.rnn(x)  # (T, N, 2H)
        return self.head(out[-1])


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_compiled_training_equals_eager_bit_for_bit(kind):
    rng = np.random.default_rng(0)
    batches = [
        (rng.standard_normal((T, N, I)).astype(np.float32), rng.integers(0, 3, N)) for _ in range(4)
    ]
    train_eager_and_compiled(lambda: _Tagger(kind), lambda p: optim.SGD(p, lr=0.1), batches)


# -- cells -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, kw",
    [
        ("RNNCell", {}),
        ("RNNCell", {"nonlinearity": "relu", "bias": False}),
        ("LSTMCell", {}),
        ("LSTMCell", {"bias": False}),
        ("GRUCell", {}),
        ("GRUCell", {"bias": False}),
    ],
    ids=str,
)
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_cells_match_torch(kind, kw, batched, with_state):
    torch.manual_seed(0)
    th = getattr(torch.nn, kind)(I, H, **kw)
    ours = getattr(nn, kind)(I, H, **kw)
    assert list(ours.state_dict()) == list(th.state_dict())
    lead = (N,) if batched else ()
    inputs = [_x((*lead, I))]
    if with_state:
        inputs += [_x((*lead, H), seed=1)] + (
            [_x((*lead, H), seed=2)] if kind == "LSTMCell" else []
        )

    def run(m, x, *s):
        if kind == "LSTMCell":
            return m(x, tuple(s) if s else None)
        return m(x, *s)

    compare_with_torch(ours, th, inputs, run, run)


def test_cell_errors_name_the_cell():
    cell = nn.LSTMCell(I, H)
    with pytest.raises(tg.ShapeError, match=r"LSTMCell\(5, 4\).*\(N, 5\).*\(3, 7\)"):
        cell(tg.tensor(_x((N, 7))))
    with pytest.raises(tg.ShapeError, match=r"c of shape \(3, 4\), got \(3, 5\)"):
        cell(tg.tensor(_x((N, I))), (tg.tensor(_x((N, H))), tg.tensor(_x((N, 5)))))


def test_lstm_cell_unrolled_equals_the_lstm_layer():
    torch.manual_seed(0)
    layer = nn.LSTM(I, H)
    cell = nn.LSTMCell(I, H)
    cell.load_state_dict({k[:-3]: v for k, v in layer.state_dict().items()})
    x = tg.tensor(_x((T, N, I)))
    out, (h_n, c_n) = layer(x)
    state = None
    for t in range(T):
        state = cell(x[t], state)
        np.testing.assert_allclose(state[0].data, out.data[t], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state[1].data, c_n.data[0], rtol=1e-5, atol=1e-6)


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


def test_gradcheck_gru_and_rnn_cells():
    args = [_w((2, 3), 0), _w((2, 2), 1), _w((6, 3), 3), _w((6, 2), 4), _w((6,), 5), _w((6,), 6)]
    tg.gradcheck(F.gru_cell, *args)
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
            st = tuple(state) if state else None
            out, (hT, cT) = F.lstm(x, wih, whh, bih, bhh, st, batch_first=True)
            return tg.concatenate([tg.flatten(out, 1), hT, cT], axis=1)
        out, hT = getattr(F, kind)(x, wih, whh, bih, bhh, *state, batch_first=True)
        return tg.concatenate([tg.flatten(out, 1), hT], axis=1)

    tg.gradcheck(f, *base)
    states = [_w((n, h), 5)] + ([_w((n, h), 6)] if kind == "lstm" else [])
    tg.gradcheck(f, *base, *states)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_gradcheck_stacked_bidirectional_layer(kind):
    layer = getattr(nn, kind)(3, 2, num_layers=2, bidirectional=True, dtype=np.float64)
    names = [n for n, _ in layer.named_parameters()]
    x0 = _w((4, 2, 3), 0)

    def f(x, *weights):
        for name, w in zip(names, weights):
            layer.__dict__[name] = w if isinstance(w, tg.Tensor) else tg.tensor(w)  # a traced input
        out, h = layer(x)
        h = h[0] if kind == "LSTM" else h
        return tg.concatenate([tg.flatten(out, 0), tg.flatten(h, 0)], axis=0)

    weights = [p.data.copy() for p in layer.parameters()]
    tg.gradcheck(f, x0, *weights)
