"""``Dropout`` and ``Dropout2d``: random zeroing (of entries, of whole channels) during
training, identity in evaluation."""

from __future__ import annotations

import warnings

import numpy as np

from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module


class Dropout(Module):
    """In training mode zero each entry with probability ``p`` and scale the rest by
    ``1 / (1 - p)`` (inverted dropout); in ``eval()`` mode return the input unchanged.

    Masks come from the layer's own generator: ``rng`` if given, else one seeded from
    ``nn.init``'s default generator when the layer is built, so ``nn.init.manual_seed``
    reproduces the masks as well as the weights.
    """

    def __init__(self, p: float = 0.5, rng: np.random.Generator | None = None) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)
        if rng is None:
            rng = np.random.default_rng(init.default_generator().integers(2**63))
        self.rng = rng

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.rng)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Dropout2d(Dropout):
    """Channel dropout: in training mode zero whole channels of ``(N, C, H, W)`` (or
    ``(N, C, L)``) input with probability ``p``, one draw per sample and channel, and scale the
    rest by ``1 / (1 - p)``; identity in ``eval()`` mode. Masks come from the layer's own
    generator, as in :class:`Dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 2:  # PyTorch warns and drops entries one by one (plain dropout)
            warnings.warn(
                f"{self!r}: received a 2-D input {tuple(x.shape)}; channel dropout expects "
                f"(N, C, H, W) or (N, C, L), so each entry is dropped on its own (as PyTorch "
                f"does); use Dropout for that",
                UserWarning,
                stacklevel=2,
            )
            return F.dropout(x, self.p, self.training, self.rng)
        if x.ndim not in (3, 4):
            raise ShapeError(
                f"{self!r}: expected input of shape (N, C, H, W) or (N, C, L), got {tuple(x.shape)}"
            )
        return F.dropout2d(x, self.p, self.training, self.rng)
