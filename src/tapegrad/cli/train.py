"""``tapegrad train``: the arguments, parsed into one :class:`~tapegrad.train.config.RunConfig`
that :func:`tapegrad.train.run.run` consumes."""

from __future__ import annotations

import argparse

from ..models import GENERIC, PRESETS
from ..train.config import RunConfig
from ..train.experiment import OPTIMIZERS, SCHEDULERS
from ..train.run import run
from .common import DEVICE_HELP, NONNEG_FLOAT, NONNEG_INT, POS_FLOAT, POS_INT

RANKS_HELP = (
    "train data-parallel on N MPI ranks (launches mpiexec; threads per rank = cores / N); "
    "needs tapegrad[mpi]; SIGINT/SIGTERM reach every rank, which stop after the same step "
    "(default: 1, this process alone)"
)


def cmd_train(args) -> int:
    return run(RunConfig.from_namespace(args))


def presets_epilog() -> str:
    lines = ["presets and their defaults (each flag left out takes the preset's value):"]
    for p in [*PRESETS.values(), *GENERIC.values()]:
        data = "your .npz" if p.datasets == ("npz",) else "/".join(p.datasets)
        lines.append(
            f"  {p.name:<17} {data:<20} {p.optimizer:<5} lr {p.lr:<7g} batch {p.batch_size:<4} "
            f"{p.epochs} epochs"
        )
    lines += [
        "",
        "--dataset also takes a .npz file with arrays x_train, y_train, x_test, y_test: integer",
        "labels train a classifier, float targets a regression (mean squared error); the",
        "preset's architecture (or 'linear') is shaped to the data.",
    ]
    return "\n".join(lines)


def add_parser(sub) -> None:
    t = sub.add_parser(
        "train",
        help="train a preset and print its per-epoch table",
        description="Train PRESET and print one table row per epoch.",
        epilog=presets_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "preset", help=f"one of: {', '.join([*PRESETS, *GENERIC])} (defaults listed below)"
    )
    _add_settings(t)
    _add_outputs(t)
    _add_ranks(t)
    t.add_argument("--device", help=DEVICE_HELP)
    t.set_defaults(func=cmd_train)


def _add_settings(t) -> None:
    """What is trained and how: data, length, optimiser, schedule, seed, threads."""
    t.add_argument(
        "--dataset",
        metavar="{mnist,fashion-mnist,imdb,PATH.npz}",
        help="what to train on (default: the preset's first dataset)",
    )
    t.add_argument("--epochs", type=POS_INT, help="passes over the data (default: the preset's)")
    t.add_argument(
        "--batch-size", type=POS_INT, help="samples per optimiser step (default: the preset's)"
    )
    t.add_argument("--lr", type=POS_FLOAT, help="learning rate (default: the preset's)")
    t.add_argument("--optimizer", choices=OPTIMIZERS, help="optimiser (default: the preset's)")
    t.add_argument(
        "--momentum",
        type=NONNEG_FLOAT,
        help="sgd/rmsprop momentum (default: the preset's with its optimiser, else 0)",
    )
    t.add_argument(
        "--weight-decay",
        type=NONNEG_FLOAT,
        help="L2 penalty (adamw: decoupled) (default: the preset's with its optimiser, else 0)",
    )
    t.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        help="learning-rate schedule, stepped every batch: step (x --gamma every --step-every "
        "epochs), cosine (to 0 over the run), onecycle (up to --lr, then down) (default: none)",
    )
    t.add_argument(
        "--step-every", type=POS_INT, help="step schedule: epochs between decays (default: 1)"
    )
    t.add_argument(
        "--gamma", type=POS_FLOAT, default=0.1, help="step schedule: decay factor (default: 0.1)"
    )
    t.add_argument(
        "--seed", type=NONNEG_INT, default=0, help="weights and batch order (default: 0)"
    )
    t.add_argument("--threads", type=POS_INT, help="numba and BLAS threads (default: all CPUs)")
    t.add_argument(
        "--data-dir",
        help="the only folder searched for the named datasets (default: $TAPEGRAD_DATA, "
        "then ~/.cache/tapegrad, then a checked download)",
    )
    t.add_argument(
        "--max-steps", type=POS_INT, help="stop after this many optimiser steps (default: none)"
    )


def _add_outputs(t) -> None:
    """What a run writes, its checkpoints, and how it steps."""
    t.add_argument(
        "--json",
        metavar="PATH",
        help="write settings and per-epoch results as JSON (default: none)",
    )
    t.add_argument(
        "--csv", metavar="PATH", help="write the per-epoch records as CSV (default: none)"
    )
    t.add_argument(
        "--plot", metavar="PATH", help="plot loss, accuracy, time, memory to a PNG (default: none)"
    )
    t.add_argument(
        "--save", metavar="PATH", help="write the final weights, safetensors (default: none)"
    )
    t.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="save a checkpoint here after each epoch and when stopped by Ctrl-C/SIGTERM "
        "(default: none)",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest valid checkpoint in --checkpoint-dir (fresh if none); "
        "refused if its settings differ (default: off)",
    )
    t.add_argument(
        "--eager",
        action="store_true",
        help="run every step eagerly instead of replaying a compiled plan, with the same "
        "results (default: off, compiled)",
    )


def _add_ranks(t) -> None:
    t.add_argument("--ranks", type=int, help=RANKS_HELP)
    t.add_argument(
        "--rank-timeout",
        type=float,
        metavar="S",
        help="with --ranks: a rank silent this long (stopped, frozen) is named and the job "
        "ends, exit 124; the last checkpoint stays resumable (default: 60)",
    )
    t.add_argument(
        "--oversubscribe",
        action="store_true",
        help="with --ranks: more ranks than CPUs is meant (no warning) (default: off)",
    )
