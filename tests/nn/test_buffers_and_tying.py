"""Module buffers (register_buffer, persistent or not, state_dict, to(), replacement, compiled
steps) and weight tying (one Parameter in two modules: listed once, gradients from both uses,
state_dict under both names as torch has it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.nn import functional as F


class Scaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("scale", np.full(3, 2.0, np.float32))
        self.register_buffer("steps", np.zeros((), np.int64))
        self.register_buffer("cache", np.zeros(3, np.float32), persistent=False)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_buffers_are_registered_saved_and_converted():
    m = nn.Sequential(Scaler())
    assert [n for n, _ in m.named_buffers()] == ["0.scale", "0.steps", "0.cache"]
    assert list(m.state_dict()) == [
        "0.scale",
        "0.steps",
        "0.lin.weight",
        "0.lin.bias",
    ]  # torch's order
    assert isinstance(m[0].scale, tg.Tensor) and not m[0].scale.requires_grad
    assert [p.shape for p in m.parameters()] == [(3, 3), (3,)]  # buffers are not parameters
    sd = m.state_dict()
    sd["0.scale"] = np.full(3, 5.0, np.float32)
    sd["0.steps"] = np.array(7)
    m.load_state_dict(sd)
    assert m[0].scale.data.tolist() == [5.0] * 3 and m[0].steps.item() == 7
    with pytest.raises(nn.StateDictError, match=r"0.steps: dtype int32 given, the model has int64"):
        m.load_state_dict({**sd, "0.steps": np.array(7, np.int32)})
    held = m[0].scale
    m.to(np.float64)
    assert m[0].scale is held and held.dtype == np.float64 and m[0].cache.dtype == np.float64
    assert m[0].steps.dtype == np.int64  # integer buffers keep their dtype
    m.to("cpu").cpu().to("cpu", dtype=np.float32)
    assert m[0].scale.dtype == np.float32
    if not _gpu():  # a machine without CuPy or a GPU says what to install
        with pytest.raises(tg.DeviceError, match="cupy-cuda12x"):
            m.to("cuda")
    with pytest.raises(tg.DeviceError, match="unknown device 'xyz'"):
        m.to(device="xyz")


def _gpu() -> bool:
    try:
        tg.tensor([1.0]).to("cuda")
    except tg.DeviceError:
        return False
    return True


def test_buffer_assignment_and_errors():
    m = Scaler()
    m.scale = tg.tensor(np.ones(3, np.float32))  # replaces the buffer, stays registered
    assert "scale" in m.state_dict() and m.state_dict()["scale"].tolist() == [1, 1, 1]
    m.cache = None
    assert [n for n, _ in m.named_buffers()] == ["scale", "steps"]
    with pytest.raises(KeyError, match="'.'"):
        m.register_buffer("a.b", np.zeros(1))
    with pytest.raises(KeyError, match="already a parameter"):
        m.lin.register_buffer("weight", np.zeros(1))
    with pytest.raises(TypeError, match="cannot be a Parameter"):
        m.register_buffer("p", nn.Parameter(np.zeros(1)))
    with pytest.raises(TypeError, match="must be a Tensor, an ndarray or None"):
        m.register_buffer("q", [1, 2])


def test_a_replaced_buffer_retraces_and_a_buffer_is_read_live():
    m = Scaler()
    f = tg.compile(lambda x: m(x).sum())
    x = np.ones((2, 3), np.float32)
    first = f(x).item()
    m.scale.data[...] = 4.0  # an in-place change between calls is read by the next replay
    assert f(x).item() == pytest.approx(2 * first)
    m.scale = tg.tensor(np.full(3, 1.0, np.float32))
    assert f(x).item() == pytest.approx(first / 2)
    assert any("buffer" in r for r in f.retraces)


class TiedLM(nn.Module):
    """A language model whose decoder reuses the embedding table (weight tying)."""

    def __init__(self, vocab=7, dim=4):
        super().__init__()
        self.encoder = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.encoder.weight

    def forward(self, ids):
        return self.decoder(tg.tanh(self.proj(self.encoder(ids))))


class TorchTiedLM(torch.nn.Module):
    def __init__(self, vocab=7, dim=4):
        super().__init__()
        self.encoder = torch.nn.Embedding(vocab, dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.decoder = torch.nn.Linear(dim, vocab)
        self.decoder.weight = self.encoder.weight

    def forward(self, ids):
        return self.decoder(torch.tanh(self.proj(self.encoder(ids))))


def test_weight_tying_matches_torch():
    torch.manual_seed(0)
    theirs, ours = TorchTiedLM(), TiedLM()
    names = ["encoder.weight", "proj.weight", "proj.bias", "decoder.weight", "decoder.bias"]
    assert list(ours.state_dict()) == list(theirs.state_dict()) == names
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert len(list(ours.parameters())) == 4
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ids = np.array([[1, 2, 6], [0, 2, 2]])
    y = np.array([[2, 6, 0], [1, 1, 3]])
    loss = F.cross_entropy(ours(ids).reshape((-1, 7)), y.reshape(-1))
    loss.backward()
    tl = torch.nn.functional.cross_entropy(
        theirs(torch.tensor(ids)).reshape(-1, 7), torch.tensor(y).reshape(-1)
    )
    tl.backward()
    assert loss.item() == pytest.approx(tl.item(), rel=1e-6)
    for (n, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    # both uses reach the one table: more than the embedding's own gradient
    assert np.abs(ours.encoder.weight.grad[4]).sum() > 0  # never looked up, only decoded


def test_tied_state_dict_round_trips_and_refuses_two_values():
    a, b = TiedLM(), TiedLM()
    b.load_state_dict(a.state_dict())
    assert b.decoder.weight is b.encoder.weight
    np.testing.assert_array_equal(b.decoder.weight.data, a.encoder.weight.data)
    sd = a.state_dict()
    sd["decoder.weight"] = sd["decoder.weight"] + 1
    with pytest.raises(
        nn.StateDictError, match="decoder.weight: shares its array with encoder.weight"
    ):
        b.load_state_dict(sd)
    opt = optim.SGD(b.parameters(), lr=0.1)
    before = b.encoder.weight.data.copy()
    loss = F.cross_entropy(b(np.array([[1, 2]])).reshape((2, 7)), np.array([2, 3]))
    opt.zero_grad()
    loss.backward()
    opt.step()  # one update of the shared table, with the summed gradient
    np.testing.assert_allclose(
        b.encoder.weight.data, before - 0.1 * b.encoder.weight.grad, rtol=1e-6
    )
