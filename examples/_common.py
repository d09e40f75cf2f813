"""Helpers the examples share: command-line flags every example has, and loading MNIST as
arrays (from ``$TAPEGRAD_DATA``, the user cache, or a download where there is internet)."""

from __future__ import annotations

import argparse

import numpy as np


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=1, help="passes over the training data")
    p.add_argument("--seed", type=int, default=1, help="seeds weights, dropout and shuffling")
    p.add_argument("--eager", action="store_true", help="run each step eagerly, not compiled")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    return p


def mnist_arrays(data_dir: str | None, train_size: int, test_size: int):
    """MNIST images ``(N, 28, 28)`` float32 in [0, 1] and labels, the first ``train_size``
    training and ``test_size`` test samples."""
    from tapegrad.data import DatasetError, mnist

    try:
        ds = mnist(data_dir)
    except DatasetError as e:  # no copy of MNIST here: say where to put one, no traceback
        raise SystemExit(str(e)) from None
    return (
        ds.train.x[:train_size],
        ds.train.y[:train_size],
        ds.test.x[:test_size],
        ds.test.y[:test_size],
    )


def say(quiet: bool, *args) -> None:
    if not quiet:
        print(*args, flush=True)


def as_array(t) -> np.ndarray:
    """A returned tensor's values, copied (a compiled step's outputs are its buffers)."""
    return np.array(t.data)
