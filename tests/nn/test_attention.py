"""scaled_dot_product_attention, MultiheadAttention, TransformerEncoderLayer and
TransformerEncoder against torch with torch's weights (values, input and parameter gradients,
masks of every kind, both layouts, float32 and float64), PyTorch's parameter names, eager ==
compiled bit for bit with attention dropout, and errors naming the layer and the shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from nn_helpers import compare_fn_with_torch, compare_with_torch, train_eager_and_compiled

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.nn import functional as F


def _x(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


L, S, N, E, HEADS = 4, 5, 3, 8, 2


def _keep_mask(seed=0, shape=(L, S)):
    m = np.random.default_rng(seed).uniform(size=shape) > 0.4
    m[..., 0] = True
    return m


SDPA = [
    {},
    {"scale": 0.3},
    {"is_causal": True},
    {"attn_mask": "bool"},
    {"attn_mask": "bool_fully_masked_row"},
    {"attn_mask": "float"},
    {"attn_mask": "bool_per_head"},
]


@pytest.mark.parametrize("kw", SDPA, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sdpa_matches_torch(kw, dtype):
    kw = dict(kw)
    mask = kw.pop("attn_mask", None)
    if mask == "bool":
        mask = _keep_mask()
    elif mask == "bool_fully_masked_row":
        mask = _keep_mask()
        mask[2] = False  # query 2 sees nothing: a zero output, as torch's
    elif mask == "float":
        mask = _x((L, S), 5, dtype)
    elif mask == "bool_per_head":
        mask = _keep_mask(1, (N, HEADS, L, S))
    args = [
        _x((N, HEADS, L, E), 1, dtype),
        _x((N, HEADS, S, E), 2, dtype),
        _x((N, HEADS, S, 6), 3, dtype),
    ]
    th_mask = None if mask is None else torch.tensor(mask)
    compare_fn_with_torch(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, attn_mask=th_mask, **kw),
        args,
    )


def test_sdpa_dropout_compiled_equals_eager_and_draws_afresh():
    w = tg.tensor(np.ones(E), requires_grad=True)
    q, k, v = _x((N, L, E), 1), _x((N, S, E), 2), _x((N, S, E), 3)

    def f(rng, q, k, v):
        w.grad = None
        out = F.scaled_dot_product_attention(q * w, k, v, dropout_p=0.3, rng=rng)
        loss = (out * out).sum()
        loss.backward()
        return loss

    r1, r2 = np.random.default_rng(0), np.random.default_rng(0)
    compiled = tg.compile(lambda q, k, v: f(r2, q, k, v))
    values = set()
    for _ in range(3):
        e = f(r1, tg.tensor(q), tg.tensor(k), tg.tensor(v)).item()
        ge = w.grad.copy()
        assert compiled(q, k, v).item() == e
        np.testing.assert_array_equal(w.grad, ge)
        values.add(e)
    assert len(values) == 3
    no_drop = F.scaled_dot_product_attention(q, k, v).data
    mean = np.mean(
        [F.scaled_dot_product_attention(q, k, v, dropout_p=0.3).data for _ in range(400)], axis=0
    )
    np.testing.assert_allclose(mean, no_drop, atol=0.15)  # inverted dropout keeps the mean


MHA = [
    ({}, {}),
    ({"batch_first": True}, {}),
    ({"bias": False}, {"need_weights": False}),
    ({"kdim": 5, "vdim": 7}, {"average_attn_weights": False}),
    ({"add_bias_kv": True}, {"key_padding_mask": "bool"}),
    ({"add_zero_attn": True}, {"attn_mask": "bool", "key_padding_mask": "bool"}),
    (
        {"add_bias_kv": True, "add_zero_attn": True, "batch_first": True},
        {"attn_mask": "float", "key_padding_mask": "float"},
    ),
    ({}, {"attn_mask": "bool3d", "need_weights": False}),
    ({"batch_first": True}, {"attn_mask": "causal", "is_causal": True}),
]


def _masks(call):
    call = dict(call)
    kpm = call.pop("key_padding_mask", None)
    am = call.pop("attn_mask", None)
    if kpm == "bool":
        kpm = ~_keep_mask(3, (N, S))
    elif kpm == "float":
        kpm = _x((N, S), 4, np.float32)
    if am == "bool":
        am = ~_keep_mask(5)
    elif am == "float":
        am = _x((L, S), 6, np.float32)
    elif am == "bool3d":
        am = ~_keep_mask(7, (N * HEADS, L, S))
    elif am == "causal":
        am = np.triu(np.ones((L, S), bool), 1)
    return kpm, am, call


@pytest.mark.parametrize("init, call", MHA, ids=str)
@pytest.mark.parametrize("self_attention", [False, True])
def test_multihead_attention_matches_torch(init, call, self_attention):
    torch.manual_seed(0)
    th = torch.nn.MultiheadAttention(E, HEADS, **init)
    ours = nn.MultiheadAttention(E, HEADS, **init)
    assert list(ours.state_dict()) == list(th.state_dict())
    with torch.no_grad():  # torch starts biases at zero: give them values to check
        for name, p in th.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    bf = init.get("batch_first", False)
    kpm, am, call = _masks(call)
    lay = (lambda s, n, d: (n, s, d)) if bf else (lambda s, n, d: (s, n, d))
    q = _x(lay(L, N, E), 1, np.float32)
    if self_attention:
        if "kdim" in init:
            return
        if am is not None:
            am = am[..., :L] if am.ndim == 2 else am[..., :L]
        if kpm is not None:
            kpm = kpm[:, :L]
        inputs = [q]

        def run_ours(m, x):
            return m(x, x, x, key_padding_mask=kpm, attn_mask=am, **call)

        def run_theirs(m, x):
            return m(
                x,
                x,
                x,
                key_padding_mask=None if kpm is None else torch.tensor(kpm),
                attn_mask=None if am is None else torch.tensor(am),
                **call,
            )
    else:
        inputs = [
            q,
            _x(lay(S, N, init.get("kdim", E)), 2, np.float32),
            _x(lay(S, N, init.get("vdim", E)), 3, np.float32),
        ]

        def run_ours(m, *x):
            return m(*x, key_padding_mask=kpm, attn_mask=am, **call)

        def run_theirs(m, *x):
            return m(
                *x,
                key_padding_mask=None if kpm is None else torch.tensor(kpm),
                attn_mask=None if am is None else torch.tensor(am),
                **call,
            )

    def drop_none(run):
        return lambda m, *x: [o for o in run(m, *x) if o is not None]

    compare_with_torch(ours, th, inputs, drop_none(run_ours), drop_none(run_theirs))


def test_multihead_attention_unbatched_and_float64():
    torch.manual_seed(1)
    th = torch.nn.MultiheadAttention(E, HEADS).double()
    ours = nn.MultiheadAttention(E, HEADS, dtype=np.float64)
    kpm = ~_keep_mask(3, (S,))
    compare_with_torch(
        ours,
        th,
        [_x((L, E), 1), _x((S, E), 2), _x((S, E), 3)],
        lambda m, q, k, v: m(q, k, v, key_padding_mask=kpm),
        lambda m, q, k, v: m(q, k, v, key_padding_mask=torch.tensor(kpm)),
        rtol=1e-10,
        atol=1e-12,
    )


ENCODER = [
    {},
    {"norm_first": True},
    {"activation": "gelu", "batch_first": True},
    {"batch_first": True, "norm_first": True, "bias": False},
]


@pytest.mark.parametrize("kw", ENCODER, ids=str)
@pytest.mark.parametrize("masks", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transformer_encoder_layer_matches_torch(kw, masks, dtype):
    torch.manual_seed(0)
    th = torch.nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=16, dropout=0.0, **kw)
    ours = nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=16, dropout=0.0, dtype=dtype, **kw)
    th = th.double() if dtype == np.float64 else th
    assert list(ours.state_dict()) == list(th.state_dict())
    bf = kw.get("batch_first", False)
    x = _x((N, L, E) if bf else (L, N, E), 1, dtype)
    src_mask = np.triu(np.ones((L, L), bool), 1) if masks else None
    kpm = ~_keep_mask(2, (N, L)) if masks else None

    def t(a):
        return None if a is None else torch.tensor(a)

    tol = {"rtol": 1e-9, "atol": 1e-11} if dtype == np.float64 else {}
    compare_with_torch(
        ours,
        th,
        [x],
        lambda m, x: m(x, src_mask=src_mask, src_key_padding_mask=kpm),
        lambda m, x: m(x, src_mask=t(src_mask), src_key_padding_mask=t(kpm)),
        **tol,
    )


def test_transformer_encoder_matches_torch_and_copies_the_layer():
    torch.manual_seed(0)
    th_layer = torch.nn.TransformerEncoderLayer(E, HEADS, 16, 0.0, batch_first=True)
    th = torch.nn.TransformerEncoder(
        th_layer, 2, norm=torch.nn.LayerNorm(E), enable_nested_tensor=False
    )
    layer = nn.TransformerEncoderLayer(E, HEADS, 16, 0.0, batch_first=True)
    ours = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E))
    assert list(ours.state_dict()) == list(th.state_dict())
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight
    np.testing.assert_array_equal(ours.layers[0].linear1.weight.data, layer.linear1.weight.data)
    assert ours.layers[0].dropout.rng is not ours.layers[1].dropout.rng
    x = _x((N, L, E), 1, np.float32)
    compare_with_torch(
        ours,
        th,
        [x],
        lambda m, x: m(x, is_causal=True),
        lambda m, x: m(
            x, mask=torch.nn.Transformer.generate_square_subsequent_mask(L), is_causal=True
        ),
    )


def test_transformer_training_compiled_equals_eager():
    def build():
        layer = nn.TransformerEncoderLayer(E, HEADS, 16, dropout=0.2, batch_first=True)
        return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(L * E, 3))

    rng = np.random.default_rng(0)
    batches = [
        (rng.standard_normal((N, L, E)).astype(np.float32), rng.integers(0, 3, N)) for _ in range(3)
    ]
    train_eager_and_compiled(build, lambda p: optim.Adam(p, lr=1e-2), batches)


def test_errors_name_the_layer_and_shapes():
    mha = nn.MultiheadAttention(E, HEADS)
    q = tg.tensor(_x((L, N, E), 0, np.float32))
    with pytest.raises(
        tg.ShapeError,
        match=r"MultiheadAttention\(embed_dim=8.*query of shape "
        r"\(L, N, 8\).*\(4, 3, 6\)",
    ):
        mha(tg.tensor(_x((L, N, 6), 0, np.float32)), q, q)
    with pytest.raises(tg.ShapeError, match=r"key_padding_mask must be \(N, S\) = \(3, 4\)"):
        mha(q, q, q, key_padding_mask=np.zeros((N, 7), bool))
    with pytest.raises(tg.ShapeError, match=r"attn_mask must be \(L, S\) = \(4, 4\)"):
        mha(q, q, q, attn_mask=np.zeros((5, 4), bool))
    with pytest.raises(tg.ShapeError, match="share the batch size"):
        mha(q, tg.tensor(_x((S, 2, E), 0, np.float32)), tg.tensor(_x((S, 2, E), 0, np.float32)))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(tg.ShapeError, match="do not fit together"):
        F.scaled_dot_product_attention(_x((2, 3, 4)), _x((2, 5, 3)), _x((2, 5, 3)))
    with pytest.raises(tg.ShapeError, match=r"attn_mask \(3, 7\) does not broadcast"):
        F.scaled_dot_product_attention(
            _x((2, 3, 4)), _x((2, 5, 4)), _x((2, 5, 4)), attn_mask=np.ones((3, 7), bool)
        )
    with pytest.raises(ValueError, match="activation"):
        nn.TransformerEncoderLayer(E, HEADS, activation="tanh")


def test_gradchecks():
    q, k, v = _x((2, 3, 4), 1), _x((2, 5, 4), 2), _x((2, 5, 3), 3)
    keep = _keep_mask(0, (3, 5))
    keep[1] = False  # a query that sees nothing: zero output, zero gradient
    tg.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep), q, k, v)
    tg.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    mha = nn.MultiheadAttention(4, 2, kdim=3, vdim=3, add_bias_kv=True, dtype=np.float64)
    names = [n for n, _ in mha.named_parameters() if "out_proj" not in n]

    def f(query, key, *weights):
        for name, w in zip(names, weights):
            mha.__dict__[name] = w  # the weights as traced inputs
        out, w = mha(query, key, key, key_padding_mask=~_keep_mask(4, (2, 5)))
        return tg.concatenate([tg.flatten(out, 0), tg.flatten(w, 0)], axis=0)

    params = [getattr(mha, n).data for n in names]
    tg.gradcheck(f, _x((3, 2, 4), 5), _x((5, 2, 3), 6), *params)
