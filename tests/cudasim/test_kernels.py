"""Every CUDA kernel (``kernels/cuda``, the optimiser's update included) against the NumPy
reference its CPU twin is tested against, on NumPy arrays: in numba's CUDA simulator (small
inputs: it runs each thread in Python), or on a GPU (numba copies the arrays there and back).
Shapes include odd sizes, so grid-stride loops that stop short or run over would show, and NaN
where the CPU kernel documents a NaN rule."""

import numpy as np
import pytest

from tapegrad.autodiff.kernels import cuda as gpu
from tapegrad.autodiff.kernels.cpu import bias, fused, loss, pool, recurrent, reduce, scan, scatter
from tapegrad.autodiff.kernels.cuda import pool as gpu_pool

F32 = dict(rtol=2e-6, atol=2e-6)
F64 = dict(rtol=1e-12, atol=1e-12)


def tol(dtype):
    return F32 if dtype == np.float32 else F64


def test_runs_where_the_mode_says():
    import os

    assert gpu.SIMULATED == (os.environ.get("NUMBA_ENABLE_CUDASIM") == "1")


def test_numpy_aliases_numba_cuda_reads_are_bound_only_while_its_registry_loads():
    """numba-cuda 0.30.4 reads np.row_stack, which NumPy 2.5 removed, when its first kernel
    compiles (every launch failed on an H200 with NumPy 2.5.2): the alias is lent while the
    registry loads, taken back after (also when loading fails), and a present one is kept."""
    from types import SimpleNamespace

    from tapegrad.autodiff.kernels.cuda import launch

    numpy = SimpleNamespace(vstack=np.vstack)
    seen = []
    launch.with_removed_numpy_aliases(lambda: seen.append(numpy.row_stack), numpy=numpy)
    assert seen == [np.vstack] and not hasattr(numpy, "row_stack")

    def fails():
        raise ImportError("registry")

    with pytest.raises(ImportError):
        launch.with_removed_numpy_aliases(fails, numpy=numpy)
    assert not hasattr(numpy, "row_stack")
    numpy.row_stack = own = object()
    launch.with_removed_numpy_aliases(lambda: None, numpy=numpy)
    assert numpy.row_stack is own


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (4, 9, 1)])
def test_add_channel_bias(shape):
    rng = np.random.default_rng(0)
    x, b = rng.normal(size=shape).astype(np.float32), rng.normal(size=shape[1]).astype(np.float32)
    out, ref = np.empty_like(x), np.empty_like(x)
    gpu.add_channel_bias(x, b, out)
    bias.add_channel_bias_reference(x, b, ref)
    np.testing.assert_array_equal(out, ref)


def test_add_into_strided_window():
    rng = np.random.default_rng(1)
    base, ref = np.zeros((3, 4, 11)), np.zeros((3, 4, 11))
    src = rng.normal(size=(3, 4, 9))
    for k in range(3):
        gpu.add_into(base[:, :, k : k + 9], src)
        bias.add_into_reference(ref[:, :, k : k + 9], src)
    np.testing.assert_allclose(base, ref, **F64)


@pytest.mark.parametrize(
    "shape,kernel,stride",
    [((2, 3, 6, 6), (2, 2), (2, 2)), ((1, 2, 7, 9), (3, 2), (2, 1)), ((2, 3, 10), (3,), (2,))],
)
@pytest.mark.parametrize("relu", [False, True])
def test_max_pool_forward_and_backward(shape, kernel, stride, relu):
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(np.float32)
    x.reshape(-1)[3] = np.nan  # NaN counts as the maximum of its windows
    out, arg = gpu_pool.window_max_forward(x, kernel, stride, relu=relu)
    planes = x.reshape((-1,) + ((1,) if x.ndim == 3 else ()) + x.shape[2:])
    k2, s2 = ((1,) + kernel, (1,) + stride) if len(kernel) == 1 else (kernel, stride)
    ref_out = np.empty((planes.shape[0],) + (1,) * (x.ndim == 3) + out.shape[2:], np.float32)
    ref_arg = np.empty(ref_out.shape, np.uint8)
    if relu:
        fused.relu_max_pool_forward_reference(planes, k2, s2, ref_out, ref_arg)
    else:
        pool.max_pool_forward_reference(planes, k2, s2, ref_out, ref_arg)
    np.testing.assert_array_equal(out.reshape(ref_out.shape), ref_out)
    np.testing.assert_array_equal(arg.reshape(ref_arg.shape), ref_arg)
    g = rng.normal(size=out.shape).astype(np.float32)
    gx = gpu_pool.window_max_backward(g, arg, x.shape, kernel, stride, out=out if relu else None)
    ref = np.zeros(planes.shape, np.float32)
    gp = g.reshape(ref_out.shape)
    if relu:
        fused.relu_max_pool_backward_reference(gp, ref_out, ref_arg, k2, s2, ref)
    else:
        pool.max_pool_backward_reference(gp, ref_arg, k2, s2, ref)
    np.testing.assert_allclose(gx.reshape(ref.shape), ref, **F32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 3), (1, 7)])
def test_bias_relu(dtype, shape):
    rng = np.random.default_rng(3)
    x = rng.normal(size=shape).astype(dtype)
    b = rng.normal(size=shape[1]).astype(dtype)
    out, ref = np.empty_like(x), np.empty_like(x)
    gpu.bias_relu_forward(x, b, out)
    fused.bias_relu_forward_reference(x, b, ref)
    np.testing.assert_array_equal(out, ref)
    g = rng.normal(size=shape).astype(dtype)
    gx, gb, rgx, rgb = (np.empty_like(a) for a in (x, b, x, b))
    gpu.bias_relu_backward(g, out, gx, gb)
    fused.bias_relu_backward_reference(g, ref, rgx, rgb)
    np.testing.assert_array_equal(gx, rgx)
    np.testing.assert_allclose(gb, rgb, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(0, 3), (1, 4), (7, 5)])
def test_sum_rows(dtype, shape):
    x = np.random.default_rng(4).normal(size=shape).astype(dtype)
    out, ref = np.empty(shape[1], dtype), np.empty(shape[1], dtype)
    gpu.sum_rows(x, out)
    reduce.sum_rows_reference(x, ref)
    np.testing.assert_allclose(out, ref, **tol(dtype))


@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence(reverse):
    rng = np.random.default_rng(5)
    b, a = rng.normal(size=(6, 5)), rng.uniform(-1, 1, size=(6, 5))
    out, ref = np.empty_like(b), np.empty_like(b)
    gpu.linear_recurrence(b, a, out, reverse)
    scan.linear_recurrence_reference(b, a, ref, reverse)
    np.testing.assert_allclose(out, ref, **F64)


@pytest.mark.parametrize("dtype", [np.intp, np.int32])  # the embedding passes its ids as given
def test_scatter_add_rows_accumulates_repeats(dtype):
    rng = np.random.default_rng(6)
    idx = np.array([3, 0, 3, 3, 1, 0], dtype)
    src = rng.normal(size=(6, 4)).astype(np.float32)
    out, ref = np.zeros((5, 4), np.float32), np.zeros((5, 4), np.float32)
    gpu.scatter_add_rows(out, idx, src)
    scatter.scatter_add_rows_reference(ref, idx, src)
    np.testing.assert_allclose(out, ref, **F32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_row", [False, True])
def test_softmax_cross_entropy(dtype, per_row):
    rng = np.random.default_rng(7)
    n, c = 5, 4
    x = rng.normal(size=(n, c)).astype(dtype)
    t = rng.integers(0, c, n)
    p, per, rp, rper = np.empty_like(x), np.empty(n, dtype), np.empty_like(x), np.empty(n, dtype)
    total = gpu.softmax_ce_forward(x, t, p, per)
    ref_total = loss.softmax_ce_forward_reference(x, t, rp, rper)
    np.testing.assert_allclose(p, rp, **tol(dtype))
    np.testing.assert_allclose(per, rper, **tol(dtype))
    np.testing.assert_allclose(float(total), ref_total, rtol=1e-6)
    k = rng.normal(size=n if per_row else 1).astype(dtype)
    gx, rgx = np.empty_like(x), np.empty_like(x)
    gpu.softmax_ce_backward(p, t, k, gx)
    loss.softmax_ce_backward_reference(rp, t, k, rgx)
    np.testing.assert_allclose(gx, rgx, **tol(dtype))


def test_softmax_cross_entropy_out_of_range_id_gives_nan():
    x = np.zeros((2, 3), np.float32)
    per = np.empty(2, np.float32)
    gpu.softmax_ce_forward(x, np.array([0, 3]), np.empty_like(x), per)
    assert np.isfinite(per[0]) and np.isnan(per[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bce(dtype):
    rng = np.random.default_rng(8)
    x = (rng.normal(size=(3, 4)) * 4).astype(dtype)
    t = rng.uniform(size=(3, 4)).astype(dtype)
    sig, per, rsig, rper = (np.empty_like(x) for _ in range(4))
    total = gpu.bce_forward(x, t, sig, per)
    ref_total = loss.bce_forward_reference(x, t, rsig, rper)
    np.testing.assert_allclose(sig, rsig, **tol(dtype))
    np.testing.assert_allclose(per, rper, **tol(dtype))
    np.testing.assert_allclose(float(total), ref_total, rtol=1e-6)
    for k in (np.array([0.7], dtype), rng.normal(size=12).astype(dtype)):
        gx, rgx = np.empty_like(x), np.empty_like(x)
        gpu.bce_backward(sig, t, k, gx)
        loss.bce_backward_reference(rsig, t, k, rgx)
        np.testing.assert_allclose(gx, rgx, **tol(dtype))


def _states(rng, n, h, gates, dtype):
    return (
        rng.normal(size=(n, gates * h)).astype(dtype),
        rng.normal(size=(n, gates * h)).astype(dtype),
        rng.normal(size=(n, h)).astype(dtype),
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lstm_steps(dtype):
    rng = np.random.default_rng(9)
    n, h = 3, 5
    xp_t, hw, c_prev = _states(rng, n, h, 4, dtype)
    outs = [np.empty(s, dtype) for s in ((n, h), (n, h), (n, 4 * h), (n, h))]
    refs = [np.empty_like(a) for a in outs]
    gpu.lstm_forward_step(xp_t, hw, c_prev, *outs)
    recurrent.lstm_forward_step_reference(xp_t, hw, c_prev, *refs)
    for a, b in zip(outs, refs):
        np.testing.assert_allclose(a, b, **tol(dtype))
    h_, c_, act, tc = refs
    gh, gc, dh = (rng.normal(size=(n, h)).astype(dtype) for _ in range(3))
    dc, rdc = (np.full((n, h), 0.3, dtype) for _ in range(2))
    dg, rdg = np.empty((n, 4 * h), dtype), np.empty((n, 4 * h), dtype)
    gpu.lstm_backward_step(gh, gc, act, tc, c_prev, dh, dc, dg)
    recurrent.lstm_backward_step_reference(gh, gc, act, tc, c_prev, dh, rdc, rdg)
    np.testing.assert_allclose(dg, rdg, **tol(dtype))
    np.testing.assert_allclose(dc, rdc, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gru_steps(dtype):
    rng = np.random.default_rng(10)
    n, h = 3, 4
    xp_t, hw, h_prev = _states(rng, n, h, 3, dtype)
    bhh = rng.normal(size=3 * h).astype(dtype)
    out, act = np.empty((n, h), dtype), np.empty((n, 4 * h), dtype)
    rout, ract = np.empty_like(out), np.empty_like(act)
    gpu.gru_forward_step(xp_t, hw, bhh, h_prev, out, act)
    recurrent.gru_forward_step_reference(xp_t, hw, bhh, h_prev, rout, ract)
    np.testing.assert_allclose(out, rout, **tol(dtype))
    np.testing.assert_allclose(act, ract, **tol(dtype))
    g_t, dhm = (rng.normal(size=(n, h)).astype(dtype) for _ in range(2))
    dhd, rdhd = (np.full((n, h), -0.2, dtype) for _ in range(2))
    dxp, dhw, rdxp, rdhw = (np.empty((n, 3 * h), dtype) for _ in range(4))
    gpu.gru_backward_step(g_t, dhm, dhd, ract, h_prev, dxp, dhw)
    recurrent.gru_backward_step_reference(g_t, dhm, rdhd, ract, h_prev, rdxp, rdhw)
    for a, b in ((dxp, rdxp), (dhw, rdhw), (dhd, rdhd)):
        np.testing.assert_allclose(a, b, **tol(dtype))


@pytest.mark.parametrize("tanh", [True, False])
def test_rnn_backward_step(tanh):
    rng = np.random.default_rng(11)
    g_t, dh, h_t = (rng.normal(size=(3, 4)).astype(np.float32) for _ in range(3))
    dpre, dxp, rdpre, rdxp = (np.empty((3, 4), np.float32) for _ in range(4))
    gpu.rnn_backward_step(g_t, dh, h_t, tanh, dpre, dxp)
    recurrent.rnn_backward_step_reference(g_t, dh, h_t, tanh, rdpre, rdxp)
    np.testing.assert_array_equal(dpre, rdpre)
    np.testing.assert_array_equal(dxp, rdxp)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("wd,decoupled", [(0.0, False), (0.1, False), (0.1, True)])
def test_adam_update(amsgrad, wd, decoupled):
    from tapegrad.autodiff.kernels.cpu import optim as adam_cpu
    from tapegrad.autodiff.kernels.cuda import optim as adam_gpu

    rng = np.random.default_rng(12)
    p, g = rng.normal(size=(2, 9)).astype(np.float32), rng.normal(size=(2, 9)).astype(np.float32)
    m, v = rng.normal(size=(2, 9)).astype(np.float32), rng.uniform(size=(2, 9)).astype(np.float32)
    vmax = rng.uniform(size=(2, 9)).astype(np.float32) if amsgrad else None
    ref = [a.copy() if a is not None else None for a in (p, g, m, v, vmax)]
    kw = dict(lr=0.01, beta1=0.9, beta2=0.99, eps=1e-8, wd=wd, decoupled=decoupled, step=3)
    adam_gpu.adam_update(p, g, m, v, vmax, None, **kw)
    scratch = (np.empty_like(p), np.empty_like(p))
    adam_cpu.adam_reference(*ref, *adam_cpu.adam_scalars(np.float32, **kw), scratch)
    for a, b in zip((p, m, v, vmax), (ref[0], ref[2], ref[3], ref[4])):
        if a is not None:
            np.testing.assert_allclose(a, b, **F32)


@pytest.mark.parametrize(
    "momentum,dampening,nesterov,wd",
    [
        (0.0, 0.0, False, 0.0),
        (0.0, 0.0, False, 0.1),
        (0.9, 0.25, False, 0.1),
        (0.9, 0.0, True, 0.1),
    ],
)
def test_sgd_update(momentum, dampening, nesterov, wd):
    from tapegrad.autodiff.kernels.cpu import optim as sgd_cpu
    from tapegrad.autodiff.kernels.cuda import optim as sgd_gpu

    rng = np.random.default_rng(14)
    p = rng.normal(size=(2, 9)).astype(np.float32)
    buf = np.empty_like(p) if momentum else None
    ref_p, ref_buf = p.copy(), None if buf is None else buf.copy()
    kw = dict(lr=0.01, momentum=momentum, dampening=dampening, wd=wd, nesterov=nesterov)
    scratch = (np.empty_like(p), np.empty_like(p))
    for first in (True, False):  # the buffer filled, then updated
        g = rng.normal(size=(2, 9)).astype(np.float32)
        sgd_gpu.sgd_update(p, g, buf, None, first=first, **kw)
        sgd_cpu.sgd_update(ref_p, np.asfortranarray(g), ref_buf, scratch, first=first, **kw)
    np.testing.assert_allclose(p, ref_p, **F32)
    if momentum:
        np.testing.assert_allclose(buf, ref_buf, **F32)


@pytest.mark.parametrize("dilation,stride", [((2, 3), (2, 1)), ((1, 2), (1, 1))])
def test_max_pool_with_dilation(dilation, stride):
    rng = np.random.default_rng(13)
    x = rng.normal(size=(2, 1, 9, 11)).astype(np.float32)
    kernel = (3, 2)
    out, arg = gpu.max_pool_forward(x, kernel, stride, dilation=dilation)
    planes = x.reshape(2, 9, 11)
    ref_out = np.empty((2,) + out.shape[2:], np.float32)
    ref_arg = np.empty(ref_out.shape, np.uint8)
    pool.max_pool_forward_reference(planes, kernel, stride, ref_out, ref_arg, dilation)
    np.testing.assert_array_equal(out.reshape(ref_out.shape), ref_out)
    np.testing.assert_array_equal(arg.reshape(ref_arg.shape), ref_arg)
    g = rng.normal(size=out.shape).astype(np.float32)
    gx = gpu.max_pool_backward(g, arg, x.shape, kernel, stride, dilation=dilation)
    ref = np.zeros(planes.shape, np.float32)
    pool.max_pool_backward_reference(g.reshape(ref_out.shape), ref_arg, kernel, stride, ref,
                                     dilation)  # fmt: skip
    np.testing.assert_allclose(gx.reshape(ref.shape), ref, **F32)
