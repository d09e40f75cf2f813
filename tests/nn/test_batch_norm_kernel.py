"""BatchNorm in training mode as one primitive (``batch_norm_train``, compiled kernels): the
same outputs, gradients and running statistics as PyTorch, compiled == eager bit for bit, and a
compiled step of it allocates nothing per step (it composed nine broadcasting operations)."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.autodiff.primitives.reduce import _mean_fwd

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(6, 3, 5, 4), (5, 4, 7), (8, 2)])
def test_training_batch_norm_matches_pytorch(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape) * 3 + 1
    g = rng.standard_normal(shape)
    layer = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d}[len(shape)](shape[1])
    ref = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}[len(shape)](
        shape[1], dtype=torch.float64
    )
    layer = layer.to(dtype=np.float64)
    w, b = rng.uniform(0.5, 1.5, shape[1]), rng.standard_normal(shape[1])
    layer.weight.data[...], layer.bias.data[...] = w, b
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(w))
        ref.bias.copy_(torch.tensor(b))
    for _ in range(2):  # the running statistics after two steps
        xt = tg.tensor(x, requires_grad=True)
        y = layer(xt)
        (y * g).sum().backward()
        xr = torch.tensor(x, requires_grad=True)
        yr = ref(xr)
        (yr * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(y.data, yr.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(xt.grad, xr.grad.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(layer.weight.grad, ref.weight.grad.numpy(), atol=1e-11)
    np.testing.assert_allclose(layer.bias.grad, ref.bias.grad.numpy(), atol=1e-11)
    np.testing.assert_allclose(layer.running_mean.data, ref.running_mean.numpy(), atol=1e-13)
    np.testing.assert_allclose(layer.running_var.data, ref.running_var.numpy(), atol=1e-13)


def test_compiled_batch_norm_equals_eager_and_uses_the_kernels():
    def run(compiled):
        tg.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
        params = list(model.parameters())

        def step(x):
            for p in params:
                p.grad = None
            loss = (model(x) ** 2).mean()
            loss.backward()
            return loss

        f = tg.compile(step) if compiled else step
        rng = np.random.default_rng(1)
        losses = [f(rng.standard_normal((5, 2, 6, 6)).astype(np.float32)).item() for _ in range(4)]
        state = [p.grad.copy() for p in params] + [model[1].running_var.data.copy()]
        return losses, state, f

    eager, s_eager, _ = run(False)
    comp, s_comp, f = run(True)
    assert eager == comp
    for a, b in zip(s_eager, s_comp):
        assert a.tobytes() == b.tobytes()
    names = [e.prim.name for e in f.all_plans[0].eqs]
    # the running statistics' moments fused into the normalisation's pass, and the ReLU after
    # it into its output pass and its VJP (plan/fusion.py)
    assert "batch_norm_relu_train_moments" in names and "batch_norm_relu_backward" in names
    assert not {"batch_moments", "relu", "relu_backward"} & set(names)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_into_a_buffer_is_numpys_mean_bit_for_bit(dtype):
    rng = np.random.default_rng(2)
    for _ in range(200):
        shape = tuple(int(n) for n in rng.integers(1, 9, size=4))
        x = (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3)).astype(dtype)
        k = int(rng.integers(1, 4))
        axes = tuple(sorted(int(a) for a in rng.choice(4, size=k, replace=False)))
        expected = np.mean(x, axis=axes, keepdims=True)
        out = np.empty_like(expected)
        _mean_fwd(x, axes, True, out=out)
        assert out.tobytes() == expected.tobytes()
