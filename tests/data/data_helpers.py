"""Writers of small synthetic dataset files for the tests (IDX, aclImdb tarballs and folders)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def real_data_root() -> Path:
    """``$TAPEGRAD_DATA`` (a relative path is taken from the repo root), else ../shared/data."""
    root = Path(os.environ.get("TAPEGRAD_DATA", "../shared/data")).expanduser()
    return root if root.is_absolute() else (REPO / root).resolve()


REAL = real_data_root()


def idx_bytes(arr: np.ndarray, magic: int | None = None, shape=None) -> bytes:
    """IDX encoding of a uint8 array; ``magic``/``shape`` override the header (to make it lie)."""
    arr = np.asarray(arr, dtype=np.uint8)
    magic = (0x08 << 8 | arr.ndim) if magic is None else magic
    shape = arr.shape if shape is None else shape
    header = magic.to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in shape)
    return header + arr.tobytes()


def write_mnist(folder: Path, n_train=12, n_test=6, seed=0, label_offset=0) -> dict:
    """Four small IDX .gz files in ``folder``; returns the arrays written."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = ((np.arange(n) + label_offset) % 10).astype(np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(x)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(y)))
        out[prefix] = (x, y)
    return out


def add_tar_bytes(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


def write_acl_tar(path: Path, reviews: dict, extra: dict | None = None) -> Path:
    """A gzip tarball in the aclImdb layout: reviews[(split, label)] = list of (id, text)."""
    with tarfile.open(path, "w:gz") as tar:
        add_tar_bytes(tar, "aclImdb/README", b"readme")
        add_tar_bytes(tar, "aclImdb/train/unsup/0_0.txt", b"unlabelled text is ignored")
        for (split, label), items in reviews.items():
            for file_id, text in items:
                add_tar_bytes(tar, f"aclImdb/{split}/{label}/{file_id}_7.txt", text.encode())
        for name, payload in (extra or {}).items():
            add_tar_bytes(tar, name, payload)
    return path


def write_acl_folder(root: Path, reviews: dict) -> Path:
    """The same reviews as files under ``root/aclImdb/``."""
    for (split, label), items in reviews.items():
        folder = root / "aclImdb" / split / label
        folder.mkdir(parents=True, exist_ok=True)
        for file_id, text in items:
            (folder / f"{file_id}_7.txt").write_text(text, encoding="utf-8")
    (root / "aclImdb" / "README").write_text("readme")
    return root / "aclImdb"


TINY_REVIEWS = {
    ("train", "pos"): [
        (10, "Great great film.<br /><br />Loved it!"),
        (2, "great acting, GREAT fun"),
    ],
    ("train", "neg"): [(0, "Awful film. Bad, bad, bad."), (1, "bad plot<br />boring film")],
    ("test", "pos"): [(0, "great film with zebras")],
    ("test", "neg"): [(5, "bad bad zebras")],
}
