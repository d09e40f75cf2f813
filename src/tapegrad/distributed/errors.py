"""The error a distributed run raises when it cannot start as asked."""

from __future__ import annotations


class DistributedError(RuntimeError):
    """A distributed run cannot start as asked (MPI missing, ranks that disagree)."""
