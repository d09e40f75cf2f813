"""The register-blocked direct convolution kernels (``kernels/cpu/direct.py``) against the
float64 references, over the geometries they take (strides 1 to 3, padding 0 to 2 and
asymmetric, dilation, 1x1 to 5x5 kernels, row lengths that end mid-block, output channels in
sixteens, a last block of 8 or a block of 16 not filled, the dot products' weight gradient for
few input channels with partial groups of channels and taps, batches that split unevenly into
chunks); serial and parallel runs give the same bits; a plan's workspace holding other bytes
changes nothing; an inf or NaN gives the references' result (or, in the input gradient's
kernel, hands the call to the image-by-image kernels); the rules; the dispatchers; and layers
through autodiff against float64 and PyTorch, compiled and eager alike."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import by_image, conv2d, direct

pytestmark = pytest.mark.skipif(not direct.AVAILABLE, reason="numba is not installed")

# (N, C, O, H, W, kernel, stride, padding (top, left), dilation, output size)
GEOMETRIES = [
    (5, 16, 16, 28, 28, (3, 3), (1, 1), (1, 1), (1, 1), (28, 28)),  # the ResNet's, two blocks a row
    (3, 16, 32, 9, 7, (3, 3), (1, 1), (0, 0), (1, 1), (7, 5)),  # "valid", short rows
    (4, 32, 16, 6, 6, (3, 3), (1, 1), (2, 2), (1, 1), (8, 8)),  # "full": the adjoint's padding 0
    (9, 16, 16, 13, 7, (3, 3), (1, 1), (1, 0), (1, 1), (13, 5)),  # asymmetric
    (3, 24, 16, 11, 12, (5, 3), (1, 1), (2, 1), (1, 1), (11, 12)),  # 5x3, 24 input channels
    (2, 16, 16, 12, 12, (3, 3), (1, 1), (2, 2), (2, 2), (12, 12)),  # dilated
    (37, 16, 16, 4, 4, (1, 1), (1, 1), (0, 0), (1, 1), (4, 4)),  # 1x1, many small images
    (5, 16, 32, 28, 28, (3, 3), (2, 2), (1, 1), (1, 1), (14, 14)),  # the ResNet's downsampling
    (4, 32, 48, 14, 14, (1, 1), (2, 2), (0, 0), (1, 1), (7, 7)),  # its projection shortcut
    (3, 16, 16, 17, 19, (3, 3), (3, 2), (1, 2), (1, 1), (6, 11)),  # strides 3 and 2, uneven
    (2, 16, 16, 15, 15, (3, 3), (2, 2), (2, 2), (2, 2), (8, 8)),  # strided and dilated
    # output channels not in sixteens: a last block of 8 (seed-cnn's 6 of 8, 16 + 8) or a block
    # of 16 that 12 fill; the weight gradient as dot products for few input channels (groups of
    # 6 channels and 3 taps, the last ones partial: 7 channels, 4 and 10 taps)
    (17, 1, 6, 28, 28, (3, 3), (1, 1), (0, 0), (1, 1), (26, 26)),  # seed-cnn's
    (3, 1, 7, 9, 20, (2, 2), (1, 1), (1, 0), (1, 1), (10, 19)),
    (4, 2, 24, 12, 13, (5, 1), (2, 1), (2, 0), (1, 1), (6, 13)),  # strided
    (3, 16, 12, 10, 14, (3, 3), (1, 1), (1, 1), (1, 1), (10, 14)),  # 16 channels: image by image
    (2, 1, 16, 30, 30, (3, 3), (1, 1), (1, 1), (1, 1), (30, 30)),  # a ResNet stem's
]


def _takes(x, w, geo):
    """Which of (forward, input gradient, weight gradient) the direct kernels take."""
    o, c = w.shape[:2]
    return (
        direct.used(o) >= direct.MIN_USED,
        geo[0] == (1, 1) and c % direct.LANES == 0,
        o % direct.LANES == 0 or c <= direct.DOTS_MAX_CHANNELS,
    )


def _case(geometry, seed=0):
    n, c, o, h, w, kernel, *_, out = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, *kernel)).astype(np.float32)
    g = rng.standard_normal((n, o, *out)).astype(np.float32)
    return x, wt, g, geometry[6:9]


def _run(x, w, g, geo, scratch=None):
    """The three kernels' results (None for a call a kernel refuses, its result untouched)."""
    res = np.full(g.shape, np.nan, x.dtype)
    gx, gw = np.full(x.shape, np.nan, x.dtype), np.full(w.shape, np.nan, x.dtype)
    got = []
    for out, kernel, args, takes in zip(
        (res, gx, gw),
        (direct.direct_forward, direct.direct_input, direct.direct_weight),
        ((x, w), (g, w), (x, g)),
        _takes(x, w, geo),
    ):
        assert kernel(*args, out, *geo, scratch) == takes
        if not takes:
            assert np.isnan(out).all()
        got.append(out if takes else None)
    return got


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_kernels_match_the_float64_references(geometry, conv_references):
    x, w, g, geo = _case(geometry)
    for got, want in zip(_run(x, w, g, geo), conv_references(x, w, g, *geo)):
        if got is None:
            continue
        # float32 sums of C*KH*KW (forward) or N*OH*OW (weight) terms
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-6 * scale)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_serial_and_parallel_runs_give_the_same_bits(geometry, threads, monkeypatch):
    monkeypatch.setattr(direct, "PARALLEL_MIN_SIZE", 0)  # these small cases in parallel too
    x, w, g, geo = _case(geometry, seed=1)
    threads(1)
    serial = _run(x, w, g, geo)
    threads(2)
    parallel = _run(x, w, g, geo)
    for a, b in zip(serial, parallel):
        assert (a is None and b is None) or a.tobytes() == b.tobytes()


@pytest.mark.parametrize("geometry", [GEOMETRIES[3], GEOMETRIES[9], GEOMETRIES[11], GEOMETRIES[13]])
def test_a_workspace_holding_other_bytes_changes_nothing(geometry, leftover_workspace):
    x, w, g, geo = _case(geometry, seed=2)
    scratch = lambda key, shape, dtype=np.float32: leftover_workspace(key, shape, dtype)  # noqa: E731
    fresh = _run(x, w, g, geo)
    for _ in range(2):
        leftover_workspace.refill(np.inf)
        for a, b in zip(fresh, _run(x, w, g, geo, scratch)):
            assert (a is None and b is None) or a.tobytes() == b.tobytes()
    keys = {"direct_w", "direct_w8", "direct_xp"}
    keys |= (
        {"direct_gt", "direct_parts"} if w.shape[0] % 16 == 0 else {"direct_dots", "direct_sums"}
    )
    if fresh[1] is not None:
        keys |= {"direct_flipped_w", "direct_flipped_w8", "direct_flipped_xp"}
    assert keys <= set(leftover_workspace.kept)


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[11]])
@pytest.mark.parametrize("where", ["x", "w", "g"])
@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_an_inf_or_nan_gives_the_references_result(where, value, geometry):
    # every product the kernels form is one of the definition's (or, in the dots' masked lanes,
    # zero times zero), so an inf or NaN spreads as it does in the image-by-image kernels; only
    # the input gradient's flipped kernel meets the padding's zeros (inf * 0), so a kernel that
    # is not finite leaves that call to them
    x, w, g, geo = _case(geometry, seed=3)
    operands = {"x": x, "w": w, "g": g}
    operands[where][1, min(2, operands[where].shape[1] - 1), 1, 1] = value
    operands[where][0, min(3, operands[where].shape[1] - 1), 0, 0] = value  # at a border
    calls = [  # (the dispatcher, the image kernel, the direct kernel, operands, result shape)
        (conv2d.conv_image_forward, by_image.conv_image_forward, direct.direct_forward, "xw"),
        (conv2d.conv_image_input, by_image.conv_image_input, direct.direct_input, "gw"),
        (conv2d.conv_image_weight, by_image.conv_image_weight, direct.direct_weight, "xg"),
    ]
    shapes = {"xw": g.shape, "gw": x.shape, "xg": w.shape}
    takes = dict(zip(("xw", "gw", "xg"), _takes(x, w, geo)))
    with np.errstate(invalid="ignore"):
        for chosen, image, kernel, names in calls:
            args = [operands[k] for k in names]
            got, want = np.empty(shapes[names], np.float32), np.empty(shapes[names], np.float32)
            mine = np.full(shapes[names], -1.0, np.float32)
            served = kernel(*args, mine, *geo)
            assert served == (takes[names] and (names != "gw" or where != "w"))
            chosen(*args, got, *geo)
            image(*args, want, *geo)
            assert np.array_equal(np.isnan(got), np.isnan(want))
            assert np.array_equal(np.isinf(got), np.isinf(want))
            if served:
                assert np.array_equal(np.isnan(mine), np.isnan(want))
                assert np.array_equal(np.isinf(mine), np.isinf(want))


@pytest.fixture
def counted(monkeypatch):
    """The names of the direct kernels called that served their call, in order."""
    calls = []
    for name in ("direct_forward", "direct_input", "direct_weight"):
        real = getattr(direct, name)

        def spy(*args, real=real, name=name):
            served = real(*args)
            if served:
                calls.append(name)
            return served

        monkeypatch.setattr(direct, name, spy)
    return calls


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_the_dispatcher_takes_the_direct_kernels_where_they_apply(counted):
    x, w, g, geo = _case(GEOMETRIES[0], seed=4)  # 16 channels, 3x3, stride 1
    conv2d.conv_image_forward(x, w, np.empty(g.shape, np.float32), *geo)
    conv2d.conv_image_input(g, w, np.empty_like(x), *geo)
    conv2d.conv_image_weight(x, g, np.empty_like(w), *geo)
    assert counted == ["direct_forward", "direct_input", "direct_weight"]
    x, w, g, geo = _case(GEOMETRIES[7], seed=4)  # strided: the input gradient is by_image's
    conv2d.conv_image_forward(x, w, np.empty(g.shape, np.float32), *geo)
    conv2d.conv_image_input(g, w, np.empty_like(x), *geo)
    conv2d.conv_image_weight(x, g, np.empty_like(w), *geo)
    assert counted[3:] == ["direct_forward", "direct_weight"]
    # float64, and 32 channels 3x3 at stride 1 (Winograd's), keep other kernels
    conv2d.conv_image_forward(x.astype(np.float64), w.astype(np.float64), np.empty(g.shape), *geo)
    x, w, g, geo = _case((2, 32, 32, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1), (8, 8)), seed=5)
    conv2d.conv_image_forward(x, w, np.empty(g.shape, np.float32), *geo)
    assert len(counted) == 5


def test_the_rule(monkeypatch):
    monkeypatch.setattr(direct, "WIDE", True)
    assert direct.applies(np.float32, 1) and direct.applies(np.dtype("float32"), 1)
    assert not direct.applies(np.float64, 1)  # float64: image by image
    assert not direct.applies(np.float32, 2)  # grouped
    monkeypatch.setattr(direct, "WIDE", False)  # no AVX-512: the accumulators would spill
    assert not direct.applies(np.float32, 1)
    # the forward's blocks: rows long enough to fill them, no strided 1x1 layer
    assert direct.rows_pay(28, (16, 16, 3, 3), (1, 1)) and direct.rows_pay(
        14, (32, 16, 3, 3), (2, 2)
    )
    assert not direct.rows_pay(7, (64, 32, 3, 3), (2, 2))
    assert direct.rows_pay(28, (16, 16, 1, 1), (1, 1))
    assert not direct.rows_pay(14, (32, 16, 1, 1), (2, 2))
    # the forward's channel lanes: blocks of 16 and a last block of 8, 3/4 of them used
    assert [direct.used(o) >= direct.MIN_USED for o in (6, 8, 12, 16, 20, 24, 28)] == [True] * 7
    assert [direct.used(o) >= direct.MIN_USED for o in (1, 3, 4, 5, 9, 10, 17)] == [False] * 7
    # the kernels refuse what they do not take, leaving the result untouched: the dispatcher
    # then runs the image-by-image (or few-channel) kernels
    x, w, g, geo = _case(GEOMETRIES[4])  # 24 input channels, 16 output channels
    gx = np.full(x.shape, 7.0, np.float32)
    assert not direct.direct_input(g, w, gx, *geo) and (gx == 7).all()
    res, gw = np.full((3, 10, 11, 12), 7.0, np.float32), np.full((10, 24, 5, 3), 7.0, np.float32)
    w10 = np.zeros((10, 24, 5, 3), np.float32)  # 10 output channels fill 10 of 16 lanes
    assert not direct.direct_forward(x, w10, res, *geo) and (res == 7).all()
    # 10 output channels from 24 input channels: the weight gradient is not the dots'
    assert not direct.direct_weight(x, res, gw, *geo) and (gw == 7).all()


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_the_few_channel_dispatcher_takes_the_direct_kernels_where_they_apply(counted):
    x, w, g, geo = _case(GEOMETRIES[11], seed=4)  # seed-cnn's: one channel to six, 3x3
    want = conv2d.few_channels
    res, gw = np.empty(g.shape, np.float32), np.empty_like(w)
    conv2d.conv_few_forward(x, w, res, geo[1])
    conv2d.conv_few_weight(x, g, gw, geo[1])
    assert counted == ["direct_forward", "direct_weight"]
    ref, gref = np.empty_like(res), np.empty_like(gw)
    want.conv_few_forward(x, w, ref, geo[1])
    want.conv_few_weight(x, g, gref, geo[1])
    np.testing.assert_allclose(res, ref, rtol=0, atol=3e-6 * np.abs(ref).max())
    np.testing.assert_allclose(gw, gref, rtol=0, atol=3e-6 * np.abs(gref).max())
    # 4 output channels fill half a block of 8: the forward keeps the few-channel loops, the
    # weight gradient takes the dots; float64 keeps both loops
    conv2d.conv_few_forward(x, w[:4], res[:, :4].copy(), geo[1])
    conv2d.conv_few_weight(x, g[:, :4].copy(), gw[:4].copy(), geo[1])
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    conv2d.conv_few_forward(x64, w64, np.empty(g.shape), geo[1])
    conv2d.conv_few_weight(x64, g64, np.empty(w.shape), geo[1])
    assert counted[2:] == ["direct_weight"]


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_seed_cnns_layer_through_autodiff_matches_float64_and_torch(
    counted, conv_layer_matches_torch
):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((9, 1, 28, 28)).astype(np.float32)
    w = (rng.standard_normal((6, 1, 3, 3)) / 3).astype(np.float32)
    conv_layer_matches_torch(x, w, rng.standard_normal(6).astype(np.float32), 0)
    assert sorted(counted) == ["direct_forward", "direct_weight"]


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_a_layer_through_autodiff_matches_float64_and_torch(counted, conv_layer_matches_torch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 16, 14, 13)).astype(np.float32)
    w = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    conv_layer_matches_torch(x, w, b, 1)
    assert sorted(counted) == ["direct_forward", "direct_input", "direct_weight"]


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_a_compiled_residual_step_equals_eager_bit_for_bit(counted):
    # a ResNet stage's shapes (16 channels, 3x3 "same", a stride-2 downsampling, BatchNorm,
    # ReLU, a residual add): the plan replays the direct kernels the eager step calls
    import tapegrad as tg
    from tapegrad import nn

    tg.manual_seed(0)
    conv1, conv2 = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 32, 3, stride=2, padding=1)
    bn1, head = nn.BatchNorm2d(16), nn.Linear(32, 3)
    layers = [conv1, conv2, bn1, head]
    params = [p for m in layers for p in m.parameters()]

    def step(x):
        for p in params:
            p.grad = None
        h = tg.relu(bn1(conv1(x)) + x)
        loss = (head(tg.relu(conv2(h)).mean(axis=(2, 3))) ** 2).sum()
        loss.backward()
        return loss

    f = tg.compile(step)
    rng = np.random.default_rng(6)
    for _ in range(3):
        x = rng.standard_normal((3, 16, 14, 14)).astype(np.float32)
        calls = len(counted)
        eager_loss = step(x).data.copy()
        eager = [p.grad.copy() for p in params]
        compiled_loss = f(x).data
        assert len(counted) > calls  # the direct kernels asked in both modes
        assert compiled_loss.tobytes() == eager_loss.tobytes()
        for p, g in zip(params, eager):
            assert np.asarray(p.grad).tobytes() == np.asarray(g).tobytes()


# 1-d rows of a channels-last input (N, L, C in memory): (N, C, O, L, K)
ROWS = [(64, 50, 8, 130, 3), (5, 16, 16, 40, 5), (3, 3, 24, 17, 2), (7, 33, 6, 29, 4)]


def _rows_case(n, c, o, length, k, seed=0):
    rng = np.random.default_rng(seed)
    x = np.moveaxis(rng.standard_normal((n, length, c)).astype(np.float32), -1, 1)
    w = rng.standard_normal((o, c, k)).astype(np.float32)
    return x, w, np.full((n, o, length - k + 1), np.nan, np.float32)


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
@pytest.mark.parametrize("case", ROWS)
def test_rows_of_a_channels_last_input_match_the_float64_reference(case):
    x, w, res = _rows_case(*case)
    assert direct.direct_rows(x, w, res)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), w.shape[2], axis=2)
    want = np.einsum("nclk,ock->nol", windows, w.astype(np.float64))
    np.testing.assert_allclose(res, want, rtol=0, atol=3e-6 * np.abs(want).max())


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_rows_serial_and_parallel_give_the_same_bits_and_refuse_what_they_do_not_take(
    threads, monkeypatch
):
    monkeypatch.setattr(direct, "PARALLEL_MIN_SIZE", 0)
    x, w, res = _rows_case(*ROWS[3], seed=1)
    threads(1)
    assert direct.direct_rows(x, w, res)
    serial = res.copy()
    threads(2)
    assert direct.direct_rows(x, w, res)
    assert serial.tobytes() == res.tobytes()
    # not channels-last; 4 output channels (half a block of 8); rows of 8 outputs: untouched
    untouched = np.full_like(res, 7.0)
    assert not direct.direct_rows(np.ascontiguousarray(x), w, untouched)
    assert not direct.direct_rows(x, w[:4], untouched[:, :4].copy())
    short = np.full((x.shape[0], w.shape[0], 8), 7.0, np.float32)
    assert not direct.direct_rows(x[:, :, :11], w, short)
    assert (untouched == 7).all() and (short == 7).all()


@pytest.mark.skipif(not direct.WIDE, reason="numba does not compile for AVX-512 here")
def test_a_text_cnn_layer_takes_the_rows_and_compiled_equals_eager(monkeypatch):
    # the text CNN's conv1d over a permuted embedding: the rows serve its forward, compiled
    # and eager alike, and the loss and gradients match PyTorch's float64 ones
    torch = pytest.importorskip("torch")
    import tapegrad as tg
    from tapegrad import nn

    calls = []
    real = direct.direct_rows
    monkeypatch.setattr(direct, "direct_rows", lambda *a: calls.append(1) or real(*a))
    tg.manual_seed(0)
    emb, conv = nn.Embedding(40, 20), nn.Conv1d(20, 8, 3)

    def step(ids):
        for p in (emb.weight, conv.weight, conv.bias):
            p.grad = None
        loss = (tg.relu(conv(emb(ids).permute(0, 2, 1))) ** 2).mean()
        loss.backward()
        return loss

    ids = np.random.default_rng(8).integers(0, 40, (6, 30))
    eager = step(ids).data.copy()
    grads = [np.asarray(p.grad).copy() for p in (emb.weight, conv.weight, conv.bias)]
    compiled = tg.compile(step)
    for _ in range(2):
        got = compiled(ids).data
        assert got.tobytes() == eager.tobytes()
        for p, g in zip((emb.weight, conv.weight, conv.bias), grads):
            assert np.asarray(p.grad).tobytes() == g.tobytes()
    assert len(calls) >= 3  # eager, the trace, the replays
    te = torch.tensor(np.asarray(emb.weight.data), dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(np.asarray(conv.weight.data), dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(np.asarray(conv.bias.data), dtype=torch.float64, requires_grad=True)
    h = torch.nn.functional.embedding(torch.tensor(ids), te).permute(0, 2, 1)
    tl = (torch.relu(torch.nn.functional.conv1d(h, tw, tb)) ** 2).mean()
    tl.backward()
    np.testing.assert_allclose(float(eager), tl.item(), rtol=1e-5)
    for ours, theirs in zip(grads, (te, tw, tb)):
        want = theirs.grad.numpy()
        np.testing.assert_allclose(ours, want, rtol=0, atol=1e-5 * np.abs(want).max())
