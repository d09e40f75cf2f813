"""User-defined operations (tg.custom_op): gradients, compiled == eager, local names, errors."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim


def _make_hypot():
    @tg.custom_op(broadcasting=True)
    def hypot(x, y):
        return np.hypot(x, y)

    @hypot.defvjp
    def _(g, out, x, y):
        return g * x / out, g * y / out

    return hypot


def test_gradients_match_finite_differences_with_broadcasting():
    hypot = _make_hypot()
    rng = np.random.default_rng(0)
    report = tg.gradcheck(
        lambda a, b: hypot(a, b).sum(), rng.uniform(1, 2, (3, 4)), rng.uniform(1, 2, (4,))
    )
    assert report.ok, str(report)


def test_attributes_reach_forward_and_rule_and_integer_inputs_get_no_gradient():
    @tg.custom_op
    def pick_scaled(x, idx, scale):
        return x[idx] * scale

    @pick_scaled.defvjp
    def _(g, out, x, idx, scale):
        gx = np.zeros_like(x)
        np.add.at(gx, idx, g * scale)
        return gx, None

    x = tg.tensor(np.arange(4.0), requires_grad=True)
    out = pick_scaled(x, np.array([1, 1, 3]), scale=2.0)
    np.testing.assert_array_equal(out.data, [2.0, 2.0, 6.0])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 4.0, 0.0, 2.0])


def test_redefining_in_a_loop_uses_the_new_definition():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    for k in (2.0, 3.0):  # a notebook cell run twice

        @tg.custom_op
        def scale(v, k=k):
            return v * k

        @scale.defvjp
        def _(g, out, v, k=k):
            return (g * k,)

        x.grad = None
        scale(x).sum().backward()
        np.testing.assert_array_equal(x.grad, [k, k])


def test_a_builtin_name_does_not_borrow_the_builtin_kernels():
    @tg.custom_op(name="add")
    def add(x, y):
        return x - y  # deliberately not an addition

    @add.defvjp
    def _(g, out, x, y):
        return g, -g

    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)

    def step(x):
        w.grad = None
        loss = add(w, tg.tensor(x)).sum()
        loss.backward()
        return loss

    f = tg.compile(step)
    x = np.full(3, 5.0, np.float32)
    for _ in range(3):
        assert f(x).item() == -12.0
        np.testing.assert_array_equal(w.grad, [1.0, 1.0, 1.0])
    assert add.name == "custom:add"


def test_compiled_training_with_a_custom_activation_equals_eager():
    @tg.custom_op
    def softsign(x):
        return x / (1 + np.abs(x))

    @softsign.defvjp
    def _(g, out, x):
        d = 1 + np.abs(x)
        return (g / (d * d),)

    def train(compiled):
        tg.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
        opt = optim.Adam(model.parameters(), lr=0.01)
        rng = np.random.default_rng(1)
        x = rng.standard_normal((16, 4)).astype(np.float32)
        y = rng.standard_normal((16, 1)).astype(np.float32)

        def step(x, y):
            loss = ((model[1](softsign(model[0](tg.tensor(x)))) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        f = tg.compile(step) if compiled else step
        losses = [f(x, y).item() for _ in range(5)]
        return losses, [p.data.copy() for p in model.parameters()]

    (le, pe), (lc, pc) = train(False), train(True)
    assert le == lc and lc[-1] < lc[0]
    for a, b in zip(pe, pc):
        np.testing.assert_array_equal(a, b)


def test_mistakes_are_named():
    x = tg.tensor(np.ones(3, np.float32), requires_grad=True)

    no_rule = tg.custom_op(lambda v: v * 2, name="double")
    with pytest.raises(tg.GraphError, match="custom:double: input 0 requires grad.*defvjp"):
        no_rule(x)
    assert no_rule(x.detach()).data.tolist() == [2.0, 2.0, 2.0]

    cases = [
        (lambda g, out, v: (g, g), "returned 2 gradient\\(s\\) for 1 input"),
        (lambda g, out, v: (g[:2],), r"shape \(2,\) for input 0 of shape \(3,\)"),
        (lambda g, out, v: (g.astype(np.float64),), "float64 gradient for input 0"),
        (lambda g, out, v: (None,), "returned None for input 0, which requires grad"),
    ]
    for rule, message in cases:
        op = tg.custom_op(lambda v: v * 2, vjp=rule, name="bad")
        with pytest.raises((ValueError, TypeError), match=message):
            op(x).sum().backward()

    returns_list = tg.custom_op(lambda v: [1.0], vjp=lambda g, out, v: (g,), name="lst")
    with pytest.raises(TypeError, match="custom:lst: the forward must return an ndarray"):
        returns_list(x)
