"""GloVe 6B word vectors (Pennington et al., 2014) as an embedding matrix for a vocabulary.

Reads ``glove.6B.{dim}d.txt`` or ``glove.6B.{dim}d.txt.gz``: one word per line followed by
``dim`` numbers, separated by single spaces. Only the rows of vocabulary words are parsed.

Rule for words GloVe lacks: the padding row (id 0, ``<pad>``) is all zeros; every other missing
word (``<unk>`` included) gets a vector drawn from ``N(0, oov_scale**2)`` with a generator seeded
by ``seed``, so the matrix is reproducible. ``coverage`` is the fraction of the vocabulary's real
words (everything but ``<pad>`` and ``<unk>``) found in the file.
"""

from __future__ import annotations

import gzip
import warnings
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..safefile import open_regular
from . import _cache
from .errors import DatasetError
from .paths import GLOVE_DIMS, PathLike, glove_files, resolve, verify_checksum
from .text import PAD_TOKEN, UNK_TOKEN, Vocab

_FORMAT_VERSION = 1


class GloveVectors(NamedTuple):
    """``matrix`` float32 (len(vocab), dim), row i for id i; ``coverage`` in [0, 1]."""

    matrix: np.ndarray
    coverage: float


def _words(vocab: Vocab | Sequence[str] | Mapping[str, int]) -> list[str]:
    """id -> word list from a :class:`Vocab`, a word list, or a word -> id mapping."""
    if isinstance(vocab, Vocab):
        return list(vocab.id_to_word)
    if isinstance(vocab, Mapping):
        words = [""] * len(vocab)
        for w, i in vocab.items():
            if not 0 <= int(i) < len(vocab) or words[int(i)]:
                raise DatasetError(
                    f"glove: vocabulary ids must be 0..{len(vocab) - 1}, each once; got {w!r}: {i}"
                )
            words[int(i)] = w
        return words
    return [str(w) for w in vocab]


def _maybe_gzip(path: Path, f):
    return gzip.GzipFile(fileobj=f, mode="rb") if path.name.endswith(".gz") else f


def read_vectors(path: PathLike, words: Sequence[str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(vectors, found)``: float32 (len(words), dim) rows from the file, and a bool mask."""
    path = Path(path)
    index: dict[str, list[int]] = {}
    for i, w in enumerate(words):
        index.setdefault(w, []).append(i)
    vectors = np.zeros((len(words), dim), dtype=np.float32)
    found = np.zeros(len(words), dtype=bool)
    lineno = 0
    try:
        with open_regular(path, DatasetError) as f, _maybe_gzip(path, f) as raw:
            for lineno, line in enumerate(raw, 1):
                word, sep, rest = line.partition(b" ")
                if lineno == 1:
                    n = len(rest.split())
                    if not sep or n != dim:
                        raise DatasetError(
                            f"{path}:1: expected a word and {dim} numbers, got {n} numbers"
                        )
                rows = index.get(word.decode("utf-8", errors="replace"))
                if rows is None:
                    continue
                try:
                    vec = np.array(rest.split(), dtype=np.float32)
                except ValueError as err:
                    raise DatasetError(f"{path}:{lineno}: not a number ({err})") from err
                if vec.shape != (dim,):
                    raise DatasetError(
                        f"{path}:{lineno}: expected {dim} numbers, got {vec.shape[0]}"
                    )
                vectors[rows] = vec
                found[rows] = True
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetError(
            f"{path}: corrupt or truncated file after line {lineno} ({err})"
        ) from err
    if lineno == 0:
        raise DatasetError(f"{path}: empty file, expected lines of a word and {dim} numbers")
    return vectors, found


def glove(
    vocab: Vocab | Sequence[str] | Mapping[str, int],
    dim: int = 50,
    data_dir: PathLike | None = None,
    *,
    seed: int = 0,
    oov_scale: float = 0.1,
    cache: bool = True,
    download: bool | None = None,
) -> GloveVectors:
    """The GloVe 6B ``dim``-d embedding matrix for ``vocab`` and its coverage.

    ``vocab`` is a :class:`~tapegrad.data.Vocab`, an id -> word list or a word -> id dict.
    Cached as ``.npz`` like :func:`~tapegrad.data.imdb`, keyed by the file's size and mtime,
    the vocabulary, ``seed`` and ``oov_scale``.
    """
    if dim not in GLOVE_DIMS:
        raise ValueError(f"glove: dim must be one of {GLOVE_DIMS}, got {dim}")
    words = _words(vocab)
    (path,) = resolve("glove", [glove_files(dim)], data_dir, download=download)
    key = {
        "source": _cache.source_stamp(path),
        "dim": dim,
        "vocab": _cache.hash_strings(words),
        "seed": seed,
        "oov_scale": oov_scale,
        "version": _FORMAT_VERSION,
    }
    cpath = _cache.cache_path("glove", key) if cache else None
    arrays = _cache.load(cpath) if cpath is not None else None
    if arrays is None:
        verify_checksum(path)
        vectors, found = read_vectors(path, words, dim)
        pad = np.array([w == PAD_TOKEN for w in words], dtype=bool)
        vectors[pad] = 0.0
        missing = ~found & ~pad
        rng = np.random.default_rng(seed)
        vectors[missing] = (oov_scale * rng.standard_normal((int(missing.sum()), dim))).astype(
            np.float32
        )
        arrays = {"matrix": vectors, "found": found}
        if cpath is not None:
            try:
                _cache.save(cpath, arrays)
            except OSError as err:
                warnings.warn(f"glove: could not write cache {cpath}: {err}", stacklevel=2)
    real = np.array([w not in (PAD_TOKEN, UNK_TOKEN) for w in words], dtype=bool)
    coverage = float(arrays["found"][real].mean()) if real.any() else 0.0
    return GloveVectors(arrays["matrix"], coverage)
