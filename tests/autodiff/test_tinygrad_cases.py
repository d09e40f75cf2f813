"""tinygrad's test_ops cases that once differed from PyTorch: each checked against PyTorch."""

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F

torch.set_grad_enabled(True)


def _both(a, requires_grad=False):
    """The same values as a tapegrad and a torch tensor."""
    a = np.asarray(a)
    return tg.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _same(ours, theirs, exact=True):
    ours = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    theirs = theirs.detach().numpy()
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    if exact:
        np.testing.assert_array_equal(ours, theirs)
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


# -- 1. edge semantics ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sigmoid_at_extreme_inputs(dtype):
    x, xt = _both(np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], dtype), requires_grad=True)
    y, yt = tg.sigmoid(x), torch.sigmoid(xt)
    _same(y, yt, exact=False)
    y.sum().backward()
    yt.sum().backward()
    assert np.isfinite(x.grad).all()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-6, atol=1e-30)


def test_pow_gradient_at_zero_and_negative_bases():
    base = [0.0, 0.0, 0.0, -2.0, -2.0, -2.0, 3.0, 0.0]
    expo = [0.0, 2.0, -1.0, 2.0, 0.5, 3.0, 0.5, 0.5]
    b, bt = _both(base, requires_grad=True)
    e, et = _both(expo, requires_grad=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = b**e
        (y * 1.0).sum().backward()
    (bt**et).sum().backward()
    _same(y, bt**et)
    np.testing.assert_array_equal(b.grad, bt.grad.numpy())
    np.testing.assert_array_equal(e.grad, et.grad.numpy())


def test_squeeze_of_a_dimension_that_is_not_one_is_a_no_op():
    x, xt = _both(np.zeros((2, 1, 3)))
    for d in (0, 1, 2, -1, (0, 1)):
        assert x.squeeze(d).shape == tuple(xt.squeeze(d).shape)
        assert tg.squeeze(x, d).shape == tuple(torch.squeeze(xt, d).shape)


@pytest.mark.parametrize(
    "op, call",
    [
        ("sum", lambda m, x: m.sum(x, 2)),
        ("var", lambda m, x: m.var(x, 3)),
        ("squeeze", lambda m, x: m.squeeze(x, -3)),
        ("softmax", lambda m, x: m.nn.functional.softmax(x, dim=2)),
        ("cat", lambda m, x: m.cat([x, x], 2)),
        ("flatten", lambda m, x: m.flatten(x, 2)),
    ],
)
def test_out_of_range_dims_raise_index_error_naming_the_op(op, call):
    x, xt = _both(np.ones((2, 3)))
    with pytest.raises(IndexError):
        call(torch, xt)
    with pytest.raises(IndexError, match=f"{op}: dimension"):
        call(tg, x)


def test_clamp_without_bounds_raises_runtime_error():
    x, xt = _both(np.ones(3))
    with pytest.raises(RuntimeError):
        torch.clamp(xt)
    with pytest.raises(RuntimeError, match="at least one"):
        x.clip(None, None)
    with pytest.raises(RuntimeError, match="at least one"):
        tg.clamp(x)
    with pytest.raises(RuntimeError, match="at least one"):
        x.clamp()


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("args", [(0, 10, 4), (-5, 5, 7), (3, -4, 5), (2, 2, 1)])
def test_linspace_with_integer_dtype(dtype, args):
    if dtype == "uint8" and min(args[:2]) < 0:
        return
    _same(
        tg.linspace(*args, dtype=getattr(tg, dtype)),
        torch.linspace(*args, dtype=getattr(torch, dtype)),
    )


@pytest.mark.parametrize("pad", [(-1, 1, 0, -1), (-2, -1), (1, -2, -1, 2), (0, 0, -1, 0, 1, 1)])
def test_negative_padding_crops(pad):
    a = np.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    x, xt = _both(a, requires_grad=True)
    y, yt = F.pad(x, pad, value=7.0), torch.nn.functional.pad(xt, pad, value=7.0)
    _same(y, yt)
    w = np.arange(y.size, dtype=float).reshape(y.shape)
    (y * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


@pytest.mark.parametrize("padding", [(-1, 0), (1, -1)])
def test_negative_conv_padding_raises_as_in_pytorch(padding):
    x, xt = _both(np.ones((1, 1, 5, 5)))
    w, wt = _both(np.ones((1, 1, 2, 2)))
    with pytest.raises(RuntimeError, match="negative padding"):
        torch.nn.functional.conv2d(xt, wt, padding=padding)
    with pytest.raises(RuntimeError, match="padding must be >= 0"):
        F.conv2d(x, w, padding=padding)


@pytest.mark.parametrize(
    "index",
    [
        (slice(None), [0, 1], slice(None), [0, 1]),
        (1, slice(None), slice(1, 4, 2), [0, 2], slice(0, 2)),
        (slice(None), [0, 1], [1, 2]),
        (0, [1, 0], 2),
        ([1, 0], 2, [3, 1]),
        (Ellipsis, 1, [0, 2]),
        (1, None, slice(None), [2, 1, 0]),
        (1, slice(None), np.arange(20).reshape(4, 5) % 3 == 0),
        ([0, 1], slice(None), 2, np.arange(5) % 3 == 0),
    ],
)
def test_advanced_index_dimensions_go_where_pytorch_puts_them(index):
    a = np.arange(2 * 3 * 4 * 5 * 3.0).reshape(2, 3, 4, 5, 3)
    x, xt = _both(a, requires_grad=True)
    t_index = tuple(torch.tensor(p) if isinstance(p, np.ndarray) else p for p in index)
    y, yt = x[index], xt[t_index]
    _same(y, yt)
    w = np.arange(y.size, dtype=float).reshape(y.shape)
    (y * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


# -- 2. reductions and operations ----------------------------------------------------------------
_TIES = np.array([[3.0, 1.0, 2.0, 1.0], [1.0, 1.0, 0.0, 2.0], [3.0, 0.0, 2.0, 1.0]])


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_are_stable_in_both_directions(dim, descending):
    x, xt = _both(_TIES, requires_grad=True)
    v, i = x.sort(dim=dim, descending=descending)
    vt, it = xt.sort(dim=dim, descending=descending, stable=True)
    _same(v, vt)
    _same(i, it)
    _same(tg.sort(x, dim, descending, stable=True)[1], it)
    _same(x.argsort(dim=dim, descending=descending), it)
    _same(tg.argsort(x, dim, descending=descending, stable=True), it)
    w = np.arange(_TIES.size, dtype=float).reshape(_TIES.shape)
    (v * tg.tensor(w)).sum().backward()
    (vt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


@pytest.mark.parametrize("dim", [(0, 1), (1, 2), (0, 2), (-1, 0)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_all_and_any_over_several_dims(dim, keepdim):
    a = np.arange(24).reshape(2, 3, 4) % 5 != 0
    x, xt = _both(a)
    _same(x.all(dim=dim, keepdim=keepdim), xt.all(dim=dim, keepdim=keepdim))
    _same(x.any(dim=dim, keepdim=keepdim), xt.any(dim=dim, keepdim=keepdim))
    _same(tg.all(x, dim=dim, keepdim=keepdim), torch.all(xt, dim=dim, keepdim=keepdim))
    _same(tg.any(~x, dim=dim, keepdim=keepdim), torch.any(~xt, dim=dim, keepdim=keepdim))


@pytest.mark.parametrize("dim", [None, 0, (0, 1), -1])
@pytest.mark.parametrize("correction", [0, 1])
def test_std_mean_and_var_mean(dim, correction):
    x, xt = _both(_TIES, requires_grad=True)
    for ours, theirs in ((tg.std_mean, torch.std_mean), (tg.var_mean, torch.var_mean)):
        s, m = ours(x, dim, correction=correction, keepdim=True)
        st, mt = theirs(xt, dim, correction=correction, keepdim=True)
        _same(s, st, exact=False)
        _same(m, mt, exact=False)
        (s + m * 2).sum().backward()
        (st + mt * 2).sum().backward()
        np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-15)
        x.grad, xt.grad = None, None


def test_softmin_and_normalize():
    a = np.array([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [3.0, 4.0, -1.0]])
    x, xt = _both(a, requires_grad=True)
    w = torch.tensor(np.arange(9.0).reshape(3, 3))
    outs = [
        (F.softmin(x, dim=0), torch.nn.functional.softmin(xt, dim=0)),
        (F.normalize(x, dim=1), torch.nn.functional.normalize(xt, dim=1)),
        (F.normalize(x, p=1, dim=0), torch.nn.functional.normalize(xt, p=1, dim=0)),
    ]
    for y, yt in outs:
        _same(y, yt, exact=False)
    sum((y * tg.tensor(w.numpy())).sum() for y, _ in outs).backward()
    sum((yt * w).sum() for _, yt in outs).backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_masked_select_nonzero_and_finite_tests_as_methods():
    a = np.array([[1.0, np.inf, 0.0], [np.nan, -np.inf, 2.0]])
    x, xt = _both(a)
    for name in ("isinf", "isnan", "isfinite"):
        _same(getattr(x, name)(), getattr(xt, name)())
        _same(getattr(tg, name)(x), getattr(torch, name)(xt))
    _same(x.nonzero(), xt.nonzero())
    for ours, theirs in zip(x.nonzero(as_tuple=True), xt.nonzero(as_tuple=True)):
        _same(ours, theirs)
    m, mt = _both(np.array([[True, False, True], [False, True, True]]))
    _same(x.masked_select(m), xt.masked_select(mt))
    v, vt = _both(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (v.masked_select(m) * tg.tensor(np.arange(4.0))).sum().backward()
    (torch.masked_select(vt, mt) * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(v.grad, vt.grad.numpy())


@pytest.mark.parametrize(
    "spec, shapes",
    [
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
        ("i...,i...->...", [(2, 3, 4), (2, 3, 4)]),
        ("...i,...i->...", [(3, 1, 4), (2, 4)]),
        ("b...d,bd->b...", [(2, 3, 4), (2, 4)]),
    ],
)
def test_einsum_with_ellipsis_on_both_sides(spec, shapes):
    rng = np.random.default_rng(0)
    pairs = [_both(rng.standard_normal(s), requires_grad=True) for s in shapes]
    y = tg.einsum(spec, *[p[0] for p in pairs])
    yt = torch.einsum(spec, *[p[1] for p in pairs])
    _same(y, yt, exact=False)
    y.sum().backward()
    yt.sum().backward()
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bool_mask", [True, False])
def test_attention_with_both_a_mask_and_is_causal_applies_both(bool_mask):
    rng = np.random.default_rng(1)
    q, qt = _both(rng.standard_normal((1, 2, 3, 4)), requires_grad=True)
    k, kt = _both(rng.standard_normal((1, 2, 5, 4)))
    if bool_mask:
        mask = np.array([[0, 1, 1, 1, 1], [1, 0, 1, 1, 1], [1, 1, 1, 0, 1]], bool)
    else:
        mask = rng.standard_normal((3, 5))
    m, mt = _both(mask)
    y = F.scaled_dot_product_attention(q, k, k, attn_mask=m, is_causal=True)
    yt = torch.nn.functional.scaled_dot_product_attention(qt, kt, kt, attn_mask=mt, is_causal=True)
    _same(y, yt, exact=False)
    y.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(q.grad, qt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_pooling_and_interpolate_of_integer_tensors(dtype):
    a = (np.arange(2 * 5 * 6) * 7 % 11 - (5 if dtype != "uint8" else 0)).reshape(1, 2, 5, 6)
    x, xt = _both(a.astype(dtype))
    tf = torch.nn.functional
    for kw in ({}, {"stride": 1}, {"padding": 1}, {"ceil_mode": True}):
        _same(F.max_pool2d(x, 2, **kw), tf.max_pool2d(xt, 2, **kw))
        k = 3 if kw.get("padding") else 2
        if dtype == "int64":  # PyTorch averages int64 only
            _same(F.avg_pool2d(x, k, **kw), tf.avg_pool2d(xt, k, **kw))
            _same(F.avg_pool1d(x[0], k, **kw), tf.avg_pool1d(xt[0], k, **kw))
        else:
            with pytest.raises(NotImplementedError):
                tf.avg_pool2d(xt, k, **kw)
            with pytest.raises(NotImplementedError, match="avg_pool2d"):
                F.avg_pool2d(x, k, **kw)
    v, i = F.max_pool2d(x, 2, return_indices=True)
    vt, it = tf.max_pool2d(xt, 2, return_indices=True)
    _same(v, vt)
    _same(i, it)
    if dtype == "uint8":  # PyTorch's nearest resizing of images
        for mode in ("nearest", "nearest-exact"):
            _same(
                F.interpolate(x, scale_factor=2, mode=mode),
                tf.interpolate(xt, scale_factor=2, mode=mode),
            )
            _same(F.interpolate(x[0], size=9, mode=mode), tf.interpolate(xt[0], size=9, mode=mode))
    calls = [lambda f, t: f.max_pool1d(t[0], 2)]
    if dtype != "uint8":
        calls += [
            lambda f, t: f.interpolate(t, scale_factor=2),
            lambda f, t: f.interpolate(t, scale_factor=2, mode="bilinear"),
        ]
    for call in calls:
        with pytest.raises(NotImplementedError):
            call(tf, xt)
        with pytest.raises(NotImplementedError, match="floating point"):
            call(F, x)


# -- 3. 3-D convolution, pooling and interpolation -----------------------------------------------
def _grads_match(ours, theirs, y, yt, seed=0):
    """Backpropagate the same random output gradient through both and compare."""
    g = np.random.default_rng(seed).standard_normal(tuple(yt.shape))
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    (y * tg.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"stride": 2, "padding": 1},
        {"stride": (1, 2, 1), "padding": (1, 0, 1), "dilation": (2, 1, 1)},
        {"padding": "same"},
        {"groups": 2},
    ],
)
def test_conv3d(kw):
    rng = np.random.default_rng(0)
    arrays = (
        rng.standard_normal((2, 4, 5, 4, 5)),
        rng.standard_normal((6, 4 // kw.get("groups", 1), 3, 2, 3)),
        rng.standard_normal(6),
    )
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    _grads_match(ours, theirs, F.conv3d(*ours, **kw), torch.nn.functional.conv3d(*theirs, **kw))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"stride": 2, "padding": 1},
        {
            "stride": (2, 1, 3),
            "padding": (1, 0, 1),
            "output_padding": (1, 0, 2),
            "dilation": (1, 2, 1),
        },
        {"groups": 2, "stride": (3, 1, 1), "output_padding": (2, 0, 0)},
    ],
)
def test_conv_transpose3d(kw):
    rng = np.random.default_rng(1)
    arrays = (
        rng.standard_normal((2, 4, 3, 4, 3)),
        rng.standard_normal((4, 6 // kw.get("groups", 1), 3, 2, 3)),
        rng.standard_normal(6),
    )
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = F.conv_transpose3d(*ours, **kw)
    _grads_match(ours, theirs, y, torch.nn.functional.conv_transpose3d(*theirs, **kw))


@pytest.mark.parametrize(
    "k, kw",
    [
        (2, {}),
        (3, {"stride": 1, "padding": 1}),
        (3, {"stride": (1, 2, 1), "padding": (1, 0, 1), "dilation": (2, 1, 1), "ceil_mode": True}),
    ],
)
def test_max_pool3d_and_avg_pool3d(k, kw):
    # rounded values: many ties, which must go to the same (first) maximum as PyTorch's
    a = np.round(np.random.default_rng(2).standard_normal((2, 3, 5, 6, 5)))
    x, xt = _both(a, requires_grad=True)
    y, i = F.max_pool3d(x, k, **kw, return_indices=True)
    yt, it = torch.nn.functional.max_pool3d(xt, k, **kw, return_indices=True)
    _same(i, it)
    _grads_match([x], [xt], y, yt)
    x.grad, xt.grad = None, None
    kw = {key: v for key, v in kw.items() if key != "dilation"}
    _grads_match([x], [xt], F.avg_pool3d(x, k, **kw), torch.nn.functional.avg_pool3d(xt, k, **kw))


@pytest.mark.parametrize(
    "kw",
    [
        {"scale_factor": 2, "mode": "trilinear"},
        {"size": (4, 3, 7), "mode": "trilinear", "align_corners": True},
        {"scale_factor": (2, 1, 3), "mode": "nearest"},
        {"size": (5, 5, 5), "mode": "nearest-exact"},
    ],
)
def test_interpolate_of_volumes(kw):
    x, xt = _both(np.random.default_rng(3).standard_normal((1, 2, 3, 4, 5)), requires_grad=True)
    _grads_match([x], [xt], F.interpolate(x, **kw), torch.nn.functional.interpolate(xt, **kw))


def test_3d_modules_match_pytorch_from_the_same_weights():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Conv3d(2, 4, 3, padding=1),
        torch.nn.MaxPool3d(2),
        torch.nn.ConvTranspose3d(4, 3, 2, stride=2),
        torch.nn.AvgPool3d(2, stride=1),
    ).double()
    ours = tg.nn.Sequential(
        tg.nn.Conv3d(2, 4, 3, padding=1),
        tg.nn.MaxPool3d(2),
        tg.nn.ConvTranspose3d(4, 3, 2, stride=2),
        tg.nn.AvgPool3d(2, stride=1),
    )
    for (_, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert p.shape == tuple(q.shape)
        p.data = q.detach().numpy().copy()
    a = np.random.default_rng(4).standard_normal((2, 2, 4, 4, 4))
    x, xt = _both(a, requires_grad=True)
    _grads_match([x, *ours.parameters()], [xt, *theirs.parameters()], ours(x), theirs(xt))


def test_3d_layers_compiled_equal_eager_bit_for_bit():
    model = tg.nn.Sequential(tg.nn.Conv3d(1, 2, 2), tg.nn.MaxPool3d(2, return_indices=False))

    def step(x):
        for p in model.parameters():
            p.grad = None
        loss = (model(x) ** 2).sum()
        loss.backward()
        return loss

    compiled = tg.compile(step)
    for seed in range(3):
        x = tg.tensor(np.random.default_rng(seed).standard_normal((2, 1, 5, 5, 5), np.float32))
        eager = step(x).item(), [p.grad.copy() for p in model.parameters()]
        replay = compiled(x).item(), [p.grad.copy() for p in model.parameters()]
        assert eager[0] == replay[0]
        for a, b in zip(eager[1], replay[1]):
            np.testing.assert_array_equal(a, b)


def test_3d_convolution_names_itself_in_errors():
    x = tg.tensor(np.zeros((1, 2, 3, 3, 3)))
    with pytest.raises(TypeError, match="conv3d: input float64 and weight float32"):
        F.conv3d(x, tg.tensor(np.zeros((1, 2, 1, 1, 1), np.float32)))
    with pytest.raises(ValueError, match="conv3d: input .* has 2 channels"):
        F.conv3d(x, tg.tensor(np.zeros((1, 3, 1, 1, 1))))
    with pytest.raises(ValueError, match="max_pool3d: input must be"):
        F.max_pool3d(x[0, 0], 2)


# -- 4. bitcast: Tensor.view(dtype) --------------------------------------------------------------
@pytest.mark.parametrize(
    "src, dst",
    [
        ("float32", "int32"),
        ("float32", "int16"),
        ("float32", "float64"),
        ("float32", "uint8"),
        ("int64", "float64"),
        ("uint8", "float32"),
        ("int16", "uint8"),
    ],
)
def test_view_dtype_reads_the_same_bytes(src, dst):
    a = (np.arange(-8, 8).reshape(2, 8) * 1.37).astype(src)
    x, xt = _both(a)
    _same(x.view(getattr(tg, dst)), xt.view(getattr(torch, dst)))
    _same(x.bitcast(getattr(tg, dst)), xt.view(getattr(torch, dst)))


def test_view_dtype_errors_where_pytorch_raises():
    cases = [
        (tg.ones(3), torch.ones(3), "float64"),  # 3 float32 do not make whole float64s
        (tg.ones((3, 4)).T, torch.ones(3, 4).t(), "int16"),  # the last axis is not contiguous
        (tg.tensor(np.float32(1.0)), torch.tensor(1.0), "int16"),  # 0-d: no item size change
    ]
    for ours, theirs, dst in cases:
        assert ours.shape == tuple(theirs.shape) and ours.dtype == np.float32
        with pytest.raises(RuntimeError):
            theirs.view(getattr(torch, dst))
        with pytest.raises(RuntimeError, match="bitcast: cannot view"):
            ours.view(getattr(tg, dst))
    x = tg.tensor(np.float32(1.5))
    assert x.view(tg.int32).item() == torch.tensor(1.5).view(torch.int32).item()
