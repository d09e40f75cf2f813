"""Scans (cumsum, cumprod, logcumsumexp, cummax, cummin), prod, and sorting (sort, argsort,
topk) against PyTorch: values and gradients in float64 and float32, second derivatives, zeros in
products, ties and NaN in orderings, compiled == eager, and the errors."""

import numpy as np
import pytest
import torch
from ops_vs_torch import assert_compiled_equals_eager, compare_with_torch

import tapegrad as tg

RNG = np.random.default_rng(0)
X = RNG.uniform(-1.5, 1.5, (3, 4, 5))
WITH_ZEROS = X.copy()
WITH_ZEROS[0, 1, 2] = WITH_ZEROS[1, 2, 0] = WITH_ZEROS[1, 2, 3] = WITH_ZEROS[2, 0, 4] = 0.0


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cumsum_matches_torch(dim):
    compare_with_torch(lambda x: tg.cumsum(x, dim), lambda x: torch.cumsum(x, dim), [X])
    compare_with_torch(lambda x: x.cumsum(dim=dim), lambda x: x.cumsum(dim=dim), [X])


@pytest.mark.parametrize("x", [X, WITH_ZEROS], ids=["no zeros", "zeros"])
@pytest.mark.parametrize("dim", [0, 2, -2])
def test_cumprod_matches_torch_also_with_zeros(x, dim):
    compare_with_torch(lambda t: tg.cumprod(t, dim), lambda t: torch.cumprod(t, dim), [x])


def test_cumprod_gradient_at_zeros_has_no_nan_and_is_exact():
    x = np.array([2.0, 0.0, 3.0, 0.0, 5.0])
    t = tg.tensor(x, requires_grad=True)
    tg.cumprod(t, 0).sum().backward()
    # d/dx_i of sum_j prod_{k<=j} x_k, written out by hand
    want = [1 + 0, 2 * (1 + 3 + 0 + 0), 0.0, 2 * 0 * 3 * (1 + 5), 0.0]
    np.testing.assert_array_equal(t.grad, want)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_matches_torch(dim):
    compare_with_torch(
        lambda x: tg.logcumsumexp(x, dim), lambda x: torch.logcumsumexp(x, dim), [X * 3]
    )


def test_logcumsumexp_is_stable_for_extreme_values():
    x = np.array([-1000.0, 0.0, 800.0, 750.0, -1e4])
    t = tg.tensor(x, requires_grad=True)
    y = tg.logcumsumexp(t, 0)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.logcumsumexp(tx, 0)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-15)
    assert y.data[0] == -1000.0  # not log(0) = -inf from a shifted exponential
    w = np.array([0.5, -1.0, 2.0, 0.25, 1.0])
    (y * tg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    assert np.isfinite(t.grad).all()
    np.testing.assert_allclose(t.grad, tx.grad.numpy(), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 2, -1])
def test_cummax_cummin_values_indices_gradients_match_torch(name, dim):
    x = RNG.permutation(60).reshape(3, 4, 5) * 0.1 - 3.0  # no ties: gradients are unique
    compare_with_torch(
        lambda t: tuple(getattr(tg, name)(t, dim)),
        lambda t: tuple(getattr(torch, name)(t, dim)),
        [x],
    )
    compare_with_torch(
        lambda t: tuple(getattr(t, name)(dim=dim)), lambda t: tuple(getattr(t, name)(dim)), [x]
    )


def test_cummax_ties_and_nan_follow_torch():
    x = np.array([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, np.nan, 4.0, np.nan, 9.0]])
    for name in ("cummax", "cummin"):
        got = getattr(tg, name)(tg.tensor(x), 1)
        want = getattr(torch, name)(torch.tensor(x), 1)
        np.testing.assert_array_equal(got.indices.data, want.indices.numpy())
        np.testing.assert_array_equal(got.values.data, want.values.numpy())  # NaN == NaN here
    t = tg.tensor(x[:, :6], requires_grad=True)
    tg.cummax(t, 1).values.sum().backward()  # each value's gradient goes where it came from
    np.testing.assert_array_equal(t.grad, [[1, 1, 2, 0, 1, 1]])


@pytest.mark.parametrize(
    "axis, keepdims", [(None, False), (0, False), (2, True), ((0, 2), False), ((1, 2), True)]
)
@pytest.mark.parametrize("x", [X, WITH_ZEROS], ids=["no zeros", "zeros"])
def test_prod_matches_torch_also_with_zeros(axis, keepdims, x):
    def torch_prod(t):
        if axis is None:
            return t.prod()
        axes = (axis,) if isinstance(axis, int) else axis
        for a in sorted(axes, reverse=True):
            t = t.prod(a, keepdim=keepdims)
        return t

    compare_with_torch(lambda t: tg.prod(t, axis, keepdims), torch_prod, [x])
    if isinstance(axis, int):
        compare_with_torch(
            lambda t: t.prod(dim=axis, keepdim=keepdims),
            lambda t: t.prod(dim=axis, keepdim=keepdims),
            [x],
        )


def test_prod_gradient_with_one_and_two_zeros():
    t = tg.tensor(np.array([[2.0, 0.0, 3.0], [0.0, 4.0, 0.0]]), requires_grad=True)
    tg.prod(t, 1).sum().backward()
    np.testing.assert_array_equal(t.grad, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0]])
    h = tg.hessian(lambda v: tg.prod(v))(np.array([2.0, 0.0, 3.0]))
    np.testing.assert_array_equal(h, [[0, 3, 0], [3, 0, 2], [0, 2, 0]])


SORTABLE = RNG.permutation(60).reshape(3, 4, 5) * 0.25 - 7.0


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_match_torch(dim, descending):
    compare_with_torch(
        lambda t: tuple(tg.sort(t, dim, descending)),
        lambda t: tuple(torch.sort(t, dim, descending)),
        [SORTABLE],
    )
    compare_with_torch(
        lambda t: t.argsort(dim=dim, descending=descending),
        lambda t: t.argsort(dim=dim, descending=descending),
        [SORTABLE],
    )


def test_sort_is_stable_with_nan_largest_like_torch_stable_sort():
    x = np.array([[2.0, 1.0, 2.0, np.nan, 1.0, 3.0, np.nan, 2.0], [0.5] * 4 + [-1.0] * 4])
    for descending in (False, True):
        got = tg.sort(tg.tensor(x), 1, descending)
        want = torch.sort(torch.tensor(x), dim=1, descending=descending, stable=True)
        np.testing.assert_array_equal(got.indices.data, want.indices.numpy())
        np.testing.assert_array_equal(got.values.data, want.values.numpy())
    ints = np.array([3, -2, 3, 9, -2])
    np.testing.assert_array_equal(
        tg.argsort(tg.tensor(ints), descending=True).data, [3, 0, 2, 1, 4]
    )


@pytest.mark.parametrize("k, dim", [(1, -1), (3, -1), (5, 2), (2, 0), (0, 1)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(k, dim, largest):
    compare_with_torch(
        lambda t: tuple(tg.topk(t, k, dim, largest)),
        lambda t: tuple(torch.topk(t, k, dim, largest)),
        [SORTABLE],
    )
    compare_with_torch(
        lambda t: tuple(t.topk(k, dim=dim, largest=largest)),
        lambda t: tuple(t.topk(k, dim=dim, largest=largest)),
        [SORTABLE],
    )


def test_topk_ties_go_to_the_earlier_entry_and_gradient_to_the_selected():
    x = tg.tensor(np.array([[1.0, 2.0, 2.0, 0.5], [3.0, 1.0, 3.0, np.nan]]), requires_grad=True)
    v, i = tg.topk(x, 2, 1)
    np.testing.assert_array_equal(i.data, [[1, 2], [3, 0]])  # (PyTorch leaves tie order open)
    v.sum().backward()
    np.testing.assert_array_equal(x.grad, [[0, 1, 1, 0], [1, 0, 0, 1]])


def test_scans_and_sorts_of_0d_and_flattened_tensors():
    s = tg.tensor(np.float64(2.5))
    assert tg.cumsum(s, 0).shape == () and tg.cumsum(s, 0).item() == 2.5
    assert tg.sort(s).values.item() == 2.5 and tg.sort(s).indices.item() == 0
    np.testing.assert_array_equal(tg.cumsum(tg.tensor(X)).data, np.cumsum(X))  # NumPy's None
    assert tg.prod(s).item() == 2.5 and tg.topk(s, 1).values.item() == 2.5
    e = tg.tensor(np.zeros((0, 3)))
    assert tg.cumprod(e, 0).shape == (0, 3) and tg.sort(e, 0).values.shape == (0, 3)
    assert tg.prod(e, 0).data.tolist() == [1.0, 1.0, 1.0]


def test_compiled_scans_and_sorts_equal_eager():
    w = tg.tensor(RNG.standard_normal((4, 6)).astype(np.float32), requires_grad=True)

    def step(x):
        h = tg.tensor(x) * w
        values, idx = tg.sort(h, 1, descending=True)  # the order changes with x
        top = tg.topk(h, 2, 0).values
        loss = (
            tg.cumsum(values, 1).mean()
            + tg.cumprod(h * 0.5, 1).sum()
            + tg.logcumsumexp(h, 0).mean()
            + tg.cummax(h, 1).values.sum()
            + tg.prod(h[:, :3], 1).sum()
            + top.sum()
        )
        w.grad = None
        loss.backward()
        return loss, idx

    calls = [(RNG.standard_normal((4, 6)).astype(np.float32),) for _ in range(3)]
    assert_compiled_equals_eager(step, [w], calls)


def test_errors_name_the_operation_and_shapes():
    x = tg.tensor(X)
    with pytest.raises(tg.ShapeError, match=r"cumsum: dimension 3 is out of range.*\(3, 4, 5\)"):
        tg.cumsum(x, 3)
    with pytest.raises(tg.ShapeError, match="cumprod: takes one axis"):
        tg.cumprod(x, (0, 1))
    with pytest.raises(tg.ShapeError, match=r"topk: k=6 is out of range for axis -1 of size 5"):
        tg.topk(x, 6)
    with pytest.raises(tg.ShapeError, match="sort: dimension -4 is out of range"):
        tg.sort(x, -4)
    with pytest.raises(tg.DTypeError, match="logcumsumexp: needs a float tensor"):
        tg.logcumsumexp(tg.tensor(np.arange(3)), 0)
    with pytest.raises(tg.ShapeError, match="prod: dimension 5 is out of range"):
        tg.prod(x, 5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (50, 1), (0, 4)])
def test_linear_recurrence_kernel_equals_its_reference_bit_for_bit(dtype, reverse, shape):
    from tapegrad.autodiff.kernels.cpu.scan import linear_recurrence, linear_recurrence_reference

    b = RNG.standard_normal(shape).astype(dtype)
    a = RNG.uniform(-1.1, 1.1, shape).astype(dtype)
    out, ref = np.empty_like(b), np.empty_like(b)
    linear_recurrence(b, a, out, reverse)
    linear_recurrence_reference(b, a, ref, reverse)
    np.testing.assert_array_equal(out, ref)


def test_compiled_functions_return_sort_results():
    f = tg.compile(lambda x: tg.sort(tg.tensor(x), descending=True))
    for x in ([3.0, 1.0, 2.0], [0.0, 5.0, 4.0], [9.0, 8.0, 7.0]):
        values, indices = f(np.array(x))
        want = torch.sort(torch.tensor(x), descending=True)
        np.testing.assert_array_equal(values.data, want.values.numpy())
        np.testing.assert_array_equal(f(np.array(x)).indices.data, want.indices.numpy())
