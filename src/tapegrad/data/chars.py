"""The characters of the IMDB reviews as a corpus for a character language model.

Text: every review with its ``<br />`` tags turned into line breaks, the reviews of a split
joined by one line break each, in the order :func:`~tapegrad.data.text.read_reviews` gives them.
Vocabulary: id 0 is ``UNKNOWN_CHAR`` (a character the training reviews never use: the few such
characters of the test reviews map to it), then every character of the training reviews in
code-point order (178 on the official archive, so ids fit ``uint8``).

Training windows are drawn, not enumerated: epoch ``k`` of a run with seed ``s`` is
``windows`` windows of ``context + 1`` consecutive characters starting at offsets drawn from
``numpy.random.default_rng([s, k])``, in batches of consecutive draws (input: the first
``context`` characters, target: the last ``context``, each target the next character). Like
:class:`~tapegrad.data.Batches`, epoch ``k``'s batches depend on ``(s, k)`` only, so a run
resumed mid-epoch sees the batches an uninterrupted run would. Validation: a fixed set of
windows of the *test* reviews (drawn once with seed 0, whatever the run's seed), so every run
reports the mean cross-entropy over the same characters.

With ``cache=True`` the encoded texts of both splits and the vocabulary are stored as ``.npz``
in the user cache (keyed by the source's size and modification time) and reused, whatever the
window settings: reading the archive takes seconds, the cache a fraction of one.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _cache
from .batches import Split
from .errors import DatasetError
from .paths import IMDB_SOURCES, PathLike, resolve, verify_checksum
from .text import _BR, _stamp, read_reviews

UNKNOWN_CHAR = "\ufffd"
_FORMAT_VERSION = 1


def _as_text(reviews: list[str]) -> str:
    return "\n".join(_BR.sub("\n", r) for r in reviews)


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def encode_chars(text: str, vocab: np.ndarray) -> np.ndarray:
    """The ids (uint8 when the vocabulary allows, else int32) of ``text``'s characters under
    ``vocab`` (code points, sorted after id 0); characters outside it become id 0."""
    points = _code_points(text)
    known = vocab[1:]
    pos = np.searchsorted(known, points)
    pos_c = np.minimum(pos, len(known) - 1)
    ids = np.where(known[pos_c] == points, pos_c + 1, 0)
    return ids.astype(np.uint8 if len(vocab) <= 256 else np.int32)


def windows_at(text: np.ndarray, starts: np.ndarray, context: int) -> tuple[np.ndarray, ...]:
    """``(x, y)`` int64 windows: ``x[i] = text[s_i : s_i + context]``, ``y[i]`` one further."""
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(context + 1)
    w = text[idx].astype(np.int64)
    return w[:, :-1], w[:, 1:]


class CharWindows:
    """The training side of a character corpus: ``text`` (ids) and how its epochs are drawn.

    ``len()`` is the number of windows in an epoch; :meth:`batches` iterates them in the
    interface the Trainer uses (``len``, ``epoch(k, start)``, ``global_size(i)``)."""

    def __init__(self, text: np.ndarray, context: int, windows: int):
        if len(text) < context + 2:
            raise DatasetError(
                f"a character corpus of {len(text)} characters is too short for windows of "
                f"{context} + 1"
            )
        if windows < 1:
            raise ValueError(f"CharWindows: windows per epoch must be >= 1, got {windows}")
        self.text, self.context, self.windows = text, int(context), int(windows)

    def __len__(self) -> int:
        return self.windows

    def starts(self, seed: int, epoch: int) -> np.ndarray:
        """The offsets of epoch ``epoch``'s windows, in the order they are trained."""
        high = len(self.text) - self.context  # a window's last target is text[start + context]
        return np.random.default_rng([int(seed), int(epoch)]).integers(0, high, self.windows)

    def batches(self, batch_size: int, seed: int = 0, shard=None) -> WindowBatches:
        return WindowBatches(self, batch_size, seed, shard)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """What identifies the data (for fingerprints): the text and the window settings."""
        return self.text, np.array([self.context, self.windows], dtype=np.int64)

    def __repr__(self) -> str:
        return (
            f"CharWindows({len(self.text)} characters, context {self.context}, "
            f"{self.windows} windows per epoch)"
        )


class WindowBatches:
    """One run's batches of :class:`CharWindows`; ``shard=(rank, ranks)`` yields that rank's
    contiguous part of each global batch, as :class:`~tapegrad.data.Batches` does."""

    def __init__(self, source: CharWindows, batch_size: int, seed: int = 0, shard=None):
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.source, self.batch_size, self.seed, self.shard = source, int(batch_size), seed, shard

    def __len__(self) -> int:
        return -(-len(self.source) // self.batch_size)

    def global_size(self, i: int) -> int:
        return min(self.batch_size, len(self.source) - i * self.batch_size)

    def epoch(self, epoch: int, start: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if not 0 <= start <= len(self):
            raise ValueError(f"start must be in 0..{len(self)}, got {start}")
        return self._batches(epoch, start)

    def _batches(self, epoch: int, start: int):
        starts, b = self.source.starts(self.seed, epoch), self.batch_size
        for i in range(start, len(self)):
            lo, hi = i * b, min((i + 1) * b, len(starts))
            if self.shard is not None:
                rank, ranks = self.shard
                lo, hi = lo + (hi - lo) * rank // ranks, lo + (hi - lo) * (rank + 1) // ranks
            yield windows_at(self.source.text, starts[lo:hi], self.source.context)


@dataclass(frozen=True)
class CharCorpus:
    """``train`` (:class:`CharWindows`), ``test`` (the fixed validation windows as a
    :class:`Split`, ``x`` and ``y`` int64 (N, context)) and ``vocab`` (one string per id)."""

    train: CharWindows
    test: Split
    vocab: list[str]
    source: Path

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in np.ravel(ids))


def imdb_chars(
    data_dir: PathLike | None = None,
    context: int = 64,
    windows: int = 6400,
    val_windows: int = 512,
    cache: bool = True,
    *,
    download: bool | None = None,
) -> CharCorpus:
    """The IMDB reviews' characters: training windows of ``context`` characters (``windows``
    per epoch) and ``val_windows`` fixed validation windows from the test reviews."""
    if context < 1 or val_windows < 1:
        raise ValueError(
            f"imdb_chars: context and val_windows must be >= 1, got {context}, {val_windows}"
        )
    (source,) = resolve("imdb", [IMDB_SOURCES], data_dir, download=download)
    key = {"source": _stamp(source), "version": _FORMAT_VERSION}
    path = _cache.cache_path("imdb-chars", key) if cache else None
    arrays = _cache.load(path) if path is not None else None
    if arrays is None:
        arrays = _build(source)
        if path is not None:
            try:
                _cache.save(path, arrays)
            except OSError as err:
                warnings.warn(f"imdb_chars: could not write cache {path}: {err}", stacklevel=2)
    vocab = [UNKNOWN_CHAR, *(chr(int(c)) for c in arrays["vocab"][1:])]
    test = arrays["test_text"]
    if len(test) < context + 2:
        raise DatasetError(f"{source}: the test reviews are too short for validation windows")
    starts = np.random.default_rng(0).integers(0, len(test) - context, val_windows)
    return CharCorpus(
        train=CharWindows(arrays["train_text"], context, windows),
        test=Split(*windows_at(test, starts, context)),
        vocab=vocab,
        source=source,
    )


def _build(source: Path) -> dict[str, np.ndarray]:
    verify_checksum(source)
    reviews = read_reviews(source)
    train, test = _as_text(reviews["train"][0]), _as_text(reviews["test"][0])
    vocab = np.concatenate([[0], np.unique(_code_points(train))]).astype(np.uint32)
    if vocab[1] == 0:  # a NUL character in the text: id 0 stays the unknown character
        raise DatasetError(f"{source}: the reviews hold NUL characters")
    return {
        "train_text": encode_chars(train, vocab),
        "test_text": encode_chars(test, vocab),
        "vocab": vocab,
    }
