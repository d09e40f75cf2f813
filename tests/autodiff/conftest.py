"""Fixtures of the autodiff tests."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def leftover_workspace():
    """``(scratch, kept)``: a plan's workspace as kernels see it, ``scratch(key, shape)`` the
    same buffer per key (first filled with NaN), and ``refill(value)`` writing ``value`` over
    every kept buffer (the bytes another step would leave)."""
    kept: dict = {}

    def scratch(key, shape, dtype=np.float64):
        a = kept.get(key)
        if a is None or a.shape != tuple(shape):
            a = kept[key] = np.full(shape, np.nan, dtype)
        return a

    def refill(value):
        for buf in kept.values():
            buf.fill(value)

    scratch.kept, scratch.refill = kept, refill
    return scratch


@pytest.fixture
def conv_layer_matches_torch():
    """``check(x, w, b, padding)``: ``(conv2d(x, w, b) ** 2).sum()`` and its gradients through
    tapegrad's autodiff (float32) against PyTorch's in float64."""
    torch = pytest.importorskip("torch")
    import tapegrad as tg
    import tapegrad.nn.functional as F

    def check(x, w, b, padding):
        xt, wt, bt = (tg.tensor(a, requires_grad=True) for a in (x, w, b))
        loss = (F.conv2d(xt, wt, bt, padding=padding) ** 2).sum()
        loss.backward()
        tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
        tl = (torch.nn.functional.conv2d(tx, tw, tb, padding=padding) ** 2).sum()
        tl.backward()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5)
        for ours, theirs in ((xt, tx), (wt, tw), (bt, tb)):
            want = theirs.grad.numpy()
            scale = np.abs(want).max()
            np.testing.assert_allclose(np.asarray(ours.grad), want, rtol=0, atol=1e-5 * scale)

    return check


@pytest.fixture
def conv_references():
    """``references(x, w, g, stride, padding, dilation)``: the float64 forward, input gradient
    and weight gradient of the convolution, by the image-by-image kernels' NumPy references."""
    from tapegrad.autodiff.kernels.cpu import by_image

    def references(x, w, g, *geo):
        x, w, g = (a.astype(np.float64) for a in (x, w, g))
        res, gx, gw = np.empty(g.shape), np.empty(x.shape), np.empty(w.shape)
        by_image.conv_image_forward_reference(x, w, res, *geo)
        by_image.conv_image_input_reference(g, w, gx, *geo)
        by_image.conv_image_weight_reference(x, g, gw, *geo)
        return res, gx, gw

    return references
