"""Ranks started differently (preset, data, version) refuse to run, in one line."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .comm import SingleWorld
from .errors import DistributedError


def agree(comm: SingleWorld, facts: dict[str, Any], what: str = "start") -> None:
    """Raise :class:`DistributedError` on every rank unless all ranks hold the same ``facts``.

    Collective: every rank must call it at the same point. The message names the first fact
    that differs and the values of rank 0 and of the first rank that differs from it.
    """
    if not comm.distributed:
        return
    every = comm.allgather(facts)
    first = every[0]
    keys = list(first) + sorted({k for f in every for k in f} - first.keys())
    for key in keys:
        for r, other in enumerate(every[1:], 1):
            if other.get(key) != first.get(key):
                raise DistributedError(
                    f"ranks disagree on {key}: rank 0 has {first.get(key)!r}, rank {r} has "
                    f"{other.get(key)!r}; every rank must {what} with the same settings"
                )


def fingerprint(*arrays: np.ndarray) -> str:
    """A short digest of arrays' shapes, dtypes and bytes (which data a rank loaded)."""
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype.str}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()
