"""Convolution and max-pooling options against PyTorch: stride, padding (ints, 'same', 'valid',
padding modes), dilation, groups, transposed convolutions (output_padding, output_size), max
pooling's padding, dilation, ceil_mode and indices, and max unpooling; values and gradients in
float64, values in float32, and compiled steps equal to eager ones."""

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn

F = nn.functional
TF = torch.nn.functional
RNG = np.random.default_rng(0)


def _grads(fn, tfn, arrays, tol=1e-10):
    """fn (tapegrad) and tfn (torch) of the same float64 arrays: values and the gradients of
    a random weighting of the output."""
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    tts = [torch.tensor(a, requires_grad=True) for a in arrays]
    tout = tfn(*tts)
    assert out.shape == tuple(tout.shape)
    np.testing.assert_allclose(out.data, tout.detach().numpy(), rtol=tol, atol=tol)
    c = RNG.standard_normal(out.shape)
    (out * c).sum().backward()
    (tout * torch.tensor(c)).sum().backward()
    for t, tt in zip(ts, tts):
        np.testing.assert_allclose(t.grad, tt.grad.numpy(), rtol=tol, atol=tol)


CONV2D = [
    dict(stride=1, padding=0, dilation=1, groups=1),
    dict(stride=2, padding=1, dilation=1, groups=1),
    dict(stride=1, padding="same", dilation=2, groups=1),
    dict(stride=1, padding="valid", dilation=1, groups=2),
    dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=4),
    dict(stride=1, padding="same", dilation=1, groups=1, k=(4, 2)),  # even kernel: asymmetric
]


@pytest.mark.parametrize("case", CONV2D)
def test_conv2d_options_match_torch(case):
    case = dict(case)
    k = case.pop("k", (3, 3))
    g = case["groups"]
    x = RNG.standard_normal((2, 4, 9, 8))
    w = RNG.standard_normal((8, 4 // g, *k))
    b = RNG.standard_normal(8)
    _grads(
        lambda x, w, b: F.conv2d(x, w, b, **case),
        lambda x, w, b: TF.conv2d(x, w, b, **case),
        [x, w, b],
    )
    got = F.conv2d(tg.tensor(x.astype(np.float32)), tg.tensor(w.astype(np.float32)), **case)
    want = TF.conv2d(
        torch.tensor(x, dtype=torch.float32), torch.tensor(w, dtype=torch.float32), **case
    )
    np.testing.assert_allclose(got.data, want.numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(stride=1, padding=2, dilation=1, groups=1),
        dict(stride=3, padding=0, dilation=2, groups=3),
        dict(stride=1, padding="same", dilation=3, groups=1),
    ],
)
def test_conv1d_options_match_torch(case):
    g = case["groups"]
    x, w, b = RNG.standard_normal((3, 6, 17)), RNG.standard_normal((9, 6 // g, 3)), None
    _grads(lambda x, w: F.conv1d(x, w, b, **case), lambda x, w: TF.conv1d(x, w, b, **case), [x, w])


@pytest.mark.parametrize(
    "case",
    [
        dict(stride=1, padding=0, output_padding=0, groups=1, dilation=1),
        dict(stride=2, padding=1, output_padding=1, groups=1, dilation=1),
        dict(stride=3, padding=2, output_padding=2, groups=2, dilation=1),
        dict(stride=2, padding=0, output_padding=1, groups=1, dilation=2),
    ],
)
@pytest.mark.parametrize("d", [1, 2])
def test_conv_transpose_matches_torch(case, d):
    g = case["groups"]
    spatial = (5,) if d == 1 else (5, 4)
    x = RNG.standard_normal((2, 4) + spatial)
    w = RNG.standard_normal((4, 6 // g) + (3,) * d)
    b = RNG.standard_normal(6)
    fn = F.conv_transpose1d if d == 1 else F.conv_transpose2d
    tfn = TF.conv_transpose1d if d == 1 else TF.conv_transpose2d
    _grads(lambda x, w, b: fn(x, w, b, **case), lambda x, w, b: tfn(x, w, b, **case), [x, w, b])


POOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=1, dilation=2),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), dilation=(1, 2), ceil_mode=True),
]


@pytest.mark.parametrize("case", POOL)
def test_max_pool2d_options_match_torch(case):
    x = RNG.permutation(2 * 3 * 9 * 10).reshape(2, 3, 9, 10) * 0.1  # no ties
    _grads(lambda x: F.max_pool2d(x, **case), lambda x: TF.max_pool2d(x, **case), [x])
    out, idx = F.max_pool2d(tg.tensor(x), **case, return_indices=True)
    tout, tidx = TF.max_pool2d(torch.tensor(x), **case, return_indices=True)
    np.testing.assert_array_equal(idx.data, tidx.numpy())
    unpool = dict(
        kernel_size=case["kernel_size"], stride=case.get("stride"), padding=case.get("padding", 0)
    )
    if case.get("dilation", 1) == 1 and not case.get("ceil_mode"):  # unpooling's own geometry
        size = x.shape[2:]
        _grads(
            lambda o: F.max_unpool2d(o, idx, **unpool, output_size=size),
            lambda o: TF.max_unpool2d(o, tidx, **unpool, output_size=size),
            [out.data],
        )


@pytest.mark.parametrize(
    "case",
    [dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), dict(kernel_size=2, dilation=3)],
)
def test_max_pool1d_options_and_unpool_match_torch(case):
    x = RNG.permutation(2 * 3 * 13).reshape(2, 3, 13) * 0.1
    _grads(lambda x: F.max_pool1d(x, **case), lambda x: TF.max_pool1d(x, **case), [x])
    _, idx = F.max_pool1d(tg.tensor(x), **case, return_indices=True)
    _, tidx = TF.max_pool1d(torch.tensor(x), **case, return_indices=True)
    np.testing.assert_array_equal(idx.data, tidx.numpy())
    if case.get("padding"):  # unpooling the padded, ceil-mode pooling back to the input's size
        o = RNG.standard_normal(idx.shape)
        np.testing.assert_array_equal(
            F.max_unpool1d(tg.tensor(o), idx, 3, 2, 1, output_size=(13,)).data,
            TF.max_unpool1d(torch.tensor(o), tidx, 3, 2, 1, output_size=(13,)).numpy(),
        )


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv_layers_with_torchs_weights(mode):
    tlayer = torch.nn.Conv2d(
        4,
        6,
        (3, 2),
        stride=1,
        padding=(1, 1),
        dilation=(1, 2),
        groups=2,
        padding_mode=mode,
        dtype=torch.float64,
    )
    layer = nn.Conv2d(
        4,
        6,
        (3, 2),
        stride=1,
        padding=(1, 1),
        dilation=(1, 2),
        groups=2,
        padding_mode=mode,
        dtype=np.float64,
    )
    layer.load_state_dict({k: v.detach().numpy() for k, v in tlayer.state_dict().items()})
    x = RNG.standard_normal((2, 4, 7, 8))
    np.testing.assert_allclose(
        layer(tg.tensor(x)).data, tlayer(torch.tensor(x)).detach().numpy(), rtol=1e-10, atol=1e-10
    )


def test_conv_transpose_layer_output_size_and_unpool_layers():
    tct = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, dtype=torch.float64)
    ct = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, dtype=np.float64)
    ct.load_state_dict({k: v.detach().numpy() for k, v in tct.state_dict().items()})
    x = RNG.standard_normal((1, 3, 5, 6))
    for size in [(9, 11), (10, 12)]:
        np.testing.assert_allclose(
            ct(tg.tensor(x), output_size=size).data,
            tct(torch.tensor(x), output_size=size).detach().numpy(),
            rtol=1e-10,
            atol=1e-10,
        )
    with pytest.raises(ValueError, match="output_size"):
        ct(tg.tensor(x), output_size=(13, 11))
    pool, unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)
    y = RNG.permutation(64).reshape(1, 1, 8, 8).astype(np.float64)
    out, idx = pool(tg.tensor(y))
    back = unpool(out, idx).data
    np.testing.assert_array_equal(
        back,
        torch.nn.MaxUnpool2d(2)(
            *torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(y))
        ).numpy(),
    )


def test_compiled_step_with_the_options_equals_eager():
    def build():
        tg.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(2, 4, 3, padding="same", dilation=2, groups=2),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
            nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1),
        )

    models = [build(), build()]
    opts = [tg.optim.SGD(m.parameters(), lr=0.1) for m in models]

    def step(model, opt, x):
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tg.compile(lambda x: step(models[1], opts[1], x))
    for _ in range(3):
        x = RNG.standard_normal((2, 2, 9, 9)).astype(np.float32)
        assert step(models[0], opts[0], tg.tensor(x)).item() == compiled(x).item()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        np.testing.assert_array_equal(a.data, b.data)


def test_mistakes_are_named():
    x = tg.tensor(np.zeros((1, 4, 6, 6), np.float32))
    with pytest.raises(tg.ShapeError, match="groups=3 must divide the input channels"):
        F.conv2d(x, tg.tensor(np.zeros((3, 1, 3, 3), np.float32)), groups=3)
    with pytest.raises(tg.ShapeError, match="padding='same' needs stride 1"):
        F.conv2d(x, tg.tensor(np.zeros((2, 4, 3, 3), np.float32)), stride=2, padding="same")
    with pytest.raises(tg.ShapeError, match="output_padding .* must be smaller"):
        F.conv_transpose2d(x, tg.tensor(np.zeros((4, 2, 3, 3), np.float32)), output_padding=1)
    with pytest.raises(tg.ShapeError, match="padding .* must be at most half the kernel"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(4, 4, 3, padding_mode="mirror")
