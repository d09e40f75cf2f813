"""``Embedding``: a trainable (or frozen) lookup table of vectors."""

from __future__ import annotations

import numpy as np

from ...autodiff.backend import float_dtype
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter


class Embedding(Module):
    """Map integer indices of any shape to rows of ``weight (num_embeddings, embedding_dim)``:
    output ``indices.shape + (embedding_dim,)``. Repeated indices accumulate gradient.

    Initialisation: standard normal N(0, 1) rows. This is the one layer that does not default
    to Xavier: Xavier's fans would be (dim, vocabulary), and over a vocabulary of 20,000 words
    its bound ``sqrt(6 / (num + dim))`` is about 0.017, rows too small for a learned embedding
    to separate words early in training. ``trainable=False`` keeps the table fixed (its
    parameter has ``requires_grad=False`` but stays in ``state_dict``; optimisers skip it).

    ``padding_idx`` (as in PyTorch; negative counts from the end): that row starts at zero and
    never gets a gradient, so padding positions contribute nothing to training.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        *,
        trainable: bool = True,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
    ) -> None:
        super().__init__()
        if device is not None and str(device) != "cpu":
            raise ValueError(f"Embedding: tapegrad runs on the CPU; got device {device!r}")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.padding_idx = _padding_index(padding_idx, self.num_embeddings)
        self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=float_dtype(dtype)))
        init.normal_(self.weight, rng=rng)
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx] = 0
        self.weight.requires_grad = bool(trainable)

    @classmethod
    def from_pretrained(
        cls, matrix, freeze: bool = True, padding_idx: int | None = None
    ) -> Embedding:
        """An Embedding whose table is a copy of ``matrix (num, dim)`` (e.g. GloVe vectors),
        frozen unless ``freeze=False``. Float arrays keep their dtype. ``padding_idx``: that
        row gets no gradient (its values are kept)."""
        arr = np.asarray(matrix.data if isinstance(matrix, Tensor) else matrix)
        if arr.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: matrix must be 2-D, got {arr.shape}")
        if arr.dtype.kind != "f":
            arr = arr.astype(np.float32)
        emb = cls.__new__(cls)
        Module.__init__(emb)
        emb.num_embeddings, emb.embedding_dim = arr.shape
        emb.padding_idx = _padding_index(padding_idx, arr.shape[0])
        emb.weight = Parameter(arr, requires_grad=not freeze)
        return emb

    def forward(self, indices) -> Tensor:
        dtype = (indices.data if isinstance(indices, Tensor) else np.asarray(indices)).dtype
        if dtype.kind not in "iu":
            raise TypeError(f"{self!r}: indices must be integers, got dtype {dtype}")
        try:  # the range is checked once, by the embedding primitive's wrapper
            return F.embedding(indices, self.weight, self.padding_idx)
        except IndexError as e:
            raise IndexError(f"{self!r}: {e}") from None

    def extra_repr(self) -> str:
        frozen = "" if self.weight.requires_grad else ", trainable=False"
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}{frozen}"


def _padding_index(padding_idx, num: int) -> int | None:
    if padding_idx is None:
        return None
    if int(padding_idx) != padding_idx or not -num <= padding_idx < num:
        raise ValueError(
            f"Embedding: padding_idx must be within [-{num}, {num}), got {padding_idx!r}"
        )
    return int(padding_idx) % num
