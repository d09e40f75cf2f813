"""``MultiheadAttention``: attention with ``num_heads`` heads, PyTorch's arguments, layouts and
parameter names (``in_proj_weight (3E, E)``, ``in_proj_bias (3E,)``, ``out_proj.weight``,
``out_proj.bias``; ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when ``kdim`` or
``vdim`` differ from ``embed_dim``; ``bias_k``/``bias_v`` with ``add_bias_kv``)."""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import float_dtype
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from .linear import Linear


class MultiheadAttention(Module):
    """``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights)``.

    Inputs are time-major ``(L, N, E)`` (``batch_first``: ``(N, L, E)``) or unbatched
    ``(L, E)``; keys and values ``(S, N, kdim)``, ``(S, N, vdim)``. Masks are boolean (True:
    leave that key out) or float (added to the scores): ``key_padding_mask (N, S)``,
    ``attn_mask (L, S)`` or ``(N * num_heads, L, S)``; ``is_causal`` without a mask lets
    query i see keys 0..i. ``weights`` (``need_weights``) are averaged over the heads,
    ``(N, L, S)``, or per head, ``(N, num_heads, L, S)``. ``dropout`` drops attention weights
    in training (masks from the layer's own generator). Initialisation: Xavier/Glorot
    uniform projections, zero biases.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
        *,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        if device is not None and str(device) != "cpu":
            raise ValueError(f"MultiheadAttention: tapegrad runs on the CPU; got {device!r}")
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                f"({num_heads})"
            )
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        E = self.embed_dim = int(embed_dim)
        self.kdim = E if kdim is None else int(kdim)
        self.vdim = E if vdim is None else int(vdim)
        self._qkv_same_embed_dim = self.kdim == E and self.vdim == E
        self.num_heads, self.head_dim = int(num_heads), E // int(num_heads)
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self.add_zero_attn = bool(add_zero_attn)
        dtype = float_dtype(dtype)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(np.empty((3 * E, E), dtype))
            init.xavier_uniform_(self.in_proj_weight, rng=rng)
            for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(n, None)
        else:
            self.q_proj_weight = Parameter(np.empty((E, E), dtype))
            self.k_proj_weight = Parameter(np.empty((E, self.kdim), dtype))
            self.v_proj_weight = Parameter(np.empty((E, self.vdim), dtype))
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w, rng=rng)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(np.zeros(3 * E, dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(E, E, bias=bias, rng=rng, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(np.empty((1, 1, E), dtype))
            self.bias_v = Parameter(np.empty((1, 1, E), dtype))
            init.xavier_normal_(self.bias_k, rng=rng)
            init.xavier_normal_(self.bias_v, rng=rng)
        else:
            self.bias_k = self.bias_v = None
        self.rng = np.random.default_rng(init.default_generator().integers(2**63))

    @property
    def _name(self) -> str:
        """The layer in one line, for messages (the repr spans lines: out_proj)."""
        return f"MultiheadAttention({self.extra_repr()})"

    def _check(self, query, key, value) -> bool:
        """Whether the input is batched, after checking every shape against the layer."""
        E = self.embed_dim
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or query.shape[-1] != E:
            lay = "(N, L, {})" if self.batch_first else "(L, N, {})"
            raise ShapeError(
                f"{self._name}: expected query of shape {lay.format(E)} or (L, {E}), got "
                f"{tuple(query.shape)}"
            )
        for name, t, width in (("key", key, self.kdim), ("value", value, self.vdim)):
            if t.ndim != query.ndim or t.shape[-1] != width:
                raise ShapeError(
                    f"{self._name}: {name} must have the query's rank and {width} features, got "
                    f"{tuple(t.shape)} for query {tuple(query.shape)}"
                )
        if not batched:
            return False
        b_ax = 0 if self.batch_first else 1
        n = query.shape[b_ax]
        s_ax = 1 - b_ax
        if key.shape[b_ax] != n or value.shape[b_ax] != n or key.shape[s_ax] != value.shape[s_ax]:
            raise ShapeError(
                f"{self._name}: query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                f"{tuple(value.shape)} must share the batch size, key and value the length"
            )
        return True

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        batched = self._check(query, key, value)
        if batched and self.batch_first:
            query, key, value = (ops.permute(t, (1, 0, 2)) for t in (query, key, value))
        elif not batched:
            query, key, value = (ops.expand_dims(t, 1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = _unsqueeze0(key_padding_mask)
            # a 3-D attn_mask (num_heads, L, S) is already (N * num_heads, L, S) for N = 1
        if is_causal and attn_mask is None:
            L = query.shape[0]
            attn_mask = np.triu(np.ones((L, key.shape[0]), dtype=bool), 1)
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:E], w[E : 2 * E], w[2 * E :]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E : 2 * E], b[2 * E :])
        out, weights = F.multi_head_attention_forward(
            query,
            key,
            value,
            self.num_heads,
            wq,
            wk,
            wv,
            bq,
            bk,
            bv,
            self.out_proj.weight,
            self.out_proj.bias,
            self.bias_k,
            self.bias_v,
            self.add_zero_attn,
            self.dropout if self.training else 0.0,
            key_padding_mask,
            need_weights,
            attn_mask,
            average_attn_weights,
            self.rng,
            name=self._name,
        )
        if batched and self.batch_first:
            out = ops.permute(out, (1, 0, 2))
        elif not batched:
            out = ops.squeeze(out, 1)
            if weights is not None:
                weights = ops.squeeze(weights, 0)
        return out, weights

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}, "
            f"batch_first={self.batch_first}"
        )


def _unsqueeze0(m):
    return ops.expand_dims(m, 0) if isinstance(m, Tensor) else np.asarray(m)[None]
