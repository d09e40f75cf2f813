"""Neural-network primitives: embedding and the fused losses (convolutions are in ``conv.py``,
max pooling in ``pool.py``).

Layouts follow the usual deep-learning conventions: (N, C, L) sequences and (N, C, H, W)
images. Every forward is vectorised over the batch.

* Embedding: a row gather forward; the backward scatter-adds the output gradient into a zero
  table with a compiled loop (``scatter_add_rows``), so repeated indices accumulate.
* Losses: softmax cross-entropy (class ids or probability targets) from a max-subtracted
  log-sum-exp, saving the softmax for the (softmax - target) backward; binary cross-entropy on
  logits as ``max(x, 0) - x*t + log1p(exp(-|x|))``, saving the sigmoid. Class-id
  cross-entropy and BCE run as one compiled loop each way (``kernels/cpu/loss.py``), the same calls
  compiled plans make.

The public wrappers check shapes, ranks, dtypes and ranges and raise :class:`ShapeError` naming
the op, the expected and the actual values; the primitives assume checked input.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, is_array, xp_of
from ..errors import ShapeError
from ..kernels.dispatch import kernels_for
from . import samples as S
from .args import plain
from .conv import _check_float, _check_rank, _data
from .elementwise import sigmoid
from .reduce import _logsumexp, _softmax, _sum
from .registry import Sample, primitive, run, scratch

__all__ = [
    "embedding",
    "softmax_cross_entropy",
    "bce_with_logits",
]

_REDUCTIONS = ("mean", "sum", "none")


# -- embedding -------------------------------------------------------------------------------
def _copied(buf: np.ndarray, a: np.ndarray) -> np.ndarray:
    np.copyto(buf, a)
    return buf


def _embedding_fwd(weight, indices, out=None, ws=None):
    v, d = weight.shape
    if indices.size:
        lo, hi = indices.min(), indices.max()
        if lo < 0 or hi >= v:
            bad = lo if lo < 0 else hi
            raise IndexError(
                f"embedding: index {int(bad)} is out of range for a table of {v} rows "
                f"(V={v}; valid: 0..{v - 1})"
            )
    rows = out
    if out is None or not out.flags.c_contiguous:  # the kernel writes contiguous rows
        rows = xp_of(weight).empty(indices.shape + (d,), weight.dtype)
    # the range is checked above: the kernel's loop does not
    kernels_for(weight).gather_rows(weight, indices.reshape(-1), rows.reshape(-1, d))
    if out is None or rows is out:
        return rows
    return _copied(out, rows)


def _embedding_backward_fwd(g, indices, rows, out=None, ws=None):
    d = g.shape[-1]
    gw = xp_of(g).zeros((rows, d), dtype=g.dtype) if out is None else out
    if out is not None:
        gw.fill(0)
    if not g.flags.c_contiguous:  # the scatter reads rows: a contiguous copy first
        g = _copied(scratch(ws, "g", g.shape, g.dtype, like=g), g)
    kernels_for(g).scatter_add_rows(gw, indices.reshape(-1), g.reshape(-1, d))
    return gw


def _embedding_vjp(g, out, weight, indices):
    return run(_embedding_backward, g, indices, rows=weight.shape[0])


def _embedding_reference(weight, indices):
    onehot = (indices[..., None] == np.arange(weight.shape[0])).astype(weight.dtype)
    return onehot @ weight


def _embedding_samples(rng):
    return [
        Sample(
            (S.values(rng, (6, 3)), np.array([0, 2, 2, 5, 0])),
        ),
        Sample(
            (S.values(rng, (5, 4)), np.array([[1, 1, 1], [4, 0, 1]])),
        ),
        Sample(
            (S.values(rng, (3, 2)), np.array(2)),
        ),
        Sample(
            (S.values(rng, (4, 1)), np.zeros((2, 0), dtype=np.int64)),
        ),
        Sample(
            (S.values(rng, (7, 3)), np.array([[[6], [3]], [[3], [6]]], dtype=np.int32)),
        ),
    ]


_embedding = primitive(
    "embedding",
    _embedding_fwd,
    (_embedding_vjp, None),
    reference=_embedding_reference,
    samples=_embedding_samples,
    doc="Rows of the (V, D) table at integer indices of any shape; the VJP is "
    "embedding_backward (a scatter-add: repeated indices accumulate). Indices are not "
    "differentiable.",
)
_embedding_backward = primitive(
    "embedding_backward",
    _embedding_backward_fwd,
    (lambda g, out, h, indices, rows: run(_embedding, g, indices), None),
    reference=lambda h, indices, rows: (
        (indices.reshape(-1, 1) == np.arange(rows)).astype(h.dtype).T @ h.reshape(-1, h.shape[-1])
    ),
    samples=lambda rng: [
        Sample((S.values(rng, (5, 3)), np.array([0, 2, 2, 5, 0])), {"rows": 6}),
        Sample((S.values(rng, (2, 3, 4)), np.array([[1, 1, 1], [4, 0, 1]])), {"rows": 5}),
    ],
    doc="embedding's VJP: the (rows, D) table of h's rows added at their indices (a compiled "
    "scatter-add); its own VJP gathers, so embeddings are twice differentiable.",
)


def embedding(weight, indices):
    """Look up rows of ``weight`` (V, D) at ``indices`` (int array or Tensor, any shape).

    Returns ``indices.shape + (D,)``. Indices must lie in [0, V).
    """
    wa = _check_float("embedding", "weight", weight)
    _check_rank("embedding", "weight", wa, 2, "(V, D)")
    idx = _data(indices)
    if not is_array(idx):
        idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"embedding: indices must be an integer array, got dtype {idx.dtype}")
    return _embedding(weight, idx)  # the forward checks the range (on every compiled call too)


# -- losses ----------------------------------------------------------------------------------
def _plain(a):
    """The array of a Tensor (class ids arrive as one inside a recorded rule)."""
    return plain(a)


def _scale(g, reduction: str, count: int):
    """The output gradient as a multiplier of per-element gradients."""
    if reduction == "mean":
        return g / max(count, 1)
    return g


def _loss_out(total: float, per, reduction: str, count: int, res):
    """The loss from the kernels' float64 sum ``total`` of the per-element losses ``per``:
    ``per`` itself, or the mean or sum (written into the 0-d ``res`` when given)."""
    if reduction == "none":
        return per
    value = total / max(count, 1) if reduction == "mean" else total
    if res is None:
        return asarray(value, per.dtype, like=per)
    res[...] = value
    return res


def _multiplier(g, reduction: str, count: int, ws) -> np.ndarray:
    """The output gradient as the loss kernels take it: (1,), or one value per sample."""
    k = scratch(ws, "k", (g.size,), g.dtype, like=g)
    if reduction == "mean":
        return np.divide(np.reshape(g, -1), max(count, 1), out=k)
    np.copyto(k, np.reshape(g, -1))
    return k


def _ce_fwd(logits, target, reduction, out=None, ws=None):
    """(loss, softmax): class ids through the compiled kernel, probabilities through NumPy."""
    res, p = (None, None) if out is None else out
    n, c = logits.shape
    if target.dtype.kind in "iu":
        p = xp_of(logits).empty(logits.shape, logits.dtype) if p is None else p
        per = (
            res
            if reduction == "none" and res is not None
            else scratch(ws, "per", (n,), p.dtype, like=logits)
        )
        try:
            total = kernels_for(logits).softmax_ce_forward(logits, target, p, per)
        except IndexError:
            bad = target[(target < 0) | (target >= c)][0]
            raise ShapeError(
                f"softmax_cross_entropy: class id {int(bad)} is out of range [0, {c}) for "
                f"logits {logits.shape}"
            ) from None
        return _loss_out(total, per, reduction, n, res), p
    m = np.max(logits, axis=1, keepdims=True)
    z = logits - m
    e = np.exp(z)
    s = np.sum(e, axis=1, keepdims=True)
    e /= s
    z -= np.log(s)  # log-softmax
    loss = -np.sum(target * z, axis=1)
    if reduction != "none":
        total = np.sum(loss)
        loss = asarray(
            total / max(n, 1) if reduction == "mean" else total, logits.dtype, like=logits
        )
    if out is None:
        return loss, e
    np.copyto(res, loss)
    np.copyto(p, e)
    return res, p


def _ce_vjp_logits(g, out, logits, target, reduction, aux):
    # the forward's softmax (``_ce_saved`` says how it follows from the logits)
    return run(_ce_grad, aux[0], target, g, reduction=reduction)


def _ce_saved(logits, target, reduction):
    return (run(_softmax, logits, axis=1),)


def _ce_grad_fwd(p, target, g, reduction, out=None, ws=None):
    if target.dtype.kind in "iu":
        gx = xp_of(p).empty(p.shape, p.dtype) if out is None else out
        kernels_for(p).softmax_ce_backward(p, target, _multiplier(g, reduction, len(p), ws), gx)
        return gx
    k = _scale(g, reduction, p.shape[0])
    gx = p * np.sum(target, axis=1, keepdims=True)
    gx -= target
    gx *= k[:, None] if reduction == "none" else k
    if out is None:
        return gx
    np.copyto(out, gx)
    return out


def _ce_grad_vjps():
    """ce_grad = (p * sum(t) - t) * k(g) row by row: its VJPs for p, t and g. Class ids enter
    as a one-hot constant."""

    def parts(p, target, g, reduction):
        t = target
        if t.dtype.kind in "iu":
            t = xp_of(_plain(p)).eye(p.shape[1], dtype=p.dtype)[_plain(t)]
        k = _scale(g, reduction, p.shape[0])
        k = k.reshape((-1, 1)) if reduction == "none" else k
        return t, _row_sum(t), k

    def dp(h, out, p, target, g, reduction):
        _, total, k = parts(p, target, g, reduction)
        return h * total * k

    def dt(h, out, p, target, g, reduction):
        if target.dtype.kind != "f":
            return None
        _, _, k = parts(p, target, g, reduction)
        return (_row_sum(p * h) - h) * k

    def dg(h, out, p, target, g, reduction):
        t, total, _ = parts(p, target, g, reduction)
        e = _row_sum(h * (p * total - t))  # (N, 1)
        if reduction == "none":
            return e.reshape((-1,))
        e = _sum_all(e)
        return e / max(p.shape[0], 1) if reduction == "mean" else e

    return (dp, dt, dg)


def _ce_vjp_target(g, out, logits, target, reduction, aux):
    if target.dtype.kind != "f":
        return None
    lse = _lse_rows(logits)
    k = _scale(g, reduction, logits.shape[0])
    return (lse - logits) * (k.reshape((-1, 1)) if reduction == "none" else k)  # -log_softmax


def _reduce_reference(loss, reduction):
    if reduction == "mean":
        return np.mean(loss)
    return np.sum(loss) if reduction == "sum" else loss


def _ce_reference(logits, target, reduction):
    logp = np.log(np.exp(logits) / np.sum(np.exp(logits), axis=1, keepdims=True))
    if target.dtype.kind in "iu":
        t = np.eye(logits.shape[1], dtype=logits.dtype)[target]
    else:
        t = target
    return _reduce_reference(-np.einsum("nc,nc->n", t, logp), reduction)


def _ce_samples(rng):
    out = []
    for r in _REDUCTIONS:
        out.append(Sample((S.values(rng, (4, 3), -3, 3), np.array([0, 2, 1, 2])), {"reduction": r}))
        probs = rng.uniform(0.1, 1.0, size=(3, 5))
        probs /= probs.sum(axis=1, keepdims=True)
        out.append(Sample((S.values(rng, (3, 5), -3, 3), probs), {"reduction": r}))
    out.append(
        Sample((S.values(rng, (1, 2)), np.array([1], dtype=np.int32)), {"reduction": "mean"})
    )
    out.append(Sample((S.values(rng, (2, 4)), np.eye(4)[[3, 0]]), {"reduction": "sum"}))
    return out


def _ce_grad_reference(p, target, g, reduction):
    t = np.eye(p.shape[1])[target] if target.dtype.kind in "iu" else target
    k = np.asarray(g) / (p.shape[0] if reduction == "mean" else 1)
    k = k.reshape(-1, 1) if reduction == "none" else k
    return (p * t.sum(axis=1, keepdims=True) - t) * k


def _ce_grad_samples(rng):
    out = []
    for r, gv in [("mean", np.asarray(1.3)), ("sum", np.asarray(-0.6)), ("none", None)]:
        x = S.values(rng, (4, 3), -3, 3)
        probs = rng.uniform(0.1, 1.0, (4, 3))
        probs /= probs.sum(axis=1, keepdims=True)
        g = S.values(rng, (4,)) if gv is None else gv
        p = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
        for t in (np.array([0, 2, 1, 2]), probs):
            out.append(Sample((p, t, g), {"reduction": r}))
    return out


_ce_grad = primitive(
    "ce_grad",
    _ce_grad_fwd,
    _ce_grad_vjps(),
    reference=_ce_grad_reference,
    samples=_ce_grad_samples,
    doc="softmax_cross_entropy's VJP for the logits from the forward's softmax p: "
    "(p * sum(t) - t) * g (scaled by the reduction), one compiled loop for class ids; "
    "differentiable in p, probability targets and g.",
)
_softmax_cross_entropy = primitive(
    "softmax_cross_entropy",
    _ce_fwd,
    (_ce_vjp_logits, _ce_vjp_target),
    reference=_ce_reference,
    samples=_ce_samples,
    aux=True,
    saved=_ce_saved,
    doc="Cross-entropy of softmax(logits) (N, C) against class ids (N,) or probabilities (N, C), "
    "fused and stable; the logits' VJP is (softmax * sum(target) - target) scaled.",
)


def softmax_cross_entropy(logits, target, reduction: str = "mean"):
    """Cross-entropy between softmax(logits) and ``target``.

    ``logits`` (N, C); ``target`` either int class ids (N,) in [0, C), or float probabilities
    (N, C) (one-hot or soft labels, differentiable). ``reduction``: "mean" (over N), "sum", or
    "none" (per-sample losses (N,)).
    """
    op = "softmax_cross_entropy"
    la = _check_float(op, "logits", logits)
    _check_rank(op, "logits", la, 2, "(N, C)")
    _check_reduction(op, reduction)
    n, c = la.shape
    ta = _data(target)
    if not is_array(ta):
        ta = np.asarray(ta)
        target = ta
    if ta.dtype.kind in "iu":
        if ta.shape != (n,):
            raise ShapeError(
                f"{op}: class-id target must have shape ({n},) for logits {la.shape}, "
                f"got {ta.shape}"
            )
        if n:
            lo, hi = ta.min(), ta.max()
            if lo < 0 or hi >= c:
                bad = lo if lo < 0 else hi
                raise ShapeError(
                    f"{op}: class id {int(bad)} is out of range [0, {c}) for logits {la.shape}"
                )
    elif ta.dtype.kind == "f":
        if ta.shape != la.shape:
            raise ShapeError(
                f"{op}: probability target must have the logits' shape {la.shape}, got {ta.shape}"
            )
    else:
        raise ShapeError(
            f"{op}: target must be int class ids or float probabilities, got dtype {ta.dtype}"
        )
    return _softmax_cross_entropy(logits, target, reduction=reduction)


def _bce_fwd(logits, target, reduction, out=None, ws=None):
    """(loss, sigmoid(logits)), one compiled loop."""
    res, sig = (None, None) if out is None else out
    xp = xp_of(logits)
    if sig is None:
        sig = xp.empty(logits.shape, logits.dtype)
    if reduction == "none":
        per = xp.empty(logits.shape, logits.dtype) if res is None else res
    else:
        per = scratch(ws, "per", logits.shape, logits.dtype, like=logits)
    total = kernels_for(logits).bce_forward(logits, target, sig, per)
    return _loss_out(total, per, reduction, per.size, res), sig


def _bce_vjp_logits(g, out, logits, target, reduction, aux):
    return run(_bce_grad, aux[0], target, g, reduction=reduction)  # aux: the sigmoid


def _bce_grad_fwd(sig, target, g, reduction, out=None, ws=None):
    gx = xp_of(sig).empty(sig.shape, sig.dtype) if out is None else out
    kernels_for(sig).bce_backward(sig, target, _multiplier(g, reduction, sig.size, ws), gx)
    return gx


def _bce_grad_vjps():
    """bce_grad = (sig - t) * k(g): its VJPs for sig, t and g."""

    def dsig(h, out, sig, target, g, reduction):
        return h * _scale(g, reduction, sig.size)

    def dt(h, out, sig, target, g, reduction):
        return -h * _scale(g, reduction, sig.size)

    def dg(h, out, sig, target, g, reduction):
        e = h * (sig - target)
        if reduction == "none":
            return e
        total = _sum_all(e)
        return total / max(sig.size, 1) if reduction == "mean" else total

    return (dsig, dt, dg)


def _bce_vjp_target(g, out, logits, target, reduction, aux):
    return -logits * _scale(g, reduction, logits.size)


def _bce_reference(logits, target, reduction):
    p = 1 / (1 + np.exp(-logits))
    return _reduce_reference(-(target * np.log(p) + (1 - target) * np.log(1 - p)), reduction)


def _bce_samples(rng):
    out = []
    for r in _REDUCTIONS:
        for shape in [(5, 1), (2, 3, 4), ()]:
            out.append(
                Sample((S.values(rng, shape, -4, 4), rng.uniform(0, 1, shape)), {"reduction": r})
            )
    out.append(
        Sample((S.values(rng, (6,), -4, 4), np.array([0.0, 1, 1, 0, 1, 0])), {"reduction": "mean"})
    )
    return out


_bce_grad = primitive(
    "bce_grad",
    _bce_grad_fwd,
    _bce_grad_vjps(),
    reference=lambda sig, target, g, reduction: (
        (sig - target) * (np.asarray(g) / (sig.size if reduction == "mean" else 1))
    ),
    samples=lambda rng: [
        Sample((1 / (1 + np.exp(-x)), t, np.asarray(gv)), {"reduction": r})
        for r, x, t, gv in [
            ("mean", S.values(rng, (4, 1), -3, 3), rng.uniform(0, 1, (4, 1)), 1.3),
            ("sum", S.values(rng, (2, 3), -3, 3), rng.uniform(0, 1, (2, 3)), -0.7),
            ("none", S.values(rng, (5,), -3, 3), rng.uniform(0, 1, (5,)), S.values(rng, (5,))),
        ]
    ],
    doc="bce_with_logits' VJP for the logits from the forward's sigmoid s: (s - t) * g (scaled "
    "by the reduction), one compiled loop; differentiable in s, t and g.",
)
_bce_with_logits = primitive(
    "bce_with_logits",
    _bce_fwd,
    (_bce_vjp_logits, _bce_vjp_target),
    reference=_bce_reference,
    samples=_bce_samples,
    aux=True,
    saved=lambda logits, target, reduction: (run(sigmoid, logits),),
    doc="Binary cross-entropy of sigmoid(logits) against targets in [0, 1], fused and stable: "
    "max(x, 0) - x*t + log1p(exp(-|x|)); the logits' VJP is sigmoid(x) - t.",
)


def _check_reduction(op: str, reduction) -> None:
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def bce_with_logits(logits, target, reduction: str = "mean"):
    """Binary cross-entropy between sigmoid(logits) and ``target`` (same shape, values in [0, 1]).

    ``reduction``: "mean" (over all elements), "sum", or "none" (elementwise).
    """
    op = "bce_with_logits"
    la = _check_float(op, "logits", logits)
    _check_reduction(op, reduction)
    ta = _data(target)
    if not is_array(ta) or ta.dtype.kind != "f":
        ta = asarray(ta, la.dtype, like=la)
        target = ta
    if ta.shape != la.shape:
        raise ShapeError(f"{op}: target must have the logits' shape {la.shape}, got {ta.shape}")
    return _bce_with_logits(logits, target, reduction=reduction)


def _row_sum(x):
    return run(_sum, x, axis=(1,), keepdims=True)


def _sum_all(x):
    return run(_sum, x, axis=tuple(range(x.ndim)), keepdims=False)


def _lse_rows(x):
    return run(_logsumexp, x, axis=(1,), keepdims=True)
