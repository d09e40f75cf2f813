"""Property tests: random shapes, broadcast pairs and small random expression graphs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

BINARY = {
    "add": tg.add,
    "sub": tg.sub,
    "mul": tg.mul,
    "div": tg.div,
    "maximum": tg.maximum,
    "minimum": tg.minimum,
}
NP_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@settings(max_examples=60, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
    op=st.sampled_from(sorted(BINARY)),
    seed=st.integers(0, 2**16),
)
def test_binary_broadcasting_gradients(shapes, op, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.uniform(0.5, 2.0, s) * rng.choice([-1, 1], s) for s in shapes.input_shapes)
    out = BINARY[op](tg.tensor(a), tg.tensor(b))
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.data, NP_BINARY[op](a, b))
    if op in ("maximum", "minimum"):  # keep finite differences off the kink
        b = np.where(np.abs(np.broadcast_to(a, shapes.result_shape).max() - b) < 0.1, b + 0.3, b)
    tg.gradcheck(lambda x, y: BINARY[op](x, y), a, b)


@settings(max_examples=30, deadline=None)
@given(
    shapes=st.tuples(
        hnp.array_shapes(min_dims=2, max_dims=2, max_side=4),
        hnp.array_shapes(min_dims=2, max_dims=2, max_side=4),
    ),
    seed=st.integers(0, 2**16),
)
def test_matmul_shape_errors_or_gradients(shapes, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
    if a.shape[1] != b.shape[0]:
        with pytest.raises(tg.ShapeError, match="matmul"):
            tg.tensor(a) @ tg.tensor(b)
    else:
        tg.gradcheck(lambda x, y: x @ y, a, b)


UNARY = [
    ("tanh", lambda x: x.tanh()),
    ("sigmoid", lambda x: x.sigmoid()),
    ("exp", lambda x: (x.tanh() * 0.3).exp()),  # bounded: chained ops must stay finite
    ("sin", lambda x: x.sin()),
    ("square", lambda x: x.tanh() * x.tanh()),  # squared, bounded
    ("softplus", lambda x: tg.softplus(x)),
    ("log1", lambda x: (x * x + 1.0).log()),
]
REDUCE = [
    ("sum", lambda x, ax: x.sum(axis=ax)),
    ("mean", lambda x, ax: x.mean(axis=ax)),
    ("lse", lambda x, ax: x.logsumexp(axis=ax)),
    ("softmax", lambda x, ax: x.softmax(axis=ax if ax is not None else -1)),
]


@st.composite
def expression(draw):
    """A random small graph: a chain of unary ops, a binary op with a broadcast partner, a
    reduction, indexing and a reshape, drawn from the building blocks above."""
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    steps = draw(st.lists(st.sampled_from(range(len(UNARY))), min_size=1, max_size=4))
    partner_shape = shape[draw(st.integers(0, len(shape) - 1)) :]
    binop = draw(st.sampled_from(["add", "mul", "sub"]))
    red = draw(st.sampled_from(range(len(REDUCE))))
    axis = draw(st.sampled_from([None, -1, 0]))
    index_last = draw(st.booleans())
    return shape, partner_shape, steps, binop, red, axis, index_last


@settings(max_examples=40, deadline=None)
@given(expr=expression(), seed=st.integers(0, 2**16))
def test_random_graphs_pass_gradcheck(expr, seed):
    shape, partner_shape, steps, binop, red, axis, index_last = expr
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=shape), rng.normal(size=partner_shape)

    def f(a, b):
        h = a
        for s in steps:
            h = UNARY[s][1](h)
        h = BINARY[binop](h, b) + h * a  # reuse: gradients must accumulate
        if index_last:
            h = h[..., ::-1]
        return REDUCE[red][1](h, axis)

    tg.gradcheck(f, x, y)
