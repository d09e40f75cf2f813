"""One rank's failure stops every rank, naming the rank (no rank waits on a dead peer)."""

from __future__ import annotations

import sys
import time

from .comm import SingleWorld


def guard(comm: SingleWorld) -> None:
    """Make an uncaught exception in this rank print which rank failed and abort every rank.

    Without it the other ranks would wait forever in their next collective. A no-op for a
    single process.
    """
    if not comm.distributed or getattr(sys.excepthook, "_tapegrad_guard", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        message = f"tapegrad: {kind.__name__}: {value}"
        note(comm, message)  # the line that matters first, then the traceback
        previous(kind, value, tb)
        fail(comm, message, noted=True)

    hook._tapegrad_guard = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def note(comm: SingleWorld, message: str) -> None:
    """Print ``message`` naming this rank as the one that failed."""
    print(
        f"{message} (rank {comm.rank} of {comm.size} failed; stopping every rank)",
        file=sys.stderr,
        flush=True,
    )


def fail(comm: SingleWorld, message: str, code: int = 1, noted: bool = False) -> None:
    """Print ``message`` naming this rank, then end every rank with status ``code``.

    It waits a moment before aborting: ``mpiexec`` forwards a rank's output asynchronously and
    drops what it has not read when the job is aborted, which lost the message now and then.
    """
    if not noted:
        note(comm, message)
    time.sleep(0.5)
    comm.abort(code)
