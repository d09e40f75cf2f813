"""Stopping a run between two steps at a signal's request: the exception that reports it and
the handlers that ask for it."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .trainer import Trainer


class TrainingInterrupted(Exception):
    """Training stopped between two steps at a signal's request (see :func:`stop_on_signals`).

    ``checkpoint`` is the mid-epoch checkpoint written at the stop (None without a
    checkpoint folder); ``epoch`` and ``batch`` say where the run stood; ``signum`` which
    signal asked.
    """

    def __init__(self, signum: int, epoch: int, batch: int, checkpoint: Path | None):
        self.signum, self.epoch, self.batch, self.checkpoint = signum, epoch, batch, checkpoint
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        where = f"saved {checkpoint}" if checkpoint else "no checkpoint folder, nothing saved"
        super().__init__(f"{name} at epoch {epoch}, batch {batch}: {where}")


@contextlib.contextmanager
def stop_on_signals(trainer: Trainer, signums=(signal.SIGINT, signal.SIGTERM)):
    """While the block runs, SIGINT and SIGTERM ask ``trainer`` to stop after its current
    step (writing a mid-epoch checkpoint); a second signal stops at once (KeyboardInterrupt).
    Only in the main thread; elsewhere the block runs with the handlers as they were."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if trainer.stop_requested is not None:
            raise KeyboardInterrupt
        trainer.request_stop(signum)

    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
