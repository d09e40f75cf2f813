"""The erf and exact-GELU kernels against Python's ``math.erf`` (float64: the same bits;
float32: within one unit in the last place of the correctly rounded value), the threaded loops
against the serial ones, GELU against PyTorch on a large array; ReLU's two kernels and the
large add against NumPy bit for bit (NaN, -0 and infinities included); the LayerNorm kernels
against their references and PyTorch."""

import math

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.autodiff.kernels.cpu import norm, special
from tapegrad.nn import functional as F


def _grid():
    # dense over the range that matters, the tails and the special values
    x = np.concatenate([np.linspace(-16, 16, 200_001), [0.0, -0.0, 1e-30, -1e-30, 40.0, -40.0]])
    return x


def test_erf_float64_is_pythons_math_erf():
    x = _grid()
    out = np.empty_like(x)
    special.erf(x, out)
    np.testing.assert_array_equal(out, [math.erf(v) for v in x])


def _ulps(got, want64):
    """|got - want| in float32 ulps of the correctly rounded ``want``; results below the
    smallest normal number count against its magnitude (they may flush to zero)."""
    tiny = np.finfo(np.float32).tiny
    spacing = np.spacing(np.abs(want64.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want64) / np.where(np.abs(want64) < tiny, tiny, spacing)


def test_gelu_float32_within_one_ulp_of_correctly_rounded():
    x64 = _grid()
    x = x64.astype(np.float32)
    xw = x.astype(np.float64)  # the float32 inputs, exactly
    # Phi through erfc: 1 + erf(x / sqrt(2)) cancels to 0 in float64 below x = -8.3, where
    # the float32 kernel still resolves x * Phi(x) (it works with the tail Phi(-|x|) directly)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in xw])
    want = xw * cdf
    g = np.linspace(-2, 2, x.size).astype(np.float32)
    want_grad = g * (cdf + xw * np.exp(-0.5 * xw * xw) / math.sqrt(2 * math.pi))
    out, grad = np.empty_like(x), np.empty_like(x)
    special.gelu_forward(x, out)
    special.gelu_backward(g, x, grad)
    assert _ulps(out, want).max() <= 1.0
    assert _ulps(grad, want_grad).max() <= 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threaded_loops_equal_serial(dtype):
    x = np.random.default_rng(0).normal(size=(1 << 17) + 3).astype(dtype) * 4
    g = np.random.default_rng(1).normal(size=x.size).astype(dtype)
    kind = "gelu32" if dtype == np.float32 else "gelu"
    for name, args in [
        ("erf", (x,)),
        (kind, (x,)),
        (kind + "_grad", (g, x)),
        ("relu", (x,)),
        ("relu_grad", (g, x)),
        ("add", (g, x)),
    ]:
        serial, threaded = np.empty_like(x), np.empty_like(x)
        special._SERIAL[name](*args, serial, 0, x.size)
        special._PARALLEL[name](*args, threaded)
        np.testing.assert_array_equal(serial, threaded, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_and_add_kernels_are_numpys_bits(dtype):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1 << 17) + 5).astype(dtype)
    g = rng.normal(size=x.size).astype(dtype)
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]
    x[: len(specials)], g[3 : 3 + len(specials)] = specials, specials
    got = np.empty_like(x)
    special.relu_forward(x, got)
    assert got.tobytes() == np.maximum(x, 0).tobytes()  # NaN kept, -0 gives +0
    special.relu_backward(g, x, got)
    assert got.tobytes() == np.where(x > 0, g, 0).astype(dtype).tobytes()  # x NaN: 0
    special.add_arrays(g, x, got)
    assert got.tobytes() == (g + x).tobytes()
    # the primitives through them, eager and compiled alike
    t = tg.tensor(x[:1000].copy(), requires_grad=True)
    tg.relu(t).sum().backward()
    np.testing.assert_array_equal(t.grad.data, (x[:1000] > 0).astype(dtype))


@pytest.mark.parametrize("size", [1000, (1 << 17) + 5])  # the serial and the threaded loops
def test_relu_and_add_kernels_in_place_give_the_same_bits(size):
    # an operand that is the output itself (a staged broadcast gradient) takes the in-place
    # loops; an aliased second operand of ReLU's VJP (the mask) keeps the general loop
    rng = np.random.default_rng(3)
    x, g = rng.normal(size=size).astype(np.float32), rng.normal(size=size).astype(np.float32)
    x[:4], g[4:8] = [np.nan, np.inf, -0.0, 0.0], [np.nan, -np.inf, -0.0, 0.0]
    calls = [
        (special.relu_backward, (g, x), [0, 1]),
        (special.relu_forward, (x,), [0]),
        (special.add_arrays, (g, x), [0, 1]),
        (special.add_arrays, (x, x), [0]),  # both operands the output
    ]
    for kernel, args, aliased in calls:
        want = np.empty_like(x)
        kernel(*args, want)
        for k in aliased:
            out = args[k].copy()
            kernel(*[out if a is args[k] else a for a in args], out)
            assert out.tobytes() == want.tobytes(), (kernel.__name__, k)


# float64 atol: 1 + erf(x / sqrt(2)) cancels for negative x in both libraries, which round it in
# different orders (differences of a few 1e-16 there, as large relative to a tiny result);
# float32: test_math_ops' tolerances (PyTorch's float32 backward rounds Phi(x) + x phi(x) in
# float32, ~1e-6 off near x = -0.75 where the sum cancels; these kernels sum in float64)
@pytest.mark.parametrize("dtype,rtol,atol", [(np.float64, 1e-14, 1e-15), (np.float32, 2e-5, 2e-6)])
def test_gelu_matches_torch_on_a_large_array(dtype, rtol, atol):
    x0 = (np.random.default_rng(2).normal(size=(256, 1024)) * 3).astype(dtype)
    w = np.random.default_rng(3).normal(size=x0.shape).astype(dtype)
    x = tg.tensor(x0, requires_grad=True)
    y = F.gelu(x)
    (y * tg.tensor(w)).sum().backward()
    tx = torch.tensor(x0, requires_grad=True)
    ty = torch.nn.functional.gelu(tx)
    ty.backward(torch.tensor(w))
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=rtol, atol=atol)


def test_gelu_on_strided_and_integer_input():
    x = np.arange(-6, 6, dtype=np.float64).reshape(3, 4)
    want = x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x.ravel()]).reshape(3, 4)) / 2
    np.testing.assert_allclose(F.gelu(tg.tensor(x.T)).data, want.T, rtol=1e-15)
    np.testing.assert_allclose(tg.erf(tg.tensor(x[:, ::2])).data, np.vectorize(math.erf)(x[:, ::2]))
    assert F.gelu(tg.tensor(np.arange(3))).dtype.kind == "f"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,d", [(3, 5), (300, 128), (257, 7)])
def test_layer_norm_kernels_match_reference_and_threads(dtype, rows, d):
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(rows, d)) * 3 + 1).astype(dtype)
    w, b = rng.normal(size=d).astype(dtype), rng.normal(size=d).astype(dtype)
    g = rng.normal(size=(rows, d)).astype(dtype)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    outs = {}
    for name, fwd in [
        ("reference", norm.layer_norm_forward_reference),
        ("serial", norm._forward_serial),
        ("threaded", norm._forward_parallel),
    ]:
        y, mean, rstd = np.empty_like(x), np.empty(rows, dtype), np.empty(rows, dtype)
        fwd(x, w, b, 1e-5, y, mean, rstd)
        outs[name] = (y, mean, rstd)
    for name in ("serial", "threaded"):
        for got, want in zip(outs[name], outs["reference"]):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    for got, want in zip(outs["serial"], outs["threaded"]):
        np.testing.assert_array_equal(got, want)
    _, mean, rstd = outs["serial"]
    grads = {}
    for name in ("serial", "threaded"):
        gx = np.empty_like(x)
        (norm._backward_serial if name == "serial" else norm._backward_parallel)(
            g, x, w, mean, rstd, gx
        )
        grads[name] = gx
    np.testing.assert_array_equal(grads["serial"], grads["threaded"])
    want = [np.empty_like(x), np.empty(d, dtype), np.empty(d, dtype)]
    norm.layer_norm_backward_reference(g, x, w, mean, rstd, *want)
    got = [np.empty_like(x), np.empty(d, dtype), np.empty(d, dtype)]
    norm.layer_norm_backward(g, x, w, mean, rstd, *got)
    for a, c in zip(got, want):
        np.testing.assert_allclose(a, c, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("shape", [(4, 6, 16), (2, 3)])
def test_layer_norm_matches_torch(shape):
    rng = np.random.default_rng(5)
    x0, w0, b0 = rng.normal(size=shape), rng.normal(size=shape[-1]), rng.normal(size=shape[-1])
    cot = rng.normal(size=shape)
    x, w, b = (tg.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    y = F.layer_norm(x, (shape[-1],), w, b)
    (y * tg.tensor(cot)).sum().backward()
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    ty = torch.nn.functional.layer_norm(tx, (shape[-1],), tw, tb)
    ty.backward(torch.tensor(cot))
    for got, want in [(y.data, ty), (x.grad, tx.grad), (w.grad, tw.grad), (b.grad, tb.grad)]:
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_backward_kernel_matches_reference_and_threads(dtype):
    rng = np.random.default_rng(6)
    g = rng.normal(size=(300, 37)).astype(dtype)
    y = rng.uniform(0.01, 1, size=(300, 37)).astype(dtype)
    serial, threaded, want = (np.empty_like(y) for _ in range(3))
    norm._softmax_backward_serial(g, y, serial)
    norm._softmax_backward_parallel(g, y, threaded)
    norm.softmax_backward_reference(g, y, want)
    np.testing.assert_array_equal(serial, threaded)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(serial, want, rtol=tol, atol=tol)


def _bit_ulps(a, b):
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32))


@pytest.mark.parametrize("d", [1, 5, 8, 37, 64])
def test_softmax_forward_kernel_within_two_ulps_and_threads(d):
    """float32 rows (each e rounded once, the product by the sum's reciprocal once more) against
    the float64 reference, with and without a mask repeating every P rows; the serial and
    threaded loops give the same bits."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((300, d)) * 4).astype(np.float32)
    keep = rng.uniform(size=(3, d)) > 0.3
    keep[:, 0] = True
    for mask in (None, keep):
        k = np.ones((1, d), np.bool_) if mask is None else mask
        serial, threaded, want = (np.empty_like(x) for _ in range(3))
        norm._softmax_serial(x, k, k.shape[0], serial)
        norm._softmax_parallel(x, k, k.shape[0], threaded)
        norm.softmax_forward_reference(x, mask, want)
        np.testing.assert_array_equal(serial, threaded)
        assert _bit_ulps(serial, want.astype(np.float32)).max() <= 2
        got = np.empty_like(x)
        norm.softmax_forward(x, mask, got)
        np.testing.assert_array_equal(got, serial)


def test_softmax_forward_kernel_rows_with_nan_inf_or_nothing_kept_are_nan():
    """As softmax(where(keep, x, -inf)) composed: a kept NaN, a kept +inf, or a row whose kept
    entries are all -inf (or none kept) gives a NaN row; a kept -inf beside finite entries is 0;
    a masked NaN or inf changes nothing."""
    x = np.zeros((6, 4), np.float32)
    keep = np.ones((6, 4), np.bool_)
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2, :] = -np.inf
    keep[3, :] = False
    x[4, 3] = -np.inf
    x[5, 0], keep[5, 0] = np.nan, False
    got = np.empty_like(x)
    norm.softmax_forward(x, keep, got)
    assert np.isnan(got[:4]).all()
    np.testing.assert_array_equal(got[4], np.float32([1, 1, 1, 0]) / np.float32(3))
    np.testing.assert_array_equal(got[5], np.float32([0, 1, 1, 1]) / np.float32(3))


def test_masked_softmax_is_the_composed_form_and_its_gradient():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 5, 5))
    keep = np.tril(np.ones((5, 5), np.bool_))
    for dtype, tol in ((np.float64, 1e-13), (np.float32, 1e-6)):
        a = tg.tensor(x.astype(dtype), requires_grad=True)
        b = tg.tensor(x.astype(dtype), requires_grad=True)
        ya = tg.ops.masked_softmax(a, keep)
        yb = tg.ops.softmax(tg.ops.where(keep, b, -np.inf), axis=-1)
        np.testing.assert_allclose(ya.data, yb.data, rtol=tol, atol=tol)
        cot = rng.standard_normal(x.shape).astype(dtype)
        ya.backward(tg.tensor(cot))
        yb.backward(tg.tensor(cot))
        np.testing.assert_allclose(a.grad, b.grad, rtol=10 * tol, atol=10 * tol)
        assert np.all(a.grad[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0)
