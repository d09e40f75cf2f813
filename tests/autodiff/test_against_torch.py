"""The same expressions in tapegrad and PyTorch: values and gradients agree in float32."""

import numpy as np
import pytest
import torch

import tapegrad as tg

EXPRESSIONS = {
    "mlp": (
        lambda m, w, b, x: ((x @ w + b).tanh() @ w.T).sigmoid().sum(),
        lambda T, w, b, x: T.sigmoid(T.tanh(x @ w + b) @ w.T).sum(),
    ),
    "softmax_mix": (
        lambda m, w, b, x: (x.softmax(axis=-1) * x.log_softmax(axis=0)).mean(),
        lambda T, w, b, x: (T.softmax(x, -1) * T.log_softmax(x, 0)).mean(),
    ),
    "lse_max": (
        lambda m, w, b, x: x.logsumexp(axis=1).sum() + (x @ w).max(axis=0).sum(),
        lambda T, w, b, x: T.logsumexp(x, 1).sum() + (x @ w).amax(0).sum(),
    ),
    "pow_div_sqrt": (
        lambda m, w, b, x: ((w * w + 1.0).sqrt() / (b.abs() + 2.0) ** 1.5).sum(),
        lambda T, w, b, x: ((w * w + 1.0).sqrt() / (b.abs() + 2.0) ** 1.5).sum(),
    ),
    "shapes": (
        lambda m, w, b, x: (
            m.concatenate([x, x[:, ::-1] * 2], axis=1)
            .permute((1, 0))
            .reshape((-1,))[::3]
            .exp()
            .sum()
            + m.stack([b, b * b], axis=0).min(axis=0).sum()
        ),
        lambda T, w, b, x: (
            T.cat([x, T.flip(x, [1]) * 2], 1).permute(1, 0).reshape(-1)[::3].exp().sum()
            + T.stack([b, b * b], 0).amin(0).sum()
        ),
    ),
    "where_clip_relu": (
        lambda m, w, b, x: (
            m.where(x > 0, x.relu() * 3, x.clip(-0.5, 0.5)).sum() + m.maximum(x, 0.25).mean()
        ),
        lambda T, w, b, x: (
            T.where(x > 0, T.relu(x) * 3, T.clamp(x, -0.5, 0.5)).sum()
            + T.maximum(x, T.tensor(0.25)).mean()
        ),
    ),
    "batched_matmul": (
        lambda m, w, b, x: (x.reshape((2, 3, 4)) @ w).sin().cos().sum(),
        lambda T, w, b, x: T.cos(T.sin(x.reshape(2, 3, 4) @ w)).sum(),
    ),
    "pad_index": (
        lambda m, w, b, x: (m.pad(x, ((1, 0), (0, 2)), 0.5)[np.array([0, 2, 2])] ** 2).sum(),
        lambda T, w, b, x: (T.nn.functional.pad(x, (0, 2, 1, 0), value=0.5)[[0, 2, 2]] ** 2).sum(),
    ),
}


@pytest.mark.parametrize("name", sorted(EXPRESSIONS))
def test_expression_matches_torch(name):
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=s).astype(np.float32) for s in [(4, 5), (5,), (6, 4)]]
    arrays[2] = np.where(np.abs(arrays[2]) < 0.05, 0.2, arrays[2]).astype(np.float32)
    ours_f, theirs_f = EXPRESSIONS[name]
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = ours_f(tg, *ours)
    ref = theirs_f(torch, *theirs)
    out.backward()
    ref.backward()
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5, atol=1e-5)
    for o, t in zip(ours, theirs):
        expected = np.zeros_like(o.data) if t.grad is None else t.grad.numpy()
        got = np.zeros_like(o.data) if o.grad is None else o.grad
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
