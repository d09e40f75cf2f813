"""Batched matrix products as attention and a batched Linear layer make them (a weight broadcast
over a batch, transposed and non-contiguous views): values and gradients against PyTorch in
float64, and compiled == eager bit for bit in float32."""

import numpy as np
import pytest
import torch

import tapegrad as tg

CASES = {
    "weight": ((3, 5, 4), (4, 6), lambda a, b: a @ b),
    "weight^T": ((3, 5, 4), (6, 4), lambda a, b: a @ b.transpose(-2, -1)),
    "permuted batch @ weight": ((5, 3, 4), (4, 6), lambda a, b: a.transpose(0, 1) @ b),
    "q @ k^T": ((2, 3, 5, 4), (2, 3, 5, 4), lambda a, b: a @ b.transpose(-2, -1)),
    "p @ v": ((2, 3, 5, 5), (2, 3, 5, 4), lambda a, b: a @ b),
    "4-d @ weight": ((2, 3, 5, 4), (4, 6), lambda a, b: a @ b),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    sa, sb, f = CASES[name]
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal(sa), rng.standard_normal(sb)
    a, b = tg.tensor(a0, requires_grad=True), tg.tensor(b0, requires_grad=True)
    y = f(a, b)
    w = rng.standard_normal(y.shape)
    (y * tg.tensor(w)).sum().backward()
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    ty = f(ta, tb)
    ty.backward(torch.tensor(w))
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.grad, ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b.grad, tb.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_equals_eager(name):
    sa, sb, f = CASES[name]
    rng = np.random.default_rng(1)
    b = tg.tensor(rng.standard_normal(sb).astype(np.float32), requires_grad=True)
    x = rng.standard_normal(sa).astype(np.float32)

    def step(x):
        a = tg.tensor(x)
        b.grad = None
        loss = (f(a, b) ** 2).mean()
        loss.backward()
        return loss

    eager = step(tg.tensor(x)).item(), b.grad.copy()
    compiled = tg.compile(step)
    for _ in range(2):
        got = compiled(x).item(), b.grad.copy()
        assert got[0] == eager[0]
        np.testing.assert_array_equal(got[1], eager[1])
