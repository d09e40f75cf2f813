"""The ``tapegrad`` command: train | evaluate | info | bench.

User mistakes (unknown preset or option, missing or corrupt data, bad model file) end with a
one-line message on stderr and exit status 2, never a traceback. A diverged run exits with 3;
a benchmark whose frameworks disagree (different first-step losses or accuracies) with 4.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np

EXIT_USAGE, EXIT_DIVERGED, EXIT_MISMATCH = 2, 3, 4
RANKS_HELP = (
    "train data-parallel on N MPI ranks (launches mpiexec; threads per rank = cores / N); "
    "needs tapegrad[mpi]"
)


class UserError(Exception):
    """A mistake in how the command was called; reported in one line."""


def _preset(name):
    from .models import get_preset

    try:
        return get_preset(name)
    except ValueError as e:
        raise UserError(str(e)) from None


# -- ranks (tapegrad.distributed) ----------------------------------------------------------------
def _launch_ranks(args) -> int | None:
    """With ``--ranks N`` (N > 1) outside MPI: run this very command as N MPI ranks and return
    the job's exit status; None when this process should do the work itself."""
    from .distributed import launched_size

    ranks, under_mpi = args.ranks, launched_size()
    if ranks is None:
        return None
    if ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {ranks}")
    if under_mpi > 1:
        if ranks != under_mpi:
            raise UserError(f"--ranks {ranks}, but mpiexec started {under_mpi} ranks")
        return None
    if ranks == 1:
        return None
    from .distributed.launch import run_ranks

    return run_ranks(ranks, [args.command, *_without_ranks(args.argv)], args.command)


def _without_ranks(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--ranks":
            skip = True
        elif not a.startswith("--ranks="):
            out.append(a)
    return out


def _world():
    """The MPI world when this process is one of several ranks (else a single process)."""
    from .distributed import world
    from .distributed.launch import THREAD_VARIABLES, threads_per_rank

    comm = world()
    if comm.distributed and not any(v in os.environ for v in THREAD_VARIABLES):
        import numba  # started by a bare mpiexec: share the machine's cores between its ranks

        numba.set_num_threads(min(threads_per_rank(comm.local_size()), numba.get_num_threads()))
    return comm


def _threads() -> int:
    import numba

    return numba.get_num_threads()


# -- commands ------------------------------------------------------------------------------------
def cmd_train(args) -> int:
    from . import save
    from .train import Trainer, plot, write_csv, write_json
    from .train.experiment import setup

    launched = _launch_ranks(args)
    if launched is not None:
        return launched
    preset = _preset(args.preset)
    for flag in ("epochs", "batch_size", "max_steps"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1, got {v}")
    if args.lr is not None and not args.lr > 0:
        raise UserError(f"--lr must be positive, got {args.lr}")
    if args.resume and not args.checkpoint_dir:
        raise UserError("--resume needs --checkpoint-dir (where the checkpoints are)")
    if args.dataset and args.dataset not in preset.datasets:
        raise UserError(
            f"preset {preset.name} trains on {' or '.join(preset.datasets)}, not {args.dataset!r}"
        )
    epochs = args.epochs or preset.epochs
    batch_size = args.batch_size or preset.batch_size
    comm = _world()
    say = print if comm.rank == 0 else _quiet  # rank 0 alone reports and writes
    if comm.distributed:
        from .distributed import agree

        agree(comm, {**vars_of(args), "tapegrad version": versions()["tapegrad"]})
    exp = setup(
        preset,
        args.dataset,
        args.data_dir,
        seed=args.seed,
        lr=args.lr,
        optimizer=args.optimizer,
        momentum=args.momentum,
        log=say,
    )
    ds, model = exp.data, exp.model
    n_params = sum(p.data.size for p in model.parameters())
    n = _threads()
    ranks = f", {comm.size} ranks x {n} thread{'s' if n > 1 else ''}" if comm.distributed else ""
    say(
        f"{preset.name} on {exp.dataset}: {len(ds.train.y)} train / {len(ds.test.y)} test "
        f"samples, {n_params} parameters, {exp.optimizer_name} lr {exp.lr:g}, batch "
        f"{batch_size}, {epochs} epochs, seed {args.seed}{ranks}"
    )
    trainer = Trainer(
        model,
        exp.optimizer,
        preset.task,
        seed=args.seed,
        mode="eager" if args.eager else "compiled",
        distributed=comm,
    )
    records = trainer.fit(
        ds.train,
        ds.test,
        epochs=epochs,
        batch_size=batch_size,
        max_steps=args.max_steps,
        checkpoint_dir=args.checkpoint_dir,
        resume=args.resume,
    )
    info = {
        "preset": preset.name,
        "dataset": exp.dataset,
        "optimizer": exp.optimizer_name,
        "lr": exp.lr,
        "batch_size": batch_size,
        "epochs": epochs,
        "seed": args.seed,
        "max_steps": args.max_steps,
        "parameters": int(n_params),
        "global_steps": trainer.global_step,
        "mode": trainer.mode,
        "ranks": comm.size,
        "threads_per_rank": _threads(),
        "versions": versions(),
    }
    if comm.rank != 0:
        return 0
    if args.json:
        write_json(args.json, records, info)
    if args.csv:
        write_csv(args.csv, records)
    if args.plot:
        plot(args.plot, records, title=f"{preset.name} on {exp.dataset}")
    if args.save:
        meta = {
            "preset": preset.name,
            "dataset": exp.dataset,
            "seed": str(args.seed),
            "config": json.dumps(exp.config),
        }
        save(model, args.save, metadata=meta)
        print(f"saved weights to {args.save}")
    return 0


def _quiet(*args, **kwargs) -> None:
    pass


def vars_of(args) -> dict:
    """The parsed command line as plain values (what every rank must have been given)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in ("func", "argv")}


def cmd_evaluate(args) -> int:
    from .models import build_model
    from .serialization import load, read_metadata
    from .train import Trainer
    from .train.experiment import load_dataset

    meta = read_metadata(args.model_file)
    if "preset" not in meta:
        raise UserError(
            f"{args.model_file} names no preset in its metadata; it was not written "
            f"by 'tapegrad train --save'"
        )
    preset = _preset(meta["preset"])
    dataset = args.dataset or meta.get("dataset", preset.dataset)
    if dataset not in preset.datasets:
        raise UserError(
            f"{args.model_file} holds a {preset.name} model, which takes "
            f"{' or '.join(preset.datasets)}, not {dataset!r}"
        )
    config = json.loads(meta.get("config", "{}"))
    ds, _ = load_dataset(dataset, args.data_dir, **{**preset.extra, **config})
    model = build_model(preset, seed=0, **config)
    load(args.model_file, model=model)
    trainer = Trainer(model, optimizer=None, task=preset.task, log=None)
    loss, acc = trainer.evaluate(ds.test.x, ds.test.y)
    print(
        f"{preset.name} on {dataset} test set ({len(ds.test.y)} samples): loss {loss:.4f}, "
        f"accuracy {100 * acc:.2f}%"
    )
    return 0


def versions() -> dict:
    import numba

    from . import __version__

    out = {
        "tapegrad": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
    }
    try:
        import torch

        out["torch"] = torch.__version__
    except ImportError:
        pass
    return out


def cmd_info(args) -> int:
    from . import data

    for k, v in versions().items():
        print(f"{k:<10} {v}")
    try:
        import numba

        threads = numba.get_num_threads()
    except Exception:  # pragma: no cover - numba always importable here
        threads = "?"
    print(f"{'cpus':<10} {os.cpu_count()} (numba threads {threads})")
    print(f"{'machine':<10} {platform.machine()} {platform.system()}")
    print("datasets:")
    for name, where in data.describe(args.data_dir).items():
        print(f"  {name:<14} {where if where else 'not found'}")
    return 0


def cmd_bench(args) -> int:
    """Run a seed workload (or the micro-benchmarks) with tapegrad and its peers side by side."""
    if args.workload == "micro":
        return _bench_micro(args)
    if args.ranks is not None:
        return _bench_ranks(args)
    from .bench import BenchError, format_table, run_benchmark

    peers = _split(args.vs, "torch,jax")
    try:
        result = run_benchmark(
            args.workload,
            peers,
            epochs=args.epochs,
            steps=args.steps,
            repeats=3 if args.repeats is None else args.repeats,
            threads=args.threads,
            data_dir=args.data_dir,
            seed=args.seed,
            mode=args.mode,
            perturb_peer=args.perturb_peer,
        )
    except BenchError as e:
        raise UserError(str(e)) from None
    result["command"] = "tapegrad bench " + " ".join(args.argv)
    print(format_table(result))
    if args.json:
        _write_json(args.json, result)
    if not result["guard"]["passed"]:
        for failure in result["guard"]["failures"]:
            print(f"tapegrad bench: frameworks disagree: {failure}", file=sys.stderr)
        return EXIT_MISMATCH
    return 0


def _bench_ranks(args) -> int:
    """``bench WORKLOAD --ranks N``: N ranks x cores/N threads against one process."""
    from .bench.scaling import ScalingError, markdown, measure

    if args.ranks < 2:
        raise UserError(f"bench --ranks compares N >= 2 ranks with one process, got {args.ranks}")
    try:
        result = measure(
            [args.workload],
            ranks=args.ranks,
            repeats=3 if args.repeats is None else args.repeats,
            epochs=args.epochs,
            max_steps=args.steps,
            seed=args.seed,
            data_dir=args.data_dir,
        )
    except ScalingError as e:
        raise UserError(str(e)) from None
    result["command"] = "tapegrad bench " + " ".join(args.argv)
    print(markdown(result))
    if args.json:
        _write_json(args.json, result)
    return 0


def _split(value: str | None, default: str) -> list[str]:
    return [v.strip() for v in (value or default).split(",") if v.strip()]


def _write_json(path: str, result: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    from .serialization import atomic_file

    with atomic_file(path) as f:
        f.write((json.dumps(result, indent=1) + "\n").encode())
    print(f"wrote {path}")


def _bench_micro(args) -> int:
    try:
        from .bench import micro
    except ImportError as e:
        raise UserError(f"the micro-benchmarks are not available in this build ({e})") from None
    frameworks = ["tapegrad", "tapegrad-compiled", *_split(args.vs, "torch,jax,autograd")]
    try:
        result = micro.run(
            frameworks,
            repeats=7 if args.repeats is None else args.repeats,
            quick=args.quick,
            threads=args.threads or 1,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    result["command"] = "tapegrad bench " + " ".join(args.argv)
    print(micro.markdown(result))
    if args.json:
        _write_json(args.json, result)
    return 0


# -- parser --------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .models import PRESETS

    p = argparse.ArgumentParser(
        prog="tapegrad", description="Train and evaluate the seed papers' models with tapegrad."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,evaluate,info,bench}")

    t = sub.add_parser("train", help="train a preset and print its per-epoch table")
    t.add_argument("preset", help=f"one of: {', '.join(PRESETS)}")
    t.add_argument("--dataset", choices=["mnist", "fashion-mnist", "imdb"])
    t.add_argument("--epochs", type=int)
    t.add_argument("--batch-size", type=int)
    t.add_argument("--lr", type=float)
    t.add_argument("--optimizer", choices=("sgd", "adam", "adamw", "rmsprop"))
    t.add_argument("--momentum", type=float, default=0.0)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--data-dir", help="where the datasets are (else TAPEGRAD_DATA, the cache, ...)")
    t.add_argument("--max-steps", type=int, help="stop after this many optimiser steps in total")
    t.add_argument("--json", help="write the results as JSON here")
    t.add_argument("--csv", help="write the per-epoch records as CSV here")
    t.add_argument("--plot", help="plot loss, accuracy, time and memory per epoch to this PNG")
    t.add_argument("--save", help="write the final weights here (safetensors)")
    t.add_argument("--checkpoint-dir", help="save a checkpoint here after each epoch")
    t.add_argument(
        "--eager",
        action="store_true",
        help="run every step eagerly instead of replaying a compiled plan",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in --checkpoint-dir (fresh if none)",
    )
    t.add_argument("--ranks", type=int, help=RANKS_HELP)
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("evaluate", help="evaluate a model file written by 'train --save'")
    e.add_argument("model_file")
    e.add_argument("--dataset", choices=["mnist", "fashion-mnist", "imdb"])
    e.add_argument("--data-dir")
    e.set_defaults(func=cmd_evaluate)

    i = sub.add_parser("info", help="versions, threads, and where each dataset was found")
    i.add_argument("--data-dir")
    i.set_defaults(func=cmd_info)

    from .bench.harness import WORKLOADS

    b = sub.add_parser(
        "bench",
        help="time a workload against PyTorch and JAX (same weights, batches, threads)",
        description="Train WORKLOAD with tapegrad and each peer in its own process, alternating, "
        "from the same initial weights and batch order; print time, memory and accuracy side "
        "by side with the FLOP floor. Exits 4 if the frameworks disagree.",
    )
    b.add_argument("workload", choices=[*WORKLOADS, "micro"])
    b.add_argument("--vs", help="peers, comma-separated (default torch,jax; micro adds autograd)")
    length = b.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help="epochs per run (default: the preset's)")
    length.add_argument("--steps", type=int, help="optimiser steps per run instead of epochs")
    b.add_argument("--repeats", type=int, help="runs per framework (default 3; micro 7)")
    b.add_argument(
        "--threads", type=int, help="threads for every framework (default: all CPUs; micro 1)"
    )
    b.add_argument("--json", help="write the full results as JSON here")
    b.add_argument("--data-dir", help="where the datasets are (else TAPEGRAD_DATA, the cache, ...)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument(
        "--mode",
        choices=("compiled", "eager"),
        default="compiled",
        help="tapegrad's execution mode (default compiled)",
    )
    b.add_argument(
        "--eager", dest="mode", action="store_const", const="eager", help="same as --mode eager"
    )
    b.add_argument("--quick", action="store_true", help="micro: small sizes, for a smoke test")
    b.add_argument("--perturb-peer", action="store_true", help=argparse.SUPPRESS)
    b.add_argument(
        "--ranks",
        type=int,
        help="compare N MPI ranks x cores/N threads with 1 process (1 thread, all cores) "
        "training the workload; needs tapegrad[mpi]",
    )
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    from .data import DatasetError
    from .distributed import DistributedError
    from .serialization import ModelFileError
    from .train import TrainingDiverged

    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits 2 with a one-line usage error itself
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    try:
        return args.func(args)
    except (UserError, DatasetError, ModelFileError, FileNotFoundError, DistributedError) as e:
        return _fail(args, EXIT_USAGE, f"error: {e}", shared=isinstance(e, DistributedError))
    except TrainingDiverged as e:
        return _fail(args, EXIT_DIVERGED, f"training diverged: {e}", shared=True)
    except KeyboardInterrupt:
        return _fail(args, 130, "interrupted")


def _fail(args, code: int, message: str, shared: bool = False) -> int:
    """Report a failure in one line and return ``code``.

    Under MPI: before MPI started (bad arguments), every rank fails alike, rank 0 reports and
    all exit. After, a failure every rank meets together (ranks that disagree, a diverged
    global loss: ``shared``) is reported by rank 0 and all exit; any other is this rank's own,
    so it is reported with the rank's number and the whole job is aborted, lest the other
    ranks wait for this one forever.
    """
    from . import distributed

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
