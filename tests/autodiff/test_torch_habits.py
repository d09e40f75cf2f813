"""Tensor methods in PyTorch's forms beside NumPy's: dim=/keepdim=, transpose(d0, d1), view,
eq/mm/pow, new_zeros, format specs."""

import numpy as np
import pytest
import torch

import tapegrad as tg

A = np.random.default_rng(0).standard_normal((2, 3, 4))


CASES = [
    (name, dim, keepdim)
    for name in ["sum", "mean", "logsumexp", "std", "var", "argmax", "argmin"]
    for dim, keepdim in [(1, False), (2, True), ((0, 2), False)]
    if not (name.startswith("arg") and isinstance(dim, tuple))  # PyTorch's argmax: one dim
]


@pytest.mark.parametrize("name, dim, keepdim", CASES)
def test_dim_and_keepdim_like_torch(name, dim, keepdim):
    got = getattr(tg.tensor(A), name)(dim=dim, keepdim=keepdim)
    want = getattr(torch.tensor(A), name)(dim=dim, keepdim=keepdim)
    np.testing.assert_allclose(got.data, want.numpy(), rtol=1e-12)
    assert got.shape == tuple(want.shape)


def test_max_min_softmax_with_dim_and_both_names_refused():
    t, tt = tg.tensor(A), torch.tensor(A)
    values, indices = t.max(dim=1)
    want = tt.max(dim=1)
    np.testing.assert_array_equal(values.data, want.values.numpy())
    np.testing.assert_array_equal(indices.data, want.indices.numpy())
    low = t.min(dim=0, keepdim=True)
    np.testing.assert_array_equal(low.values.data, tt.min(dim=0, keepdim=True).values.numpy())
    np.testing.assert_array_equal(low.indices.data, tt.min(dim=0, keepdim=True).indices.numpy())
    # PyTorch's positional form `_, predicted = logits.max(1)`; NumPy's `axis=` gives values
    for got, want in [(t.max(1), tt.max(1)), (t.min(2, True), tt.min(2, True))]:
        np.testing.assert_array_equal(got.values.data, want.values.numpy())
        np.testing.assert_array_equal(got.indices.data, want.indices.numpy())
    np.testing.assert_array_equal(t.max(axis=1).data, A.max(1))
    np.testing.assert_array_equal(t.min((0, 2)).data, A.min((0, 2)))
    assert float(t.max().data) == A.max()
    x = tg.tensor(A, requires_grad=True)
    x.max(dim=2).values.sum().backward()
    np.testing.assert_array_equal(x.grad, (A == A.max(2, keepdims=True)).astype(float))
    np.testing.assert_allclose(t.softmax(dim=1).data, torch.tensor(A).softmax(dim=1).numpy())
    with pytest.raises(TypeError, match="axis or dim, not both"):
        t.sum(1, dim=2)


def test_transpose_swaps_two_axes_like_torch_and_permutes_like_numpy():
    t, tt = tg.tensor(A), torch.tensor(A)
    np.testing.assert_array_equal(t.transpose(0, 2).data, tt.transpose(0, 2).numpy())
    np.testing.assert_array_equal(t.transpose(-1, 1).data, tt.transpose(-1, 1).numpy())
    np.testing.assert_array_equal(t.transpose((2, 0, 1)).data, np.transpose(A, (2, 0, 1)))
    np.testing.assert_array_equal(t.transpose(2, 0, 1).data, np.transpose(A, (2, 0, 1)))
    m = tg.tensor(A[0])
    np.testing.assert_array_equal(m.transpose(0, 1).data, A[0].T)  # PyTorch: a swap
    x = tg.tensor(A, requires_grad=True)
    (x.transpose(0, 2) * tg.tensor(np.arange(24.0).reshape(4, 3, 2))).sum().backward()
    np.testing.assert_array_equal(x.grad, np.arange(24.0).reshape(4, 3, 2).transpose(2, 1, 0))


def test_aliases_and_constructors():
    t = tg.tensor(A[0])
    assert t.view(4, 3).shape == (4, 3) and t.view_as(tg.tensor(A[0].T)).shape == (4, 3)
    np.testing.assert_array_equal(t.eq(t).data, np.ones((3, 4), bool))
    np.testing.assert_array_equal(
        t.ne(t).data | t.lt(t).data | t.gt(t).data, np.zeros((3, 4), bool)
    )
    assert t.le(t).data.all() and t.ge(t).data.all()
    np.testing.assert_allclose(t.mm(t.T).data, A[0] @ A[0].T)
    np.testing.assert_allclose(t.matmul(t.T).data, A[0] @ A[0].T)
    np.testing.assert_allclose(t.pow(2).data, A[0] ** 2)
    assert t.numel() == 12 and t.dim() == 2
    z = t.new_zeros(2, 5)
    assert z.shape == (2, 5) and z.dtype == np.float64 and not z.data.any()
    assert t.new_ones((3,)).data.tolist() == [1.0, 1.0, 1.0]
    assert t.new_full((2,), 4.0).data.tolist() == [4.0, 4.0]
    loss = tg.tensor(np.float32(0.123456))
    assert f"{loss:.3f}" == "0.123" and format(loss, "+.2e") == "+1.23e-01"
    assert f"{t}" == str(t)
