"""``Embedding``: a trainable (or frozen) lookup table of vectors."""

from __future__ import annotations

import numpy as np

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
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        trainable: bool = True,
        rng: np.random.Generator | None = None,
        dtype=np.float32,
    ) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=dtype))
        init.normal_(self.weight, rng=rng)
        self.weight.requires_grad = bool(trainable)

    @classmethod
    def from_pretrained(cls, matrix, freeze: bool = True) -> Embedding:
        """An Embedding whose table is a copy of ``matrix (num, dim)`` (e.g. GloVe vectors),
        frozen unless ``freeze=False``. Float arrays keep their dtype."""
        arr = np.asarray(matrix.data if isinstance(matrix, Tensor) else matrix)
        if arr.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: matrix must be 2-D, got {arr.shape}")
        if arr.dtype.kind != "f":
            arr = arr.astype(np.float32)
        emb = cls.__new__(cls)
        Module.__init__(emb)
        emb.num_embeddings, emb.embedding_dim = arr.shape
        emb.weight = Parameter(arr, requires_grad=not freeze)
        return emb

    def forward(self, indices) -> Tensor:
        dtype = (indices.data if isinstance(indices, Tensor) else np.asarray(indices)).dtype
        if dtype.kind not in "iu":
            raise TypeError(f"{self!r}: indices must be integers, got dtype {dtype}")
        try:  # the range is checked once, by the embedding primitive's wrapper
            return F.embedding(indices, self.weight)
        except IndexError as e:
            raise IndexError(f"{self!r}: {e}") from None

    def extra_repr(self) -> str:
        frozen = "" if self.weight.requires_grad else ", trainable=False"
        return f"{self.num_embeddings}, {self.embedding_dim}{frozen}"
