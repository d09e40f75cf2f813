"""Index operations against PyTorch: gather, scatter, scatter_add, scatter_reduce, index_select,
index_add, index_put, take, masked_fill, masked_select, nonzero (values, gradients, second
derivatives, float32), repeated indices, indices computed inside compiled steps, and errors."""

import numpy as np
import pytest
import torch
from ops_vs_torch import assert_compiled_equals_eager, compare_with_torch

import tapegrad as tg

RNG = np.random.default_rng(3)
X = RNG.standard_normal((3, 4, 5))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_matches_torch(dim):
    shape = list(X.shape)
    shape[dim] = 6  # more picks than entries: repeats
    shape[(dim + 1) % 3] -= 1  # and a smaller block on another axis
    index = RNG.integers(0, X.shape[dim], shape)
    compare_with_torch(lambda x, i: tg.gather(x, dim, i), lambda x, i: torch.gather(x, dim, i),
                       [X, index])  # fmt: skip
    compare_with_torch(lambda x, i: x.gather(dim, i), lambda x, i: x.gather(dim, i), [X, index])


def _unique_index(shape, dim, n):
    """Indices that never repeat along ``dim`` (the scatter result is then defined in PyTorch)."""
    out = np.empty(shape, np.int64)
    for k in np.ndindex(*(s for d, s in enumerate(shape) if d != dim)):
        at = list(k)
        at.insert(dim, slice(None))
        out[tuple(at)] = RNG.permutation(n)[: shape[dim]]
    return out


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_and_scatter_add_match_torch(dim):
    shape = list(X.shape)
    shape[dim] -= 1
    index = _unique_index(tuple(shape), dim % 3, X.shape[dim])
    src = RNG.standard_normal(shape)
    compare_with_torch(
        lambda x, i, s: tg.scatter(x, dim, i, s),
        lambda x, i, s: x.scatter(dim, i, s),
        [X, index, src],
    )
    # a src larger than index (its leading block is used; PyTorch's backward refuses this case)
    big = RNG.standard_normal([s + 1 for s in shape])
    for op in (tg.scatter, tg.scatter_add):
        report = tg.gradcheck(lambda x, s, op=op: op(x, dim, index, s), X, big)
        assert report.ok, report
    np.testing.assert_array_equal(
        tg.scatter(tg.tensor(X), dim, index, big).data,
        torch.tensor(X).scatter(dim, torch.tensor(index), torch.tensor(big)).numpy(),
    )
    compare_with_torch(
        lambda x, i: x.scatter(dim, i, value=1.5), lambda x, i: x.scatter(dim, i, 1.5), [X, index]
    )
    repeats = RNG.integers(0, X.shape[dim], shape)
    compare_with_torch(
        lambda x, i, s: x.scatter_add(dim, i, s),
        lambda x, i, s: x.scatter_add(dim, i, s),
        [X, repeats, src],
    )


def test_scatter_with_repeats_keeps_the_last_write_and_its_gradient_only():
    x = tg.tensor(np.zeros((2, 3)), requires_grad=True)
    src = tg.tensor(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), requires_grad=True)
    index = np.array([[0, 0, 2], [1, 1, 1]])
    out = tg.scatter(x, 1, index, src)
    np.testing.assert_array_equal(out.data, [[2.0, 0.0, 3.0], [0.0, 6.0, 0.0]])
    (out * tg.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    np.testing.assert_array_equal(src.grad, [[0.0, 0.0, 2.0], [0.0, 0.0, 4.0]])
    np.testing.assert_array_equal(x.grad, [[0.0, 1.0, 0.0], [3.0, 0.0, 5.0]])


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_torch(reduce, include_self):
    # values all distinct, so amax/amin have no ties (PyTorch counts an excluded self entry
    # equal to the result among the ties when include_self=False; tapegrad does not)
    x = RNG.permutation(20).reshape(4, 5) * 0.1 + 0.3
    src = (
        RNG.permutation(np.arange(20, 38)).reshape(3, 6)
        * 0.1
        * np.where(RNG.uniform(size=(3, 6)) > 0.3, 1, -1)
    )
    index = RNG.integers(0, 5, (3, 6))
    compare_with_torch(
        lambda a, i, s: tg.scatter_reduce(a, 1, i, s, reduce, include_self),
        lambda a, i, s: a.scatter_reduce(1, i, s, reduce, include_self=include_self),
        [x, index, src],
    )
    # a src larger than index (PyTorch's backward refuses it): against finite differences
    big = np.concatenate([src, src[:1] * 1.01 + 0.5], 0)
    report = tg.gradcheck(
        lambda a, s: tg.scatter_reduce(a, 1, index, s, reduce, include_self), x, big
    )
    assert report.ok, report


def test_scatter_reduce_prod_gradient_is_exact_with_zeros():
    x = np.array([[2.0, 0.5, 3.0, 1.5]])
    src = np.array([[0.0, 4.0, 0.0, 5.0, 0.0, 7.0]])  # a group with one zero, one with two
    index = np.array([[0, 0, 1, 1, 2, 3]])
    for include_self in (True, False):
        compare_with_torch(
            lambda a, i, s, inc=include_self: tg.scatter_reduce(a, 1, i, s, "prod", inc),
            lambda a, i, s, inc=include_self: a.scatter_reduce(1, i, s, "prod", include_self=inc),
            [x, index, src],
            f32=False,
        )
    xs = tg.tensor(x, requires_grad=True)
    ss = tg.tensor(src, requires_grad=True)
    tg.scatter_reduce(xs, 1, index, ss, "prod").sum().backward()
    np.testing.assert_array_equal(ss.grad, [[2 * 4.0, 0.0, 0.5 * 5, 0.0, 3.0, 1.5]])
    np.testing.assert_array_equal(xs.grad, [[0.0, 0.0, 0.0, 7.0]])


def test_scatter_reduce_ties_share_the_gradient():
    x = tg.tensor(np.array([[1.0, 5.0]]), requires_grad=True)
    src = tg.tensor(np.array([[5.0, 5.0, 0.0]]), requires_grad=True)
    tg.scatter_reduce(x, 1, np.array([[1, 1, 0]]), src, "amax", include_self=False).sum().backward()
    np.testing.assert_array_equal(src.grad, [[0.5, 0.5, 1.0]])  # the two tied 5s, then 0 > -inf
    np.testing.assert_array_equal(x.grad, [[0.0, 0.0]])


def test_index_select_index_add_take_match_torch():
    for dim in (0, 1, -1):
        index = RNG.integers(0, X.shape[dim], 7)
        compare_with_torch(
            lambda x, i, d=dim: tg.index_select(x, d, i),
            lambda x, i, d=dim: torch.index_select(x, d, i),
            [X, index],
        )
        shape = list(X.shape)
        shape[dim] = 7
        src = RNG.standard_normal(shape)
        compare_with_torch(
            lambda x, i, s, d=dim: x.index_add(d, i, s, alpha=0.5),
            lambda x, i, s, d=dim: x.index_add(d, i, s, alpha=0.5),
            [X, index, src],
        )
    flat = RNG.integers(0, X.size, (2, 3))
    compare_with_torch(lambda x, i: x.take(i), lambda x, i: x.take(i), [X, flat])


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_matches_torch(accumulate):
    rows = np.array([0, 2, 1])  # no repeats without accumulate: PyTorch's result is then defined
    cols = np.array([4, 0, 4]) if not accumulate else np.array([4, 0, 4, 4, 1])
    if accumulate:
        rows = np.array([0, 2, 0, 0, 1])
    v = RNG.standard_normal((len(rows), 4))
    compare_with_torch(
        lambda x, r, c, v: tg.index_put(x.permute(0, 2, 1), (r, c), v, accumulate),
        lambda x, r, c, v: x.permute(0, 2, 1).index_put((r, c), v, accumulate),
        [X, rows, cols, v],
    )


def test_masked_fill_masked_select_nonzero_match_torch():
    mask = X[0] > 0.3
    compare_with_torch(lambda x, m: x.masked_fill(m, -2.5), lambda x, m: x.masked_fill(m, -2.5),
                       [X, mask])  # fmt: skip
    compare_with_torch(
        lambda x, m, v: x.masked_fill(m, v), lambda x, m, v: x.masked_fill(m, v),
        [X, mask, np.float64(0.7)],
    )  # fmt: skip
    compare_with_torch(lambda x, m: tg.masked_select(x, m), torch.masked_select, [X, mask])
    compare_with_torch(
        lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), [X[:, :1], mask]
    )  # fmt: skip  (both broadcast)
    z = np.where(X > 0.5, X, 0.0)
    np.testing.assert_array_equal(tg.nonzero(tg.tensor(z)).data, torch.nonzero(torch.tensor(z)))
    for got, want in zip(
        tg.tensor(z).nonzero(as_tuple=True), torch.tensor(z).nonzero(as_tuple=True)
    ):
        np.testing.assert_array_equal(got.data, want.numpy())


def test_compiled_index_ops_read_indices_of_every_call():
    """Indices passed in, and computed in the step (argsort), are inputs of the plan."""
    w = tg.tensor(RNG.standard_normal((5, 4)).astype(np.float32), requires_grad=True)

    def step(x, idx):
        x = tg.tensor(x)
        order = tg.argsort(x, 1)
        h = w * x
        g = tg.gather(h, 1, order)  # data-dependent indices
        s = tg.scatter_add(tg.zeros(5, 4), 1, order, h)
        r = tg.scatter_reduce(h, 0, tg.tensor(idx), h, "amax")
        p = tg.scatter_reduce(h, 0, tg.tensor(idx), h * 0.5, "prod")
        sel = tg.index_select(h, 0, tg.tensor(idx[:, 0]))
        put = tg.index_put(h, (tg.tensor(idx[:, 0]),), h[:1] * 2.0)
        mf = tg.masked_fill(h, x > 0, 0.25)
        loss = g[:, 0].sum() + (s * s).sum() + r.sum() + p.sum() + sel.sum() + put.sum() + mf.sum()
        w.grad = None
        loss.backward()
        return loss, order

    calls = [
        (RNG.standard_normal((5, 4)).astype(np.float32), RNG.integers(0, 5, (5, 4)))
        for _ in range(3)
    ]
    assert_compiled_equals_eager(step, [w], calls)


def test_masked_select_in_a_compiled_step_refuses_another_count():
    f = tg.compile(lambda x: tg.masked_select(tg.tensor(x), tg.tensor(x) > 0).sum())
    assert f(np.array([1.0, -1.0, 2.0])).item() == 3.0
    assert f(np.array([4.0, -1.0, 2.0])).item() == 6.0  # same count: replayed
    with pytest.raises(tg.ShapeError, match="selects 1 entries now and selected 2"):
        f(np.array([4.0, -1.0, -2.0]))


def test_errors_name_the_operation_and_shapes():
    x = tg.tensor(X)
    with pytest.raises(tg.IndexOutOfRange, match=r"gather: index 4 is out of range for axis 1"):
        tg.gather(x, 1, np.full((3, 2, 5), 4))
    with pytest.raises(tg.ShapeError, match=r"gather: index has 2 axes and the input 3"):
        tg.gather(x, 1, np.zeros((3, 2), np.int64))
    with pytest.raises(tg.ShapeError, match=r"index shape \(4, 2, 5\) is larger than"):
        tg.gather(x, 1, np.zeros((4, 2, 5), np.int64))
    with pytest.raises(tg.DTypeError, match="gather: index must hold integers"):
        tg.gather(x, 1, np.zeros((3, 2, 5)))
    with pytest.raises(tg.ShapeError, match="scatter: takes one axis"):
        tg.scatter(x, (0, 1), np.zeros((3, 4, 5), np.int64), 1.0)
    with pytest.raises(tg.IndexOutOfRange, match="index_select: index -1 is out of range"):
        tg.index_select(x, 0, np.array([-1]))
    with pytest.raises(tg.ShapeError, match=r"index_add: src has shape \(3, 4\)"):
        tg.index_add(x, 1, np.array([0, 1]), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="reduce must be one of"):
        tg.scatter_reduce(x, 0, np.zeros((1, 1, 1), np.int64), x, "max")
    with pytest.raises(tg.ShapeError, match=r"masked_fill: mask shape \(2,\) does not broadcast"):
        tg.masked_fill(x, np.array([True, False]), 1.0)
    with pytest.raises(tg.DTypeError, match="masked_fill: the mask must be bool"):
        tg.masked_fill(x, np.ones(5), 1.0)
    with pytest.raises(IndexError):
        tg.index_put(x, (np.array([7]),), 1.0)
