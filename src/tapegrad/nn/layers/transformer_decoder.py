"""``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer`` (the
encoder-decoder), with PyTorch's arguments, defaults and sub-module names (``self_attn``,
``multihead_attn``, ``linear1``, ``linear2``, ``norm1``-``norm3``, ``dropout1``-``dropout3``;
``encoder.layers.{i}``, ``decoder.layers.{i}``, ``encoder.norm``, ``decoder.norm``), so
PyTorch's state dicts load 1:1."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...autodiff.backend import float_dtype
from ...autodiff.tensor import Tensor
from .. import init
from ..module import Module
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm
from .transformer import TransformerEncoder, TransformerEncoderLayer, _activation, _copies


class TransformerDecoderLayer(Module):
    """Self-attention over ``tgt``, attention from ``tgt`` to ``memory``, and a feed-forward
    block, each with a residual connection and a LayerNorm (after each block, or before it
    with ``norm_first``). ``forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=False,
    memory_is_causal=False)``."""

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
        kw = {"dtype": dtype, "device": device}
        attn = {"dropout": dropout, "bias": bias, "batch_first": batch_first, "rng": rng, **kw}
        self.self_attn = MultiheadAttention(d_model, nhead, **attn)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **attn)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, rng=rng, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, rng=rng, dtype=dtype)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1, self.dropout2, self.dropout3 = (
            Dropout(dropout),
            Dropout(dropout),
            Dropout(dropout),
        )
        self.activation = _activation(activation, "TransformerDecoderLayer")

    def _sa_block(self, x, mask, padding, is_causal):
        out, _ = self.self_attn(
            x,
            x,
            x,
            key_padding_mask=padding,
            need_weights=False,
            attn_mask=mask,
            is_causal=is_causal and mask is None,
        )
        return self.dropout1(out)

    def _mha_block(self, x, mem, mask, padding, is_causal):
        out, _ = self.multihead_attn(
            x,
            mem,
            mem,
            key_padding_mask=padding,
            need_weights=False,
            attn_mask=mask,
            is_causal=is_causal and mask is None,
        )
        return self.dropout2(out)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        sa = (tgt_mask, tgt_key_padding_mask, bool(tgt_is_causal))
        mha = (memory, memory_mask, memory_key_padding_mask, bool(memory_is_causal))
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), *sa)
            x = x + self._mha_block(self.norm2(x), *mha)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, *sa))
        x = self.norm2(x + self._mha_block(x, *mha))
        return self.norm3(x + self._ff_block(x))


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` applied in turn, then ``norm`` if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm=None):
        super().__init__()
        self.layers = _copies(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                      memory_key_padding_mask, bool(tgt_is_causal), memory_is_causal)  # fmt: skip
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """PyTorch's encoder-decoder ``Transformer``: ``num_encoder_layers`` encoder layers and
    ``num_decoder_layers`` decoder layers, each stack ending in a LayerNorm; every matrix
    parameter re-drawn Xavier-uniform after construction, as PyTorch does.
    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)``."""

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
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
        kw = {"layer_norm_eps": layer_norm_eps, "batch_first": batch_first,
              "norm_first": norm_first, "bias": bias, "device": device, "dtype": dtype}  # fmt: skip
        args = (d_model, nhead, dim_feedforward, dropout, activation)
        norm = {"eps": layer_norm_eps, "bias": bias, "device": device, "dtype": dtype}
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(*args, **kw, rng=rng), num_encoder_layers,
            LayerNorm(d_model, **norm),
        )  # fmt: skip
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(*args, **kw, rng=rng), num_decoder_layers,
            LayerNorm(d_model, **norm),
        )  # fmt: skip
        self.d_model, self.nhead, self.batch_first = int(d_model), int(nhead), bool(batch_first)
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p, rng=rng)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False) -> Tensor:  # fmt: skip
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=bool(src_is_causal))  # fmt: skip
        return self.decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                            memory_key_padding_mask, tgt_is_causal, memory_is_causal)  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """``(sz, sz)`` float mask: 0 on and below the diagonal, -inf above (future steps)."""
        mask = np.triu(np.full((sz, sz), -np.inf, dtype=float_dtype(dtype)), 1)
        return Tensor(mask)
