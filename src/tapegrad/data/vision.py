"""MNIST and Fashion-MNIST: 28x28 grey-scale images in ten classes, 60,000 train / 10,000 test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .batches import Split
from .errors import DatasetError
from .idx import read_idx
from .paths import MNIST_FILES, PathLike, resolve, verify_checksum

MNIST_CLASSES = tuple(str(d) for d in range(10))
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
IMAGE_SIDE = 28


@dataclass(frozen=True)
class ImageDataset:
    """``train`` and ``test`` splits (``x`` float32 (N, 28, 28) in [0, 1], ``y`` int64 (N,))."""

    train: Split
    test: Split
    classes: tuple[str, ...]


def _load_split(images: Path, labels: Path, n_classes: int) -> Split:
    for p in (images, labels):
        verify_checksum(p)
    x = read_idx(images, ndim=3)
    y = read_idx(labels, ndim=1)
    if x.shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        raise DatasetError(
            f"{images}: expected {IMAGE_SIDE}x{IMAGE_SIDE} images, header says "
            f"{x.shape[1]}x{x.shape[2]}"
        )
    if len(x) != len(y):
        raise DatasetError(
            f"{images} holds {len(x)} images but {labels} holds {len(y)} labels; counts must agree"
        )
    if len(y) == 0:
        raise DatasetError(f"{labels}: no samples")
    if y.max() >= n_classes:
        raise DatasetError(f"{labels}: label {int(y.max())} outside 0..{n_classes - 1}")
    # Scale in float32 directly (no float64 temporary of 60000x784).
    xf = x.astype(np.float32)
    xf *= np.float32(1.0 / 255.0)
    return Split(xf, y.astype(np.int64))


def _load(name: str, classes: tuple[str, ...], data_dir: PathLike | None, download) -> ImageDataset:
    tr_x, tr_y, te_x, te_y = resolve(name, MNIST_FILES, data_dir, download=download)
    return ImageDataset(
        train=_load_split(tr_x, tr_y, len(classes)),
        test=_load_split(te_x, te_y, len(classes)),
        classes=classes,
    )


def mnist(data_dir: PathLike | None = None, *, download: bool | None = None) -> ImageDataset:
    """The MNIST handwritten digits (LeCun et al.), from the four official IDX ``.gz`` files.

    Files are found as described in :mod:`tapegrad.data.paths`; a ``SHA256SUMS`` beside them is
    checked. ``download`` as in :func:`~tapegrad.data.paths.resolve`.
    """
    return _load("mnist", MNIST_CLASSES, data_dir, download)


def fashion_mnist(
    data_dir: PathLike | None = None, *, download: bool | None = None
) -> ImageDataset:
    """Fashion-MNIST (Zalando Research): clothing images in MNIST's format and sizes.

    Also found in Debian's ``/usr/share/datasets/fashion-mnist/`` (package
    ``dataset-fashion-mnist``); Debian recompressed the files, so their gzip bytes differ from the
    official ones and are checked by the IDX headers only.
    """
    return _load("fashion-mnist", FASHION_CLASSES, data_dir, download)
