"""Higher derivatives: gradients of gradients, hvp, hessian, jacobian and jvp against PyTorch in
float64, create_graph, and compiled steps that differentiate a gradient."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import nn, optim

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3))
B = RNG.standard_normal(3)


def _expressions(lib):
    """The same expressions written with tapegrad (lib=tg) or torch: each maps x (4,) to a
    scalar, and together they pass through every twice-differentiable operation family."""
    t = (lambda a: tg.tensor(a)) if lib is tg else (lambda a: torch.tensor(a))
    w, b = t(W), t(B)
    sm = (lambda z: tg.softmax(z, axis=-1)) if lib is tg else (lambda z: torch.softmax(z, -1))
    lse = (lambda z: z.logsumexp(axis=0)) if lib is tg else (lambda z: z.logsumexp(0))
    return [
        lambda x: (lib.tanh(x @ w + b) ** 2).sum(),
        lambda x: (lib.sigmoid(x) * lib.exp(-x * x)).sum() + lse(x),
        lambda x: (sm(x @ w) * (x[:3] ** 3)).sum() / (1 + (x * x).sum()),
        lambda x: lib.sqrt(1 + x * x).mean() + lib.log(2 + lib.sin(x)).sum() * lib.cos(x[0]),
        lambda x: (
            (lib.maximum(x, x[[3, 2, 1, 0]] * 0.5) * x).sum()
            + (lib.stack([x, x * 2]).reshape((-1,))[1:5] * x).sum()
        ),
        lambda x: ((x.reshape((2, 2)) @ x.reshape((2, 2)).T) ** 2).sum() + lib.abs(x).sum() * x[1],
    ]


TG_EXPRS, TORCH_EXPRS = _expressions(tg), _expressions(torch)
IDS = [f"expr{k}" for k in range(len(TG_EXPRS))]


def _x():
    return np.random.default_rng(3).uniform(-1.0, 1.0, 4) + np.array([0.1, 0.2, -0.3, 0.05])


@pytest.mark.parametrize("k", range(len(TG_EXPRS)), ids=IDS)
def test_hvp_hessian_jacobian_and_jvp_match_torch(k):
    f, tf = TG_EXPRS[k], TORCH_EXPRS[k]
    x = _x()
    v = np.random.default_rng(4).standard_normal(4)
    tx, tv = torch.tensor(x), torch.tensor(v)
    _, t_hvp = torch.autograd.functional.hvp(tf, tx, tv)
    np.testing.assert_allclose(tg.hvp(f, x, v), t_hvp.numpy(), rtol=1e-10, atol=1e-12)
    t_hess = torch.autograd.functional.hessian(tf, tx)
    np.testing.assert_allclose(tg.hessian(f)(x), t_hess.numpy(), rtol=1e-10, atol=1e-12)
    # the gradient map x -> grad f(x) is a vector function: its Jacobian is the Hessian, and
    # forward mode through it is the hvp again
    grad_f = tg.grad(f)
    np.testing.assert_allclose(
        tg.jacobian(lambda x: grad_f(x))(x), t_hess.numpy(), rtol=1e-10, atol=1e-12
    )
    value, tangent = tg.jvp(lambda x: tg.grad(f)(x), (x,), (v,))
    _, t_jvp = torch.func.jvp(torch.func.grad(tf), (tx,), (tv,))
    np.testing.assert_allclose(tangent, t_jvp.numpy(), rtol=1e-10, atol=1e-12)


def test_nested_grad_is_the_second_and_third_derivative():
    x = np.float64(0.7)
    f = lambda x: tg.sin(x) * x**3  # noqa: E731
    d2 = 6 * x * np.sin(x) + 6 * x**2 * np.cos(x) - x**3 * np.sin(x)
    assert tg.grad(tg.grad(f))(x) == pytest.approx(d2, rel=1e-12)
    d3 = 6 * np.sin(x) + 18 * x * np.cos(x) - 9 * x**2 * np.sin(x) - x**3 * np.cos(x)
    assert tg.grad(tg.grad(tg.grad(f)))(x) == pytest.approx(d3, rel=1e-12)


def test_backward_create_graph_gives_a_differentiable_gradient_like_torch():
    x0 = _x()
    x = tg.tensor(x0, requires_grad=True)
    y = (tg.tanh(x @ tg.tensor(W)) ** 2).sum()
    y.backward(create_graph=True)
    np.testing.assert_array_equal(x.grad, x.grad_tensor.data)
    penalty = (x.grad_tensor**2).sum()
    x.grad = None
    penalty.backward()

    tx = torch.tensor(x0, requires_grad=True)
    ty = (torch.tanh(tx @ torch.tensor(W)) ** 2).sum()
    (tgrad,) = torch.autograd.grad(ty, tx, create_graph=True)
    (tgrad**2).sum().backward()
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_gradients_of_several_outputs_with_weights():
    x = tg.tensor(_x(), requires_grad=True)
    a, b = x * 2, (x**2).sum()
    ga, gb = np.arange(4.0), np.array(3.0)
    (g,) = tg.gradients([a, b], [x], [ga, gb])
    np.testing.assert_allclose(g.data, 2 * ga + 3 * 2 * x.data)
    assert x.grad is None  # gradients() leaves .grad alone


def test_gradients_mistakes_are_named():
    x = tg.tensor(_x(), requires_grad=True)
    z = tg.tensor(_x(), requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(tg.GraphError, match=r"do not depend on input 1 \(shape \(4,\)\)"):
        tg.gradients(y, [x, z], retain_graph=True)
    (gx, gz) = tg.gradients(y, [x, z], allow_unused=True)
    np.testing.assert_array_equal(gz.data, np.zeros(4))
    with pytest.raises(ValueError, match="2 grad_outputs for 1 outputs"):
        tg.gradients([y], [x], [None, None])


def test_first_order_only_primitives_say_so():
    lstm = nn.LSTM(3, 4, batch_first=True)
    x = tg.tensor(np.ones((2, 5, 3), np.float32))
    loss = lstm(x)[0].sum()
    with pytest.raises(tg.GraphError, match="lstm_scan: its gradient cannot be differentiated"):
        tg.gradients(loss, list(lstm.parameters()), create_graph=True)


@pytest.mark.parametrize("groups,dilation,stride", [(1, 1, 1), (2, 2, 1), (1, 1, 2)])
def test_convolution_hessian_vector_products_match_torch(groups, dilation, stride):
    # convolutions are twice differentiable: conv, conv_transpose and conv_weight are each
    # other's VJPs
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 4 // groups, 3, 2)) * 0.3
    x0, v = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((2, 4, 7, 6))

    def f(x):
        y = nn.functional.conv2d(
            x, tg.tensor(w), stride=stride, padding=1, dilation=dilation, groups=groups
        )
        z = nn.functional.conv_transpose2d(
            tg.tanh(y), tg.tensor(w), stride=stride, padding=1, dilation=dilation, groups=groups
        )
        return (tg.tanh(y) ** 2).sum() + (z * x[:, :, : z.shape[2], : z.shape[3]]).sum()

    def tf(x):
        F = torch.nn.functional
        y = F.conv2d(x, torch.tensor(w), stride=stride, padding=1, dilation=dilation, groups=groups)
        z = F.conv_transpose2d(
            torch.tanh(y),
            torch.tensor(w),
            stride=stride,
            padding=1,
            dilation=dilation,
            groups=groups,
        )
        return (torch.tanh(y) ** 2).sum() + (z * x[:, :, : z.shape[2], : z.shape[3]]).sum()

    tx = torch.tensor(x0, requires_grad=True)
    (g,) = torch.autograd.grad(tf(tx), tx, create_graph=True)
    (thvp,) = torch.autograd.grad((g * torch.tensor(v)).sum(), tx)
    np.testing.assert_allclose(tg.hvp(f, x0, v), thvp.numpy(), rtol=1e-9, atol=1e-10)


def test_compiled_gradient_penalty_step_equals_eager():
    """A WGAN-GP-style step: the loss includes the norm of a gradient with respect to the
    input, so the backward pass runs through a gradient (double backward), compiled."""

    def train(compiled):
        tg.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
        opt = optim.SGD(model.parameters(), lr=0.05)
        rng = np.random.default_rng(2)
        xs = rng.standard_normal((16, 3)).astype(np.float32)

        def penalty_step(x):
            out = model(x)
            (g,) = tg.gradients(out.sum(), [x], create_graph=True)
            loss = out.mean() + ((g * g).sum(axis=1) - 1.0).mean() ** 2
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        leaf = tg.tensor(xs, requires_grad=True)
        f = tg.compile(lambda: penalty_step(leaf)) if compiled else (lambda: penalty_step(leaf))
        losses = [f().item() for _ in range(4)]
        return losses, [p.data.copy() for p in model.parameters()]

    (le, pe), (lc, pc) = train(False), train(True)
    assert le == lc
    for a, b in zip(pe, pc):
        np.testing.assert_array_equal(a, b)


def test_backward_create_graph_in_a_compiled_step_equals_eager():
    """backward(create_graph=True) inside a compiled step: the leaves' grad_tensor feeds a
    penalty whose backward runs through the gradient; compiled equals eager bit for bit."""

    def train(compiled):
        tg.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
        params = list(model.parameters())
        opt = optim.SGD(params, lr=0.05)
        xs = np.random.default_rng(2).standard_normal((16, 3)).astype(np.float32)

        def step(x):
            out = model(tg.tensor(x)).mean()
            opt.zero_grad()
            out.backward(create_graph=True)
            penalty = tg.stack([(p.grad_tensor**2).sum() for p in params]).sum()
            opt.zero_grad()
            penalty.backward()
            opt.step()
            return out, penalty

        f = tg.compile(step) if compiled else step
        losses = [[t.item() for t in f(xs)] for _ in range(4)]
        return losses, [p.data.copy() for p in params]

    (le, pe), (lc, pc) = train(False), train(True)
    assert le == lc
    for a, b in zip(pe, pc):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("k", range(len(TG_EXPRS)), ids=IDS)
def test_hvp_hessian_jacobian_and_jvp_compiled_equal_eager(k):
    """The transformations inside a compiled step record their passes: each replay computes
    them for its own input, as eager mode does."""
    f = TG_EXPRS[k]
    v = np.random.default_rng(4).standard_normal(4)
    transforms = {
        "hvp": (lambda x: tg.hvp(f, x, v)),
        "hessian": (lambda x: tg.hessian(f)(x)),
        "jacobian": (lambda x: tg.jacobian(tg.grad(f))(x)),
        "jvp": (lambda x: tg.jvp(tg.grad(f), (x,), (v,))[1]),
    }
    for name, fn in transforms.items():
        compiled = tg.compile(lambda x, fn=fn: tg.tensor(fn(x)))
        for seed in range(3):  # the trace, then two replays with other inputs
            x = _x() + seed
            np.testing.assert_array_equal(compiled(x).data, fn(x), err_msg=name)


def test_hessians_of_the_fused_losses_and_embedding_match_torch():
    rng = np.random.default_rng(5)
    x, ids = rng.standard_normal((20, 3)), rng.integers(0, 4, 20)
    probs = rng.uniform(0.1, 1, (20, 4))
    probs /= probs.sum(axis=1, keepdims=True)
    t01 = rng.uniform(0, 1, (20, 1))
    tok = rng.integers(0, 5, (6, 2))
    w0 = rng.standard_normal(12) * 0.3
    F = torch.nn.functional
    cases = [
        (
            lambda w: tg.softmax_cross_entropy(tg.tensor(x) @ w.reshape((3, 4)), ids),
            lambda w: F.cross_entropy(torch.tensor(x) @ w.reshape(3, 4), torch.tensor(ids)),
        ),
        (
            lambda w: tg.softmax_cross_entropy(tg.tensor(x) @ w.reshape((3, 4)), probs, "sum"),
            lambda w: F.cross_entropy(
                torch.tensor(x) @ w.reshape(3, 4), torch.tensor(probs), reduction="sum"
            ),
        ),
        (
            lambda w: tg.bce_with_logits(tg.tensor(x) @ w[:3].reshape((3, 1)), t01),
            lambda w: F.binary_cross_entropy_with_logits(
                torch.tensor(x) @ w[:3].reshape(3, 1), torch.tensor(t01)
            ),
        ),
        (
            lambda w: (tg.tanh(tg.embedding(w[:10].reshape((5, 2)), tok)) ** 2).sum(),
            lambda w: (torch.tanh(F.embedding(torch.tensor(tok), w[:10].reshape(5, 2))) ** 2).sum(),
        ),
    ]
    for f, tf in cases:
        want = torch.autograd.functional.hessian(tf, torch.tensor(w0)).numpy()
        np.testing.assert_allclose(tg.hessian(f)(w0), want, rtol=1e-9, atol=1e-12)


M6 = np.random.default_rng(5).standard_normal((6, 6)) * 0.3

# (tapegrad, torch) pairs of twice-differentiable operations on a (2, 6) value, for random graphs
_UNARY = [
    (lambda t: tg.tanh(t), torch.tanh),
    (lambda t: tg.sigmoid(t), torch.sigmoid),
    (lambda t: tg.exp(t * 0.3), lambda t: torch.exp(t * 0.3)),
    (lambda t: tg.sin(t) * t, lambda t: torch.sin(t) * t),
    (lambda t: t * t * 0.5, lambda t: t * t * 0.5),
    (lambda t: tg.softplus(t), torch.nn.functional.softplus),
    (lambda t: tg.softmax(t, axis=1), lambda t: torch.softmax(t, 1)),
    (lambda t: t @ tg.tensor(M6), lambda t: t @ torch.tensor(M6)),
    (
        lambda t: tg.concatenate([tg.max_pool1d(t.reshape((2, 1, 6)), 2).reshape((2, 3))] * 2, 1),
        lambda t: torch.cat([torch.max_pool1d(t.reshape(2, 1, 6), 2).reshape(2, 3)] * 2, 1),
    ),
]
_BINARY = [
    (lambda a, b: a * b, lambda a, b: a * b),
    (lambda a, b: a + b * 0.5, lambda a, b: a + b * 0.5),
    (lambda a, b: a / (1.5 + b * b), lambda a, b: a / (1.5 + b * b)),
]


@settings(max_examples=30, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, len(_UNARY) - 1), st.integers(0, len(_BINARY) - 1)),
        min_size=1,
        max_size=4,
    ),
    seed=st.integers(0, 10_000),
)
def test_random_graphs_hvp_and_jvp_match_torch(ops, seed):
    """Random compositions of twice-differentiable operations: the Hessian-vector product and
    the jvp of the gradient map against torch.autograd.grad(create_graph=True) and
    torch.func.jvp, in float64."""

    def build(lib_unary, lib_binary, x):
        h = x.reshape((2, 6))
        for u, b in ops:
            h = lib_binary[b](lib_unary[u](h), h)
        return (h * h).sum()

    def f(x):
        return build([u for u, _ in _UNARY], [b for b, _ in _BINARY], x)

    def tf(x):
        return build([u for _, u in _UNARY], [b for _, b in _BINARY], x)

    rng = np.random.default_rng(seed)
    x, v = rng.uniform(-1, 1, 12), rng.standard_normal(12)
    tx, tv = torch.tensor(x, requires_grad=True), torch.tensor(v)
    (tgrad,) = torch.autograd.grad(tf(tx), tx, create_graph=True)
    (thvp,) = torch.autograd.grad((tgrad * tv).sum(), tx)
    np.testing.assert_allclose(tg.hvp(f, x, v), thvp.numpy(), rtol=1e-9, atol=1e-10)
    _, tjvp = torch.func.jvp(torch.func.grad(tf), (torch.tensor(x),), (tv,))
    _, jv = tg.jvp(tg.grad(f), (x,), (v,))
    np.testing.assert_allclose(jv, tjvp.numpy(), rtol=1e-9, atol=1e-10)
