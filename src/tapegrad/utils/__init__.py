"""``tapegrad.utils``: PyTorch's ``torch.utils`` names (``tapegrad.utils.data``)."""

from . import data

__all__ = ["data"]
