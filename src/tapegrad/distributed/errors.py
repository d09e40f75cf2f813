"""The error a distributed run raises (its own module, so that ``launch`` and the package both
import it without importing each other at start)."""


class DistributedError(RuntimeError):
    """A distributed run cannot start as asked (MPI missing, ranks that disagree)."""
