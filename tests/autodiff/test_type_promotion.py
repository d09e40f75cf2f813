"""Integer and bool tensors and type promotion, against PyTorch: a table of operations on
operand pairs (dimensioned tensors of every dtype, 0-d tensors, Python numbers) checks the
result's dtype and values; mixed-float graphs send each input its gradient in its own dtype
(compiled == eager, bit for bit); integer arithmetic is exact beyond 2**24 and 2**53; and the
examples of issue 26, verbatim."""

import operator

import numpy as np
import pytest
import torch

import tapegrad as tg

DIM_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
X = [-7, 2, 3, 5, 0, 9]  # values of the left operands (in each dtype: -7 wraps in uint8)
Y = [3, 2, -4, 1, 5, 2]  # right operands: no zero (integer division), shifts take |y|


def _dim(dtype, values):
    return np.array(values).astype(dtype)


def _operands(values):
    """(name, tapegrad operand, torch operand): dimensioned tensors of every dtype, 0-d
    tensors, Python numbers."""
    out = []
    for d in DIM_DTYPES:
        a = _dim(d, values)
        out.append((d, tg.tensor(a), torch.from_numpy(a.copy())))
    for d, v in [("int64", values[1]), ("float64", values[1] + 0.5), ("float32", -1.5)]:
        a = np.array(v, dtype=d)
        out.append((f"0-d {d}", tg.tensor(a), torch.from_numpy(a.copy())))
    a = np.array(True)
    out.append(("0-d bool", tg.tensor(a), torch.from_numpy(a.copy())))
    for v in (values[1], float(values[1]) + 0.25, True):
        out.append((repr(v), v, v))
    return out


BINARY = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "==": operator.eq,
    "<": operator.lt,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
}


def _check(what, fn, args, torch_fn, torch_args):
    """``fn(*args)`` against ``torch_fn(*torch_args)``: both raise, or the same dtype and
    values."""
    try:
        w = torch_fn(*torch_args)
    except (RuntimeError, TypeError, ValueError, ZeroDivisionError):
        with pytest.raises((TypeError, ValueError, ZeroDivisionError)):
            fn(*args)
        return 0
    g = fn(*args)
    w = w.numpy()
    assert g.dtype == w.dtype, f"{what}: tapegrad {g.dtype}, torch {w.dtype}"
    if w.dtype.kind == "f":
        rtol = {2: 2e-3, 4: 2e-6, 8: 1e-14}[w.dtype.itemsize]
        np.testing.assert_allclose(g.data, w, rtol=rtol, atol=0, err_msg=what)
    else:
        np.testing.assert_array_equal(g.data, w, err_msg=what)
    return 1


@pytest.mark.parametrize("op", list(BINARY))
def test_operators_promote_and_compute_as_torch_does(op):
    fn = BINARY[op]
    y_values = [abs(v) for v in Y] if op in ("<<", ">>", "**") else Y
    compared = 0
    for na, a, ta in _operands(X):
        for nb, b, tb in _operands(y_values):
            if not isinstance(a, tg.Tensor) and not isinstance(b, tg.Tensor):
                continue
            if op == "**" and b is True:
                continue  # torch's shortcut for x ** 1 returns a bool tensor, its pow refuses bool
            with np.errstate(all="ignore"):
                compared += _check(f"{na} {op} {nb}", fn, (a, b), fn, (ta, tb))
    assert compared > 80  # most pairs compute (torch refuses some: bool - x, float & y, ...)


FUNCTIONS = {
    "maximum": (tg.maximum, torch.maximum),
    "minimum": (tg.minimum, torch.minimum),
    "fmod": (tg.fmod, torch.fmod),
    "remainder": (tg.remainder, torch.remainder),
    "div trunc": (
        lambda a, b: tg.div(a, b, rounding_mode="trunc"),
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    ),
    "div floor": (
        lambda a, b: tg.div(a, b, rounding_mode="floor"),
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
    ),
    "where": (
        lambda a, b: tg.where(tg.tensor(np.array([1, 0, 1, 0, 0, 1], bool)), a, b),
        lambda a, b: torch.where(torch.tensor([1, 0, 1, 0, 0, 1], dtype=torch.bool), a, b),
    ),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_functions_promote_and_compute_as_torch_does(name):
    """Tensor pairs (torch's maximum/fmod take no Python number first), and where with numbers."""
    fn, tfn = FUNCTIONS[name]
    compared = 0
    for na, a, ta in _operands(X):
        for nb, b, tb in _operands(Y):
            if not isinstance(b, tg.Tensor) and name != "where":
                continue
            if not isinstance(a, tg.Tensor) and name not in ("where",):
                continue
            with np.errstate(all="ignore"):
                compared += _check(f"{name}({na}, {nb})", fn, (a, b), tfn, (ta, tb))
    assert compared > 100


@pytest.mark.parametrize(
    "name, fn",
    [
        ("neg", operator.neg),
        ("abs", abs),
        ("~", operator.invert),
        ("exp", lambda t: t.exp()),
        ("sqrt", lambda t: t.abs().sqrt()),
        ("floor", lambda t: t.floor() if isinstance(t, torch.Tensor) else tg.floor(t)),
    ],
)
def test_unary_operations_keep_integers_or_go_to_float_as_torch(name, fn):
    for na, a, ta in _operands(X):
        if isinstance(a, tg.Tensor):
            with np.errstate(over="ignore"):  # exp(9) in float16 is inf, as in torch
                _check(f"{name}({na})", fn, (a,), fn, (ta,))


def test_the_rule_itself():
    from tapegrad.autodiff.promotion import result_type

    cases = [
        ([np.ones(2, np.float32), np.ones(2)], np.float64),
        ([np.ones(2, np.int32), np.ones(2, np.int64)], np.int64),
        ([np.ones(2, np.uint8), np.ones(2, np.int8)], np.int16),
        ([np.ones(2, np.float32), np.array(1.0)], np.float32),  # 0-d weaker
        ([np.ones(2, np.int32), np.array(1.0)], np.float64),  # ... unless a higher category
        ([np.ones(2, np.int8), 1000], np.int8),  # Python int: weak
        ([np.ones(2, np.int64), 2.5], np.float32),  # Python float with integers: default float
        ([np.ones(2, np.float16), 2.5], np.float16),
        ([np.ones(2, np.int64), np.ones(2, np.float16)], np.float16),
        ([np.ones(2, bool), 1], np.int64),
        ([1, 3], np.int64),
        ([1, 3.0], np.float32),
    ]
    for operands, want in cases:
        assert result_type(operands) == want, operands
    with pytest.raises(tg.DTypeError, match="no integer dtype holds both uint64 and int8"):
        result_type([np.ones(2, np.uint64), np.ones(2, np.int8)])


def test_mixed_float_graph_gradients_come_back_in_each_inputs_dtype():
    rng = np.random.default_rng(0)
    a0, b0, c0 = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((3, 4))
    a = tg.tensor(a0.astype(np.float32), requires_grad=True)
    b = tg.tensor(b0, requires_grad=True)
    c = tg.tensor(c0.astype(np.float16), requires_grad=True)
    ta = torch.tensor(a0.astype(np.float32), requires_grad=True)
    tb = torch.tensor(b0, requires_grad=True)
    tc = torch.tensor(c0.astype(np.float16), requires_grad=True)

    def f(a, b, c, lib):
        return (lib.tanh(a * b + c) * a + (a.exp() / (c * c + 1)) + b).sum()

    y, ty = f(a, b, c, tg), f(ta, tb, tc, torch)
    assert y.dtype == np.float64 and ty.dtype == torch.float64
    y.backward()
    ty.backward()
    for t, tt in ((a, ta), (b, tb), (c, tc)):
        assert t.grad.dtype == tt.grad.numpy().dtype == t.dtype
        rtol = 2e-3 if t.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(t.grad, tt.grad.numpy(), rtol=rtol)


def test_mixed_dtype_step_compiled_equals_eager_bit_for_bit():
    rng = np.random.default_rng(1)
    w = tg.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    s = tg.tensor(rng.standard_normal(3), requires_grad=True)  # float64
    x = rng.standard_normal((5, 4)).astype(np.float32)
    counts = np.arange(15).reshape(5, 3)

    def step(x, counts):
        w.grad = s.grad = None
        h = (x @ w) * s + counts // 2 - (counts % 4) * 0.5  # float32 -> float64, ints exact
        loss = (h * h).mean()
        loss.backward()
        return loss

    eager = [step(tg.tensor(x), tg.tensor(counts)).item(), w.grad.copy(), s.grad.copy()]
    assert eager[1].dtype == np.float32 and eager[2].dtype == np.float64
    compiled = tg.compile(step)
    for _ in range(3):
        got = [compiled(x, counts).item(), w.grad.copy(), s.grad.copy()]
        assert got[0] == eager[0]
        np.testing.assert_array_equal(got[1], eager[1])
        np.testing.assert_array_equal(got[2], eager[2])
        assert got[1].dtype == np.float32


def test_integer_ops_compiled_equal_eager():
    def f(i, j):
        return (i * 3 + j) // 2, (i << 2) ^ j, tg.where(i > j, i % 5, -j), tg.maximum(i, j) ** 2

    i = np.array([2**40 + 1, -5, 7, 2**25 + 3])
    j = np.array([3, 2**33, -9, 1])
    eager = [o.data for o in f(tg.tensor(i), tg.tensor(j))]
    compiled = tg.compile(f)
    for _ in range(2):
        for a, b in zip(compiled(i, j), eager):
            assert a.dtype == np.int64
            np.testing.assert_array_equal(a.data, b)


def test_integer_arithmetic_is_exact_beyond_2_to_the_24_and_53():
    big = [2**24 + 1, 2**53 + 1, -(2**60) + 7, 3]
    other = [3, 7, 2**31 - 1, -2]
    x, y = tg.tensor(np.array(big)), tg.tensor(np.array(other))
    pairs = [
        (x + y, [a + b for a, b in zip(big, other)]),
        (x - 1, [a - 1 for a in big]),
        (x * 2, [a * 2 for a in big]),
        (x // y, [a // b for a, b in zip(big, other)]),
        (x % y, [a % b for a, b in zip(big, other)]),
        (tg.maximum(x, y), [max(a, b) for a, b in zip(big, other)]),
        (tg.where(x > 10, x, 0), [a if a > 10 else 0 for a in big]),
        (-x, [-a for a in big]),
        (abs(x), [abs(a) for a in big]),
        (x >> 1, [a >> 1 for a in big]),
        (x & 0xFF, [a & 0xFF for a in big]),
    ]
    for got, want in pairs:
        assert got.dtype == np.int64
        assert got.data.tolist() == want, (got, want)
    trunc = tg.div(x, y, rounding_mode="trunc").data.tolist()
    assert trunc[1] == (2**53 + 1) // 7 and trunc[2] == -((2**60 - 7) // (2**31 - 1))
    assert (x == 2**53 + 1).data.tolist() == [False, True, False, False]
    assert (x == 2**53).data.tolist() == [False] * 4  # compared as integers, not as floats


def test_issue_26_examples_verbatim():
    assert (tg.tensor(np.array([16777217])) + 0).tolist() == [16777217]
    lengths = tg.tensor(np.array([3, 1, 2]))
    h = tg.tensor(np.arange(12.0).reshape(3, 4))
    last = h[tg.arange(3), lengths - 1]  # lengths - 1 stays integer: an index
    assert (lengths - 1).dtype == np.int64 and last.tolist() == [2.0, 4.0, 9.0]
    i = tg.tensor(np.array([7, -7, 12]))
    assert (i // 2).tolist() == [3, -4, 6]
    assert tg.div(i, 2, rounding_mode="trunc").tolist() == [3, -3, 6]
    assert tg.div(i, 2, rounding_mode="floor").tolist() == [3, -4, 6]
    assert i.div(2).dtype == np.float32 and (i / 2).tolist() == [3.5, -3.5, 6.0]
    assert (i & 3).tolist() == [3, 1, 0] and (i | 8).tolist() == [15, -7, 12]
    assert (i ^ 1).tolist() == [6, -8, 13] and (~i).tolist() == [-8, 6, -13]
    assert (i << 2).tolist() == [28, -28, 48] and (i >> 1).tolist() == [3, -4, 6]
    mask = i > 0
    assert tg.where(mask, 1, 3).dtype == np.int64 and tg.where(mask, 1, 3).tolist() == [1, 3, 1]
    for got in (tg.maximum(i, 0), tg.fmod(i, 5), i % 5, i**2):
        assert got.dtype == np.int64
    assert tg.fmod(i, 5).tolist() == [2, -2, 2] and (i % 5).tolist() == [2, 3, 2]
    # a float64 dataset feeding a float32 model: elementwise operations promote as in PyTorch
    features = tg.tensor(np.array([[1.0, 2.0], [3.0, 5.0]]))  # float64, from an .npz
    mean = tg.tensor(np.array([2.0, 3.5], np.float32))
    assert ((features - mean) / 2).dtype == np.float64
    # ... and matmul refuses mixed floats, as PyTorch's does
    lin = tg.nn.Linear(2, 1)
    with pytest.raises(tg.DTypeError, match="matmul: operands have dtypes"):
        lin(features)
    with pytest.raises(RuntimeError):
        torch.nn.Linear(2, 1)(torch.from_numpy(features.data))
    assert lin(features.float()).dtype == np.float32


def test_in_place_updates_cast_within_a_category_and_refuse_across():
    i = tg.tensor(np.arange(3))
    with pytest.raises(tg.DTypeError, match="add_: the result has dtype float32 and cannot be"):
        i += 1.5
    with pytest.raises(RuntimeError):
        ti = torch.arange(3)
        ti += 1.5
    i += 2
    assert i.dtype == np.int64 and i.tolist() == [2, 3, 4]
    f = tg.tensor(np.ones(2, np.float32))
    f += tg.tensor(np.full(2, 1 / 3))  # float64 into float32: cast, as torch does
    tf = torch.ones(2)
    tf += torch.full((2,), 1 / 3, dtype=torch.float64)
    assert f.dtype == np.float32 and f.tolist() == tf.tolist()


def test_only_float_tensors_take_gradients_and_cat_promotes():
    with pytest.raises(TypeError, match="only float tensors can require grad"):
        tg.tensor(np.arange(3), requires_grad=True)
    h = tg.tensor(np.ones(2, np.float16), requires_grad=True)
    (h * 3).sum().backward()
    assert h.grad.dtype == np.float16 and h.grad.tolist() == [3.0, 3.0]
    a = tg.tensor(np.ones(2, np.float32), requires_grad=True)
    out = tg.cat([a, tg.tensor(np.arange(2)), tg.tensor(np.zeros(1))])
    want = torch.cat([torch.ones(2), torch.arange(2), torch.zeros(1, dtype=torch.float64)])
    assert out.dtype == want.numpy().dtype and out.tolist() == want.tolist()
    out.sum().backward()
    assert a.grad.dtype == np.float32
    assert tg.stack([tg.tensor(np.arange(2, dtype=np.int32)), tg.tensor(np.arange(2))]).dtype == (
        np.int64
    )


def test_python_ints_wrap_into_small_integer_dtypes_as_in_torch():
    u, tu = tg.tensor(np.array([0, 5, 200], np.uint8)), torch.tensor([0, 5, 200], dtype=torch.uint8)
    for got, want in ((u - 1, tu - 1), (u + 300, tu + 300), (u * 2, tu * 2), (7 - u, 7 - tu)):
        assert got.dtype == np.uint8 and got.tolist() == want.tolist()
