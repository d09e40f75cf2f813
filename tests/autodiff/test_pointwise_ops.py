"""lerp, copysign, fmod, remainder, logaddexp (with gradients), isnan/isinf/isfinite/isclose and
the logical operations (bool, no gradient) against PyTorch; compiled == eager; errors."""

import numpy as np
import pytest
import torch
from ops_vs_torch import assert_compiled_equals_eager, compare_with_torch

import tapegrad as tg

RNG = np.random.default_rng(7)
A = RNG.uniform(-3, 3, (3, 4))
B = RNG.uniform(-3, 3, (4,))


def _off_whole(x, y):
    """x with x / y kept away from whole numbers (where fmod/remainder jump)."""
    q = x / y
    return (np.floor(q) + np.clip(q - np.floor(q), 0.15, 0.85)) * y


@pytest.mark.parametrize(
    "tg_fn, torch_fn, args",
    [
        (tg.logaddexp, torch.logaddexp, [A, B]),
        (lambda a, b: a.logaddexp(b), lambda a, b: a.logaddexp(b), [A * 100, B]),
        (tg.copysign, torch.copysign, [A, B]),
        (lambda a, b: a.copysign(b), lambda a, b: a.copysign(b), [A, -np.abs(A)]),
        (tg.fmod, torch.fmod, [_off_whole(A, B), B]),
        (tg.remainder, torch.remainder, [_off_whole(A, B), B]),
        (lambda a, b: a % b, lambda a, b: a % b, [_off_whole(A, B), B]),
        (lambda a, b: a.fmod(b), lambda a, b: a.fmod(b), [_off_whole(A, 1.3), np.float64(1.3)]),
        (tg.lerp, torch.lerp, [A, B, RNG.uniform(-1, 2, (3, 4))]),
        (lambda a, b: a.lerp(b, 0.3), lambda a, b: a.lerp(b, 0.3), [A, B]),
        (lambda a, b: tg.lerp(a, b, 0.8), lambda a, b: torch.lerp(a, b, 0.8), [A, B]),
    ],
)
def test_differentiable_pointwise_ops_match_torch(tg_fn, torch_fn, args):
    # PyTorch's vectorised lerp uses fused multiply-adds: 1 ulp apart
    compare_with_torch(tg_fn, torch_fn, args, rtol=1e-14, atol=1e-14)


def test_lerp_ends_are_exact_and_copysign_has_zero_gradient_at_zero():
    a, b = tg.tensor(np.array([0.1, 3.7])), tg.tensor(np.array([-2.3, 1e-8]))
    np.testing.assert_array_equal(tg.lerp(a, b, 0.0).data, a.data)
    np.testing.assert_array_equal(tg.lerp(a, b, 1.0).data, b.data)
    x = tg.tensor(np.array([0.0, -2.0, 3.0]), requires_grad=True)
    tg.copysign(x, np.array([-1.0, -0.0, 1.0])).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 1.0, 1.0])  # -0.0 has a sign too


def test_special_value_tests_and_isclose_match_torch():
    x = np.array([[1.0, np.nan, -np.inf, 0.0], [np.inf, -1e-300, np.nan, 5.0]])
    for name in ("isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(
            getattr(tg, name)(tg.tensor(x)).data, getattr(torch, name)(torch.tensor(x))
        )
        np.testing.assert_array_equal(
            getattr(tg.tensor(x), name)().data, getattr(torch, name)(torch.tensor(x))
        )
    y = x + np.array([1e-9, 0.0, 0.0, 1e-3])
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 2e-3}):
        np.testing.assert_array_equal(
            tg.isclose(tg.tensor(x), tg.tensor(y), **kw).data,
            torch.isclose(torch.tensor(x), torch.tensor(y), **kw).numpy(),
        )
    ints = tg.tensor(np.array([1, 2]))
    assert not tg.isnan(ints).data.any() and tg.isfinite(ints).data.all()


def test_logical_ops_match_torch_and_masks_combine_with_operators():
    p, q = RNG.uniform(size=(3, 4)) > 0.5, RNG.uniform(size=(4,)) > 0.5
    nums = np.array([0.0, 1.5, -2.0, 0.0])
    for name in ("logical_and", "logical_or", "logical_xor"):
        want = getattr(torch, name)(torch.tensor(p), torch.tensor(q)).numpy()
        np.testing.assert_array_equal(getattr(tg, name)(tg.tensor(p), tg.tensor(q)).data, want)
        got = getattr(tg.tensor(nums), name)(tg.tensor(q)).data
        np.testing.assert_array_equal(
            got, getattr(torch, name)(torch.tensor(nums), torch.tensor(q))
        )
    np.testing.assert_array_equal(
        tg.logical_not(tg.tensor(nums)).data, torch.logical_not(torch.tensor(nums))
    )
    tp, tq = tg.tensor(p), tg.tensor(q)
    np.testing.assert_array_equal((tp & tq).data, p & q)
    np.testing.assert_array_equal((tp | q).data, p | q)
    np.testing.assert_array_equal((q ^ tp).data, p ^ q)
    np.testing.assert_array_equal((~tp).data, ~p)
    with pytest.raises(tg.DTypeError, match="bitwise_and: needs integer or bool tensors"):
        tg.tensor(A) & tp  # a float operand: PyTorch raises too


def test_compiled_pointwise_ops_equal_eager():
    w = tg.tensor(RNG.standard_normal((3, 4)).astype(np.float32), requires_grad=True)

    def step(x):
        h = tg.tensor(x) * w
        mask = tg.isfinite(h) & (h > 0)
        loss = (
            tg.logaddexp(h, h * 0.5).sum()
            + tg.copysign(h, tg.tensor(x) - 0.5).sum()
            + tg.fmod(h, 0.7).sum()
            + (h % 0.9).sum()
            + tg.lerp(h, h * h, tg.sigmoid(h)).sum()
            + tg.where(mask, h, 0.0).sum()
        )
        w.grad = None
        loss.backward()
        return loss, mask

    calls = [(RNG.standard_normal((3, 4)).astype(np.float32),) for _ in range(3)]
    assert_compiled_equals_eager(step, [w], calls)


def test_isclose_refuses_negative_tolerances():
    with pytest.raises(ValueError, match="isclose: rtol and atol must be >= 0"):
        tg.isclose(tg.tensor(A), tg.tensor(A), rtol=-1.0)
    with pytest.raises(tg.ShapeError, match="copysign"):
        tg.copysign(tg.tensor(A), tg.tensor(np.ones(3)))
