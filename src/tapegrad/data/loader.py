"""``Dataset``, ``TensorDataset`` and ``DataLoader``: PyTorch's way of feeding a training loop,
over NumPy arrays.

>>> ds = TensorDataset(x, y)                                   # doctest: +SKIP
>>> for xb, yb in DataLoader(ds, batch_size=64, shuffle=True, generator=0):  # doctest: +SKIP
...     ...

A *dataset* is anything with ``__getitem__(i)`` (one sample) and ``__len__``; a *loader* draws
an order (the identity, or a permutation when ``shuffle``), cuts it into batches of indices and
turns each batch of samples into arrays with ``collate_fn`` (:func:`default_collate`: arrays
and numbers stacked along a new first axis, tuples, lists and dicts collated entry by entry).
A :class:`TensorDataset` without transforms skips the per-sample path: each batch is one
fancy-indexing operation per array, as fast as slicing arrays by hand.

Shuffling follows PyTorch: off by default, and a new permutation on every pass over the loader,
drawn from ``generator`` (a ``numpy.random.Generator`` or an int seed), or, when None, from a
generator seeded by ``nn.init``'s default one (so ``tg.manual_seed`` reproduces the order).
Everything runs in the calling process (``num_workers=0``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .batches import take_rows


class Dataset:
    """A map-style dataset: subclass it and define ``__getitem__(index)`` (one sample: an
    array, a tuple, a dict, ...) and ``__len__``."""

    def __getitem__(self, index: int):
        raise NotImplementedError(f"{type(self).__name__} does not define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not define __len__")


def _as_array(a) -> np.ndarray:
    data = getattr(a, "data", a) if not isinstance(a, np.ndarray) else a
    return np.asanyarray(data)


class TensorDataset(Dataset):
    """Samples ``(a[i], b[i], ...)`` of arrays (or tensors) sharing their first axis.

    ``transform`` is applied to each sample's first entry (the input), ``target_transform`` to
    its second (the label), one sample at a time, as vision datasets do; without them a
    :class:`DataLoader` takes whole batches with one indexing operation per array.
    """

    def __init__(
        self,
        *arrays,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
    ) -> None:
        if not arrays:
            raise ValueError("TensorDataset: give at least one array")
        self.arrays = tuple(_as_array(a) for a in arrays)
        if any(a.ndim == 0 for a in self.arrays):
            raise ValueError("TensorDataset: arrays need a sample axis (0-d array given)")
        sizes = [len(a) for a in self.arrays]
        if len(set(sizes)) != 1:
            shapes = ", ".join(str(a.shape) for a in self.arrays)
            raise ValueError(
                f"TensorDataset: the arrays must share their first axis, got shapes {shapes}"
            )
        if target_transform is not None and len(self.arrays) < 2:
            raise ValueError("TensorDataset: target_transform needs a second array (the labels)")
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index):
        sample = [a[index] for a in self.arrays]
        if self.transform is not None:
            sample[0] = self.transform(sample[0])
        if self.target_transform is not None:
            sample[1] = self.target_transform(sample[1])
        return tuple(sample)

    @property
    def batchable(self) -> bool:
        """Whether a batch may be taken as ``a[indices]`` for every array at once."""
        return self.transform is None and self.target_transform is None

    def __repr__(self) -> str:
        shapes = ", ".join(str(a.shape) for a in self.arrays)
        return f"TensorDataset({shapes})"


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64)
        n = len(dataset)
        if self.indices.ndim != 1 or (
            len(self.indices) and (self.indices.min() < -n or self.indices.max() >= n)
        ):
            raise IndexError(f"Subset: indices must be a list of positions in 0..{n - 1}")

    def __getitem__(self, index):
        return self.dataset[int(self.indices[index])]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths: Sequence[float], generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random :class:`Subset` s of the given lengths
    (counts summing to ``len(dataset)``, or fractions summing to 1, the remainder handed out
    one by one from the first split on), drawn from ``generator`` (see :class:`DataLoader`)."""
    n = len(dataset)
    lengths = list(lengths)
    if (
        lengths
        and all(0 <= f <= 1 for f in lengths)
        and abs(sum(lengths) - 1) < 1e-9
        and (sum(lengths) != n)
    ):
        counts = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(int(k) != k or k < 0 for k in lengths) or sum(lengths) != n:
        raise ValueError(
            f"random_split: lengths must be counts summing to {n} or fractions summing to 1, "
            f"got {lengths}"
        )
    order = _generator(generator).permutation(n)
    cuts = np.cumsum([0, *lengths])
    return [Subset(dataset, order[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def default_collate(samples: Sequence[Any]):
    """Stack a list of samples into a batch: arrays (and tensors) along a new first axis,
    Python numbers into an array (floats as float32, tapegrad's default; ints as int64),
    tuples/lists and dicts entry by entry (keeping their structure), strings into a list."""
    if not len(samples):
        raise ValueError("default_collate: no samples")
    first = samples[0]
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, Mapping):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        if any(len(s) != len(first) for s in samples):
            raise ValueError("default_collate: samples have different numbers of entries")
        parts = [default_collate(list(p)) for p in zip(*samples)]
        if isinstance(first, tuple) and hasattr(first, "_fields"):  # a named tuple
            return type(first)(*parts)
        return tuple(parts) if isinstance(first, tuple) else parts
    if isinstance(first, (bool, np.bool_)):
        return np.asarray(samples, dtype=bool)
    if isinstance(first, (int, np.integer)) and not isinstance(first, np.ndarray):
        return np.asarray(samples, dtype=np.int64 if isinstance(first, int) else None)
    if isinstance(first, float):
        return np.asarray(samples, dtype=np.float32)
    arrays = [_as_array(s) for s in samples]
    if arrays[0].dtype == object:
        raise TypeError(f"default_collate: cannot batch samples of type {type(first).__name__}")
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(
            f"default_collate: samples of different shapes {sorted(shapes)} cannot be stacked; "
            f"pad them or pass a collate_fn"
        )
    return np.stack(arrays)


def _generator(generator) -> np.random.Generator:
    if isinstance(generator, np.random.Generator):
        return generator
    if generator is None:
        from ..nn import init  # the seedable default generator (tg.manual_seed)

        return np.random.default_rng(init.default_generator().integers(2**63))
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(
        f"generator must be a numpy.random.Generator, an int seed or None, got "
        f"{type(generator).__name__}"
    )


class DataLoader:
    """Iterate ``dataset`` in batches of ``batch_size`` samples.

    ``shuffle`` draws a new order on every pass (from ``generator``: a
    ``numpy.random.Generator``, an int seed, or None for one seeded from ``nn.init``'s default
    generator); ``drop_last`` leaves out a last, smaller batch; ``collate_fn`` turns a list of
    samples into a batch (default :func:`default_collate`). ``len()`` is the number of batches.
    Batches of a :class:`TensorDataset` without transforms are tuples of arrays taken with one
    indexing operation each.
    """

    def __init__(
        self,
        dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        drop_last: bool = False,
        generator: np.random.Generator | int | None = None,
    ) -> None:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(
                f"DataLoader: the dataset must define __getitem__ and __len__, got "
                f"{type(dataset).__name__}"
            )
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if num_workers != 0:
            raise ValueError(
                "DataLoader: num_workers must be 0 (tapegrad loads batches in the calling process)"
            )
        self.dataset, self.batch_size = dataset, int(batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.collate_fn = collate_fn
        self.generator = (
            _generator(generator) if generator is not None or not self.shuffle else None
        )

    def __len__(self) -> int:
        n, b = len(self.dataset), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def _order(self) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        gen = self.generator if self.generator is not None else _generator(None)
        return gen.permutation(n)

    def __iter__(self) -> Iterator:
        order = self._order()
        fast = self.collate_fn is None and getattr(self.dataset, "batchable", False)
        for k in range(len(self)):
            idx = order[k * self.batch_size : (k + 1) * self.batch_size]
            if fast:
                if not self.shuffle:  # a slice: views, no copies
                    idx = slice(int(idx[0]), int(idx[-1]) + 1)
                    yield tuple(a[idx] for a in self.dataset.arrays)
                else:
                    yield tuple(take_rows(a, idx) for a in self.dataset.arrays)
                continue
            samples = [self.dataset[int(i)] for i in idx]
            yield (self.collate_fn or default_collate)(samples)

    def __repr__(self) -> str:
        return (
            f"DataLoader({len(self.dataset)} samples, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last})"
        )
