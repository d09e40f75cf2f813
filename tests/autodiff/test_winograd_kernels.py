"""Winograd's F(2x2, 3x3) convolution kernels (``kernels/cpu/winograd.py``) against the float64
references, over the geometries they take (padding 0 to 2, odd and even sizes, an output
smaller than the input's "same", channel counts that are not powers of two, batches that
split unevenly into chunks); serial and parallel runs give the same bits; a plan's workspace
holding other bytes changes nothing; an inf or NaN in an operand hands the call to the
image-by-image kernels, whose results then come out; the rule; and a whole conv2d layer
through tapegrad's autodiff against float64 and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import by_image, conv2d, gemm, winograd

pytestmark = pytest.mark.skipif(not winograd.AVAILABLE, reason="NumPy's BLAS is no ILP64 OpenBLAS")

# (N, C, O, H, W, padding (top, left), output size): stride 1, 3x3
GEOMETRIES = [
    (5, 32, 32, 8, 8, (1, 1), (8, 8)),  # "same", even
    (7, 32, 40, 7, 9, (1, 1), (7, 9)),  # odd sizes: the last tiles half outside
    (3, 48, 32, 6, 5, (0, 0), (4, 3)),  # "valid"
    (4, 32, 33, 5, 5, (2, 2), (7, 7)),  # "full": the adjoint's padding is 0
    (9, 32, 32, 13, 7, (1, 0), (13, 5)),  # asymmetric: bottom and right from the shapes
    (37, 32, 32, 4, 4, (1, 1), (4, 4)),  # many small images: uneven chunks
]


def _case(geometry, seed=0):
    n, c, o, h, w, padding, out = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    g = rng.standard_normal((n, o, *out)).astype(np.float32)
    return x, wt, g, padding


def _run(x, w, g, padding, scratch=None):
    res = np.full(g.shape, np.nan, x.dtype)
    gx, gw = np.full(x.shape, np.nan, x.dtype), np.full(w.shape, np.nan, x.dtype)
    assert winograd.wino_forward(x, w, res, padding, scratch)
    assert winograd.wino_input(g, w, gx, padding, scratch)
    assert winograd.wino_weight(x, g, gw, padding, scratch)
    return res, gx, gw


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_kernels_match_the_float64_references(geometry, conv_references):
    x, w, g, padding = _case(geometry)
    for got, want in zip(_run(x, w, g, padding), conv_references(x, w, g, (1, 1), padding, (1, 1))):
        # float32 sums of C*9 (forward) or N*OH*OW*9 (weight) terms, through the transforms'
        # additions: a few units in the last place of the largest entry
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-6 * scale)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_serial_and_parallel_runs_give_the_same_bits(geometry, threads, monkeypatch):
    monkeypatch.setattr(winograd, "PARALLEL_MIN_SIZE", 0)  # these small cases in parallel too
    x, w, g, padding = _case(geometry, seed=1)
    threads(1)
    serial = _run(x, w, g, padding)
    threads(2)
    parallel = _run(x, w, g, padding)
    for a, b in zip(serial, parallel):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("geometry", [GEOMETRIES[1], GEOMETRIES[4]])
def test_a_workspace_holding_other_bytes_changes_nothing(geometry, leftover_workspace):
    x, w, g, padding = _case(geometry, seed=2)
    scratch = lambda key, shape: leftover_workspace(key, shape, np.float32)  # noqa: E731
    fresh = _run(x, w, g, padding)
    for _ in range(2):
        leftover_workspace.refill(np.inf)
        for a, b in zip(fresh, _run(x, w, g, padding, scratch)):
            assert a.tobytes() == b.tobytes()
    keys = {"wino_u", "wino_ut", "wino_xp", "wino_v", "wino_m", "wino_s", "wino_parts"}
    assert keys <= set(leftover_workspace.kept)


@pytest.mark.parametrize("where", ["x", "w", "g"])
@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_an_inf_or_nan_hands_the_call_to_the_image_kernels(where, value):
    # the transforms subtract: inf - inf is NaN where the direct sums give inf
    x, w, g, padding = _case(GEOMETRIES[0], seed=3)
    operands = {"x": x, "w": w, "g": g}
    operands[where][1, 2, 1, 1] = value
    geo = ((1, 1), padding, (1, 1))
    calls = [  # (the dispatcher, the image kernel, the Winograd kernel, operands, result shape)
        (conv2d.conv_image_forward, by_image.conv_image_forward, winograd.wino_forward, "xw"),
        (conv2d.conv_image_input, by_image.conv_image_input, winograd.wino_input, "gw"),
        (conv2d.conv_image_weight, by_image.conv_image_weight, winograd.wino_weight, "xg"),
    ]
    shapes = {"xw": g.shape, "gw": x.shape, "xg": w.shape}
    with np.errstate(invalid="ignore"):
        for chosen, image, wino, names in calls:
            args = [operands[k] for k in names]
            got, want = np.empty(shapes[names], np.float32), np.empty(shapes[names], np.float32)
            served = wino(*args, np.empty(shapes[names], np.float32), padding)
            assert served == (where not in names)
            chosen(*args, got, *geo)
            image(*args, want, *geo)
            if where in names:
                assert got.tobytes() == want.tobytes()
            else:
                assert np.isfinite(got).all()


@pytest.fixture
def counted(monkeypatch):
    """The names of the Winograd kernels called, in order."""
    calls = []
    for name in ("wino_forward", "wino_input", "wino_weight"):
        real = getattr(winograd, name)

        def spy(*args, real=real, name=name):
            calls.append(name)
            return real(*args)

        monkeypatch.setattr(winograd, name, spy)
    return calls


def test_finite_calls_take_the_winograd_kernels(counted):
    calls = counted
    x, w, g, padding = _case(GEOMETRIES[0], seed=4)
    geo = ((1, 1), padding, (1, 1))
    conv2d.conv_image_forward(x, w, np.empty(g.shape, np.float32), *geo)
    conv2d.conv_image_input(g, w, np.empty_like(x), *geo)
    conv2d.conv_image_weight(x, g, np.empty_like(w), *geo)
    assert calls == ["wino_forward", "wino_input", "wino_weight"]
    conv2d.conv_image_forward(x, w, np.empty((5, 32, 4, 4), np.float32), (2, 2), padding, (1, 1))
    conv2d.conv_image_forward(x.astype(np.float64), w.astype(np.float64), np.empty(g.shape), *geo)
    assert len(calls) == 3  # strided and float64 calls keep the image-by-image kernels


def test_images_too_large_for_the_chunks_keep_the_image_kernels(counted, monkeypatch):
    # a chunk holds at least one image: its buffers are bounded by keeping larger images on
    # the image-by-image kernels (8 MiB a buffer a thread: 64 channels up to 90x90)
    assert winograd.fits((90, 90), 64) and not winograd.fits((92, 92), 64)
    assert winograd.fits((128, 128), 32) and not winograd.fits((130, 128), 32)
    x, w, g, padding = _case(GEOMETRIES[0], seed=7)  # 8x8 images: 16 tiles, 32 channels
    geo = ((1, 1), padding, (1, 1))
    monkeypatch.setattr(winograd, "MAX_IMAGE_ENTRIES", 16 * 32 - 1)
    got, want = np.empty(g.shape, np.float32), np.empty(g.shape, np.float32)
    conv2d.conv_image_forward(x, w, got, *geo)
    conv2d.conv_image_weight(x, g, np.empty_like(w), *geo)
    conv2d.conv_image_input(g, w, np.empty_like(x), *geo)
    by_image.conv_image_forward(x, w, want, *geo)
    assert counted == [] and got.tobytes() == want.tobytes()


def test_openblas_keeps_its_thread_count():
    setter, getter = gemm._THREADS
    before = getter()
    try:
        setter(2)
        _run(*_case(GEOMETRIES[0]))
        assert getter() == 2
    finally:
        setter(before)


def test_the_rule():
    assert winograd.applies(np.float32, (32, 32, 3, 3), (1, 1), (1, 1), 1)
    assert winograd.applies(np.dtype("float32"), (64, 48, 3, 3), (1, 1), (1, 1), 1)
    assert not winograd.applies(np.float64, (32, 32, 3, 3), (1, 1), (1, 1), 1)  # float64: direct
    assert not winograd.applies(np.float32, (16, 32, 3, 3), (1, 1), (1, 1), 1)  # few channels
    assert not winograd.applies(np.float32, (32, 16, 3, 3), (1, 1), (1, 1), 1)
    assert not winograd.applies(np.float32, (32, 32, 5, 5), (1, 1), (1, 1), 1)  # 5x5
    assert not winograd.applies(np.float32, (32, 32, 3, 3), (2, 2), (1, 1), 1)  # strided
    assert not winograd.applies(np.float32, (32, 32, 3, 3), (1, 1), (2, 2), 1)  # dilated
    assert not winograd.applies(np.float32, (32, 16, 3, 3), (1, 1), (1, 1), 2)  # grouped
    assert winograd.chunking(100, 49) == (3, 38)  # ~128 tiles a chunk, an even count
    assert winograd.chunking(1, 16) == (1, 1)
    assert winograd.chunking(3, 400) == (1, 3)  # no more chunks than images


def test_a_layer_through_autodiff_matches_float64_and_torch(counted, conv_layer_matches_torch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 32, 9, 9)).astype(np.float32)
    w = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    conv_layer_matches_torch(x, w, b, 1)
    assert sorted(counted) == ["wino_forward", "wino_input", "wino_weight"]


def test_a_compiled_residual_step_equals_eager_bit_for_bit(counted):
    # a ResNet block's shapes (32 channels, 3x3 "same", BatchNorm, ReLU, a residual add, the
    # average pool): the plan replays the Winograd kernels the eager step calls, and an inf in
    # a batch hands both to the image-by-image kernels alike
    import tapegrad as tg
    from tapegrad import nn

    tg.manual_seed(0)
    conv1, conv2 = nn.Conv2d(32, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1)
    bn1, bn2, head = nn.BatchNorm2d(32), nn.BatchNorm2d(32), nn.Linear(32, 3)
    layers = [conv1, conv2, bn1, bn2, head]
    params = [p for m in layers for p in m.parameters()]

    def step(x):
        for p in params:
            p.grad = None
        h = tg.relu(bn1(conv1(x)))
        y = tg.relu(bn2(conv2(h)) + x)
        loss = (head(y.mean(axis=(2, 3))) ** 2).sum()
        loss.backward()
        return loss

    f = tg.compile(step)
    rng = np.random.default_rng(6)
    for k in range(4):
        x = rng.standard_normal((3, 32, 6, 6)).astype(np.float32)
        if k == 3:
            x[1, 2, 3, 4] = np.inf
        calls = len(counted)
        with np.errstate(invalid="ignore", over="ignore"):
            eager_loss = step(x).data.copy()
            eager = [p.grad.copy() for p in params]
            compiled_loss = f(x).data
        assert len(counted) > calls  # Winograd asked in both modes
        assert compiled_loss.tobytes() == eager_loss.tobytes()
        for p, g in zip(params, eager):
            assert np.asarray(p.grad).tobytes() == np.asarray(g).tobytes()
