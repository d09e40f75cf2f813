"""What ``apply`` records as a node's parents, through its inline branches for one and two inputs
and its general path alike: each input that needs a gradient and has a rule, ``None`` for the
others, no node when none does; and ``Primitive.diff_all``, which picks the branch, agrees with
the rules of every registered primitive."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.core.primitive import Primitive
from tapegrad.autodiff.primitives import REGISTRY


def _rule(g, out, *inputs):
    return g


def _prim(rules, **kw):
    """An unregistered primitive adding its inputs, with ``rules`` (one per input, or fewer)."""
    return Primitive("add_example", lambda *xs: sum(xs[1:], xs[0]), rules, **kw)


def test_diff_all_agrees_with_the_rules_of_every_primitive():
    for prim in REGISTRY.values():
        mask = prim.diff_mask
        want = None if mask is None else (len(mask) if all(mask) else -1)
        assert prim.diff_all == want, prim.name


@pytest.mark.parametrize("broadcasting", [True, False])
@pytest.mark.parametrize(
    "rules, grads, want",
    [
        ((_rule,), (True,), (0,)),
        ((_rule,), (False,), None),
        ((_rule, _rule), (True, True), (0, 1)),
        ((_rule, _rule), (False, True), (None, 1)),
        ((_rule, _rule), (True, False), (0, None)),
        ((_rule, _rule), (False, False), None),
        ((_rule, None), (True, True), (0, None)),  # no rule for the second input
        ((None, _rule), (True, False), None),
        ((_rule,), (True, True), (0,)),  # fewer rules than inputs: the rest are constants
        ((_rule, _rule, _rule), (False, True, True), (None, 1, 2)),
    ],
)
def test_a_node_records_the_inputs_that_need_a_gradient_and_have_a_rule(
    rules, grads, want, broadcasting
):
    prim = _prim(rules, broadcasting=broadcasting)
    xs = [
        tg.tensor(np.full(3, float(i + 1), np.float32), requires_grad=r)
        for i, r in enumerate(grads)
    ]
    out = prim(*xs)
    np.testing.assert_array_equal(out.data, sum(range(1, len(xs) + 1)) * np.ones(3))
    if want is None:
        assert out._node is None and not out.requires_grad
        return
    got = tuple(None if p is None else [x is p for x in xs].index(True) for p in out._node.parents)
    assert got == want
    assert out.requires_grad


def test_a_number_and_a_tensor_record_the_tensor_only():
    x = tg.tensor(np.arange(3, dtype=np.float32), requires_grad=True)
    y = 2.0 * x
    assert y._node.parents[0] is None and y._node.parents[1] is x
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, np.full(3, 2, np.float32))


def test_no_grad_records_nothing():
    x = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    with tg.no_grad():
        y = tg.sin(x) * x
    assert y._node is None and not y.requires_grad
