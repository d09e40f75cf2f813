"""Data the CLI tests train on: a small .npz of Gaussian blobs, one per class."""

from pathlib import Path

import numpy as np


def write_blobs(path: Path, classes: int, features: int, n: int = 500) -> Path:
    """x_train/y_train (the first 80%) and x_test/y_test of ``n`` samples around ``classes``
    random centres in ``features`` dimensions, float32 features and integer labels."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, n)
    centres = rng.normal(scale=2.0, size=(classes, features))
    x = (centres[y] + rng.normal(size=(n, features))).astype(np.float32)
    cut = n * 4 // 5
    np.savez(path, x_train=x[:cut], y_train=y[:cut], x_test=x[cut:], y_test=y[cut:])
    return path
