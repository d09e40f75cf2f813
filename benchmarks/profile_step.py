"""Where a compiled training step's time goes: each kernel of the plan timed over many steps.

    python benchmarks/profile_step.py seed-rnn [--steps 500] [--threads 1]

Builds the preset's experiment (as ``tapegrad train`` does), traces its step, then wraps every
step of the plan's program (each equation's forward, forward and backward alike, each
gradient sink, the guard on the loss and each parameter's optimiser update) with a timer and
trains ``--steps`` steps. Prints microseconds per step for each kind of step, named by its
primitive and input shapes, largest first, beside the whole step's time (the timers add about
0.3 us each). Read the figures as shares: absolute times move with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("preset")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # before tapegrad (numba, the BLAS) is imported

    from tapegrad.train.experiment import setup
    from tapegrad.train.trainer import Trainer

    ex = setup(args.preset, data_dir=args.data_dir, log=None)
    trainer = Trainer(ex.model, ex.optimizer, ex.preset.task, progress=False, log=None)
    batches = training_batches(ex.data.train, ex.preset.batch_size, 200)

    def step(i: int) -> None:
        trainer.train_step(*batches[i % len(batches)])

    for i in range(5):
        step(i)
    if len(trainer._compiled.all_plans) != 1:
        sys.exit(f"expected one plan, found {len(trainer._compiled.all_plans)}")
    plan = trainer._compiled.all_plans[0]
    spent: dict[str, float] = defaultdict(float)
    plan.program[:] = [timed(fn, name, spent) for fn, name in zip(plan.program, plan.labels)]

    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    total = (time.perf_counter() - t0) / args.steps * 1e6
    print(f"{args.preset}: {total:.1f} us per training step ({args.threads} thread(s)), of which:")
    for name, sec in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"{sec / args.steps * 1e6:9.1f} us  {name}")


def training_batches(train, batch_size: int, most: int) -> list:
    """Up to ``most`` full batches of the training data, in epoch 0's order: arrays (``x``,
    ``y``) or a corpus that draws its own batches (``batches(batch_size)``)."""
    if hasattr(train, "x"):
        n = max(1, min(len(train.y) // batch_size, most))
        s = [slice(j * batch_size, (j + 1) * batch_size) for j in range(n)]
        return [(train.x[k], train.y[k]) for k in s]
    out = []
    for xb, yb in train.batches(batch_size).epoch(0):
        if len(xb) < batch_size or len(out) == most:
            break
        out.append((xb, yb))
    return out


def timed(fn, name: str, spent: dict):
    def run():
        t0 = time.perf_counter()
        fn()
        spent[name] += time.perf_counter() - t0

    return run


if __name__ == "__main__":
    main()
