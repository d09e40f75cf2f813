"""grad, value_and_grad, vjp and gradcheck as a user calls them."""

import numpy as np
import pytest

import tapegrad as tg


def test_grad_of_least_squares_matches_closed_form():
    rng = np.random.default_rng(0)
    X, y, w0 = rng.normal(size=(20, 3)), rng.normal(size=20), rng.normal(size=3)

    def f(w):
        return ((X @ w - y) ** 2).mean()

    g = tg.grad(f)(w0)
    assert isinstance(g, np.ndarray) and g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * X.T @ (X @ w0 - y) / 20, rtol=1e-12)
    v, g2 = tg.value_and_grad(f)(w0)
    np.testing.assert_allclose(v, np.mean((X @ w0 - y) ** 2))
    np.testing.assert_array_equal(g, g2)


def test_argnums_and_tensor_inputs():
    def f(a, b, c):
        return (a * b + c).sum()

    a, b, c = np.ones(2), np.full(2, 3.0), np.zeros(2)
    ga, gc = tg.grad(f, argnums=(0, 2))(a, b, c)
    np.testing.assert_allclose(ga, [3, 3])
    np.testing.assert_allclose(gc, [1, 1])
    np.testing.assert_allclose(tg.grad(f, argnums=-2)(tg.tensor(a), b, c), [1, 1])
    with pytest.raises(ValueError, match="argnums 5"):
        tg.grad(f, argnums=5)(a, b, c)


def test_grad_of_unused_input_is_zero_and_errors():
    assert np.all(
        tg.grad(lambda a, b: (a * 2).sum(), argnums=1)(tg.tensor(np.ones(2)), np.ones(3)) == 0
    )
    with pytest.raises(tg.GraphError, match="scalar"):
        tg.grad(lambda a: a * 2)(np.ones(2))
    with pytest.raises(TypeError, match="Tensor"):
        tg.grad(lambda a: 3.0)(np.ones(2))
    with pytest.raises(TypeError, match="float"):
        tg.grad(lambda a: a.sum())(np.arange(3))


def test_vjp_can_be_called_twice():
    x = np.array([0.5, -1.0])
    out, pullback = tg.vjp(lambda a: a.tanh() * 2, x)
    np.testing.assert_allclose(out, 2 * np.tanh(x))
    (g1,) = pullback(np.ones(2))
    (g2,) = pullback(np.array([1.0, 0.0]))
    np.testing.assert_allclose(g1, 2 * (1 - np.tanh(x) ** 2))
    np.testing.assert_allclose(g2, [g1[0], 0.0])


def test_gradcheck_reports_the_worst_entry():
    bad = tg.autodiff.primitives.registry.Primitive(
        "bad_square", np.square, (lambda g, out, x: g * x,)
    )  # wrong on purpose: misses the 2
    with pytest.raises(tg.GradcheckError, match=r"worst at input 0, index \(\d,\)"):
        tg.gradcheck(lambda x: bad(x), np.array([1.0, 2.0, 3.0]))
    report = tg.gradcheck(lambda x: (x * x).sum(), np.array([1.0, 2.0]))
    assert report.ok and report.checked == 2 and report.max_error < 1e-8
