"""The ``tapegrad`` command: train | evaluate | info | bench.

User mistakes (unknown preset or option, a bad value, an output that cannot be written, missing
or corrupt data, a bad model file or checkpoint, a resume with other settings, a checkpoint
folder another run holds) end with a one-line message on stderr and exit status 2, never a
traceback; output targets are checked before any data loads. A diverged run exits with 3; a
benchmark whose frameworks disagree (different first-step losses or accuracies) with 4; a run
that trained but could not write an output or a checkpoint where asked with 5 (each failure
named, the weights saved elsewhere, the earlier checkpoint kept); a benchmark whose
self-check fails (a peer's worker more than 10% off that peer's plain training loop) with 6.
SIGINT and SIGTERM stop training after the current step, write a mid-epoch checkpoint (with
--checkpoint-dir) and print the command that resumes it; the exit status is then 130 or 143.

One module per subcommand (``train``, ``evaluate``, ``info``, ``bench``), each with its
``add_parser`` and its ``cmd_*``; ``train`` parses into one
:class:`~tapegrad.train.config.RunConfig` that :func:`tapegrad.train.run.run` consumes.
"""

from __future__ import annotations

import signal
import sys

from . import bench, evaluate, info, train
from .bench import cmd_bench
from .common import EXIT_DIVERGED, EXIT_MISMATCH, EXIT_OUTPUT, EXIT_USAGE, Parser, UserError
from .evaluate import cmd_evaluate
from .info import cmd_info
from .train import RANKS_HELP, cmd_train

__all__ = [
    "EXIT_DIVERGED",
    "EXIT_MISMATCH",
    "EXIT_OUTPUT",
    "EXIT_USAGE",
    "RANKS_HELP",
    "UserError",
    "build_parser",
    "cmd_bench",
    "cmd_evaluate",
    "cmd_info",
    "cmd_train",
    "main",
]


class _Terminated(Exception):
    """SIGTERM outside the training loop (which handles it itself)."""


def build_parser() -> Parser:
    from .. import __version__

    p = Parser(
        prog="tapegrad", description="Train and evaluate the seed papers' models with tapegrad."
    )
    p.add_argument("--version", action="version", version=f"tapegrad {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,evaluate,info,bench}")
    for command in (train, evaluate, info, bench):
        command.add_parser(sub)
    return p


def _on_sigterm(signum, frame):
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    from ..data import DatasetError, paths
    from ..distributed import DistributedError
    from ..serialization import ModelFileError
    from ..train import TrainingDiverged
    from ..train.checkpoint import CheckpointError
    from ..train.outputs import OutputError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # a one-line error (see Parser), or --help/--version
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    previous = None
    if argv is None:  # the command itself, not a test calling main()
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    wording, paths.DATA_DIR_OPTION = paths.DATA_DIR_OPTION, "--data-dir DIR"
    try:
        return args.func(args)
    except (
        UserError,
        DatasetError,
        ModelFileError,
        CheckpointError,
        OutputError,
        FileNotFoundError,
        DistributedError,
    ) as e:
        # ranks that disagree, a refused checkpoint and a mistake rank 0 found (see train/ranks.py)
        # are met by every rank together; any other is one rank's own
        shared = isinstance(e, DistributedError | CheckpointError) or getattr(e, "every_rank", 0)
        return _fail(args, EXIT_USAGE, f"error: {e}", shared=bool(shared))
    except TrainingDiverged as e:
        return _fail(args, EXIT_DIVERGED, f"training diverged: {e}", shared=True)
    except KeyboardInterrupt:
        return _fail(args, 128 + signal.SIGINT, "interrupted (SIGINT)")
    except _Terminated:
        return _fail(args, 128 + signal.SIGTERM, "terminated (SIGTERM)")
    finally:
        paths.DATA_DIR_OPTION = wording
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _fail(args, code: int, message: str, shared: bool = False) -> int:
    """Report a failure in one line and return ``code``: the one error path of every command.

    Under MPI: before MPI started (bad arguments), every rank fails alike, rank 0 reports and
    all exit. After, a failure every rank meets together (ranks that disagree, a refused
    checkpoint, a mistake rank 0 found and broadcast, a diverged global loss: ``shared``) is
    reported by rank 0 and all exit; any other (a signal outside the training loop included)
    is this rank's own, so it is reported with the rank's number and the whole job is
    aborted, lest the other ranks wait for this one forever.
    """
    from .. import distributed

    comm = distributed.active()
    line = f"tapegrad {args.command}: {message}"
    if comm is None or not comm.distributed:
        if distributed.launched_rank() == 0:
            print(line, file=sys.stderr)
        return code
    if shared:
        if comm.rank == 0:
            print(line, file=sys.stderr)
        return code
    distributed.fail(comm, line, code)
    return code  # pragma: no cover - abort does not return
