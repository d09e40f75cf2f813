"""Child process of the kill harness: ``python kill_launcher.py ARGS...`` runs ``tapegrad ARGS``.

It is ``tapegrad.cli.main`` with two instruments that change nothing in the numbers:

* after every optimiser step it prints ``@@STEP <global step>`` (flushed), so the harness can kill
  the run a chosen number of steps after it started;
* every file tapegrad writes (checkpoints, the ``--save`` file) is written in
  ``$TAPEGRAD_KILL_CHUNKS`` chunks (default 8), each announced as ``@@WRITE <write> <chunk>``.
  With ``TAPEGRAD_KILL_PAUSE_AT=W:C`` the process prints ``@@PAUSED`` after chunk ``C`` of its
  ``W``-th write (both from 0) and sleeps, so the harness can kill it in the middle of writing a
  file, deterministically.
"""

from __future__ import annotations

import os
import sys
import time


def _instrument() -> None:
    import tapegrad.serialization as serialization
    from tapegrad.train import trainer as trainer_module

    chunks = max(int(os.environ.get("TAPEGRAD_KILL_CHUNKS", "8")), 1)
    pause_at = os.environ.get("TAPEGRAD_KILL_PAUSE_AT")
    pause = tuple(int(v) for v in pause_at.split(":")) if pause_at else None
    writes = [0]

    def chunked_write(f, payload: bytes) -> None:
        w = writes[0]
        writes[0] += 1
        size = -(-len(payload) // chunks)
        for c in range(chunks):
            f.write(payload[c * size : (c + 1) * size])
            f.flush()
            print(f"@@WRITE {w} {c}", flush=True)
            if pause == (w, c) and c < chunks - 1:
                print("@@PAUSED", flush=True)
                time.sleep(3600)  # the harness kills us here

    serialization._write_payload = chunked_write

    original_step = trainer_module.Trainer.train_step

    def announced_step(self, x, y):
        out = original_step(self, x, y)
        print(f"@@STEP {self.global_step + 1}", flush=True)
        return out

    trainer_module.Trainer.train_step = announced_step


if __name__ == "__main__":
    _instrument()
    from tapegrad.cli import main

    sys.exit(main(sys.argv[1:]))
