"""One instrumented rank of ``tapegrad ...``: ``python rank_launcher.py ARGS...``.

It is ``tapegrad.cli.main`` with one instrument: with ``TAPEGRAD_TEST_DIE=R:S`` rank R SIGKILLs
itself right after its global step S (a rank dying mid-epoch, deterministically).
"""

from __future__ import annotations

import os
import signal
import sys


def _instrument() -> None:
    die = os.environ.get("TAPEGRAD_TEST_DIE")
    if not die:
        return
    rank, step = (int(v) for v in die.split(":"))
    from tapegrad.distributed import launched_rank
    from tapegrad.train import trainer as trainer_module

    if launched_rank() != rank:
        return
    original = trainer_module.Trainer.train_step

    def dying_step(self, *args):
        out = original(self, *args)
        if self.global_step + 1 >= step:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    trainer_module.Trainer.train_step = dying_step


if __name__ == "__main__":
    _instrument()
    from tapegrad.cli import main

    sys.exit(main(sys.argv[1:]))
