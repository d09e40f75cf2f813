"""Creation operations and the statistics/norm/index reductions, against PyTorch."""

import numpy as np
import pytest
import torch

import tapegrad as tg


def test_creation_takes_both_shape_forms_and_matches_torch():
    assert tg.zeros(2, 3).shape == tg.zeros((2, 3)).shape == (2, 3)
    assert tg.ones(4).dtype == np.float32 and tg.ones(2, 2, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(tg.full((2, 2), 7.5).data, torch.full((2, 2), 7.5).numpy())
    like = tg.tensor(np.ones((2, 3), np.float64))
    assert tg.zeros_like(like).dtype == np.float64 and tg.ones_like(like).data.sum() == 6
    np.testing.assert_array_equal(tg.full_like(like, 2).data, np.full((2, 3), 2.0))
    np.testing.assert_array_equal(tg.arange(5).data, torch.arange(5).numpy())
    assert tg.arange(5).dtype == np.int64 and tg.arange(0.0, 1.0, 0.25).dtype == np.float32
    np.testing.assert_allclose(tg.arange(1, 2, 0.25).data, torch.arange(1, 2, 0.25).numpy())
    np.testing.assert_allclose(tg.linspace(-1, 1, 5).data, torch.linspace(-1, 1, 5).numpy())
    np.testing.assert_array_equal(tg.eye(3, 2).data, torch.eye(3, 2).numpy())
    ids = np.array([[0, 2], [1, 1]])
    np.testing.assert_array_equal(
        tg.one_hot(ids, 3).data, torch.nn.functional.one_hot(torch.tensor(ids), 3).numpy()
    )
    assert tg.one_hot(np.array([4])).shape == (1, 5)
    with pytest.raises(tg.ShapeError, match="index 3 is out of range for 3 classes"):
        tg.one_hot(np.array([3]), 3)
    with pytest.raises(ValueError, match="step must not be zero"):
        tg.arange(0, 3, 0)


def test_randint_is_seeded_in_range_and_fresh_in_compiled_steps():
    a = tg.randint(-2, 5, (200,), rng=np.random.default_rng(0))
    assert a.dtype == np.int64 and a.data.min() >= -2 and a.data.max() <= 4
    np.testing.assert_array_equal(
        a.data, np.random.default_rng(0).integers(-2, 5, size=(200,), dtype=np.int64)
    )
    gen = np.random.default_rng(1)
    f = tg.compile(lambda x: tg.tensor(x) + tg.randint(0, 1000, 4, rng=gen).astype(np.float32))
    z = np.zeros(4, np.float32)
    first, second = f(z).data.copy(), f(z).data.copy()
    assert not np.array_equal(first, second)
    with pytest.raises(ValueError, match="high"):
        tg.randint(3, 3, 2)


X = np.random.default_rng(2).standard_normal((3, 4))


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std_match_torch_with_gradients(axis, correction):
    for fn, tfn in [(tg.var, torch.var), (tg.std, torch.std)]:
        x = tg.tensor(X, requires_grad=True)
        y = fn(x, axis=axis, correction=correction)
        y.sum().backward()
        tx = torch.tensor(X, requires_grad=True)
        ty = tfn(tx, dim=axis, correction=correction)
        ty.sum().backward()
        np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    s, m = tg.std_mean(tg.tensor(X), axis=1)
    ts, tm = torch.std_mean(torch.tensor(X), dim=1)
    np.testing.assert_allclose(s.data, ts.numpy(), rtol=1e-12)
    np.testing.assert_allclose(m.data, tm.numpy(), rtol=1e-12)


@pytest.mark.parametrize("ord", [2, 1, 3, np.inf, -np.inf])
@pytest.mark.parametrize("axis", [None, 1])
def test_norm_matches_torch_with_gradients(ord, axis):
    x = tg.tensor(X, requires_grad=True)
    y = tg.norm(x, ord=ord, axis=axis)
    y.sum().backward()
    tx = torch.tensor(X, requires_grad=True)
    ty = torch.linalg.vector_norm(tx, ord=ord, dim=axis)
    ty.sum().backward()
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_index_and_logical_reductions_match_torch():
    tx = torch.tensor(X)
    for axis in (0, 1, -1):
        np.testing.assert_array_equal(tg.argmax(tg.tensor(X), axis).data, tx.argmax(axis))
        np.testing.assert_array_equal(tg.argmin(tg.tensor(X), axis).data, tx.argmin(axis))
    assert tg.argmax(tg.tensor(X)).item() == tx.argmax().item()
    assert tg.argmax(tg.tensor(X), 1, keepdims=True).shape == (3, 1)
    assert tg.argmax(tg.tensor(np.float64(2.0)), axis=0).item() == 0
    m = tg.tensor(X) > 0
    np.testing.assert_array_equal(tg.all(m, axis=1).data, (tx > 0).all(1).numpy())
    np.testing.assert_array_equal(tg.any(m, axis=0).data, (tx > 0).any(0).numpy())
    assert tg.any(m).item() and not tg.all(m).item()


def test_statistics_are_twice_differentiable():
    v = np.linspace(-1, 1, 12)
    got = tg.hvp(lambda x: tg.std(x.reshape((3, 4)), axis=1).sum(), X.reshape(-1), v)
    _, want = torch.autograd.functional.hvp(
        lambda x: x.reshape(3, 4).std(dim=1).sum(), torch.tensor(X.reshape(-1)), torch.tensor(v)
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-12)
