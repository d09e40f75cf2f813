"""The direct and fused conv (+ ReLU + max-pool) kernels equal their NumPy references, the fused
backward equals the plain direct backward bit for bit, and compiled plans match eager where the
conv gradient goes through the direct kernel."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.kernels import conv as K
from tapegrad.autodiff.kernels.pool import pool_arg_dtype
from tapegrad.autodiff.primitives import nn as nn_prims

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-11)}

# (x shape, weight shape, bias?, pool kernel, pool stride, channels-last input?)
CASES = [
    ((3, 2, 9, 11), (4, 2, 3, 2), True, (2, 3), (2, 3), False),
    ((1, 1, 7, 7), (2, 1, 3, 3), False, (2, 2), (2, 2), False),  # batch 1, 5 % 2 != 0
    ((2, 3, 8, 6), (3, 3, 2, 2), True, (3, 2), (4, 2), True),  # stride > kernel
    ((3, 5, 17), (4, 5, 3), True, (4,), (4,), False),  # 15 % 4 != 0
    ((1, 7, 20), (2, 7, 3), False, (3,), (3,), True),  # batch 1, channels-last
    ((2, 6, 13), (3, 6, 2), True, (5,), (5,), True),  # odd sizes
]


def _make(rng, xs, ws, has_bias, channels_last, dt, pool_w=1):
    if channels_last:  # a permuted view of a contiguous (N, *spatial, C) array
        base = rng.normal(size=(xs[0],) + xs[2:] + (xs[1],)).astype(dt)
        x = np.moveaxis(base, -1, 1)
    else:
        x = rng.normal(size=xs).astype(dt)
    w = rng.normal(size=ws).astype(dt)
    b = rng.normal(size=ws[0]).astype(dt) if has_bias else None
    # pooling windows whose conv values are all <= 0, so ReLU zeroes them: x = 0 under the
    # first column of windows of sample 0, and a negative bias for filter 0
    x[0, :, ..., : ws[-1] + pool_w - 1] = 0
    if b is not None:
        b[0] = -abs(b[0]) - 0.5
    return x, w, b


def _conv_shape(xs, ws):
    return (xs[0], ws[0]) + tuple(n - k + 1 for n, k in zip(xs[2:], ws[2:]))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_direct_conv_matches_reference(case, dt):
    xs, ws, has_bias, _, _, cl = case
    rng = np.random.default_rng(0)
    x, w, b = _make(rng, xs, ws, has_bias, cl, dt)
    y, yr = np.empty(_conv_shape(xs, ws), dt), np.empty(_conv_shape(xs, ws), dt)
    K.conv_forward(x, w, b, y)
    K.conv_forward_reference(x, w, b, yr)
    np.testing.assert_allclose(y, yr, **TOL[dt])
    g = rng.normal(size=y.shape).astype(dt)
    g[rng.uniform(size=g.shape) < 0.5] = 0  # the kernel skips zeros; the reference does not
    grads = [np.full(x.shape, 9, dt), np.full(w.shape, 9, dt)] + (
        [np.full(b.shape, 9, dt)] if has_bias else [None]
    )
    refs = [np.empty(x.shape, dt), np.empty(w.shape, dt)] + (
        [np.empty(b.shape, dt)] if has_bias else [None]
    )
    K.conv_backward(g, x, w, grads[1], grads[2], grads[0])
    K.conv_backward_reference(g, x, w, refs[1], refs[2], refs[0])
    for a, r in zip(grads, refs):
        if r is not None:
            np.testing.assert_allclose(a, r, **TOL[dt])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_fused_conv_relu_max_pool_matches_reference_and_plain_backward(case, dt):
    xs, ws, has_bias, pk, ps, cl = case
    rng = np.random.default_rng(1)
    x, w, b = _make(rng, xs, ws, has_bias, cl, dt, pk[-1])
    two_d = len(xs) == 4
    fwd = K.conv2d_relu_max_pool_forward if two_d else K.conv1d_relu_max_pool_forward
    bwd = K.conv2d_relu_max_pool_backward if two_d else K.conv1d_relu_max_pool_backward
    fwd_ref = (
        K.conv2d_relu_max_pool_forward_reference
        if two_d
        else K.conv1d_relu_max_pool_forward_reference
    )
    bwd_ref = (
        K.conv2d_relu_max_pool_backward_reference
        if two_d
        else K.conv1d_relu_max_pool_backward_reference
    )
    out, arg = K.fused_buffers(xs, ws, pk, ps, dt)
    out_r, arg_r = K.fused_buffers(xs, ws, pk, ps, dt)
    assert arg.dtype == pool_arg_dtype(pk)
    fwd(x, w, b, pk, ps, out, arg)
    fwd_ref(x, w, b, pk, ps, out_r, arg_r)
    np.testing.assert_allclose(out, out_r, **TOL[dt])
    assert (out == 0).any() and (out > 0).any()  # both kinds of window are exercised
    pos = out_r > 0
    np.testing.assert_array_equal(arg[pos], arg_r[pos])
    assert (arg[~pos] == 0).all()

    g = rng.normal(size=out.shape).astype(dt)
    gx, gw = np.full(x.shape, 9, dt), np.full(w.shape, 9, dt)
    gb = np.full(ws[0], 9, dt) if has_bias else None
    gx_r, gw_r = np.empty(x.shape, dt), np.empty(w.shape, dt)
    gb_r = np.empty(ws[0], dt) if has_bias else None
    bwd(g, x, w, out, arg, pk, ps, gw, gb, gx)
    bwd_ref(g, x, w, out, arg, pk, ps, gw_r, gb_r, gx_r)
    np.testing.assert_allclose(gx, gx_r, **TOL[dt])
    np.testing.assert_allclose(gw, gw_r, **TOL[dt])
    if has_bias:
        np.testing.assert_allclose(gb, gb_r, **TOL[dt])

    # bit for bit: the fused backward is the plain direct backward of the dense conv gradient
    # that separate ReLU and max-pool backward rules give
    gy = np.zeros(_conv_shape(xs, ws), dt)
    pk2, ps2 = (pk, ps) if two_d else ((1,) + pk, (1,) + ps)
    g4, out4, arg4, gy4 = (a if two_d else a[:, :, None, :] for a in (g, out, arg, gy))
    for idx in np.ndindex(out4.shape):
        n, o, pi, pj = idx
        if out4[idx] > 0:
            q = int(arg4[idx])
            gy4[n, o, pi * ps2[0] + q // pk2[1], pj * ps2[1] + q % pk2[1]] = g4[idx]
    gx2, gw2 = np.empty(x.shape, dt), np.empty(w.shape, dt)
    gb2 = np.empty(ws[0], dt) if has_bias else None
    K.conv_backward(gy, x, w, gw2, gb2, gx2)
    np.testing.assert_array_equal(gx, gx2)
    np.testing.assert_array_equal(gw, gw2)
    if has_bias:
        np.testing.assert_array_equal(gb, gb2)


def test_only_requested_gradients_are_written():
    rng = np.random.default_rng(2)
    x, w, b = _make(rng, (2, 3, 10), (2, 3, 3), True, True, np.float64)
    out, arg = K.fused_buffers(x.shape, w.shape, (2,), (2,), np.float64)
    K.conv1d_relu_max_pool_forward(x, w, b, (2,), (2,), out, arg)
    g = rng.normal(size=out.shape)
    gw, gw_all = np.empty(w.shape), np.empty(w.shape)
    gx = np.empty(x.shape)
    K.conv1d_relu_max_pool_backward(g, x, w, out, arg, (2,), (2,), gw, None, None)
    K.conv1d_relu_max_pool_backward(g, x, w, out, arg, (2,), (2,), gw_all, np.empty(2), gx)
    np.testing.assert_array_equal(gw, gw_all)


def test_overlapping_pool_windows_are_refused():
    x = np.ones((1, 1, 6, 6))
    w = np.ones((1, 1, 3, 3))
    out, arg = K.fused_buffers(x.shape, w.shape, (2, 2), (1, 1), np.float64)
    with pytest.raises(ValueError, match="overlap"):
        K.conv2d_relu_max_pool_forward(x, w, None, (2, 2), (1, 1), out, arg)


def _text_step(seed=0, l_in=40, c=20, o=4, pool=4, dt=np.float32):
    """conv1d over a permuted (channels-last) input -> relu -> pool -> loss, the text-CNN
    pattern, on tensors; returns the function and its tensors."""
    rng = np.random.default_rng(seed)
    xt = tg.tensor(rng.normal(size=(3, l_in, c)).astype(dt), requires_grad=True)
    wt = tg.tensor((rng.normal(size=(o, c, 3)) * 0.3).astype(dt), requires_grad=True)
    bt = tg.tensor((rng.normal(size=o) * 0.1).astype(dt), requires_grad=True)
    coef = tg.tensor(rng.normal(size=(3, o, (l_in - 2) // pool)).astype(dt))

    def step():
        h = tg.nn.functional.conv1d(tg.permute(xt, (0, 2, 1)), wt, bt)
        y = tg.nn.functional.max_pool1d(tg.relu(h), pool)
        (y * coef).sum().backward()

    return step, (xt, wt, bt)


def test_eager_text_cnn_gradient_uses_the_direct_kernel_and_matches_blas(monkeypatch):
    calls = []
    real = K.conv_backward
    monkeypatch.setattr(K, "conv_backward", lambda *a: calls.append(1) or real(*a))
    step, params = _text_step(dt=np.float64)
    step()
    assert calls, "the direct conv backward was not used"
    direct = [p.grad.copy() for p in params]
    for p in params:
        p.grad = None
    monkeypatch.setattr(nn_prims, "direct_backward_applies", lambda *a: False)
    step()
    for a, p in zip(direct, params):
        np.testing.assert_allclose(a, p.grad, rtol=1e-12, atol=1e-12)


def test_compiled_text_cnn_pattern_equals_eager_bit_for_bit():
    step, params = _text_step()
    step()
    eager = [p.grad.copy() for p in params]
    for p in params:
        p.grad = None
    compiled = tg.compile(step)
    compiled()  # trace
    for _ in range(2):  # replays
        for p in params:
            p.grad = None
        compiled()
        for a, p in zip(eager, params):
            np.testing.assert_array_equal(a, p.grad)


def test_dense_gradient_keeps_the_blas_path():
    # ReLU alone leaves about half the gradient nonzero: more than the direct kernel's quarter
    rng = np.random.default_rng(3)
    g = rng.normal(size=(4, 3, 10))
    assert not nn_prims.direct_backward_sparse(g)
    g[:, :, 1:] = 0
    assert nn_prims.direct_backward_sparse(g)


def test_kernels_refuse_mismatched_shapes_before_their_unchecked_loops():
    from tapegrad import ShapeError
    from tapegrad.autodiff.kernels import conv as K

    x = np.zeros((2, 3, 9, 9), np.float32)
    w = np.zeros((4, 3, 3, 3), np.float32)
    g = np.zeros((2, 4, 7, 7), np.float32)
    with pytest.raises(ShapeError, match=r"conv_backward: output/gradient \(2, 4, 6, 7\)"):
        K.conv_backward(g[:, :, :6], x, w, np.empty_like(w), None, None)
    with pytest.raises(ShapeError, match=r"conv_backward: gx must have shape \(2, 3, 9, 9\)"):
        K.conv_backward(g, x, w, None, None, np.empty((2, 3, 9, 8), np.float32))
    with pytest.raises(ShapeError, match="conv_forward: input .* and weight .* do not fit"):
        K.conv_forward(x, np.zeros((4, 2, 3, 3), np.float32), None, np.empty_like(g))
    out = np.empty((2, 4, 3, 3), np.float32)  # pooled 7x7 by 2 is 3x3
    arg = np.empty((2, 4, 3, 4), np.int8)
    with pytest.raises(ShapeError, match=r"pooled array \(2, 4, 3, 4\) should be \(2, 4, 3, 3\)"):
        K.conv2d_relu_max_pool_forward(x, w, None, (2, 2), (2, 2), out, arg)
