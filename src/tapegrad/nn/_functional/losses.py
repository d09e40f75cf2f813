"""Loss functions: classification (``cross_entropy``, ``nll_loss``, the binary cross-entropies),
regression (``mse_loss``, ``l1_loss``, ``smooth_l1_loss``, ``huber_loss``), ``kl_div``,
``cosine_similarity`` and ``cosine_embedding_loss``.

Argument orders are PyTorch's, including its deprecated ``size_average``/``reduce`` flags (a
string passed where one of them stands is refused, naming ``reduction=``). ``reduction`` is
"mean", "sum" or "none".

Targets stay tensors from end to end: in a compiled step the labels are an input of the plan,
so every value computed from them (which entries are ignored, which log-probability each row
picks, the per-sample weights) goes through tapegrad operations and follows each call's labels.
A row picks its class by comparing the labels with ``arange(C)``, which also drops labels equal
to ``ignore_index``. The plain cases take the engine's fused kernels: ``cross_entropy`` with no
class weights, no smoothing and no ignored label (while ``ignore_index`` lies outside
``[0, C)``, where a replayed batch holding it raises rather than counting it), and
``binary_cross_entropy_with_logits`` without ``weight``/``pos_weight``.
"""

from __future__ import annotations

import numpy as np

from ...autodiff import backend, ops
from ...autodiff.backend import beside
from ...autodiff.errors import DTypeError, ShapeError
from ...autodiff.tensor import Tensor

ArrayLike = Tensor | np.ndarray
_REDUCTIONS = ("mean", "sum", "none")


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _check_reduction(fname: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{fname}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def legacy_reduction(fname: str, size_average, reduce, reduction: str) -> str:
    """``reduction`` from PyTorch's deprecated ``size_average``/``reduce`` flags when either
    is given (``reduce=False``: "none"; else ``size_average=False``: "sum"; else "mean")."""
    for flag, v in (("size_average", size_average), ("reduce", reduce)):
        if v is not None and not isinstance(v, (bool, np.bool_)):
            raise TypeError(
                f"{fname}: {flag} is PyTorch's deprecated flag (a bool), got {v!r}; pass "
                f"reduction=... (and weights) by keyword"
            )
    if size_average is None and reduce is None:
        _check_reduction(fname, reduction)
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _target_array(target) -> np.ndarray:
    t = target.data if isinstance(target, Tensor) else target
    return t if backend.is_array(t) else np.asarray(t)


def _float_target(fname: str, target, logits: Tensor):
    """Float targets must share the logits' dtype; integer/bool ones are lifted to it."""
    arr = _target_array(target)
    if arr.dtype.kind in "biu":
        return (
            ops.astype(target, logits.dtype)
            if isinstance(target, Tensor)
            else arr.astype(logits.dtype)
        )
    if arr.dtype.kind != "f":
        raise TypeError(f"{fname}: target must be numeric, got dtype {arr.dtype}")
    if arr.dtype != logits.dtype:
        raise DTypeError(
            f"{fname}: target has dtype {arr.dtype}, input has {logits.dtype}; cast one "
            f"explicitly (PyTorch refuses this pair too)"
        )
    return target if isinstance(target, Tensor) else arr


# The losses PyTorch computes in the wider dtype when the input and a float target differ
_PROMOTING = (
    "cross_entropy",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "kl_div",
    "binary_cross_entropy_with_logits",
)


def _promoted(fname: str, x: Tensor, target):
    """``(x, target)`` lifted to the wider float dtype of the two where PyTorch promotes
    (``_PROMOTING``): a float32 model's loss against a float64 target is float64, and the
    input's gradient comes back in its own dtype (through the recorded cast)."""
    arr = _target_array(target)
    if fname not in _PROMOTING or arr.dtype.kind != "f" or x.dtype.kind != "f":
        return x, target
    if arr.dtype == x.dtype:
        return x, target
    wide = np.promote_types(arr.dtype, x.dtype)
    if x.dtype != wide:
        x = ops.astype(x, wide)
    if arr.dtype != wide:
        target = ops.astype(target, wide) if isinstance(target, Tensor) else arr.astype(wide)
    return x, target


def _weight_vector(fname: str, weight, c: int, dtype) -> np.ndarray | Tensor | None:
    if weight is None:
        return None
    if isinstance(weight, str):
        raise TypeError(
            f"{fname}: weight must be class weights ({c},), got the string {weight!r}; pass "
            f"reduction=... by keyword"
        )
    arr = _target_array(weight)
    if arr.shape != (c,):
        raise ShapeError(f"{fname}: weight must have shape ({c},), got {arr.shape}")
    if isinstance(weight, Tensor):
        return weight if weight.dtype == dtype else ops.astype(weight, dtype)
    return arr.astype(dtype)


def _reduce(per: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return ops.mean(per)
    if reduction == "sum":
        return ops.sum(per)
    return per


# -- class labels: nll_loss and cross_entropy ------------------------------------------------------
def _class_rows(fname: str, x: Tensor, what: str):
    """``x (N, C, d1, ...)``, ``(N, C)`` or ``(C,)`` as rows ``(M, C)`` (classes last), with
    the label shape that goes with it."""
    if x.ndim == 0:
        raise ShapeError(f"{fname}: {what} must be (N, C), (N, C, d1, ...) or (C,), got ()")
    if x.ndim == 1:
        return ops.reshape(x, (1, x.shape[0])), ()
    if x.ndim == 2:
        return x, (x.shape[0],)
    moved = ops.permute(x, (0, *range(2, x.ndim), 1))
    return ops.reshape(moved, (-1, x.shape[1])), (x.shape[0], *x.shape[2:])


def _check_labels(fname: str, ids: np.ndarray, shape, x_shape, c: int, ignore_index: int):
    if ids.shape != tuple(shape):
        raise ShapeError(
            f"{fname}: integer labels must have shape {tuple(shape)} for {fname.split('_')[0]} "
            f"input {tuple(x_shape)}, got {ids.shape}"
        )
    if ids.size == 0 or (ids.min() >= 0 and ids.max() < c):  # every label a class (usual)
        return
    bad = (ids != ignore_index) & ((ids < 0) | (ids >= c))
    if bad.any():
        raise IndexError(
            f"{fname}: label {ids[bad].flat[0]} is out of range for {c} classes "
            f"(valid: 0..{c - 1}, or ignore_index {ignore_index})"
        )


def _picked(fname, logp, target, shape, c, weight, ignore_index, label_smoothing, reduction):
    """The weighted negative log-likelihood of the labelled classes (and the smoothing term)
    over rows ``logp (M, C)``, reduced as PyTorch reduces it: "mean" divides by the summed
    weights of the counted rows."""
    dtype = logp.dtype
    t = ops.reshape(_t(target), (-1, 1))
    classes = np.arange(c)
    if 0 <= ignore_index < c:
        classes[ignore_index] = -1  # no label matches it: rows labelled ignore_index pick nothing
    hit = ops.equal(t, beside(logp, classes))  # (M, C); a row whose label is ignored has no hit
    w = beside(logp, np.ones(c, dtype)) if weight is None else weight
    zero = beside(logp, np.zeros((), dtype))
    row_w = ops.sum(ops.where(hit, w, zero), axis=1)  # the label's weight; 0 when ignored
    nll = -ops.sum(ops.where(hit, logp, zero), axis=1)
    if weight is not None:
        nll = nll * row_w
    smooth = None
    if label_smoothing > 0:
        counted = ops.not_equal(ops.reshape(t, (-1,)), ignore_index)
        total = ops.sum(logp if weight is None else logp * w, axis=1)
        smooth = ops.where(counted, -total, zero)
    if reduction == "none":
        out = (
            nll if smooth is None else nll * (1 - label_smoothing) + smooth * (label_smoothing / c)
        )
        return ops.reshape(out, shape)
    loss = ops.sum(nll)
    if smooth is not None:
        loss = loss * (1 - label_smoothing) + ops.sum(smooth) * (label_smoothing / c)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):  # every row ignored: NaN
            loss = loss / ops.sum(row_w)
    return loss


def nll_loss(
    input: Tensor,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of class ids ``target`` under log-probabilities ``input``:
    ``(N, C)`` with labels ``(N,)``, ``(N, C, d1, ...)`` with labels ``(N, d1, ...)``, or
    ``(C,)`` with one label. Each row counts ``weight[label]`` times (class weights ``(C,)``,
    default 1); rows labelled ``ignore_index`` count for nothing. "mean" divides by the summed
    weights of the counted rows."""
    name = "nll_loss"
    reduction = legacy_reduction(name, size_average, reduce, reduction)
    x = _t(input)
    rows, shape = _class_rows(name, x, "input")
    c = rows.shape[1]
    ids = _target_array(target)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: target must be integer class ids, got dtype {ids.dtype}")
    _check_labels(name, ids, shape, x.shape, c, ignore_index)
    w = _weight_vector(name, weight, c, x.dtype)
    return _picked(name, rows, target, shape, c, w, ignore_index, 0.0, reduction)


def cross_entropy(
    input: Tensor,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits ``input`` (``(N, C)``, ``(N, C, d1, ...)`` or
    ``(C,)``; classes on axis 1, or 0 for one sample), computed stably.

    ``target`` is either integer class ids (the input's shape without C; ``ignore_index``
    rows count for nothing) or float class probabilities of the input's shape. ``weight``
    (``(C,)``) weighs each class; ``label_smoothing`` mixes the target with the uniform
    distribution: ``(1 - s) * target + s / C``. "mean" divides by the summed weights of the
    counted rows for class ids, by the number of rows for probabilities (as PyTorch does).
    """
    name = "cross_entropy"
    reduction = legacy_reduction(name, size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{name}: label_smoothing must be in [0, 1], got {label_smoothing}")
    x, target = _promoted(name, _t(input), target)  # probabilities of another float dtype
    rows, shape = _class_rows(name, x, "logits")
    c = rows.shape[1]
    arr = _target_array(target)
    w = _weight_vector(name, weight, c, x.dtype)
    plain = w is None and label_smoothing == 0.0
    if arr.dtype.kind in "iu":
        _check_labels(name, arr, shape, x.shape, c, ignore_index)
        outside = not 0 <= ignore_index < c
        if plain and x.ndim == 2 and outside and not (arr == ignore_index).any():
            return ops.softmax_cross_entropy(x, target, reduction=reduction)
        logp = ops.log_softmax(rows, axis=1)
        return _picked(name, logp, target, shape, c, w, ignore_index, label_smoothing, reduction)
    if arr.dtype.kind == "f":
        if arr.shape != x.shape:
            raise ShapeError(
                f"{name}: probability targets must have the logits' shape {x.shape}, "
                f"got {arr.shape}"
            )
        t = _float_target(name, target, x)
        if plain and x.ndim == 2:
            return ops.softmax_cross_entropy(x, t, reduction=reduction)
        t_rows, _ = _class_rows(name, _t(t), "target")
        if label_smoothing > 0:
            t_rows = t_rows * (1 - label_smoothing) + label_smoothing / c
        logp = ops.log_softmax(rows, axis=1)
        prod = logp * t_rows if w is None else logp * t_rows * w
        per = -ops.sum(prod, axis=1)
        return _reduce(per if reduction != "none" else ops.reshape(per, shape), reduction)
    raise TypeError(
        f"{name}: target must be integer labels or float probabilities, got {arr.dtype}"
    )


# -- binary ------------------------------------------------------------------------------------
def _broadcast_weight(fname: str, name: str, weight, x: Tensor):
    if weight is None:
        return None
    arr = _target_array(weight)
    try:
        fits = np.broadcast_shapes(arr.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{fname}: {name} {arr.shape} does not broadcast to input {x.shape}")
    if isinstance(weight, Tensor):
        return weight if weight.dtype == x.dtype else ops.astype(weight, x.dtype)
    return arr.astype(x.dtype)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight=None,
) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable step; ``target`` (0/1 or probabilities)
    has the logits' shape. ``weight`` (broadcast to the input) scales each entry's loss;
    ``pos_weight`` (broadcast along the last axis, one per class) scales the positive term:
    ``-(pos_weight * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x)))``."""
    name = "binary_cross_entropy_with_logits"
    reduction = legacy_reduction(name, size_average, reduce, reduction)
    x = _t(input)
    arr = _target_array(target)
    if arr.shape != x.shape:
        raise ShapeError(f"{name}: target shape {arr.shape} differs from logits {x.shape}")
    x, target = _promoted(name, x, target)
    t = _float_target(name, target, x)
    if weight is None and pos_weight is None:
        return ops.bce_with_logits(x, t, reduction=reduction)
    w = _broadcast_weight(name, "weight", weight, x)
    pw = _broadcast_weight(name, "pos_weight", pos_weight, x)
    neg_log_sig = ops.softplus(-x)  # -log(sigmoid(x)), stable
    if pw is None:
        per = (1.0 - _t(t)) * x + neg_log_sig
    else:
        per = (1.0 - _t(t)) * x + (_t(t) * (pw - 1.0) + 1.0) * neg_log_sig
    if w is not None:
        per = per * w
    return _reduce(per, reduction)


def _pointwise_loss(name: str, input: Tensor, target, reduction: str, fn) -> Tensor:
    """``fn(input, target)`` per entry (shapes must match; the target takes the input's float
    dtype), then the reduction: "mean" over every entry, "sum", or "none"."""
    _check_reduction(name, reduction)
    input = _t(input)
    arr = _target_array(target)
    if arr.shape != input.shape:
        raise ShapeError(f"{name}: target shape {arr.shape} differs from input {input.shape}")
    input, target = _promoted(name, input, target)
    t = _t(_float_target(name, target, input))
    return _reduce(fn(input, t), reduction)


def binary_cross_entropy(
    input: Tensor, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"
) -> Tensor:
    """Binary cross-entropy of probabilities ``input`` in [0, 1] against ``target``, each
    entry scaled by ``weight`` (broadcast to the input); each log is clamped at -100, as
    PyTorch does, so a probability of exactly 0 or 1 stays finite. (On logits,
    :func:`binary_cross_entropy_with_logits` is the stable form.)"""
    name = "binary_cross_entropy"
    reduction = legacy_reduction(name, size_average, reduce, reduction)
    w = _broadcast_weight(name, "weight", weight, _t(input))

    def bce(p, t):
        log_p = ops.maximum(ops.log(p), -100.0)
        log_q = ops.maximum(ops.log(1.0 - p), -100.0)
        per = -(t * log_p + (1.0 - t) * log_q)
        return per if w is None else per * w

    with np.errstate(divide="ignore"):
        return _pointwise_loss(name, input, target, reduction, bce)


# -- regression --------------------------------------------------------------------------------
def mse_loss(input: Tensor, target, size_average=None, reduce=None, reduction: str = "mean"):
    """Mean squared error ``(input - target)^2``, averaged ("mean"), summed or per entry."""

    def sq(x, t):
        d = x - t
        return d * d

    reduction = legacy_reduction("mse_loss", size_average, reduce, reduction)
    return _pointwise_loss("mse_loss", input, target, reduction, sq)


def l1_loss(input: Tensor, target, size_average=None, reduce=None, reduction: str = "mean"):
    """Mean absolute error ``|input - target|``."""
    reduction = legacy_reduction("l1_loss", size_average, reduce, reduction)
    return _pointwise_loss("l1_loss", input, target, reduction, lambda x, t: ops.absolute(x - t))


def smooth_l1_loss(
    input: Tensor,
    target,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """``0.5 d^2 / beta`` where ``|d| < beta``, ``|d| - beta / 2`` elsewhere (``d = input -
    target``; ``beta=0`` is the L1 loss)."""
    reduction = legacy_reduction("smooth_l1_loss", size_average, reduce, reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")

    def smooth(x, t):
        a = ops.absolute(x - t)
        if beta == 0:
            return a
        return ops.where(a < beta, a * a * (0.5 / beta), a - 0.5 * beta)

    return _pointwise_loss("smooth_l1_loss", input, target, reduction, smooth)


def huber_loss(input: Tensor, target, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """``0.5 d^2`` where ``|d| < delta``, ``delta (|d| - delta / 2)`` elsewhere."""
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")

    def huber(x, t):
        a = ops.absolute(x - t)
        return ops.where(a < delta, a * a * 0.5, (a - 0.5 * delta) * delta)

    return _pointwise_loss("huber_loss", input, target, reduction, huber)


def kl_div(
    input: Tensor,
    target,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """KL divergence with ``input`` as log-probabilities: ``target * (log(target) - input)``
    per entry (0 where target is 0), or with ``log_target`` ``exp(target) * (target -
    input)``. ``reduction="batchmean"`` divides the sum by the batch size (the true KL
    divergence per sample; "mean" averages over every entry, as PyTorch does)."""
    batchmean = reduction == "batchmean"
    if not batchmean:
        reduction = legacy_reduction("kl_div", size_average, reduce, reduction)
    input = _t(input)

    def kl(x, t):
        if log_target:
            return ops.exp(t) * (t - x)
        positive = t > 0
        return ops.where(positive, t * (ops.log(ops.where(positive, t, 1.0)) - x), 0.0)

    per = _pointwise_loss("kl_div", input, target, "sum" if batchmean else reduction, kl)
    return per / max(input.shape[0], 1) if batchmean and input.ndim else per


# -- similarity --------------------------------------------------------------------------------
def cosine_similarity(
    x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8, *, axis: int | None = None
) -> Tensor:
    """``x1 . x2 / (max(|x1|, eps) * max(|x2|, eps))`` along ``dim`` (or ``axis``;
    broadcasting)."""
    d = dim if axis is None else axis
    n1 = ops.maximum(ops.norm(x1, axis=d), eps)
    n2 = ops.maximum(ops.norm(x2, axis=d), eps)
    return ops.sum(_t(x1) * x2, axis=d) / (n1 * n2)


def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target,
    margin: float = 0.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``1 - cos(x1, x2)`` where ``target`` is 1, ``max(0, cos(x1, x2) - margin)`` where it is
    -1 (0 elsewhere); rows ``(N, D)`` with targets ``(N,)``, or one pair ``(D,)``."""
    name = "cosine_embedding_loss"
    reduction = legacy_reduction(name, size_average, reduce, reduction)
    a, b = _t(input1), _t(input2)
    if a.shape != b.shape or a.ndim not in (1, 2):
        raise ShapeError(f"{name}: inputs must both be (N, D) or (D,), got {a.shape}, {b.shape}")
    arr = _target_array(target)
    if arr.shape != a.shape[:-1]:
        raise ShapeError(f"{name}: target must have shape {a.shape[:-1]}, got {arr.shape}")
    axis = a.ndim - 1
    eps = 1e-12  # keeps an all-zero row finite, as PyTorch's does
    prod = ops.sum(a * b, axis=axis)
    cos = prod / ops.sqrt((ops.sum(a * a, axis=axis) + eps) * (ops.sum(b * b, axis=axis) + eps))
    y = _t(target)
    zero = beside(a, np.zeros((), a.dtype))
    pos = ops.where(ops.equal(y, 1), 1.0 - cos, zero)
    neg = ops.where(ops.equal(y, -1), ops.relu(cos - margin), zero)
    return _reduce(pos + neg, reduction)
