"""Regression tests for six correctness bugs a PyTorch user met (each failed before its fix)."""

import numpy as np
import pytest
import torch

import tapegrad as tg


# 1. integer tensors are lifted like integer arrays: never a silent float64
@pytest.mark.parametrize(
    "make",
    [
        lambda a, f: a * f,
        lambda a, f: f * a,
        lambda a, f: a / a,
        lambda a, f: tg.exp(a),
        lambda a, f: tg.cos(a),
        lambda a, f: a - 1.5,
        lambda a, f: a * np.float32(2),
    ],
)
def test_integer_tensors_take_the_float_dtype(make):
    a = tg.tensor(np.int32([1, 2]))
    f = tg.tensor(np.float32(2))
    assert make(a, f).dtype == np.float32
    assert make(tg.tensor(np.int64([1, 2])), tg.tensor(np.float64(2))).dtype in (
        np.float32,  # no float operand in that expression: float32
        np.float64,  # the float64 operand sets the dtype
    )
    assert (tg.tensor(np.int32([1, 2])) * tg.tensor(np.float64(2))).dtype == np.float64


def test_integer_comparisons_stay_exact():
    big = tg.tensor(np.int64([2**40, 2**40 + 1]))
    np.testing.assert_array_equal((big == np.int64(2**40)).data, [True, False])


# 2., 3. x ** y at the edges: PyTorch's values (d/dy is 0 at x == 0, y >= 0; log's elsewhere)
@pytest.mark.parametrize(
    "x, y", [(0.0, 0.0), (0.0, 2.0), (2.0, 3.0), (0.0, -1.0), (-2.0, 0.5), (-2.0, 2.0)]
)
def test_power_gradients_at_zero_and_negative_bases(x, y):
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ty = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    (tx**ty).backward()
    gx = tg.tensor(np.float64(x), requires_grad=True)
    gy = tg.tensor(np.float64(y), requires_grad=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        (gx**gy).backward()
    np.testing.assert_equal(gx.grad, tx.grad.item())  # nan == nan, inf == inf
    np.testing.assert_equal(gy.grad, ty.grad.item())


def test_power_gradient_compiled_equals_eager_at_zero():
    x = tg.tensor(np.array([0.0, 1.5, 0.0], np.float32), requires_grad=True)
    y = np.array([0.0, 2.0, -1.0], np.float32)

    def step(y):
        x.grad = None
        with np.errstate(divide="ignore", invalid="ignore"):
            (x ** tg.tensor(y)).sum().backward()
        return x.grad.copy()

    eager = step(y)
    f = tg.compile(lambda y: (x.__setattr__("grad", None), (x ** tg.tensor(y)).sum().backward()))
    with np.errstate(divide="ignore", invalid="ignore"):
        f(y)
        f(y)
    np.testing.assert_array_equal(x.grad, eager)
    assert eager[0] == 0.0 and np.isfinite(eager[1])


# 4. axis 0 / -1 of a 0-d tensor, as in PyTorch
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "logsumexp"])
@pytest.mark.parametrize("axis", [0, -1])
def test_reductions_of_a_0d_tensor_over_axis_0(name, axis):
    x = tg.tensor(np.float64(3.0), requires_grad=True)
    out = getattr(x, name)(axis=axis)
    assert out.shape == () and out.item() == 3.0
    out.backward()
    assert x.grad == 1.0


def test_squeeze_and_softmax_of_a_0d_tensor():
    x = tg.tensor(np.float32(3.0))
    assert x.squeeze(0).shape == () and x.squeeze(-1).item() == 3.0
    assert tg.softmax(x, axis=0).item() == 1.0 and tg.log_softmax(x, axis=0).item() == 0.0
    with pytest.raises(IndexError, match="sum: dimension 1 is out of range"):
        x.sum(axis=1)


# 5. out-of-range indexing is an IndexError, so tensors iterate and unpack
def test_tensors_iterate_and_unpack():
    t = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert [v.item() for v in t] == [1.0, 2.0, 3.0]
    a, b, c = t
    (a + 2 * b + 3 * c).backward()
    np.testing.assert_array_equal(t.grad, [1.0, 2.0, 3.0])
    with pytest.raises(IndexError, match=r"index 3 is out of bounds.*\(3,\)"):
        t[3]
    with pytest.raises(tg.ShapeError):
        t[3]
    with pytest.raises(TypeError, match="0-d"):
        iter(tg.tensor(1.0))


# 6. repeated entries in a tuple index accumulate their gradient
@pytest.mark.parametrize(
    "index, expected",
    [(((0, 0),), [2, 0, 0]), (((0, 2, 0),), [2, 0, 1]), ([0, 0, 1], [2, 1, 0])],
)
def test_repeated_tuple_index_accumulates(index, expected):
    x = tg.tensor(np.zeros(3, np.float64), requires_grad=True)
    x[index].sum().backward()
    np.testing.assert_array_equal(x.grad, expected)
    tx = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    tx[list(index[0] if isinstance(index, tuple) else index)].sum().backward()
    np.testing.assert_array_equal(x.grad, tx.grad.numpy())


def test_shape_errors_are_runtime_errors_and_clip_needs_a_bound():
    with pytest.raises(RuntimeError, match="matmul"):
        tg.tensor(np.ones((2, 3))) @ tg.tensor(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match="reshape"):
        tg.tensor(np.ones(6)).reshape((4, 2))
    with pytest.raises(ValueError, match="at least one of the bounds"):
        tg.clip(tg.tensor([1.0]), None, None)
