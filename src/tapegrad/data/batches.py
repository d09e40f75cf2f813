"""Mini-batch iteration over in-memory arrays.

Shuffling is a permutation drawn from ``numpy.random.default_rng([seed, epoch])``: epoch ``k``'s
order depends on ``(seed, k)`` only, not on how many epochs ran before, so a run resumed at
epoch ``k`` (and batch ``start``) sees exactly the batches an uninterrupted run would.
Batches are taken with one fancy-indexing operation each (a slice view when not shuffling),
never a Python loop over samples; float rows of a contiguous array are copied by the CPU
kernels' compiled gather instead, on numba's threads (:func:`take_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..autodiff.kernels.dispatch import kernels_for

# what the compiled gather copies (the dtypes whose gather the kernels compile anyway: an
# embedding's table); other arrays are indexed by NumPy
_GATHERED = (np.dtype(np.float32), np.dtype(np.float64))


def take_rows(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[idx]`` for an int array ``idx`` of valid row numbers, a new array. The rows of a plain
    C-contiguous float array are copied by the CPU kernels' gather (``gather_rows``: ranges of
    rows on numba's threads; the same values): a shuffled MNIST batch, 100 random rows of 784
    float32 (313 KiB), took 40 us by fancy indexing and 22 us so on two threads (Zen 4,
    2026-12-08), a tenth of seed-rnn's step."""
    gathered = type(a) is np.ndarray and a.ndim >= 2 and a.size and a.dtype in _GATHERED
    if not gathered or not a.flags.c_contiguous:
        return a[idx]
    row = a.size // len(a)
    out = np.empty((len(idx),) + a.shape[1:], a.dtype)
    kernels_for(a).gather_rows(a.reshape(len(a), row), idx, out.reshape(len(idx), row))
    return out


class Batches:
    """Iterate ``(x[idx], y[idx])`` mini-batches; ``y=None`` yields ``x[idx]`` alone.

    ``for xb, yb in batches`` runs the current epoch (from batch ``start`` if one was given to
    the constructor or :meth:`set_epoch`) and then advances to the next epoch; :meth:`epoch`
    runs any epoch explicitly. ``len()`` is the number of batches per epoch.

    With ``shard=(rank, ranks)`` each batch is rank ``rank``'s contiguous part of the global
    batch of ``batch_size`` samples (data-parallel training: the global batches, and so the
    training, do not depend on how many ranks share them); :meth:`global_size` is the size of
    the whole global batch.

    ``compiled_gather=False`` takes shuffled batches by NumPy's fancy indexing alone, never
    :func:`take_rows`' compiled gather, which starts numba's threads in the process (what a
    process that must not run them wants: another framework's benchmark worker).
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray | None,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        epoch: int = 0,
        start: int = 0,
        shard: tuple[int, int] | None = None,
        compiled_gather: bool = True,
    ):
        x = np.asanyarray(x)  # keeps subclasses such as np.memmap
        if x.ndim == 0:
            raise ValueError("Batches: x must have a sample dimension, got a 0-d array")
        if y is not None:
            y = np.asanyarray(y)
            if y.ndim == 0 or len(y) != len(x):
                raise ValueError(
                    f"Batches: x has {len(x)} samples but y has shape {y.shape}; "
                    "their first dimensions must agree"
                )
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"Batches: batch_size must be a positive integer, got {batch_size!r}")
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        if shard is not None and not 0 <= shard[0] < shard[1]:
            raise ValueError(
                f"Batches: shard must be (rank, ranks) with 0 <= rank < ranks, got {shard}"
            )
        self.shard = shard
        self.compiled_gather = bool(compiled_gather)
        self.set_epoch(epoch, start)

    @property
    def n_samples(self) -> int:
        return len(self.x)

    def __len__(self) -> int:
        n, b = self.n_samples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def order(self, epoch: int) -> np.ndarray:
        """The sample order of ``epoch``: a seeded permutation, or ``arange`` without shuffling."""
        if not self.shuffle:
            return np.arange(self.n_samples)
        return np.random.default_rng([self.seed, int(epoch)]).permutation(self.n_samples)

    def epoch(self, epoch: int, start: int = 0) -> Iterator:
        """The batches of ``epoch`` from batch index ``start`` (for resuming mid-epoch)."""
        n_batches = len(self)
        if not 0 <= start <= n_batches:
            raise ValueError(f"Batches: start must be in 0..{n_batches}, got {start}")
        return self._batches(epoch, start)

    def _batches(self, epoch: int, start: int) -> Iterator:
        n_batches, b = len(self), self.batch_size
        order = self.order(epoch) if self.shuffle else None
        for i in range(start, n_batches):
            lo, hi = i * b, min((i + 1) * b, self.n_samples)
            if self.shard is not None:  # this rank's contiguous part of the global batch
                rank, ranks = self.shard
                lo, hi = lo + (hi - lo) * rank // ranks, lo + (hi - lo) * (rank + 1) // ranks
            if order is None:  # a slice: views
                idx = slice(lo, hi)
                xb = self.x[idx]
            else:
                idx = order[lo:hi]
                xb = take_rows(self.x, idx) if self.compiled_gather else self.x[idx]
            yield xb if self.y is None else (xb, self.y[idx])

    def global_size(self, i: int) -> int:
        """Samples in batch ``i`` over all shards (the last batch may be short)."""
        return min(self.batch_size, self.n_samples - i * self.batch_size)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Make the next ``iter()`` run ``epoch`` from batch ``start`` (checkpoint resume)."""
        if epoch < 0:
            raise ValueError(f"Batches: epoch must be >= 0, got {epoch}")
        if not 0 <= start <= len(self):
            raise ValueError(f"Batches: start must be in 0..{len(self)}, got {start}")
        self._epoch, self._start = int(epoch), int(start)

    @property
    def current_epoch(self) -> int:
        """The epoch the next ``iter()`` will run."""
        return self._epoch

    def __iter__(self) -> Iterator:
        epoch, start = self._epoch, self._start
        self._epoch, self._start = epoch + 1, 0
        return self.epoch(epoch, start)

    def __repr__(self) -> str:
        return (
            f"Batches({self.n_samples} samples, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last})"
        )


@dataclass(frozen=True)
class Split:
    """One split of a dataset: inputs ``x`` and labels ``y`` with the same first dimension."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    def batches(
        self, batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = False
    ) -> Batches:
        """A :class:`Batches` iterator over this split."""
        return Batches(self.x, self.y, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
