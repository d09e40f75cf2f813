"""tinygrad's test_ops cases that once differed from PyTorch: each checked against PyTorch."""

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F

torch.set_grad_enabled(True)


def _both(a, requires_grad=False):
    """The same values as a tapegrad and a torch tensor."""
    a = np.asarray(a)
    return tg.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _same(ours, theirs, exact=True):
    ours = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    theirs = theirs.detach().numpy()
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    if exact:
        np.testing.assert_array_equal(ours, theirs)
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


# -- 1. edge semantics ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sigmoid_at_extreme_inputs(dtype):
    x, xt = _both(np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], dtype), requires_grad=True)
    y, yt = tg.sigmoid(x), torch.sigmoid(xt)
    _same(y, yt, exact=False)
    y.sum().backward()
    yt.sum().backward()
    assert np.isfinite(x.grad).all()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-6, atol=1e-30)


def test_pow_gradient_at_zero_and_negative_bases():
    base = [0.0, 0.0, 0.0, -2.0, -2.0, -2.0, 3.0, 0.0]
    expo = [0.0, 2.0, -1.0, 2.0, 0.5, 3.0, 0.5, 0.5]
    b, bt = _both(base, requires_grad=True)
    e, et = _both(expo, requires_grad=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = b**e
        (y * 1.0).sum().backward()
    (bt**et).sum().backward()
    _same(y, bt**et)
    np.testing.assert_array_equal(b.grad, bt.grad.numpy())
    np.testing.assert_array_equal(e.grad, et.grad.numpy())


def test_squeeze_of_a_dimension_that_is_not_one_is_a_no_op():
    x, xt = _both(np.zeros((2, 1, 3)))
    for d in (0, 1, 2, -1, (0, 1)):
        assert x.squeeze(d).shape == tuple(xt.squeeze(d).shape)
        assert tg.squeeze(x, d).shape == tuple(torch.squeeze(xt, d).shape)


@pytest.mark.parametrize(
    "op, call",
    [
        ("sum", lambda m, x: m.sum(x, 2)),
        ("var", lambda m, x: m.var(x, 3)),
        ("squeeze", lambda m, x: m.squeeze(x, -3)),
        ("softmax", lambda m, x: m.nn.functional.softmax(x, dim=2)),
        ("cat", lambda m, x: m.cat([x, x], 2)),
        ("flatten", lambda m, x: m.flatten(x, 2)),
    ],
)
def test_out_of_range_dims_raise_index_error_naming_the_op(op, call):
    x, xt = _both(np.ones((2, 3)))
    with pytest.raises(IndexError):
        call(torch, xt)
    with pytest.raises(IndexError, match=f"{op}: dimension"):
        call(tg, x)


def test_clamp_without_bounds_raises_runtime_error():
    x, xt = _both(np.ones(3))
    with pytest.raises(RuntimeError):
        torch.clamp(xt)
    with pytest.raises(RuntimeError, match="at least one"):
        x.clip(None, None)
    with pytest.raises(RuntimeError, match="at least one"):
        tg.clamp(x)
    with pytest.raises(RuntimeError, match="at least one"):
        x.clamp()


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("args", [(0, 10, 4), (-5, 5, 7), (3, -4, 5), (2, 2, 1)])
def test_linspace_with_integer_dtype(dtype, args):
    if dtype == "uint8" and min(args[:2]) < 0:
        return
    _same(
        tg.linspace(*args, dtype=getattr(tg, dtype)),
        torch.linspace(*args, dtype=getattr(torch, dtype)),
    )


@pytest.mark.parametrize("pad", [(-1, 1, 0, -1), (-2, -1), (1, -2, -1, 2), (0, 0, -1, 0, 1, 1)])
def test_negative_padding_crops(pad):
    a = np.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    x, xt = _both(a, requires_grad=True)
    y, yt = F.pad(x, pad, value=7.0), torch.nn.functional.pad(xt, pad, value=7.0)
    _same(y, yt)
    w = np.arange(y.size, dtype=float).reshape(y.shape)
    (y * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


@pytest.mark.parametrize(
    "index",
    [
        (slice(None), [0, 1], slice(None), [0, 1]),
        (1, slice(None), slice(1, 4, 2), [0, 2], slice(0, 2)),
        (slice(None), [0, 1], [1, 2]),
        (0, [1, 0], 2),
        ([1, 0], 2, [3, 1]),
        (Ellipsis, 1, [0, 2]),
        (1, None, slice(None), [2, 1, 0]),
        (1, slice(None), np.arange(20).reshape(4, 5) % 3 == 0),
        ([0, 1], slice(None), 2, np.arange(5) % 3 == 0),
    ],
)
def test_advanced_index_dimensions_go_where_pytorch_puts_them(index):
    a = np.arange(2 * 3 * 4 * 5 * 3.0).reshape(2, 3, 4, 5, 3)
    x, xt = _both(a, requires_grad=True)
    t_index = tuple(torch.tensor(p) if isinstance(p, np.ndarray) else p for p in index)
    y, yt = x[index], xt[t_index]
    _same(y, yt)
    w = np.arange(y.size, dtype=float).reshape(y.shape)
    (y * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())
