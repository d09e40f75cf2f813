"""The neural-network primitives against torch.nn.functional (float32 values and gradients), the
compiled kernels against their NumPy references, and every documented bad-input error."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tapegrad as tg
from tapegrad.autodiff.kernels.cpu import pool, scatter

RTOL = ATOL = 1e-5


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(a, b, what):
    """Elementwise rtol, plus an atol on the array's scale: a weight gradient sums thousands of
    float32 products, and where those cancel to a small entry its absolute rounding error is
    that of the terms (e.g. 4e-5 on an entry of 0.9 among entries of 80), in torch too."""
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs torch {b.shape}"
    assert a.dtype == np.float32, f"{what}: dtype {a.dtype}"
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL * scale, err_msg=what)


def run_both(tg_fn, torch_fn, arrays, diff, seed=0):
    """Run both with the same float32 inputs and the same random cotangent; compare the outputs
    and the gradients of every input whose index is in ``diff``."""
    tins = [tg.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    pins = [
        torch.tensor(a, requires_grad=i in diff) if a.dtype.kind == "f" else torch.from_numpy(a)
        for i, a in enumerate(arrays)
    ]
    out = tg_fn(*tins)
    ref = torch_fn(*pins)
    close(out.data, ref, "forward")
    cot = np.random.default_rng(seed).standard_normal(out.shape).astype(np.float32)
    out.backward(cot)
    ref.backward(torch.from_numpy(cot))
    for i in diff:
        close(tins[i].grad, pins[i].grad, f"gradient of input {i}")
    return out


# -- convolution -----------------------------------------------------------------------------
CONV1D = [  # x, weight, bias, stride, padding
    ((4, 3, 11), (5, 3, 3), True, 1, 0),
    ((1, 2, 9), (3, 2, 4), False, 2, 1),
    ((2, 5, 7), (2, 5, 7), True, 1, 0),
    ((3, 4, 10), (6, 4, 3), True, 3, 2),
    ((2, 50, 13), (8, 50, 3), True, 1, 1),
]


@pytest.mark.parametrize("xs,ws,bias,stride,padding", CONV1D)
def test_conv1d_matches_torch(xs, ws, bias, stride, padding):
    rng = np.random.default_rng(1)
    arrays = [f32(rng, *xs), f32(rng, *ws)] + ([f32(rng, ws[0])] if bias else [])
    run_both(
        lambda *a: tg.conv1d(*a[:2], a[2] if bias else None, stride=stride, padding=padding),
        lambda *a: F.conv1d(*a[:2], a[2] if bias else None, stride=stride, padding=padding),
        arrays,
        diff=range(len(arrays)),
    )


CONV2D = [
    ((2, 3, 8, 8), (4, 3, 3, 3), True, 1, 0),
    ((1, 2, 7, 9), (3, 2, 3, 3), False, 2, 1),
    ((3, 1, 7, 9), (2, 1, 2, 4), True, (2, 1), (1, 2)),
    ((2, 4, 5, 6), (5, 4, 5, 6), True, 1, 0),
    ((4, 1, 28, 28), (6, 1, 3, 3), False, 1, 0),
]


@pytest.mark.parametrize("xs,ws,bias,stride,padding", CONV2D)
def test_conv2d_matches_torch(xs, ws, bias, stride, padding):
    rng = np.random.default_rng(2)
    arrays = [f32(rng, *xs), f32(rng, *ws)] + ([f32(rng, ws[0])] if bias else [])
    run_both(
        lambda *a: tg.conv2d(*a[:2], a[2] if bias else None, stride=stride, padding=padding),
        lambda *a: F.conv2d(*a[:2], a[2] if bias else None, stride=stride, padding=padding),
        arrays,
        diff=range(len(arrays)),
    )


def test_conv_weight_only_gradient_and_no_grad_input():
    # The first layer of a CNN: x needs no gradient; only the weight gets one.
    rng = np.random.default_rng(3)
    x, w = f32(rng, 3, 1, 9, 9), tg.tensor(f32(rng, 6, 1, 3, 3), requires_grad=True)
    tg.relu(tg.conv2d(x, w)).sum().backward()
    wt = torch.tensor(w.data, requires_grad=True)
    F.relu(F.conv2d(torch.from_numpy(x), wt)).sum().backward()
    close(w.grad, wt.grad, "weight gradient")


# -- pooling ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,k,s",
    [((2, 3, 16), 8, None), ((1, 2, 9), 3, 2), ((3, 1, 10), 3, None), ((2, 2, 7), 2, 3)],
)
def test_max_pool1d_matches_torch(shape, k, s):
    rng = np.random.default_rng(4)
    run_both(
        lambda x: tg.max_pool1d(x, k, s),
        lambda x: F.max_pool1d(x, k, s),
        [f32(rng, *shape)],
        diff=[0],
    )


@pytest.mark.parametrize(
    "shape,k,s",
    [
        ((2, 3, 8, 8), 2, None),
        ((1, 2, 7, 9), 3, 2),
        ((2, 1, 7, 9), (2, 3), None),
        ((3, 2, 6, 5), (3, 2), (1, 2)),
        ((1, 1, 5, 5), 5, None),
    ],
)
def test_max_pool2d_matches_torch(shape, k, s):
    rng = np.random.default_rng(5)
    run_both(
        lambda x: tg.max_pool2d(x, k, s),
        lambda x: F.max_pool2d(x, k, s),
        [f32(rng, *shape)],
        diff=[0],
    )


def test_max_pool_ties_give_the_gradient_to_the_first_maximum():
    # After relu, whole windows are zero: each window's gradient goes to exactly one element,
    # the first in row-major order, as in torch.
    rng = np.random.default_rng(6)
    x = np.maximum(f32(rng, 2, 3, 8, 8), 0)
    x[:, :, :4, :4] = 0.0
    out = run_both(lambda t: tg.max_pool2d(t, 2), lambda t: F.max_pool2d(t, 2), [x], diff=[0])
    xt = tg.tensor(x, requires_grad=True)
    tg.max_pool2d(xt, 2).sum().backward()
    assert xt.grad.sum() == out.size
    assert np.all(xt.grad[:, :, 0:4:2, 0:4:2] == 1) and np.all(xt.grad[:, :, 1:4:2, :4] == 0)
    # Overlapping windows [1 3 3] [3 3 2] [3 2 3] [2 3 3]: first maxima at 1, 1, 2, 4.
    x1 = np.array([[[1.0, 3.0, 3.0, 2.0, 3.0, 3.0]]], dtype=np.float32)
    t1 = tg.tensor(x1, requires_grad=True)
    tg.max_pool1d(t1, 3, 1).sum().backward()
    np.testing.assert_array_equal(t1.grad, [[[0, 2, 1, 0, 1, 0]]])
    run_both(lambda t: tg.max_pool1d(t, 3, 1), lambda t: F.max_pool1d(t, 3, 1), [x1], diff=[0])


def test_max_pool_propagates_nan():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 0] = np.nan
    out = tg.max_pool2d(x, 2).data
    assert np.isnan(out[0, 0, 0, 0]) and np.isfinite(out[0, 0, 1:, :]).all()
    assert torch.isnan(F.max_pool2d(torch.from_numpy(x), 2)[0, 0, 0, 0]).item()


@pytest.mark.parametrize(
    "shape,kernel,stride",
    [((6, 7, 9), (3, 3), (2, 2)), ((4, 8, 8), (2, 2), (2, 2)), ((5, 1, 13), (1, 4), (1, 3))],
)
def test_pool_kernels_match_numpy_reference(shape, kernel, stride):
    rng = np.random.default_rng(7)
    x = np.round(f32(rng, 1, *shape), 1)  # rounding makes ties
    x[0, 0, 0, 0] = np.nan
    nd = 2 if shape[1] > 1 else 1
    xx = x if nd == 2 else x[:, :, 0]
    kk, ss = (kernel, stride) if nd == 2 else (kernel[1:], stride[1:])
    out, arg = pool.max_pool_forward(xx, kk, ss)
    ref_out = np.empty_like(out).reshape(
        (-1,) + out.shape[-2:] if nd == 2 else (-1, 1, out.shape[-1])
    )
    ref_arg = np.empty(ref_out.shape, arg.dtype)
    pool.max_pool_forward_reference(x.reshape(-1, *shape[1:]), kernel, stride, ref_out, ref_arg)
    np.testing.assert_array_equal(out.reshape(ref_out.shape), ref_out)
    np.testing.assert_array_equal(arg.reshape(ref_arg.shape), ref_arg)
    g = f32(rng, *out.shape)
    gx = pool.max_pool_backward(g, arg, xx.shape, kk, ss)
    ref_gx = np.zeros((x.size // (shape[1] * shape[2]), shape[1], shape[2]), np.float32)
    pool.max_pool_backward_reference(g.reshape(ref_arg.shape), ref_arg, kernel, stride, ref_gx)
    # Overlapping windows add in a different order in the two: float32 rounding only.
    np.testing.assert_allclose(gx.reshape(ref_gx.shape), ref_gx, rtol=1e-6, atol=1e-6)


# -- embedding -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "v,d,idx",
    [
        (10, 4, np.array([[1, 2, 1], [9, 1, 0]])),
        (6, 3, np.array([5, 5, 5, 5])),
        (7, 2, np.array(3)),
        (20, 5, np.random.default_rng(0).integers(0, 20, (3, 4, 5))),
    ],
)
def test_embedding_matches_torch(v, d, idx):
    rng = np.random.default_rng(8)
    out = run_both(tg.embedding, lambda w, i: F.embedding(i, w), [f32(rng, v, d), idx], diff=[0])
    assert out.shape == idx.shape + (d,)


def test_embedding_accepts_int_tensor_and_int32():
    rng = np.random.default_rng(9)
    w = f32(rng, 5, 3)
    idx = np.array([[4, 0], [4, 4]], dtype=np.int32)
    np.testing.assert_array_equal(tg.embedding(w, tg.tensor(idx)).data, w[idx])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_scatter_kernel_is_exact_against_add_at(dtype):
    rng = np.random.default_rng(10)
    idx = rng.integers(0, 50, 2000).astype(dtype)
    src = f32(rng, 2000, 7)
    a, b = np.zeros((50, 7), np.float32), np.zeros((50, 7), np.float32)
    scatter.scatter_add_rows(a, idx, src)
    scatter.scatter_add_rows_reference(b, idx, src)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n", [0, 1, 37, 9000])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16])
def test_gather_kernel_equals_take_serial_and_parallel(n, dtype, threads, monkeypatch):
    """Ranges of rows on numba's threads (9,000 rows of 7 go parallel with the minimum at
    zero) copy what np.take does; ids of any int type, a strided table."""
    monkeypatch.setattr(scatter, "PARALLEL_MIN_SIZE", 0)
    rng = np.random.default_rng(12)
    table = f32(rng, 60, 14)[:, ::2]  # not contiguous: the kernel reads a copy
    idx = rng.integers(0, 60, n).astype(dtype)
    want = np.take(table, idx, axis=0)
    for count in (1, 2):
        threads(count)
        out = np.full((n, 7), 5, np.float32)
        scatter.gather_rows(table, idx, out)
        np.testing.assert_array_equal(out, want)


def test_embedding_into_a_strided_buffer_keeps_its_rows():
    """A plan's output buffer that is not contiguous gets the rows copied in, not lost."""
    from tapegrad.autodiff.primitives.nn import _embedding_fwd

    rng = np.random.default_rng(13)
    w = f32(rng, 9, 4)
    idx = np.array([[3, 8, 0], [1, 1, 7]])
    out = np.zeros((2, 3, 8), np.float32)[:, :, ::2]
    assert _embedding_fwd(w, idx, out=out) is out
    np.testing.assert_array_equal(out, w[idx])


# -- losses ----------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", ["ids", "probs", "onehot"])
def test_cross_entropy_matches_torch(reduction, kind):
    rng = np.random.default_rng(11)
    n, c = 7, 5
    logits = f32(rng, n, c) * 3
    ids = rng.integers(0, c, n)
    if kind == "ids":
        target, diff = ids, [0]
    else:
        target = np.eye(c, dtype=np.float32)[ids]
        if kind == "probs":
            target = rng.uniform(0.05, 1, (n, c)).astype(np.float32)
            target /= target.sum(axis=1, keepdims=True)
        diff = [0, 1]
    run_both(
        lambda x, t: tg.softmax_cross_entropy(x, t, reduction=reduction),
        lambda x, t: F.cross_entropy(x, t, reduction=reduction),
        [logits, target],
        diff=diff,
    )


def test_cross_entropy_batch_one_and_large_logits_are_stable():
    logits = np.array([[1000.0, -1000.0, 999.0]], dtype=np.float32)
    run_both(
        tg.softmax_cross_entropy,
        F.cross_entropy,
        [logits, np.array([2])],
        diff=[0],
    )
    v = tg.softmax_cross_entropy(logits, np.array([1])).item()
    assert abs(v - (2000.0 + np.log1p(np.exp(-1.0)))) < 1e-3


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(64, 1), (5,), (2, 3, 4)])
def test_bce_with_logits_matches_torch(reduction, shape):
    rng = np.random.default_rng(12)
    logits = f32(rng, *shape) * 4
    target = rng.uniform(0, 1, shape).astype(np.float32)
    target.reshape(-1)[::3] = np.round(target.reshape(-1)[::3])
    run_both(
        lambda x, t: tg.bce_with_logits(x, t, reduction=reduction),
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction),
        [logits, target],
        diff=[0, 1],
    )


def test_bce_is_stable_for_large_logits():
    x = tg.tensor(np.array([100.0, -100.0, 0.0], dtype=np.float32), requires_grad=True)
    loss = tg.bce_with_logits(x, np.array([0.0, 1.0, 1.0], dtype=np.float32), reduction="sum")
    assert abs(loss.item() - (200 + np.log(2))) < 1e-3
    loss.backward()
    np.testing.assert_allclose(x.grad, [1.0, -1.0, -0.5], atol=1e-6)


def test_float32_in_float32_out_everywhere():
    rng = np.random.default_rng(13)
    x = tg.tensor(f32(rng, 2, 3, 6, 6), requires_grad=True)
    w = tg.tensor(f32(rng, 4, 3, 3, 3), requires_grad=True)
    h = tg.max_pool2d(tg.conv2d(x, w, padding=1), 2)
    loss = tg.softmax_cross_entropy(h.reshape((2, -1)), np.array([0, 5]))
    assert h.dtype == np.float32 and loss.dtype == np.float32
    loss.backward()
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32


# -- bad input -------------------------------------------------------------------------------
def _raises(exc, fn, *words):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"message {msg!r} lacks {w!r}"


def test_conv_errors():
    x2, w2 = np.zeros((2, 3, 5, 5), np.float32), np.zeros((4, 3, 3, 3), np.float32)
    x1, w1 = np.zeros((2, 3, 5), np.float32), np.zeros((4, 3, 3), np.float32)
    _raises(tg.ShapeError, lambda: tg.conv2d(x1, w2), "conv2d", "rank 4", "(2, 3, 5)")
    _raises(tg.ShapeError, lambda: tg.conv2d(x2, w1), "conv2d", "weight", "(4, 3, 3)")
    _raises(tg.ShapeError, lambda: tg.conv1d(x2, w1), "conv1d", "rank 3", "(2, 3, 5, 5)")
    _raises(
        tg.ShapeError,
        lambda: tg.conv2d(np.zeros((2, 1, 5, 5), np.float32), w2),
        "conv2d",
        "3 input channels",
        "has 1",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.conv1d(x1, np.zeros((4, 2, 3), np.float32)),
        "conv1d",
        "2 input channels",
        "has 3",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.conv2d(x2, np.zeros((4, 3, 7, 3), np.float32), padding=0),
        "conv2d",
        "kernel (7, 3)",
        "(5, 5)",
    )
    _raises(
        tg.ShapeError, lambda: tg.conv1d(x1, np.zeros((4, 3, 8), np.float32), padding=1), "(7,)"
    )
    _raises(
        tg.ShapeError, lambda: tg.conv2d(x2, w2, np.zeros(3, np.float32)), "conv2d", "(4,)", "(3,)"
    )
    _raises(tg.ShapeError, lambda: tg.conv2d(x2, w2, stride=0), "conv2d", "stride")
    _raises(tg.ShapeError, lambda: tg.conv2d(x2, w2, padding=(1, 1, 1)), "conv2d", "padding")
    _raises(tg.DTypeError, lambda: tg.conv2d(x2.astype(np.int64), w2), "conv2d")


def test_pool_errors():
    _raises(
        tg.ShapeError,
        lambda: tg.max_pool2d(np.zeros((2, 5, 5), np.float32), 2),
        "max_pool2d",
        "rank 4",
        "(2, 5, 5)",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.max_pool1d(np.zeros((2, 3, 4), np.float32), 5),
        "max_pool1d",
        "(5,)",
        "(4,)",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.max_pool2d(np.zeros((1, 1, 4, 4), np.float32), 2, stride=0),
        "max_pool2d",
        "stride",
    )


def test_embedding_errors():
    w = np.zeros((10, 3), np.float32)
    _raises(tg.ShapeError, lambda: tg.embedding(w, np.array([1.0, 2.0])), "embedding", "integer")
    _raises(IndexError, lambda: tg.embedding(w, np.array([[1, 10]])), "embedding", "10", "V=10")
    _raises(IndexError, lambda: tg.embedding(w, np.array([-1, 2])), "embedding", "-1", "V=10")
    _raises(
        tg.ShapeError, lambda: tg.embedding(np.zeros(10, np.float32), [1]), "embedding", "(V, D)"
    )


def test_loss_errors():
    logits = np.zeros((4, 3), np.float32)
    _raises(
        tg.ShapeError,
        lambda: tg.softmax_cross_entropy(logits, np.array([0, 1, 3, 2])),
        "softmax_cross_entropy",
        "class id 3",
        "[0, 3)",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.softmax_cross_entropy(logits, np.array([0, -2, 1, 2])),
        "class id -2",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.softmax_cross_entropy(logits, np.array([0, 1])),
        "softmax_cross_entropy",
        "(4,)",
        "(2,)",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.softmax_cross_entropy(logits, np.zeros((4, 2), np.float32)),
        "softmax_cross_entropy",
        "(4, 3)",
        "(4, 2)",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.softmax_cross_entropy(np.zeros(3, np.float32), np.array([0])),
        "softmax_cross_entropy",
        "rank 2",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.softmax_cross_entropy(logits, np.array([0, 1, 2, 0]), reduction="avg"),
        "reduction",
        "'avg'",
    )
    _raises(
        tg.ShapeError,
        lambda: tg.bce_with_logits(np.zeros((4, 1), np.float32), np.zeros(4, np.float32)),
        "bce_with_logits",
        "(4, 1)",
        "(4,)",
    )
    _raises(tg.ShapeError, lambda: tg.bce_with_logits(logits, logits, reduction=None), "reduction")
