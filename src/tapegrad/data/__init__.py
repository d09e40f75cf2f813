"""Datasets: resolution of local copies, checksummed downloads, loaders, batch iterators.

>>> from tapegrad import data
>>> ds = data.mnist()                         # doctest: +SKIP
>>> for xb, yb in data.Batches(ds.train.x, ds.train.y, 100, seed=0):  # doctest: +SKIP
...     ...
>>> train = data.TensorDataset(ds.train.x, ds.train.y)   # doctest: +SKIP
>>> for xb, yb in data.DataLoader(train, batch_size=64, shuffle=True):  # doctest: +SKIP
...     ...

Where files are looked for, and in which order, is described in :mod:`tapegrad.data.paths`;
:func:`describe` reports what was found.
"""

from .batches import Batches
from .chars import CharCorpus, CharWindows, imdb_chars
from .embeddings import GloveVectors, glove
from .errors import DatasetError, DatasetNotFoundError
from .idx import parse_idx, read_idx
from .loader import DataLoader, Dataset, Subset, TensorDataset, default_collate, random_split
from .paths import (
    DATASETS,
    cache_dir,
    describe,
    downloads_enabled,
    resolve,
    sha256_file,
    verify_checksum,
)
from .text import PAD, STOPWORDS, UNK, TextDataset, Vocab, imdb, pad_sequences, tokenize
from .vision import FASHION_CLASSES, MNIST_CLASSES, ImageDataset, Split, fashion_mnist, mnist

__all__ = [
    "mnist",
    "fashion_mnist",
    "imdb",
    "imdb_chars",
    "CharCorpus",
    "CharWindows",
    "glove",
    "Batches",
    "Dataset",
    "TensorDataset",
    "Subset",
    "random_split",
    "DataLoader",
    "default_collate",
    "describe",
    "resolve",
    "cache_dir",
    "downloads_enabled",
    "verify_checksum",
    "sha256_file",
    "read_idx",
    "parse_idx",
    "tokenize",
    "STOPWORDS",
    "pad_sequences",
    "Vocab",
    "PAD",
    "UNK",
    "Split",
    "ImageDataset",
    "TextDataset",
    "GloveVectors",
    "MNIST_CLASSES",
    "FASHION_CLASSES",
    "DATASETS",
    "DatasetError",
    "DatasetNotFoundError",
]
