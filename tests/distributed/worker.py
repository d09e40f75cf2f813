"""One rank of the distributed tests: ``mpiexec -n N python worker.py OUT MODE OPT STEPS``.

Trains a small network on synthetic data (a fixed seed: every rank and every run sees the same
data) with ``Trainer(distributed=True)`` for STEPS steps and writes this rank's final weights,
the records and the per-step losses to ``OUT/rank-R.npz``. Run without mpiexec it is the
single-process reference with the same global batches.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from tapegrad import nn
from tapegrad.distributed import world
from tapegrad.train import Trainer
from tapegrad.train.experiment import make_optimizer

N_TRAIN, N_TEST, FEATURES, CLASSES, BATCH = 330, 100, 20, 4, 64


def data():
    rng = np.random.default_rng(7)
    w = rng.normal(size=(FEATURES, CLASSES))
    x = rng.normal(size=(N_TRAIN + N_TEST, FEATURES)).astype(np.float32)
    y = np.argmax(x @ w + 0.5 * rng.normal(size=(len(x), CLASSES)), axis=1)
    return (x[:N_TRAIN], y[:N_TRAIN]), (x[N_TRAIN:], y[N_TRAIN:])


def model(seed: int) -> nn.Module:
    rng = np.random.default_rng(seed)
    return nn.Sequential(
        nn.Linear(FEATURES, 32, rng=rng), nn.ReLU(), nn.Linear(32, CLASSES, rng=rng)
    )


def main(out: str, mode: str, optimizer: str, steps: int) -> None:
    comm = world()
    # Each rank builds its model from a different seed: the broadcast from rank 0 must fix it.
    net = model(seed=comm.rank)
    if optimizer == "adam-2groups":  # two parameter groups: the step is not split across ranks
        params = list(net.parameters())
        opt = make_optimizer("adam", [{"params": params[:2]}, {"params": params[2:]}], lr=0.01)
    else:
        lr = 0.05 if optimizer == "sgd" else 0.01
        opt = make_optimizer(optimizer, net.parameters(), lr=lr)
    trainer = Trainer(net, opt, seed=1, progress=False, log=None, mode=mode, distributed=True)
    losses = []
    step = trainer.train_step
    fail_at = os.environ.get("TAPEGRAD_TEST_RAISE")  # "R:S": rank R raises at its step S

    def recording_step(x, y, n=None):
        if fail_at and [comm.rank, len(losses) + 1] == [int(v) for v in fail_at.split(":")]:
            raise RuntimeError(f"injected failure at step {len(losses) + 1}")
        value, correct = step(x, y, n)
        losses.append(value)
        return value, correct

    trainer.train_step = recording_step
    train, test = data()
    records = trainer.fit(train, test, epochs=10, batch_size=BATCH, max_steps=steps)
    Path(out).mkdir(parents=True, exist_ok=True)
    np.savez(
        Path(out) / f"rank-{comm.rank}.npz",
        losses=np.array(losses),
        **{f"w/{n}": p.data for n, p in net.named_parameters()},
        **{
            f"opt/{k.split('.', 1)[1]}": v
            for k, v in opt.state_dict().items()
            if k.startswith("state.") and isinstance(v, np.ndarray)
        },
    )
    (Path(out) / f"records-{comm.rank}.json").write_text(
        json.dumps(
            [
                [r.loss, r.train_accuracy, r.test_accuracy, r.steps, r.allocated_per_step]
                for r in records
            ]
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
