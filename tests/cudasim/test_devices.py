"""Devices as a user meets them, on the stand-in CUDA device (``fake_cuda``, kernels in numba's
simulator): tensors made on and moved between devices, mixed-device errors, modules and their
optimiser state moved, and whole training runs (Trainer, CLI) on "cuda" against the CPU."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.autodiff import backend
from tapegrad.train import Trainer


def _on_cuda(a) -> bool:
    return backend.device_of(a).name == "cuda" and not isinstance(a, np.ndarray)


def test_tensors_are_made_on_and_moved_between_devices():
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    assert x.device == "cuda" and _on_cuda(x.data) and x.dtype == np.float32
    host = x.numpy()  # a copy on the host
    assert isinstance(host, np.ndarray) and host.tolist() == [[1, 2], [3, 4]]
    host[0, 0] = 9.0
    assert x.tolist()[0][0] == 1.0
    assert x.cpu().device == "cpu" and x.cuda() is x and x.to("cuda:0") is x
    y = tg.tensor(np.arange(3.0)).cuda()
    assert y.device == "cuda" and y.dtype == np.float64
    z = y.to("cpu", np.float32)
    assert z.device == "cpu" and z.dtype == np.float32
    assert "device='cuda'" in repr(x)
    assert float(tg.tensor(2.5, device="cuda")) == 2.5


def test_moves_are_differentiable():
    w = tg.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)  # a CPU leaf
    y = (w.cuda() * w.cuda()).sum()
    assert y.device == "cuda"
    y.backward()
    assert isinstance(w.grad, np.ndarray)  # the gradient comes back to the leaf's device
    np.testing.assert_allclose(w.grad, [2.0, -4.0, 6.0])
    v = tg.tensor(np.ones(2), requires_grad=True, device="cuda")
    (v.cpu() * 3).sum().backward()
    assert _on_cuda(v.grad)
    np.testing.assert_allclose(backend.to_host(v.grad), [3.0, 3.0])


def test_mixing_devices_names_both():
    a = tg.tensor(np.ones(3, np.float32), device="cuda")
    b = tg.tensor(np.ones(3, np.float32))
    with pytest.raises(tg.DeviceError, match=r"add: .*'cuda'.*'cpu'.*\.to\("):
        a + b
    with pytest.raises(tg.DeviceError, match="matmul"):
        tg.tensor(np.ones((2, 3), np.float32)) @ tg.tensor(np.ones((3, 2), np.float32)).cuda()
    assert (a + 1).device == "cuda"  # Python numbers go where the tensor is
    assert (a * np.float32(2)).device == "cuda"


def test_creation_functions_take_a_device():
    x = tg.tensor(np.zeros((2, 3), np.float32), device="cuda")
    for t in (
        tg.zeros_like(x),
        tg.ones_like(x),
        tg.randn_like(x),
        tg.randn(2, 3, device="cuda"),
        x.new_zeros(4),
    ):
        assert t.device == "cuda", t
    a = tg.randn(4, rng=np.random.default_rng(1), device="cuda")
    b = tg.randn(4, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a.numpy(), b.numpy())  # drawn on the host: the same numbers


def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    return nn.Sequential(nn.Linear(6, 16, rng=rng), nn.ReLU(), nn.Linear(16, 3, rng=rng))


def test_module_to_moves_parameters_and_optimiser_state_follows():
    model = _mlp()
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = tg.tensor(np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32))
    y = np.arange(8) % 3
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()  # state made on the CPU
    assert model.to("cuda") is model
    assert all(_on_cuda(p.data) for p in model.parameters())
    opt.zero_grad()
    nn.functional.cross_entropy(model(x.cuda()), tg.tensor(y, device="cuda")).backward()
    opt.step()
    assert all(_on_cuda(v) for s in opt.state.values() for v in s.values() if hasattr(v, "shape"))
    sd = model.state_dict()  # host copies, ready to save
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    other = _mlp(1).cuda()
    other.load_state_dict(sd)
    assert all(_on_cuda(p.data) for p in other.parameters())
    np.testing.assert_array_equal(backend.to_host(other[0].weight.data), sd["0.weight"])
    osd = opt.state_dict()
    assert all(isinstance(v, np.ndarray) for k, v in osd.items() if k.endswith("exp_avg"))
    model.cpu()
    assert all(isinstance(p.data, np.ndarray) for p in model.parameters())


def _data(n=48, features=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    return x, y % classes


@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_trainer_on_cuda_follows_the_cpu(mode):
    """The same run on both devices: equal losses and weights to float32 rounding (the CUDA
    kernels' exp and the reductions' order differ from the CPU's in the last bits)."""
    x, y = _data()
    runs = {}
    for device in ("cpu", "cuda"):
        model = _mlp()
        opt = optim.Adam(model.parameters(), lr=0.05)
        trainer = Trainer(model, opt, progress=False, log=None, mode=mode, device=device)
        recs = trainer.fit((x, y), (x, y), epochs=2, batch_size=16)
        runs[device] = (recs, [backend.to_host(p.data) for p in model.parameters()])
        if device == "cuda":
            assert all(_on_cuda(p.data) for p in model.parameters())
    (cpu, wc), (gpu, wg) = runs["cpu"], runs["cuda"]
    for a, b in zip(cpu, gpu):
        assert a.loss == pytest.approx(b.loss, rel=1e-5)
        assert a.test_accuracy == b.test_accuracy
    for a, b in zip(wc, wg):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


class _Tiny(nn.Module):
    """A conv, fused ReLU + max pooling and an LSTM: the seed models' kernels on one path."""

    def __init__(self, rng):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, rng=rng)
        self.rnn = nn.LSTM(4, 5, batch_first=True, rng=rng)
        self.head = nn.Linear(5 + 2 * 3 * 3, 3, rng=rng)

    def forward(self, x):
        img = nn.functional.max_pool2d(nn.functional.relu(self.conv(x.reshape((-1, 1, 8, 8)))), 2)
        seq, _ = self.rnn(x.reshape((-1, 16, 4)))
        return self.head(tg.concatenate([img.reshape((img.shape[0], -1)), seq[:, -1]], axis=1))


def _three_compiled_steps(device, x, y):
    model = _Tiny(np.random.default_rng(0)).to(device)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @tg.compile
    def step(xb, yb):
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    xs, ys = tg.tensor(x, device=device), tg.tensor(y, device=device)
    losses = [float(step(xs, ys).numpy()) for _ in range(3)]
    (plan,) = step.all_plans
    assert all(backend.device_of(v).name == device for v in plan.vals.values())
    return losses, [p.numpy() for p in model.parameters()]


def test_compiled_conv_and_lstm_step_on_cuda_matches_cpu():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 64)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    (lc, wc), (lg, wg) = (_three_compiled_steps(d, x, y) for d in ("cpu", "cuda"))
    np.testing.assert_allclose(lc, lg, rtol=1e-5)
    for a, b in zip(wc, wg):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_cli_trains_and_evaluates_on_cuda(tmp_path, capsys):
    from tapegrad.cli import main

    x, y = _data(64, 20, 3)
    data = tmp_path / "tiny.npz"
    np.savez(data, x_train=x, y_train=y, x_test=x[:32], y_test=y[:32])
    weights = tmp_path / "w.safetensors"
    common = ["--dataset", str(data), "--epochs", "1", "--batch-size", "32"]
    assert main(["train", "mlp", *common, "--device", "cuda", "--save", str(weights)]) == 0
    out = capsys.readouterr().out
    assert ", on cuda" in out.splitlines()[0]
    assert main(["evaluate", str(weights), "--dataset", str(data), "--device", "cuda"]) == 0
    gpu_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["evaluate", str(weights), "--dataset", str(data)]) == 0
    cpu_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert gpu_line.split("accuracy")[1] == cpu_line.split("accuracy")[1]


@pytest.mark.parametrize("ufunc", [np.add, np.maximum, np.minimum, np.multiply])
def test_ufunc_at_on_the_device_is_the_hosts_bit_for_bit(ufunc):
    """backend.ufunc_at (the scatter of index_put, scatter_add, scatter_reduce, getitem's
    gradient): repeated positions, a tuple index with a slice, float64 kept whole (CuPy 14.2's
    maximum.at rounded float64 to float32 on an H200; np.add.at refused a tuple index)."""
    rng = np.random.default_rng(3)
    host = rng.normal(size=(3, 5))
    index = (slice(None), np.array([0, 2, 2, 4, 0]))
    values = rng.normal(size=(3, 5))
    want = host.copy()
    ufunc.at(want, index, values)
    dev = backend.get_device("cuda")
    a = backend.copy_to_device(host, dev)
    backend.ufunc_at(ufunc, a, (index[0], backend.copy_to_device(index[1], dev)), values)
    got = backend.to_host(a)
    if ufunc is np.add:  # atomics: repeated positions add in any order
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)
    else:
        np.testing.assert_array_equal(got, want)
