"""Every layer of ``tapegrad.nn`` forward and backward on the "cuda" device against the CPU:
their outputs and parameter gradients on the device, equal to the CPU's to float64 rounding."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.autodiff import backend


def _layers():
    r = np.random.default_rng
    return {
        "Linear": (lambda: nn.Linear(5, 3, rng=r(0)), (4, 5)),
        "Conv1d": (lambda: nn.Conv1d(2, 3, 3, stride=2, padding=1, rng=r(0)), (2, 2, 9)),
        "Conv2d": (lambda: nn.Conv2d(2, 3, 3, padding=1, rng=r(0)), (2, 2, 5, 5)),
        "MaxPool2d": (lambda: nn.MaxPool2d(2), (2, 3, 6, 6)),
        "AvgPool2d": (lambda: nn.AvgPool2d(3, stride=2, padding=1), (2, 3, 7, 7)),
        "AdaptiveAvgPool1d": (lambda: nn.AdaptiveAvgPool1d(4), (2, 3, 10)),
        "Upsample": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (1, 2, 3, 3)),
        "BatchNorm1d": (lambda: nn.BatchNorm1d(4), (6, 4)),
        "BatchNorm2d": (lambda: nn.BatchNorm2d(3), (2, 3, 4, 4)),
        "LayerNorm": (lambda: nn.LayerNorm(5), (3, 5)),
        "GroupNorm": (lambda: nn.GroupNorm(2, 4), (2, 4, 3)),
        "RNN": (lambda: nn.RNN(3, 4, 2, bidirectional=True, rng=r(0)), (5, 2, 3)),
        "LSTM": (lambda: nn.LSTM(3, 4, batch_first=True, rng=r(0)), (2, 5, 3)),
        "GRU": (lambda: nn.GRU(3, 4, rng=r(0)), (5, 2, 3)),
        "MultiheadAttention": (lambda: nn.MultiheadAttention(4, 2, rng=r(0)), (3, 2, 4)),
        "TransformerEncoderLayer": (
            lambda: nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, rng=r(0)),
            (3, 2, 4),
        ),
    }


def _run(make, shape, device):
    layer = make().double().to(device)
    x = tg.tensor(np.random.default_rng(1).normal(size=shape), requires_grad=True, device=device)
    out = layer(x, x, x) if isinstance(layer, nn.MultiheadAttention) else layer(x)
    out = out[0] if isinstance(out, tuple) else out
    (out * out).sum().backward()
    grads = [p.grad for p in layer.parameters()] + [x.grad]
    return out.data, grads


@pytest.mark.parametrize("name", sorted(_layers()))
def test_layer_on_the_device_matches_the_cpu(name):
    make, shape = _layers()[name]
    want, want_g = _run(make, shape, "cpu")
    got, got_g = _run(make, shape, "cuda")
    assert backend.device_of(got).name == "cuda"
    np.testing.assert_allclose(backend.to_host(got), want, rtol=1e-9, atol=1e-9)
    for a, b in zip(got_g, want_g):
        assert backend.device_of(a).name == "cuda"
        np.testing.assert_allclose(backend.to_host(a), b, rtol=1e-8, atol=1e-9)


def test_causal_and_masked_attention_on_the_device():
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(size=(2, 3, 4, 5)) for _ in range(3))
    mask = rng.uniform(size=(4, 4)) > 0.7
    for kw in ({"is_causal": True}, {"attn_mask": mask}):
        want = nn.functional.scaled_dot_product_attention(*map(tg.tensor, (q, k, v)), **kw)
        dev = [tg.tensor(a, device="cuda") for a in (q, k, v)]
        if "attn_mask" in kw:
            kw = {"attn_mask": tg.tensor(mask, device="cuda")}
        got = nn.functional.scaled_dot_product_attention(*dev, **kw)
        assert got.device == "cuda"
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-12)


def test_dropout_draws_the_cpus_masks_on_the_device():
    x = np.ones((4, 6))
    a = nn.functional.dropout(tg.tensor(x), 0.5, rng=np.random.default_rng(3))
    b = nn.functional.dropout(tg.tensor(x, device="cuda"), 0.5, rng=np.random.default_rng(3))
    assert b.device == "cuda"
    np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_float32_dropout_masks_equal_the_cpus_over_many_counters():
    """The Philox masks' array form on the device: every counter block (entry i from counter
    i // 4), an odd size so the last block is partial, equal to the CPU kernel's bit for bit."""
    x = np.ones((37, 1001), np.float32)
    a = nn.functional.dropout(tg.tensor(x), 0.3, rng=np.random.default_rng(11))
    b = nn.functional.dropout(tg.tensor(x, device="cuda"), 0.3, rng=np.random.default_rng(11))
    assert b.device == "cuda" and b.dtype == np.float32
    np.testing.assert_array_equal(b.numpy(), a.numpy())


@pytest.mark.parametrize("masked", [False, True])
def test_float32_softmax_rows_on_the_device(masked):
    """float32 softmax over the last axis (and causal attention's masked form) through the
    device's softmax kernel, forward and gradient, against the CPU's kernel."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3, 2, 9, 9)).astype(np.float32) * 4
    g = rng.normal(size=x.shape).astype(np.float32)
    keep = np.tril(np.ones((9, 9), bool))
    results = {}
    for device in ("cpu", "cuda"):
        xt = tg.tensor(x, requires_grad=True, device=device)
        if masked:
            y = tg.ops.masked_softmax(xt, tg.tensor(keep, device=device))
        else:
            y = nn.functional.softmax(xt, dim=-1)
        (y * tg.tensor(g, device=device)).sum().backward()
        assert y.device == device
        results[device] = (y.data, xt.grad)
    # the gradient y (g - sum(g y)) is a difference of O(1) float32 terms: a few of their ulps
    for (got, want), atol in zip(zip(results["cuda"], results["cpu"]), (1e-7, 1e-6)):
        assert backend.device_of(got).name == "cuda" and got.dtype == np.float32
        np.testing.assert_allclose(backend.to_host(got), want, rtol=2e-6, atol=atol)


def test_losses_on_the_device():
    rng = np.random.default_rng(4)
    logits, y = rng.normal(size=(5, 3)), rng.integers(0, 3, 5)
    for fn, target in [
        (lambda a, t: nn.functional.cross_entropy(a, t, label_smoothing=0.1, ignore_index=1), y),
        (lambda a, t: nn.functional.nll_loss(nn.functional.log_softmax(a, 1), t), y),
        (nn.functional.mse_loss, rng.normal(size=(5, 3))),
        (nn.functional.binary_cross_entropy_with_logits, rng.uniform(size=(5, 3))),
        (nn.functional.smooth_l1_loss, rng.normal(size=(5, 3))),
    ]:
        want = fn(tg.tensor(logits), tg.tensor(target)).item()
        got = fn(tg.tensor(logits, device="cuda"), tg.tensor(target, device="cuda"))
        assert got.device == "cuda"
        assert got.item() == pytest.approx(want, rel=1e-12)


def test_conv_over_a_channels_last_input_on_the_device():
    """The text CNN's pattern: a conv1d over permuted (N, L, C) embeddings, whose forward is one
    GEMM plus the taps added (``add_taps``) and whose input gradient is laid out like the input;
    on the CPU the sparse gradient takes the direct kernel, on the device the matmul path."""
    x = np.random.default_rng(2).normal(size=(2, 17, 8))
    results = {}
    for device in ("cpu", "cuda"):
        conv = nn.Conv1d(8, 3, 3, rng=np.random.default_rng(0)).double().to(device)
        xt = tg.tensor(x, requires_grad=True, device=device)
        out = nn.functional.max_pool1d(nn.functional.relu(conv(tg.permute(xt, (0, 2, 1)))), 5)
        (out * out).sum().backward()
        results[device] = [out.data, xt.grad, conv.weight.grad, conv.bias.grad]
    for got, want in zip(results["cuda"], results["cpu"]):
        assert backend.device_of(got).name == "cuda"
        np.testing.assert_allclose(backend.to_host(got), want, rtol=1e-9, atol=1e-12)
