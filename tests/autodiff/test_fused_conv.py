"""The direct conv backward kernel, both of its paths (float32 channels-last input through the
run kernels, ``microkernels.runs_weight`` / ``runs_input``; the loops), equals its NumPy
reference, gives the same bits serial and parallel (the batch in chunks fixed by its size), one
gradient at a time as all at once, and for no images the gradients' zeros; ``nonzeros`` finds
every nonzero offset of a row; compiled plans match eager where the conv gradient goes through
the direct kernel."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.kernels import cpu as cpu_kernels
from tapegrad.autodiff.kernels.cpu import conv as K
from tapegrad.autodiff.primitives import conv as nn_prims

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-11)}

# (x shape, weight shape, bias?, pool kernel, pool stride, channels-last input?)
CASES = [
    ((3, 2, 9, 11), (4, 2, 3, 2), True, (2, 3), (2, 3), False),
    ((1, 1, 7, 7), (2, 1, 3, 3), False, (2, 2), (2, 2), False),  # batch 1, 5 % 2 != 0
    ((2, 3, 8, 6), (3, 3, 2, 2), True, (3, 2), (4, 2), True),  # stride > kernel
    ((3, 5, 17), (4, 5, 3), True, (4,), (4,), False),  # 15 % 4 != 0
    ((1, 7, 20), (2, 7, 3), False, (3,), (3,), True),  # batch 1, channels-last
    ((2, 6, 13), (3, 6, 2), True, (5,), (5,), True),  # odd sizes
    ((2, 70, 12), (3, 70, 3), True, (2,), (2,), True),  # a run of 210: two pieces
    ((2, 20, 6, 9), (3, 20, 3, 3), False, (2, 2), (2, 2), True),  # three runs of 60 a window
    ((2, 8, 40), (2, 8, 2), True, (2,), (2,), True),  # a run of one whole vector, rows of 39
]


@pytest.fixture(params=["runs", "loops"])
def path(request, monkeypatch):
    """Both paths for float32 channels-last input: the run kernels (512-bit vectors where
    numba compiles for AVX-512; elsewhere LLVM splits them, the same arithmetic) and the
    loops."""
    monkeypatch.setattr(K, "WIDE", request.param == "runs")
    return request.param


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
def test_direct_conv_backward_matches_reference(case, dt, path):
    xs, ws, has_bias, _, _, cl = case
    rng = np.random.default_rng(0)
    x, w, b = _make(rng, xs, ws, has_bias, cl, dt)
    g = rng.normal(size=_conv_shape(xs, ws)).astype(dt)
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


@pytest.mark.parametrize("n", [37, 1])
@pytest.mark.parametrize("cl", [True, False])
def test_serial_and_parallel_runs_give_the_same_bits(n, cl, threads, monkeypatch, path):
    monkeypatch.setattr(K, "PARALLEL_MIN_SIZE", 0)  # these small cases in parallel too
    rng = np.random.default_rng(2)
    x, w, b = _make(rng, (n, 6, 30), (5, 6, 3), True, cl, np.float32)
    g = rng.normal(size=(n, 5, 28)).astype(np.float32)
    g[rng.uniform(size=g.shape) < 0.7] = 0
    runs = []
    for count in (1, 2):
        threads(count)
        got = [np.full(a.shape, 9, np.float32) for a in (w, b, x)]
        K.conv_backward(g, x, w, *got)
        runs.append(got)
    for a, b_ in zip(*runs):
        assert a.tobytes() == b_.tobytes()
    refs = [np.empty(a.shape, np.float32) for a in (w, b, x)]
    K.conv_backward_reference(g, x, w, *refs)
    for a, r in zip(runs[0], refs):
        np.testing.assert_allclose(a, r, **TOL[np.float32])


@pytest.mark.parametrize("case", [CASES[4], CASES[6], CASES[7]])
def test_one_gradient_at_a_time_gives_the_bits_of_all_at_once(case, path):
    """What the fused conv_grads (both gradients) and the eager conv_weight / conv_transpose
    (one each) compute: the same bits."""
    xs, ws, has_bias, _, _, cl = case
    rng = np.random.default_rng(4)
    x, w, b = _make(rng, xs, ws, has_bias, cl, np.float32)
    g = rng.normal(size=_conv_shape(xs, ws)).astype(np.float32)
    g[rng.uniform(size=g.shape) < 0.8] = 0
    both = [np.full(w.shape, 9, np.float32), np.full(ws[0], 9, np.float32), np.empty_like(x)]
    K.conv_backward(g, x, w, *both)
    alone = [np.full(w.shape, 7, np.float32), np.full(ws[0], 7, np.float32), np.empty_like(x)]
    K.conv_backward(g, x, w, alone[0], None, None)
    K.conv_backward(g, x, w, None, alone[1], None)
    K.conv_backward(g, x, w, None, None, alone[2])
    for a, b_ in zip(both, alone):
        assert a.tobytes() == b_.tobytes()


def test_the_text_cnn_gradient_takes_the_run_kernels_where_wide(monkeypatch):
    x = np.zeros((64, 130, 50), np.float32).transpose(0, 2, 1)
    w, g = np.zeros((8, 50, 3), np.float32), np.zeros((64, 8, 128), np.float32)
    calls = []
    for name in ("_conv_runs", "_conv_runs_parallel", "_conv_bwd", "_conv_bwd_parallel"):
        real = getattr(K, name)
        monkeypatch.setattr(
            K, name, lambda *a, name=name, real=real: calls.append(name) or real(*a)
        )
    K.conv_backward(g, x, w, np.empty_like(w), None, None)
    K.conv_backward(g.astype(np.float64), x.astype(np.float64), w.astype(np.float64),
                    np.empty(w.shape), None, None)  # fmt: skip
    assert calls[1] == "_conv_bwd_parallel"  # float64: the loops
    assert calls[0] == ("_conv_runs_parallel" if K.WIDE else "_conv_bwd_parallel")


@pytest.mark.parametrize("length", [0, 1, 15, 16, 17, 40, 128])
def test_nonzeros_finds_every_nonzero_offset_in_order(length):
    import numba

    from tapegrad.autodiff.kernels.cpu.microkernels import nonzeros

    @numba.njit
    def found(g, g0, n, idx):
        return nonzeros(g, g0, n, idx)

    rng = np.random.default_rng(length)
    g = rng.normal(size=length + 5).astype(np.float32)
    g[rng.uniform(size=g.shape) < 0.6] = 0
    if length >= 4:
        g[2:5] = [np.nan, -0.0, np.inf]  # NaN and inf count, -0.0 does not
    idx = np.full(length + 16, -1, np.int32)
    count = found(g, 2, length, idx)
    want = np.flatnonzero(g[2 : 2 + length] != 0)
    assert count == want.size
    np.testing.assert_array_equal(idx[:count], want)


def test_no_images_give_zero_gradients():
    x, w = np.ones((0, 3, 9)), np.ones((2, 3, 3))
    got = [np.full(w.shape, 9.0), np.full(2, 9.0), np.full(x.shape, 9.0)]
    K.conv_backward(np.ones((0, 2, 7)), x, w, *got)
    assert not got[0].any() and not got[1].any()


def test_only_requested_gradients_are_written():
    rng = np.random.default_rng(1)
    x, w, _ = _make(rng, (2, 3, 9), (2, 3, 3), False, False, np.float64)
    g = rng.normal(size=(2, 2, 7))
    gx = np.full(x.shape, 7.0)
    K.conv_backward(g, x, w, np.empty(w.shape), None, None)
    K.conv_backward(g, x, w, None, None, gx)
    ref = np.empty(x.shape)
    K.conv_backward_reference(g, x, w, None, None, ref)
    np.testing.assert_allclose(gx, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ws", [((3, 20, 40), (4, 20, 3)), ((1, 7, 5), (2, 7, 5))])
def test_channels_last_conv1d_forward_one_gemm_matches_reference(xs, ws, dt):
    """A channels-last input takes the one-GEMM forward; a contiguous one the per-tap matmuls;
    both equal the direct definition."""
    rng = np.random.default_rng(3)
    x, w, b = _make(rng, xs, ws, True, True, dt)
    assert nn_prims._rows(x, ((0, 0),)) and not nn_prims._rows(np.ascontiguousarray(x), ((0, 0),))
    geo = dict(stride=(1,), padding=((0, 0),), dilation=(1,), groups=1)
    ref = nn_prims._conv_reference(x, w, b, **geo)
    for arr in (x, np.ascontiguousarray(x)):
        np.testing.assert_allclose(nn_prims._conv_fwd(arr, w, b, **geo)[0], ref, **TOL[dt])
        y = tg.nn.functional.conv1d(tg.tensor(arr), tg.tensor(w), tg.tensor(b))
        np.testing.assert_allclose(y.numpy(), ref, **TOL[dt])


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
    real = cpu_kernels.conv_backward  # the CPU namespace's, which the forwards call
    monkeypatch.setattr(cpu_kernels, "conv_backward", lambda *a: calls.append(1) or real(*a))
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
    from tapegrad.autodiff.kernels.cpu import conv as K

    x = np.zeros((2, 3, 9, 9), np.float32)
    w = np.zeros((4, 3, 3, 3), np.float32)
    g = np.zeros((2, 4, 7, 7), np.float32)
    with pytest.raises(ShapeError, match=r"conv_backward: output/gradient \(2, 4, 6, 7\)"):
        K.conv_backward(g[:, :, :6], x, w, np.empty_like(w), None, None)
    with pytest.raises(ShapeError, match=r"conv_backward: gx must have shape \(2, 3, 9, 9\)"):
        K.conv_backward(g, x, w, None, None, np.empty((2, 3, 9, 8), np.float32))
    with pytest.raises(ShapeError, match="conv_backward: input .* and weight .* do not fit"):
        K.conv_backward(g, x, np.zeros((4, 2, 3, 3), np.float32), None, None, None)


_WITHOUT_AVX512 = """
import numpy as np
from tapegrad.autodiff.kernels.cpu import conv as K
from tapegrad.autodiff.kernels.cpu import microkernels as M
assert not M.WIDE, "numba compiled for AVX-512"
K.WIDE = True  # the dispatcher's rule: the run kernels, their vectors split by LLVM
rng = np.random.default_rng(5)
for xs, ws in (((2, 70, 12), (3, 70, 3)), ((3, 20, 6, 9), (4, 20, 3, 3))):
    base = rng.normal(size=(xs[0],) + xs[2:] + (xs[1],)).astype(np.float32)
    x = np.moveaxis(base, -1, 1)
    w = rng.normal(size=ws).astype(np.float32)
    g = rng.normal(size=(xs[0], ws[0]) + tuple(n - k + 1 for n, k in zip(xs[2:], ws[2:])))
    g = g.astype(np.float32)
    g[rng.uniform(size=g.shape) < 0.7] = 0
    got = [np.empty(w.shape, np.float32), np.empty(ws[0], np.float32), np.empty_like(x)]
    want = [np.empty(w.shape), np.empty(ws[0]), np.empty(x.shape)]
    K.conv_backward(g, x, w, *got)
    K.conv_backward_reference(*(a.astype(np.float64) for a in (g, x, w)), *want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
print("ok")
"""


def test_run_kernels_compile_without_avx512(tmp_path):
    """Where numba compiles without AVX-512 (here for Haswell, AVX2, in a process of its own
    with a cache of its own), ``nonzeros`` takes LLVM's generic compressing store and the run
    kernels' 512-bit vectors are split: the gradients still match the reference."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CPU_FEATURES", None)
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_AVX512], env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
