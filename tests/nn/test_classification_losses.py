"""cross_entropy (class weights, ignore_index, label smoothing, probability targets, (N, C,
d1, ...) inputs), nll_loss, the binary cross-entropies with weight / pos_weight, the cosine
losses, and the loss modules with PyTorch's constructor arguments, all against torch (values
and gradients, float64 and float32); compiled steps follow each call's labels bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from nn_helpers import compare_fn_with_torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F

C = 5


def _x(shape, seed=0, dtype=np.float64, scale=2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _labels(shape, seed=1, ignore=None):
    y = np.random.default_rng(seed).integers(0, C, shape)
    if ignore is not None:
        y.flat[::3] = ignore
    return y


CE = [
    {},
    {"weight": True},
    {"ignore_index": 2},
    {"ignore_index": -100, "ignored": True},
    {"label_smoothing": 0.2},
    {"weight": True, "ignore_index": 1, "label_smoothing": 0.3},
    {"weight": True, "ignored": True},
]


@pytest.mark.parametrize("opts", CE, ids=str)
@pytest.mark.parametrize("shape", [(6, C), (3, C, 4), (2, C, 3, 2), (C,)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_and_nll_with_class_ids(opts, shape, reduction, dtype):
    opts = dict(opts)
    w = _x((C,), 7, dtype, 0.5) ** 2 + 0.1 if opts.pop("weight", False) else None
    ignored = opts.pop("ignored", False)
    ignore = opts.get("ignore_index", -100)
    label_shape = (shape[0], *shape[2:]) if len(shape) > 1 else ()
    y = _labels(label_shape, ignore=ignore if (ignored or "ignore_index" in opts) else None)
    if not label_shape:
        y = np.array(3)
    kw = dict(opts, reduction=reduction)
    tw = None if w is None else torch.tensor(w)
    compare_fn_with_torch(
        lambda x: F.cross_entropy(x, y, w, **kw),
        lambda x: TF.cross_entropy(x, torch.tensor(y), tw, **kw),
        [_x(shape, dtype=dtype)],
    )
    if "label_smoothing" not in opts:
        compare_fn_with_torch(
            lambda x: F.nll_loss(F.log_softmax(x, axis=1 if len(shape) > 1 else 0), y, w, **kw),
            lambda x: TF.nll_loss(
                TF.log_softmax(x, dim=1 if len(shape) > 1 else 0), torch.tensor(y), tw, **kw
            ),
            [_x(shape, dtype=dtype)],
        )


@pytest.mark.parametrize(
    "opts",
    [{}, {"weight": True}, {"label_smoothing": 0.25}, {"weight": True, "label_smoothing": 0.1}],
    ids=str,
)
@pytest.mark.parametrize("shape", [(6, C), (3, C, 4), (C,)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_with_probabilities(opts, shape, reduction, dtype):
    opts = dict(opts)
    w = _x((C,), 7, dtype, 0.5) ** 2 + 0.1 if opts.pop("weight", False) else None
    axis = 1 if len(shape) > 1 else 0
    p = np.exp(_x(shape, 3))
    p = (p / p.sum(axis=axis, keepdims=True)).astype(dtype)
    kw = dict(opts, reduction=reduction)
    compare_fn_with_torch(
        lambda x, t: F.cross_entropy(x, t, w, **kw),
        lambda x, t: TF.cross_entropy(x, t, None if w is None else torch.tensor(w), **kw),
        [_x(shape, dtype=dtype), p],
    )


def test_every_label_ignored_gives_nan_like_torch():
    x = _x((3, C))
    y = np.full(3, -100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy warning on the way
        got = F.cross_entropy(tg.tensor(x), y, np.ones(C)).item()
    assert np.isnan(got) and np.isnan(
        TF.cross_entropy(
            torch.tensor(x), torch.tensor(y), torch.ones(C, dtype=torch.float64)
        ).item()
    )
    assert F.cross_entropy(tg.tensor(x), y, reduction="sum").item() == 0.0


def test_plain_cross_entropy_keeps_the_fused_kernel():
    x, y = tg.tensor(_x((6, C), dtype=np.float32), requires_grad=True), _labels(6)
    np.testing.assert_array_equal(
        F.cross_entropy(x, y).data, tg.softmax_cross_entropy(x, y, reduction="mean").data
    )
    assert F.cross_entropy(x, y)._node.prim.name == "softmax_cross_entropy"
    assert F.cross_entropy(x, y, ignore_index=0)._node.prim.name != "softmax_cross_entropy"


@pytest.mark.parametrize(
    "loss",
    [
        lambda x, y: F.cross_entropy(x, y, ignore_index=0),
        lambda x, y: F.cross_entropy(x, y, np.linspace(0.5, 2, C, dtype=np.float32)),
        lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1, reduction="sum"),
        lambda x, y: F.nll_loss(F.log_softmax(x, 1), y, ignore_index=3),
        lambda x, y: F.cross_entropy(
            tg.reshape(x, (2, 3, C)).permute((0, 2, 1)), tg.reshape(y, (2, 3)), ignore_index=1
        ),
    ],
)
def test_compiled_losses_follow_each_calls_labels(loss):
    w = tg.tensor(np.ones(C, np.float32), requires_grad=True)

    def f(x, y):
        w.grad = None
        out = loss(x * w, y)
        out.backward()
        return out

    compiled = tg.compile(f)
    for k in range(4):
        x = _x((6, C), k, np.float32)
        y = _labels(6, seed=10 + k)
        y[k] = 0 if k % 2 else 3  # ignored labels come and go between calls
        want = f(tg.tensor(x), y).item()
        g = w.grad.copy()
        assert compiled(x, y).item() == want, k
        np.testing.assert_array_equal(w.grad, g)


def test_a_replayed_fused_step_refuses_a_label_it_was_not_traced_with():
    compiled = tg.compile(lambda x, y: F.cross_entropy(x, y))
    compiled(_x((4, C), dtype=np.float32), _labels(4))
    with pytest.raises(tg.ShapeError, match=r"class id -100 is out of range \[0, 5\)"):
        compiled(_x((4, C), dtype=np.float32), np.array([0, 1, -100, 2]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "opts",
    [
        {"weight": "full"},
        {"weight": "row"},
        {"pos_weight": True},
        {"weight": "row", "pos_weight": True},
    ],
    ids=str,
)
def test_binary_cross_entropies_with_weights(reduction, dtype, opts):
    shape = (4, 3)
    t = np.random.default_rng(2).uniform(size=shape).astype(dtype)
    w = {"full": _x(shape, 5, dtype) ** 2, "row": _x((3,), 5, dtype) ** 2, None: None}[
        opts.get("weight")
    ]
    pw = _x((3,), 6, dtype) ** 2 + 0.5 if opts.get("pos_weight") else None
    th = {
        "weight": None if w is None else torch.tensor(w),
        "pos_weight": None if pw is None else torch.tensor(pw),
    }
    compare_fn_with_torch(
        lambda x: F.binary_cross_entropy_with_logits(x, t, w, reduction=reduction, pos_weight=pw),
        lambda x: TF.binary_cross_entropy_with_logits(
            x, torch.tensor(t), reduction=reduction, **th
        ),
        [_x(shape, dtype=dtype, scale=4.0)],
    )
    if pw is None:
        p = np.random.default_rng(3).uniform(0.05, 0.95, shape).astype(dtype)
        compare_fn_with_torch(
            lambda x: F.binary_cross_entropy(x, t, w, reduction=reduction),
            lambda x: TF.binary_cross_entropy(
                x, torch.tensor(t), th["weight"], reduction=reduction
            ),
            [p],
        )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cosine_embedding_loss_and_similarity(reduction):
    y = np.array([1, -1, 1, -1, -1])
    compare_fn_with_torch(
        lambda a, b: F.cosine_embedding_loss(a, b, y, margin=0.2, reduction=reduction),
        lambda a, b: TF.cosine_embedding_loss(
            a, b, torch.tensor(y), margin=0.2, reduction=reduction
        ),
        [_x((5, 4), 1), _x((5, 4), 2)],
    )
    compare_fn_with_torch(
        lambda a, b: nn.CosineSimilarity(dim=0)(a, b),
        lambda a, b: torch.nn.CosineSimilarity(dim=0)(a, b),
        [_x((5, 4), 1), _x((5, 4), 2)],
    )


def test_loss_modules_take_pytorchs_constructor_arguments():
    x = _x((6, C, 2))
    y = _labels((6, 2), ignore=4)
    w = np.linspace(0.5, 1.5, C)
    pairs = [
        (
            nn.CrossEntropyLoss(w, None, 4, None, "sum", 0.1),
            torch.nn.CrossEntropyLoss(torch.tensor(w), None, 4, None, "sum", 0.1),
        ),
        (nn.NLLLoss(w, ignore_index=4), torch.nn.NLLLoss(torch.tensor(w), ignore_index=4)),
    ]
    for ours, theirs in pairs:
        compare_fn_with_torch(
            lambda a, ours=ours: ours(a, y), lambda a, th=theirs: th(a, torch.tensor(y)), [x]
        )
    t = np.random.default_rng(0).uniform(size=(4, 3))
    pw = np.array([1.0, 2.0, 3.0])
    compare_fn_with_torch(
        lambda a: nn.BCEWithLogitsLoss(pos_weight=pw)(a, t),
        lambda a: torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw))(a, torch.tensor(t)),
        [_x((4, 3))],
    )
    compare_fn_with_torch(
        lambda a: nn.BCELoss(pw, reduction="none")(a, t),
        lambda a: torch.nn.BCELoss(torch.tensor(pw), reduction="none")(a, torch.tensor(t)),
        [np.full((4, 3), 0.3)],
    )
    compare_fn_with_torch(
        lambda a, b: nn.CosineEmbeddingLoss(0.1)(a, b, np.array([1, -1, 1])),
        lambda a, b: torch.nn.CosineEmbeddingLoss(0.1)(a, b, torch.tensor([1, -1, 1])),
        [_x((3, 4), 1), _x((3, 4), 2)],
    )
    with warnings.catch_warnings():  # torch warns that the flags are deprecated
        warnings.simplefilter("ignore", UserWarning)
        for sa, red in ((False, None), (None, False), (True, True)):
            ours, theirs = nn.MSELoss(sa, red), torch.nn.MSELoss(sa, red)
            assert ours.reduction == theirs.reduction, (sa, red)
            ours, theirs = nn.L1Loss(sa, red), torch.nn.L1Loss(sa, red)
            assert ours.reduction == theirs.reduction, (sa, red)
    assert nn.SmoothL1Loss(beta=0.5).beta == 0.5 and nn.KLDivLoss(reduction="batchmean")
    with pytest.raises(TypeError, match="CrossEntropyLoss: weight must be an array.*reduction="):
        nn.CrossEntropyLoss("sum")
    with pytest.raises(TypeError, match=r"NLLLoss: size_average is PyTorch's deprecated"):
        nn.NLLLoss(None, "mean")


def test_loss_errors():
    x = tg.tensor(_x((4, C, 3)))
    with pytest.raises(
        tg.ShapeError, match=r"labels must have shape \(4, 3\).*\(4, 5, 3\).*\(4,\)"
    ):
        F.cross_entropy(x, np.zeros(4, int))
    with pytest.raises(IndexError, match=r"label 7 is out of range for 5 classes"):
        F.nll_loss(x, np.full((4, 3), 7))
    with pytest.raises(tg.ShapeError, match=r"weight must have shape \(5,\), got \(3,\)"):
        F.cross_entropy(x, np.zeros((4, 3), int), np.ones(3))
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        F.cross_entropy(x, np.zeros((4, 3), int), label_smoothing=1.5)
    with pytest.raises(
        tg.ShapeError, match=r"pos_weight \(4,\) does not broadcast to input \(2, 3\)"
    ):
        F.binary_cross_entropy_with_logits(_x((2, 3)), np.zeros((2, 3)), pos_weight=np.ones(4))
    with pytest.raises(TypeError, match="integer class ids"):
        F.nll_loss(x, np.zeros((4, 3)))


def test_gradchecks():
    x = _x((4, C, 2))
    y = _labels((4, 2), ignore=1)
    w = np.linspace(0.5, 2.0, C)
    tg.gradcheck(lambda x: F.cross_entropy(x, y, w, ignore_index=1, label_smoothing=0.2), x)
    p = np.exp(_x((4, C, 2), 3))
    p /= p.sum(axis=1, keepdims=True)
    tg.gradcheck(lambda x, t: F.cross_entropy(x, t, w, label_smoothing=0.1), x, p)
    t = np.random.default_rng(2).uniform(size=(4, 3))
    tg.gradcheck(
        lambda x: F.binary_cross_entropy_with_logits(x, t, t + 0.5, pos_weight=w[:3]), _x((4, 3))
    )
    tg.gradcheck(
        lambda a, b: F.cosine_embedding_loss(a, b, np.array([1, -1, -1, 1]), 0.1),
        _x((4, 3), 4),
        _x((4, 3), 5),
    )
