"""Convolution's column layouts (per sample, whole batch, image by image in the compiled
kernels) give the same values, the rules pick per shape, and a convolution's gradient is its
adjoint primitives in every mode."""

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.autodiff.kernels.cpu import gemm
from tapegrad.autodiff.primitives import conv, conv_layout

# (x shape, weight shape, stride, padding pairs, dilation, groups): 16 input channels per group
WIDE = [
    ((2, 16, 6, 5), (3, 16, 3, 2), (1, 1), ((1, 1), (0, 1)), (1, 1), 1),
    ((2, 32, 7, 7), (4, 16, 3, 3), (2, 2), ((1, 1), (1, 1)), (2, 1), 2),
    ((3, 16, 9), (2, 16, 3), (2,), ((1, 0),), (1,), 1),  # 1-d with stride: im2col
]


def _grads(xs, ws, stride, padding, dilation, groups, layout, monkeypatch):
    monkeypatch.setattr(conv_layout, "whole_batch", lambda *a: layout == "batch")
    if layout != "image":  # else the rule's own choice
        monkeypatch.setattr(conv_layout, "by_image", lambda *a: False)
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal(xs), requires_grad=True)
    w = tg.tensor(rng.standard_normal(ws), requires_grad=True)
    f = tg.conv1d if len(xs) == 3 else tg.conv2d
    y = f(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    (y * tg.tensor(rng.standard_normal(y.shape))).sum().backward()
    return y.data, x.grad, w.grad


@pytest.mark.parametrize("case", WIDE)
def test_the_layouts_equal_per_sample_and_the_reference(case, monkeypatch):
    sample = _grads(*case, "sample", monkeypatch)
    batch = _grads(*case, "batch", monkeypatch)
    for a, b in zip(sample, batch):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    xs, ws, *_, groups = case
    if conv_layout.by_image(np.zeros(xs), np.zeros(ws), groups):
        for a, b in zip(sample, _grads(*case, "image", monkeypatch)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    ref = conv._conv_reference(
        x, w, stride=stride, padding=padding, dilation=dilation, groups=groups
    )
    np.testing.assert_allclose(batch[0], ref, rtol=1e-12, atol=1e-12)


def test_the_rule_picks_per_shape():
    x1, x16 = np.zeros((2, 1, 8, 8), np.float32), np.zeros((2, 16, 8, 8), np.float32)
    assert not conv_layout.whole_batch(x1, 1, 2)  # seed-cnn's and the ResNet stem's input
    assert conv_layout.whole_batch(x16, 16, 2)
    assert not conv_layout.whole_batch(x16, 8, 2)  # 16 channels in two groups of 8
    w1, w16 = np.zeros((4, 1, 3, 3), np.float32), np.zeros((4, 16, 3, 3), np.float32)
    assert conv_layout.by_image(x16, w16, 1) == gemm.AVAILABLE  # NumPy's OpenBLAS called
    assert not conv_layout.by_image(x1, w1, 1)
    assert not conv_layout.by_image(x16, w16[:, :8], 2)


@pytest.mark.parametrize("channels", [1, 16])
def test_second_derivatives_in_both_layouts_match_torch(channels):
    rng = np.random.default_rng(1)
    x0, w0 = rng.standard_normal((2, channels, 5, 4)), rng.standard_normal((3, channels, 2, 2))

    def penalty(lib, conv2d, tanh, x, w):  # a function of both first derivatives
        loss = (tanh(conv2d(x, w, stride=2, padding=1)) ** 2).sum()
        if lib is torch:
            gx, gw = torch.autograd.grad(loss, [x, w], create_graph=True)
        else:
            gx, gw = tg.gradients(loss, [x, w], create_graph=True)
        return (gx * gx).sum() + (gw * gw).sum()

    x, w = tg.tensor(x0, requires_grad=True), tg.tensor(w0, requires_grad=True)
    got = tg.gradients(penalty(tg, tg.conv2d, tg.tanh, x, w), [x, w])
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    F = torch.nn.functional
    want = torch.autograd.grad(penalty(torch, F.conv2d, torch.tanh, tx, tw), [tx, tw])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.data, b.numpy(), rtol=1e-9, atol=1e-9)


def _train_step(model, opt, x, y):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("channels", [1, 16])
def test_compiled_equals_eager_and_runs_the_adjoint_primitives(channels):
    rng = np.random.default_rng(2)
    x = tg.tensor(rng.standard_normal((3, channels, 6, 6)).astype(np.float32))
    y = tg.tensor(rng.standard_normal((3, 4, 3, 3)).astype(np.float32))
    models, losses = [], []
    for compiled in (False, True):
        model = tg.nn.Sequential(
            tg.nn.Conv2d(channels, 16, 3, padding=1, rng=np.random.default_rng(3)),
            tg.nn.ReLU(),
            tg.nn.Conv2d(16, 4, 3, stride=2, padding=1, rng=np.random.default_rng(4)),
        )
        opt = tg.optim.SGD(model.parameters(), lr=0.1)
        step = tg.compile(_train_step) if compiled else _train_step
        losses.append([float(step(model, opt, x, y).data) for _ in range(4)])
        models.append(model)
        if compiled:
            labels = " ".join(step.all_plans[0].labels)
            assert "conv_transpose" in labels and "conv_weight" in labels
            assert "conv_backward" not in labels
    assert losses[0] == losses[1]
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        np.testing.assert_array_equal(a.data, b.data)
