"""PyTorch's modules added for issue 26, against torch: every activation module, the
containers (ModuleDict, ParameterList, ParameterDict) and variable-length sequences
(pad_sequence, pack_padded_sequence, pad_packed_sequence) through RNN/LSTM/GRU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_helpers import compare_with_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F
from tapegrad.nn.utils import rnn as tg_rnn


def _x(shape, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


ACTIVATIONS = [
    ("GELU()", "GELU()"),
    ("GELU(approximate='tanh')", "GELU(approximate='tanh')"),
    ("LeakyReLU()", "LeakyReLU()"),
    ("LeakyReLU(0.2, inplace=True)", "LeakyReLU(0.2)"),
    ("SiLU()", "SiLU()"),
    ("ELU(alpha=0.7)", "ELU(alpha=0.7)"),
    ("SELU()", "SELU()"),
    ("CELU(alpha=1.5)", "CELU(alpha=1.5)"),
    ("Softplus()", "Softplus()"),
    ("Softplus(beta=2.0, threshold=1.0)", "Softplus(beta=2.0, threshold=1.0)"),
    ("Softsign()", "Softsign()"),
    ("Hardtanh(-0.5, 0.7)", "Hardtanh(-0.5, 0.7)"),
    ("ReLU6()", "ReLU6()"),
    ("Hardsigmoid()", "Hardsigmoid()"),
    ("Hardswish()", "Hardswish()"),
    ("Mish()", "Mish()"),
    ("Tanhshrink()", "Tanhshrink()"),
    ("Softshrink(0.3)", "Softshrink(0.3)"),
    ("Hardshrink(0.4)", "Hardshrink(0.4)"),
    ("LogSigmoid()", "LogSigmoid()"),
    ("PReLU()", "PReLU()"),
    ("RReLU(0.1, 0.3).eval()", "RReLU(0.1, 0.3).eval()"),
    ("PReLU(6, init=0.1)", "PReLU(6, init=0.1)"),
    ("GLU(dim=1)", "GLU(dim=1)"),
    ("Threshold(0.1, 20.0)", "Threshold(0.1, 20.0)"),
    ("Softmin(dim=1)", "Softmin(dim=1)"),
    ("Softmax(dim=1)", "Softmax(dim=1)"),
    ("LogSoftmax(dim=2)", "LogSoftmax(dim=2)"),
    ("Softmax2d()", "Softmax2d()"),
    ("ReLU(inplace=True)", "ReLU(inplace=True)"),
    ("Identity(54, unused='x')", "Identity(54, unused='x')"),
]


@pytest.mark.parametrize("ours, theirs", ACTIVATIONS, ids=[a for a, _ in ACTIVATIONS])
def test_activation_modules_match_torch(ours, theirs):
    x = _x((2, 6, 3, 4))
    x[0, 0, 0, :2] = [25.0, -30.0]  # beyond softplus' threshold, far into the tails
    mine, ref = eval(f"nn.{ours}"), eval(f"torch.nn.{theirs}")
    assert type(mine).__name__ == type(ref).__name__
    if "inplace=True" in theirs:  # torch's in-place form cannot take a leaf that needs grad
        compare_with_torch(mine, ref, [x], run_theirs=lambda m, t: m(t * 1))
    else:
        compare_with_torch(mine, ref, [x])


def test_rrelu_in_training_draws_slopes_in_range():
    layer = nn.RReLU(0.1, 0.3)
    x = -np.ones((400, 50), np.float32)
    y = layer(tg.tensor(x)).numpy()
    assert (y <= -0.1).all() and (y > -0.3).all() and y.std() > 0.05
    np.testing.assert_allclose(y.mean(), -0.2, atol=0.005)
    np.testing.assert_array_equal(layer(tg.tensor(-x)).numpy(), -x)
    with pytest.raises(ValueError, match="lower <= upper"):
        nn.functional.rrelu(tg.tensor(x), 0.5, 0.2)


def test_prelu_per_channel_on_2d_and_1d_input():
    compare_with_torch(nn.PReLU(5), torch.nn.PReLU(5), [_x((4, 5))])
    compare_with_torch(nn.PReLU(), torch.nn.PReLU(), [_x((5,))])
    with pytest.raises(tg.ShapeError, match="prelu"):
        nn.PReLU(3)(tg.tensor(_x((4, 5))))
    with pytest.raises(tg.ShapeError, match="prelu"):
        nn.PReLU(5)(tg.tensor(_x((5,))))


def test_module_dict_and_parameter_containers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"cls": nn.Linear(3, 2), "reg": nn.Linear(3, 1)})
            self.scales = nn.ParameterList([nn.Parameter(np.ones(2, np.float32)), tg.zeros(1)])
            self.extra = nn.ParameterDict({"shift": nn.Parameter(np.zeros(2, np.float32))})

        def forward(self, x):
            y = self.heads["cls"](x) * self.scales[0] + self.extra["shift"]
            return y.sum() + self.heads["reg"](x).sum() + self.scales[1].sum()

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = torch.nn.ModuleDict(
                {"cls": torch.nn.Linear(3, 2), "reg": torch.nn.Linear(3, 1)}
            )
            self.scales = torch.nn.ParameterList([torch.ones(2), torch.zeros(1)])
            self.extra = torch.nn.ParameterDict({"shift": torch.zeros(2)})

    ours, theirs = Net(), TNet()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert len(list(ours.parameters())) == 7
    assert "cls" in ours.heads and list(ours.heads) == ["cls", "reg"] and len(ours.scales) == 2
    ours(tg.tensor(_x((4, 3)))).backward()
    assert ours.scales[1].grad is not None and ours.extra["shift"].grad is not None
    ours.heads["new"] = nn.Tanh()
    del ours.heads["reg"]
    assert list(ours.heads.keys()) == ["cls", "new"]
    ours.scales.append(np.ones(3, np.float32))
    assert isinstance(ours.scales[2], nn.Parameter) and "scales.2" in ours.state_dict()
    with pytest.raises(TypeError, match="nn.Module"):
        ours.heads["bad"] = 3


# -- variable-length sequences -------------------------------------------------------------
def test_pad_sequence_against_torch():
    seqs = [_x((n, 3), seed=n) for n in (2, 5, 3)]
    for kw in ({}, {"batch_first": True, "padding_value": -1.0}, {"padding_side": "left"}):
        ours = tg_rnn.pad_sequence([tg.tensor(s) for s in seqs], **kw)
        ref = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], **kw)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_and_unpack_match_torch(enforce_sorted):
    lengths = [5, 3, 3, 1] if enforce_sorted else [3, 5, 1, 3]
    x = _x((5, 4, 2))
    ours = tg_rnn.pack_padded_sequence(tg.tensor(x), lengths, enforce_sorted=enforce_sorted)
    ref = torch.nn.utils.rnn.pack_padded_sequence(
        torch.tensor(x), lengths, enforce_sorted=enforce_sorted
    )
    np.testing.assert_array_equal(ours.data.numpy(), ref.data.numpy())
    np.testing.assert_array_equal(ours.batch_sizes.numpy(), ref.batch_sizes.numpy())
    if not enforce_sorted:
        np.testing.assert_array_equal(ours.sorted_indices.numpy(), ref.sorted_indices.numpy())
    padded, lens = tg_rnn.pad_packed_sequence(ours, batch_first=True, total_length=6)
    rpadded, rlens = torch.nn.utils.rnn.pad_packed_sequence(ref, batch_first=True, total_length=6)
    np.testing.assert_array_equal(padded.numpy(), rpadded.numpy())
    np.testing.assert_array_equal(lens.numpy(), rlens.numpy())
    with pytest.raises(ValueError, match="decreasing"):
        tg_rnn.pack_padded_sequence(tg.tensor(x), [3, 5, 1, 3])


@pytest.mark.parametrize(
    "kind, kw",
    [
        ("RNN", {"num_layers": 2}),
        ("LSTM", {"bidirectional": True}),
        ("GRU", {"batch_first": True, "num_layers": 2, "bidirectional": True}),
    ],
)
def test_recurrent_layers_on_packed_sequences_match_torch(kind, kw):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(3, 4, **kw)
    ours = getattr(nn, kind)(3, 4, **kw)
    lengths = [4, 6, 2, 4, 1]
    batch_first = kw.get("batch_first", False)
    x = _x((5, 6, 3) if batch_first else (6, 5, 3), scale=1.0)
    dirs = 2 if kw.get("bidirectional") else 1
    h0 = _x((kw.get("num_layers", 1) * dirs, 5, 4), seed=1, scale=0.5)

    def run(lib, rnn_mod, model, xs, h):
        packed = rnn_mod.pack_padded_sequence(
            xs, lengths, batch_first=batch_first, enforce_sorted=False
        )
        state = (h, h * 0.5) if kind == "LSTM" else h
        out, final = model(packed, state)
        padded, _ = rnn_mod.pad_packed_sequence(out, batch_first=batch_first)
        return padded, final

    compare_with_torch(
        ours,
        theirs,
        [x, h0],
        run_ours=lambda m, xs, h: run(tg, tg_rnn, m, xs, h),
        run_theirs=lambda m, xs, h: run(torch, torch.nn.utils.rnn, m, xs, h),
    )


# -- default initialisation ----------------------------------------------------------------
@pytest.mark.parametrize(
    "ours, theirs",
    [
        ("Linear(784, 256)", "Linear(784, 256)"),
        ("Conv2d(16, 32, 3, groups=2)", "Conv2d(16, 32, 3, groups=2)"),
        ("Conv1d(20, 30, 4)", "Conv1d(20, 30, 4)"),
        ("ConvTranspose2d(16, 12, 3)", "ConvTranspose2d(16, 12, 3)"),
    ],
)
def test_default_initialisation_is_pytorchs(ours, theirs):
    tg.manual_seed(0)
    torch.manual_seed(0)
    mine, ref = eval(f"nn.{ours}"), eval(f"torch.nn.{theirs}")
    fan_in = torch.nn.init._calculate_fan_in_and_fan_out(ref.weight)[0]
    bound = 1 / np.sqrt(fan_in)  # both weight (kaiming_uniform, a=sqrt(5)) and bias
    for name in ("weight", "bias"):
        a, b = getattr(mine, name).numpy(), getattr(ref, name).detach().numpy()
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.abs(b).max() <= bound and np.abs(a).max() <= bound
        if a.size > 1000:  # uniform on (-bound, bound): fills it, std bound / sqrt(3)
            assert np.abs(a).max() > 0.97 * bound
            assert a.std() == pytest.approx(b.std(), rel=0.05)
            assert a.std() == pytest.approx(bound / np.sqrt(3), rel=0.05)
    glorot = eval(f"nn.{ours[:-1]}, init='glorot')")
    fan_in, fan_out = nn.init.calculate_fans(glorot.weight.shape)
    limit = np.sqrt(6 / (fan_in + fan_out))
    assert np.abs(glorot.weight.numpy()).max() <= limit and not glorot.bias.numpy().any()
    with pytest.raises(ValueError, match="init must be one of"):
        eval(f"nn.{ours[:-1]}, init='xavier')")


# -- the encoder-decoder Transformer -----------------------------------------------------------
@pytest.mark.parametrize("norm_first, batch_first", [(False, False), (True, True)])
def test_transformer_matches_torch(norm_first, batch_first):
    torch.manual_seed(0)
    kw = dict(
        d_model=8,
        nhead=2,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=16,
        dropout=0.0,
        norm_first=norm_first,
        batch_first=batch_first,
    )
    theirs, ours = torch.nn.Transformer(**kw), nn.Transformer(**kw)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    S, T, N = 5, 4, 3
    src = _x((N, S, 8) if batch_first else (S, N, 8), scale=1.0)
    tgt = _x((N, T, 8) if batch_first else (T, N, 8), seed=1, scale=1.0)
    pad = np.zeros((N, S), bool)
    pad[0, -2:] = True

    def run(lib, m, s, t):
        mask = type(m).generate_square_subsequent_mask(T)
        kp = lib.tensor(pad)
        return m(s, t, tgt_mask=mask, src_key_padding_mask=kp, memory_key_padding_mask=kp)

    compare_with_torch(ours, theirs, [src, tgt],
                       run_ours=lambda m, s, t: run(tg, m, s, t),
                       run_theirs=lambda m, s, t: run(torch, m, s, t))  # fmt: skip
    fresh = nn.Transformer(**kw)  # matrices Xavier-uniform, as PyTorch re-draws them
    w = fresh.decoder.layers[0].linear1.weight.numpy()
    assert np.abs(w).max() <= np.sqrt(6 / (8 + 16))
    mask = nn.Transformer.generate_square_subsequent_mask(3).numpy()
    np.testing.assert_array_equal(
        mask, torch.nn.Transformer.generate_square_subsequent_mask(3).numpy()
    )


# -- more layers ----------------------------------------------------------------------------
MORE = [
    ("Unflatten(1, (2, 3))", (4, 6, 5)),
    ("RMSNorm(5)", (2, 3, 5)),
    ("RMSNorm((3, 5), eps=1e-3)", (2, 3, 5)),
    ("RMSNorm(5, elementwise_affine=False)", (2, 3, 5)),
    ("ZeroPad2d((1, 2, 0, 3))", (2, 3, 4, 5)),
    ("ZeroPad1d(2)", (2, 3, 5)),
    ("ConstantPad1d((1, 2), 3.5)", (2, 3, 5)),
    ("ConstantPad2d(1, -1.0)", (2, 3, 4, 5)),
    ("ReflectionPad1d((2, 1))", (2, 3, 5)),
    ("ReflectionPad2d(1)", (2, 3, 4, 5)),
    ("ReplicationPad1d(2)", (2, 3, 5)),
    ("ReplicationPad2d((1, 0, 2, 1))", (1, 2, 4, 5)),
    ("CircularPad1d(2)", (2, 3, 5)),
    ("CircularPad2d(1)", (2, 3, 4, 5)),
    ("Dropout1d(0.5).eval()", (2, 3, 5)),
]


@pytest.mark.parametrize("layer, shape", MORE, ids=[m for m, _ in MORE])
def test_more_layers_match_torch(layer, shape):
    mine, ref = eval(f"nn.{layer}"), eval(f"torch.nn.{layer}")
    compare_with_torch(mine, ref, [_x(shape)])


def test_more_functional_forms_match_torch():
    import torch.nn.functional as TF

    a, b = _x((4, 6)), _x((4, 6), seed=1)
    compare_with_torch(nn.PairwiseDistance(p=1.5), torch.nn.PairwiseDistance(p=1.5), [a, b])
    for ours, theirs in [
        (lambda x: F.normalize(x, dim=1), lambda x: TF.normalize(x, dim=1)),
        (lambda x: F.normalize(x, p=1.0, dim=0), lambda x: TF.normalize(x, p=1.0, dim=0)),
        (lambda x: F.rms_norm(x, (6,)), lambda x: TF.rms_norm(x, (6,))),
    ]:
        compare_with_torch(_Fn(ours), _TFn(theirs), [a])
    labels = np.array([0, 3, 1])
    np.testing.assert_array_equal(
        F.one_hot(tg.tensor(labels), 5).numpy(), TF.one_hot(torch.tensor(labels), 5).numpy()
    )
    layer = nn.Dropout1d(0.5)
    y = layer(tg.ones(8, 40, 6)).numpy()
    assert ((y == 0).all(-1) | (y == 2).all(-1)).all()  # whole channels dropped or kept
    assert abs((y == 0).mean() - 0.5) < 0.1


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class _TFn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_module_zero_grad_and_lookups():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    model(tg.tensor(_x((2, 3)))).sum().backward()
    g = model[0].weight.grad
    model.zero_grad(set_to_none=False)
    assert model[0].weight.grad is g and not g.any()
    model.zero_grad()
    assert model[0].weight.grad is None
    assert model.get_submodule("2") is model[2] and model.get_submodule("") is model
    assert model.get_parameter("2.bias") is model[2].bias
    model.register_module("extra", nn.ReLU())
    assert "extra" in dict(model.named_children())
    with pytest.raises(AttributeError, match="no parameter"):
        model.get_parameter("1.weight")
