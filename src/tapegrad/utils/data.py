"""``tapegrad.utils.data``: PyTorch's ``torch.utils.data``, yielding Tensors.

``Dataset``, ``TensorDataset``, ``Subset``, ``random_split`` and ``DataLoader`` are
``tapegrad.data``'s (same arguments: ``batch_size``, ``shuffle``, ``drop_last``,
``collate_fn``, ``generator``), except that samples and batches are Tensors, as in PyTorch:
``TensorDataset(x, y)[i]`` is a tuple of Tensors and every batch a loader yields is a Tensor
(or a tuple, list or dict of them) sharing the batch array's memory. ``tapegrad.data``'s own
loader keeps yielding NumPy arrays. ``num_workers`` is accepted and ignored (one process).
Python floats collate to tapegrad's default dtype (float32), not float64.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..autodiff.tensor import Tensor
from ..data import loader as _loader
from ..data.loader import Dataset, Subset
from ..data.loader import default_collate as _collate_arrays

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "Subset",
    "random_split",
    "DataLoader",
    "default_collate",
]


def _tensors(batch):
    """Every ndarray in ``batch`` (nested in tuples, lists and dicts) as a Tensor."""
    if isinstance(batch, Tensor):
        return batch
    if isinstance(batch, (np.ndarray, np.generic)):
        return Tensor(np.asarray(batch))
    if isinstance(batch, Mapping):
        return {k: _tensors(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_tensors(v) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_tensors(v) for v in batch)
    return batch


def default_collate(samples):
    """Stack samples into a batch of Tensors (see ``tapegrad.data.default_collate``)."""
    return _tensors(_collate_arrays(samples))


class IterableDataset(Dataset):
    """A dataset that is iterated (``__iter__``) rather than indexed."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} does not define __iter__")


class TensorDataset(_loader.TensorDataset):
    """Samples ``(a[i], b[i], ...)`` of Tensors sharing their first axis; ``tensors`` holds
    them whole."""

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(Tensor(a) for a in self.arrays)

    def __getitem__(self, index):
        return _tensors(super().__getitem__(index))


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Non-overlapping random subsets of the given lengths (counts, or fractions summing to 1)."""
    return _loader.random_split(dataset, lengths, generator)


class DataLoader(_loader.DataLoader):
    """``tapegrad.data.DataLoader`` whose batches are Tensors (the same order and values).
    ``num_workers``, ``pin_memory`` and the other process options are accepted and ignored:
    batches are made in the calling process."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, generator=None, **kwargs) -> None:  # fmt: skip
        if sampler is not None or batch_sampler is not None:
            raise NotImplementedError(
                "DataLoader: sampler= and batch_sampler= are not supported; use shuffle= and "
                "batch_size=, or index a Subset"
            )
        super().__init__(
            dataset,
            batch_size=batch_size or 1,
            shuffle=bool(shuffle),
            num_workers=0,  # workers (and pin_memory) would only change where batches are made
            collate_fn=collate_fn,
            drop_last=drop_last,
            generator=generator,
        )

    def __iter__(self):
        for batch in super().__iter__():
            yield _tensors(batch)
