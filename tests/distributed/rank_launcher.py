"""One instrumented rank of ``tapegrad ...``: ``python rank_launcher.py ARGS...``.

It is ``tapegrad.cli.main`` with two instruments: with ``TAPEGRAD_TEST_DIE=R:S`` rank R SIGKILLs
itself right after its global step S (a rank dying mid-epoch, deterministically); with
``TAPEGRAD_TEST_SIGNAL=R:S:N`` rank R alone sends itself signal N there (a stop request only one
rank received).
"""

from __future__ import annotations

import os
import signal
import sys


def _instrument() -> None:
    die, sig = os.environ.get("TAPEGRAD_TEST_DIE"), os.environ.get("TAPEGRAD_TEST_SIGNAL")
    if not (die or sig):
        return
    rank, step, signum = (
        (int(v) for v in f"{die}:{signal.SIGKILL}".split(":"))
        if die
        else (int(v) for v in sig.split(":"))
    )
    from tapegrad.distributed import launched_rank
    from tapegrad.train import trainer as trainer_module

    if launched_rank() != rank:
        return
    original = trainer_module.Trainer.train_step

    def dying_step(self, *args):
        out = original(self, *args)
        if self.global_step + 1 == step or (signum == signal.SIGKILL and self.global_step >= step):
            os.kill(os.getpid(), signum)
        return out

    trainer_module.Trainer.train_step = dying_step


if __name__ == "__main__":
    _instrument()
    from tapegrad.cli import main

    sys.exit(main(sys.argv[1:]))
