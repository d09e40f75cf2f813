"""Attention: ``scaled_dot_product_attention`` and the multi-head attention forward pass that
``nn.MultiheadAttention`` runs.

``softmax(q k^T * scale + mask) v``, composed from batched products and a softmax, so every
gradient is the engine's. Masks follow the two conventions PyTorch users know: for
``scaled_dot_product_attention`` a boolean ``attn_mask`` marks the positions that *take part*
(True), for ``multi_head_attention_forward`` boolean masks mark the positions to *leave out*
(True); float masks are added to the scores in both. A query whose keys are all masked gets a
zero output from ``scaled_dot_product_attention`` and NaN weights from the multi-head form
when weights are requested, as in PyTorch.
"""

from __future__ import annotations

import math

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import beside, is_array
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import init as _init
from .dense import linear

ArrayLike = Tensor | np.ndarray


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _is_bool(m) -> bool:
    a = m.data if isinstance(m, Tensor) else m
    return (a if is_array(a) else np.asarray(a)).dtype == np.bool_


def _last_two_swapped(x: Tensor) -> Tensor:
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return ops.permute(x, tuple(axes))


def _attend(q, k, v, keep, bias, dropout_p: float, rng, safe: bool):
    """``(softmax(q k^T + bias, masked to keep) v, weights)``; ``q`` comes scaled. ``safe``:
    rows with every key masked give zero weights instead of NaN."""
    scores = ops.matmul(q, _last_two_swapped(k))
    if keep is not None and bias is None and not safe:
        weights = ops.masked_softmax(scores, keep)  # the mask folded into the softmax's rows
        return _dropped_weights_times_v(weights, v, dropout_p, rng)
    if keep is not None:
        scores = ops.where(keep, scores, -np.inf)
    if bias is not None:
        scores = scores + bias
    if safe and (keep is not None or bias is not None):
        valid = ops.max(scores, axis=-1, keepdims=True) > -np.inf
        weights = ops.where(valid, ops.softmax(ops.where(valid, scores, 0.0), axis=-1), 0.0)
    else:
        weights = ops.softmax(scores, axis=-1)
    return _dropped_weights_times_v(weights, v, dropout_p, rng)


def _dropped_weights_times_v(weights, v, dropout_p: float, rng):
    if dropout_p > 0.0:
        if dropout_p >= 1.0:
            weights = weights * 0.0
        else:
            gen = rng if rng is not None else _init.default_generator()
            weights = weights * ops.dropout_mask(weights, p=float(dropout_p), rng=gen)
    return ops.matmul(weights, v), weights


def _causal_keep(n_q: int, n_k: int) -> np.ndarray:
    return np.tril(np.ones((n_q, n_k), dtype=bool))


def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    rng: np.random.Generator | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` over the last two axes:
    ``query (..., L, E)``, ``key (..., S, E)``, ``value (..., S, Ev)`` -> ``(..., L, Ev)``.

    ``attn_mask`` broadcasts to ``(..., L, S)``: boolean (True: the key takes part) or float
    (added to the scores). ``is_causal``: query i sees keys 0..i (with ``attn_mask``: both apply).
    ``scale`` defaults to ``1 / sqrt(E)``. ``dropout_p`` drops attention weights (always, as
    PyTorch's function does; pass 0 in evaluation) with masks from ``rng`` (default:
    ``nn.init``'s generator; compiled steps draw afresh).
    """
    q, k, v = _t(query), _t(key), _t(value)
    op = "scaled_dot_product_attention"
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ShapeError(
            f"{op}: query, key and value need at least 2 axes, got {q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"{op}: query (..., L, E) {q.shape}, key (..., S, E) {k.shape} and value "
            f"(..., S, Ev) {v.shape} do not fit together"
        )
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1], got {dropout_p}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    keep = beside(q, _causal_keep(n_q, n_k)) if is_causal else None
    bias = None
    if attn_mask is not None:  # with is_causal too: both apply, as in PyTorch
        shape = tuple(attn_mask.shape)
        try:
            np.broadcast_shapes(shape, (*q.shape[:-1], n_k))
        except ValueError:
            raise ShapeError(
                f"{op}: attn_mask {shape} does not broadcast to the scores {(*q.shape[:-1], n_k)}"
            ) from None
        if not _is_bool(attn_mask):
            bias = attn_mask
        elif keep is None:
            keep = attn_mask
        else:
            keep = ops.logical_and(attn_mask, keep)
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # a causal mask alone leaves every query key 0, so no row can be all masked: the guard
    # against such rows (a max, a comparison and two selections each way) has nothing to do
    safe = attn_mask is not None or n_k == 0
    out, _ = _attend(q * s, k, v, keep, bias, dropout_p, rng, safe=safe)
    return out


def _additive(mask, dtype) -> Tensor | np.ndarray:
    """A boolean "leave out" mask as 0 / -inf scores of ``dtype``; a float mask as it is."""
    if _is_bool(mask):
        return ops.where(
            mask, beside(mask, np.array(-np.inf, dtype)), beside(mask, np.array(0.0, dtype))
        )
    return mask


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    num_heads: int,
    q_weight: Tensor,
    k_weight: Tensor,
    v_weight: Tensor,
    q_bias: Tensor | None,
    k_bias: Tensor | None,
    v_bias: Tensor | None,
    out_weight: Tensor,
    out_bias: Tensor | None,
    bias_k: Tensor | None = None,
    bias_v: Tensor | None = None,
    add_zero_attn: bool = False,
    dropout_p: float = 0.0,
    key_padding_mask=None,
    need_weights: bool = True,
    attn_mask=None,
    average_attn_weights: bool = True,
    rng: np.random.Generator | None = None,
    name: str = "multi_head_attention_forward",
):
    """Multi-head attention on time-major ``query (L, N, E)``, ``key (S, N, Ek)``,
    ``value (S, N, Ev)``; returns ``(output (L, N, E), weights or None)``.

    The projections ``x @ W^T + b`` split into ``num_heads`` heads of ``E / num_heads``;
    ``key_padding_mask (N, S)`` and ``attn_mask (L, S)`` or ``(N * num_heads, L, S)`` are
    boolean (True: leave out) or float (added). ``bias_k``/``bias_v`` ``(1, 1, E)`` append one
    learned key and value; ``add_zero_attn`` appends a zero key and value. Weights come back
    averaged over heads ``(N, L, S)`` or per head ``(N, num_heads, L, S)``.
    """
    L, N, E = query.shape
    S = key.shape[0]
    H = num_heads
    hd = E // H
    dtype = query.dtype
    _check_masks(name, key_padding_mask, attn_mask, L, N, S, H)
    q = linear(query, q_weight, q_bias)
    k = linear(key, k_weight, k_bias)
    v = linear(value, v_weight, v_bias)
    bias = None if attn_mask is None else _additive(attn_mask, dtype)
    if bias is not None and bias.ndim == 2:
        bias = ops.reshape(bias, (1, L, S))
    kpm = None if key_padding_mask is None else _additive(key_padding_mask, dtype)
    if bias_k is not None:
        k = ops.concatenate([k, ops.broadcast_to(bias_k, (1, N, E))], axis=0)
        v = ops.concatenate([v, ops.broadcast_to(bias_v, (1, N, E))], axis=0)
        bias, kpm = _pad_last(bias, dtype), _pad_last(kpm, dtype)
        S += 1
    q = ops.permute(ops.reshape(q, (L, N * H, hd)), (1, 0, 2))
    k = ops.permute(ops.reshape(k, (S, N * H, hd)), (1, 0, 2))
    v = ops.permute(ops.reshape(v, (S, N * H, hd)), (1, 0, 2))
    if add_zero_attn:
        k = ops.concatenate([k, beside(k, np.zeros((N * H, 1, hd), dtype))], axis=1)
        v = ops.concatenate([v, beside(v, np.zeros((N * H, 1, hd), dtype))], axis=1)
        bias, kpm = _pad_last(bias, dtype), _pad_last(kpm, dtype)
        S += 1
    if kpm is not None:
        kpm = ops.reshape(
            ops.broadcast_to(ops.reshape(kpm, (N, 1, 1, S)), (N, H, 1, S)), (N * H, 1, S)
        )
        bias = kpm if bias is None else bias + kpm
    scale = math.sqrt(1.0 / hd)
    out, weights = _attend(q * scale, k, v, None, bias, dropout_p, rng, safe=not need_weights)
    out = ops.reshape(ops.permute(out, (1, 0, 2)), (L * N, E))
    out = ops.reshape(linear(out, out_weight, out_bias), (L, N, E))
    if not need_weights:
        return out, None
    weights = ops.reshape(weights, (N, H, L, S))
    return out, (ops.mean(weights, axis=1) if average_attn_weights else weights)


def _check_masks(name: str, key_padding_mask, attn_mask, L: int, N: int, S: int, H: int):
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (N, S):
        raise ShapeError(
            f"{name}: key_padding_mask must be (N, S) = {(N, S)}, got "
            f"{tuple(key_padding_mask.shape)}"
        )
    if attn_mask is not None:
        shape = tuple(attn_mask.shape)
        if shape not in ((L, S), (N * H, L, S)):
            raise ShapeError(
                f"{name}: attn_mask must be (L, S) = {(L, S)} or (N * num_heads, L, S) = "
                f"{(N * H, L, S)}, got {shape}"
            )


def _pad_last(mask, dtype):
    """Append one zero column (the extra key) to a float mask."""
    if mask is None:
        return None
    zeros = beside(mask, np.zeros((*mask.shape[:-1], 1), dtype))
    return ops.concatenate([mask, zeros], axis=-1)
