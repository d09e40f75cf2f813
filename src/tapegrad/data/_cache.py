"""The ``.npz`` cache of preprocessed arrays (IMDB token ids, GloVe matrices).

A cache file's name is a hash of everything its content depends on: the source file's resolved
path, size and modification time, the preprocessing parameters and a format version, so a changed
source or parameter simply misses. Files are written atomically (temporary file in the same folder,
then ``os.replace``, see :func:`tapegrad.serialization.atomic_file`) and read with
``allow_pickle=False``; an unreadable cache file is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

from .paths import cache_dir


def source_stamp(path: Path) -> dict:
    """What identifies a source file's version: resolved path, size, mtime (ns)."""
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def hash_strings(items) -> str:
    """A short digest of a sequence of strings (e.g. a vocabulary), order included."""
    h = hashlib.sha256()
    for s in items:
        h.update(s.encode("utf-8", errors="surrogatepass") + b"\0")
    return h.hexdigest()[:32]


def cache_path(kind: str, key: dict) -> Path:
    """``<cache>/<kind>/<kind>-<hash of key>.npz``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / kind / f"{kind}-{digest}.npz"


def load(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a cache file, or ``None`` when it is missing or unreadable."""
    if not path.is_file():
        return None
    try:
        from ..safefile import open_regular

        with open_regular(path) as f, np.load(f, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, NotImplementedError):
        return None


def save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically; a failure leaves no partial file behind, and the
    partial file of a writer that was killed is removed by the next write of ``path``."""
    from ..serialization import atomic_file  # imported here: serialization needs the engine

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        np.savez(f, **arrays)
