"""``TransformerEncoderLayer`` and ``TransformerEncoder``: self-attention and a feed-forward
block, each with a residual connection and layer normalisation (after each block, or before
it with ``norm_first``), with PyTorch's arguments and sub-module names (``self_attn``,
``linear1``, ``linear2``, ``norm1``, ``norm2``, ``dropout``, ``dropout1``, ``dropout2``;
``layers.{i}`` in the encoder)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np

from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module, ModuleList
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(fn, owner: str):
    if not isinstance(fn, str):
        return fn
    if fn not in _ACTIVATIONS:
        raise ValueError(f"{owner}: activation must be 'relu', 'gelu' or a callable, got {fn!r}")
    return _ACTIVATIONS[fn]


def _copies(layer: Module, n: int, owner: str) -> ModuleList:
    """``n`` deep copies of ``layer``, each drawing dropout masks of its own."""
    if int(n) != n or n < 1:
        raise ValueError(f"{owner}: num_layers must be >= 1, got {n!r}")
    layers = []
    for _ in range(int(n)):
        c = copy.deepcopy(layer)
        for m in c.modules():
            if isinstance(getattr(m, "rng", None), np.random.Generator):
                m.rng = np.random.default_rng(init.default_generator().integers(2**63))
        layers.append(c)
    return ModuleList(layers)


class TransformerEncoderLayer(Module):
    """``x + dropout(self_attn(x))`` then ``x + dropout(linear2(dropout(act(linear1(x)))))``,
    each followed by a LayerNorm (``norm_first=False``) or applied to the LayerNorm of ``x``
    (``norm_first=True``). ``activation``: "relu", "gelu" or a callable. Inputs as
    :class:`MultiheadAttention`'s (time-major unless ``batch_first``);
    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        activation = _activation(activation, "TransformerEncoderLayer")
        kw = {"dtype": dtype, "device": device}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, rng=rng, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, rng=rng, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, rng=rng, dtype=dtype)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation

    def _sa_block(self, x, mask, key_padding_mask, is_causal):
        out, _ = self.self_attn(
            x,
            x,
            x,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            attn_mask=mask,
            is_causal=is_causal and mask is None,
        )
        return self.dropout1(out)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(
        self, src: Tensor, src_mask=None, src_key_padding_mask=None, is_causal: bool = False
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (each with weights of its own, copied from it,
    and dropout masks of its own) applied in turn, then ``norm`` if given.
    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=False)``.
    ``enable_nested_tensor`` and ``mask_check`` (PyTorch's switches of its padded fast path)
    are accepted; the results do not depend on them."""

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm=None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        self.layers = _copies(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(
        self, src: Tensor, mask=None, src_key_padding_mask=None, is_causal: bool = False
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(
                x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal
            )
        return self.norm(x) if self.norm is not None else x
