"""Tensor API, the backward pass's contract, and the errors bad input gets."""

import gc
import weakref

import numpy as np
import pytest

import tapegrad as tg


def test_dtype_rules():
    assert tg.tensor([1.0, 2.0]).dtype == np.float32  # Python data -> float32
    assert tg.tensor(np.ones(2)).dtype == np.float64  # arrays keep their dtype
    assert tg.tensor(np.arange(3)).dtype == np.int64
    x = tg.tensor(np.ones(2, np.float32))
    assert (x * 2).dtype == np.float32 and (2.5 + x).dtype == np.float32
    assert (x + np.arange(2)).dtype == np.float32  # int arrays take the float dtype
    assert (x + np.ones(2)).dtype == np.float64  # elementwise operations promote
    with pytest.raises(tg.DTypeError, match="matmul: operands .* does not promote"):
        tg.tensor(np.ones((2, 2), np.float32)) @ tg.tensor(np.ones((2, 2)))
    y = x.astype(np.float64) * np.ones(2)
    assert y.dtype == np.float64
    with pytest.raises(TypeError, match="only float tensors"):
        tg.tensor(np.arange(3), requires_grad=True)


def test_shape_errors_name_op_and_shapes():
    a, b = tg.tensor(np.ones((2, 3))), tg.tensor(np.ones((4,)))
    with pytest.raises(tg.ShapeError, match=r"add.*\(2, 3\).*\(4,\)"):
        a + b
    with pytest.raises(tg.ShapeError, match=r"matmul: shapes \(2, 3\) and \(4, 2\) do not fit"):
        a @ tg.tensor(np.ones((4, 2)))
    with pytest.raises(tg.ShapeError, match=r"reshape: cannot reshape shape \(2, 3\)"):
        a.reshape(4, 2)
    with pytest.raises(tg.ShapeError, match="permute"):
        a.permute(0, 0)


def test_backward_errors():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(tg.GraphError, match="single-element"):
        (x * 2).backward()
    with pytest.raises(tg.GraphError, match="does not require grad"):
        tg.tensor([1.0]).sum().backward()
    y = (x * x).sum()
    y.backward()
    with pytest.raises(tg.GraphError, match="retain_graph=True"):
        y.backward()
    with pytest.raises(tg.ShapeError, match="gradient has shape"):
        (x * 2).backward(np.ones(3, np.float32))


def test_retain_graph_accumulates_and_grad_is_owned():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad, 2 * 2 * np.array([1.0, 2.0]))
    # add's VJP passes the same array to both inputs: leaves must not share it
    a, b = tg.tensor([1.0], requires_grad=True), tg.tensor([1.0], requires_grad=True)
    (a + b).sum().backward()
    a.grad += 1
    assert b.grad[0] == 1.0


def test_shared_subexpression_accumulates():
    x = tg.tensor(np.array([0.3, -0.7]), requires_grad=True)
    h = x.tanh()
    (h * h + h).sum().backward()
    t = np.tanh(x.data)
    np.testing.assert_allclose(x.grad, (2 * t + 1) * (1 - t**2))


def test_no_grad_and_detach():
    x = tg.tensor([1.0], requires_grad=True)
    with tg.no_grad():
        y = x * 2
    assert not y.requires_grad and y.is_leaf
    assert tg.is_grad_enabled()
    z = (x.detach() * 2 + x).sum()
    z.backward()
    assert x.grad[0] == 1.0

    @tg.no_grad()
    def f(t):
        return t * 3

    assert not f(x).requires_grad


def test_comparisons_are_not_differentiable():
    x = tg.tensor([1.0, -1.0], requires_grad=True)
    m = x > 0
    assert m.dtype == np.bool_ and not m.requires_grad
    (tg.where(m, x, x * 3)).sum().backward()
    np.testing.assert_allclose(x.grad, [1.0, 3.0])


def test_indexing_scatter_adds_repeats():
    x = tg.tensor(np.arange(5.0), requires_grad=True)
    x[np.array([0, 0, 3])].sum().backward()
    np.testing.assert_allclose(x.grad, [2, 0, 0, 1, 0])
    x.grad = None
    x[x > 2].sum().backward()
    np.testing.assert_allclose(x.grad, [0, 0, 0, 1, 1])
    x.grad = None
    x[tg.tensor(np.array([4, 4]))].sum().backward()
    np.testing.assert_allclose(x.grad, [0, 0, 0, 0, 2])
    x.grad = None
    x[1:4:2].sum().backward()
    np.testing.assert_allclose(x.grad, [0, 1, 0, 1, 0])


def test_retain_grad_on_intermediate():
    x = tg.tensor([2.0], requires_grad=True)
    h = (x * 3).retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad, [12.0])
    np.testing.assert_allclose(x.grad, [36.0])


def test_ten_thousand_step_recurrence():
    w = tg.tensor(np.array(0.5), requires_grad=True)
    h = tg.tensor(np.array(0.1))
    for _ in range(10_000):
        h = (h * w + 0.3).tanh()
    h.backward()
    # compare with a hand-written reverse sweep of the same recurrence
    hs = [0.1]
    for _ in range(10_000):
        hs.append(np.tanh(hs[-1] * 0.5 + 0.3))
    gh, gw = 1.0, 0.0
    for k in range(10_000, 0, -1):
        d = gh * (1 - hs[k] ** 2)
        gw += d * hs[k - 1]
        gh = d * 0.5
    np.testing.assert_allclose(w.grad, gw, rtol=1e-10)


def test_graph_freed_after_backward_and_with_last_reference():
    x = tg.tensor(np.ones(1000), requires_grad=True)
    h = x * 2
    probe = weakref.ref(h)
    loss = (h * h).sum()
    del h
    assert probe() is not None  # the graph keeps h alive until backward
    loss.backward()
    gc.disable()  # reference counting alone must free the graph: no cycles
    try:
        assert probe() is None
        h2 = x * 3
        probe2 = weakref.ref(h2)
        loss2 = (h2 + 1).sum()
        del h2, loss2
        assert probe2() is None
    finally:
        gc.enable()


def test_deep_graph_frees_without_recursion_error():
    x = tg.tensor(np.array(1.0), requires_grad=True)
    h = x
    for _ in range(100_000):
        h = h * 1.0
    del h  # deallocating a 100k-long chain must not overflow the C stack


def test_methods_and_repr():
    x = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    assert x.T.shape == (3, 2) and x.flatten().shape == (6,)
    assert x.reshape(3, 2).shape == (3, 2) and x.reshape((6, 1)).shape == (6, 1)
    assert x.unsqueeze(0).shape == (1, 2, 3) and x.unsqueeze(0).squeeze().shape == (2, 3)
    assert x.sum().item() == 15.0 and float(x.max()) == 5.0
    assert "requires_grad=True" in repr(x) and "op=mul" in repr(x * 2)
    assert len(x) == 2 and x.ndim == 2 and x.size == 6
