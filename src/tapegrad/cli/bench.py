"""``tapegrad bench``: a workload (or the micro-benchmarks) with tapegrad and its peers side by
side; ``--ranks N`` compares N MPI ranks with one process."""

from __future__ import annotations

import argparse
import sys

from .common import EXIT_MISMATCH, UserError, split, write_json


def add_parser(sub) -> None:
    from ..bench.harness import WORKLOADS

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
        "--threads",
        help="threads for every framework: N, 'all' (the default: every usable CPU; micro 1), "
        "or several separated by commas, measured alternately in one run (all,1)",
    )
    b.add_argument(
        "--batch-size", type=int, help="batch size for every framework (default: the preset's)"
    )
    b.add_argument(
        "--width",
        type=int,
        help="every hidden size this many times larger (seed-cnn and mlp; default 1)",
    )
    b.add_argument(
        "--no-self-check",
        action="store_true",
        help="skip the peers' plain training loops (run beside the bench's workers, the run "
        "fails with 6 when a worker is more than 10%% off its plain loop)",
    )
    b.add_argument(
        "--allocator",
        choices=("keep", "system"),
        default="keep",
        help="keep: every process's malloc keeps the memory it frees (the default, see "
        "BENCHMARKS.md); system: malloc as configured",
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
        "training the workload; needs tapegrad[mpi] (default: none, the peers instead)",
    )
    b.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    """Run a seed workload (or the micro-benchmarks) with tapegrad and its peers side by side."""
    if args.workload == "micro":
        return _bench_micro(args)
    if args.ranks is not None:
        return _bench_ranks(args)
    from ..bench import BenchError, format_table, run_benchmarks
    from ..bench.harness import parse_threads
    from ..bench.selfcheck import EXIT_SELF_CHECK

    peers = split(args.vs, "torch,jax")
    try:
        combined = run_benchmarks(
            args.workload,
            peers,
            threads=parse_threads(args.threads),
            epochs=args.epochs,
            steps=args.steps,
            repeats=3 if args.repeats is None else args.repeats,
            data_dir=args.data_dir,
            seed=args.seed,
            mode=args.mode,
            batch_size=args.batch_size,
            width=args.width,
            self_check=not args.no_self_check,
            allocator=args.allocator,
            perturb_peer=args.perturb_peer,
        )
    except BenchError as e:
        raise UserError(str(e)) from None
    command = "tapegrad bench " + " ".join(args.argv)
    results = combined["results"]
    for result in results:
        result["command"] = command
        print(format_table(result) + "\n")
    if args.json:  # one thread setting: its result alone; several: all of them
        write_json(args.json, results[0] if len(results) == 1 else {**combined, "command": command})
    status = 0
    for result in results:
        for failure in result["self_check"]["failures"]:
            print(f"tapegrad bench: {failure}", file=sys.stderr)
            status = EXIT_SELF_CHECK
    for result in results:
        for failure in result["guard"]["failures"]:
            print(f"tapegrad bench: frameworks disagree: {failure}", file=sys.stderr)
            status = EXIT_MISMATCH
    return status


def _bench_ranks(args) -> int:
    """``bench WORKLOAD --ranks N``: N ranks x cores/N threads against one process."""
    from ..bench.scaling import ScalingError, markdown, measure

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
        write_json(args.json, result)
    return 0


def _micro_threads(text: str | None) -> int:
    """``bench micro --threads N``: one setting (default 1); ``all`` is every usable CPU."""
    from ..bench.harness import BenchError, parse_threads

    try:
        settings = parse_threads(text or "1")
    except BenchError as e:
        raise UserError(str(e)) from None
    if len(settings) != 1:
        raise UserError(f"bench micro runs one thread setting at a time, got --threads {text}")
    return settings[0]


def _bench_micro(args) -> int:
    try:
        from ..bench import micro
    except ImportError as e:
        raise UserError(f"the micro-benchmarks are not available in this build ({e})") from None
    frameworks = ["tapegrad", "tapegrad-compiled", *split(args.vs, "torch,jax,autograd")]
    try:
        result = micro.run(
            frameworks,
            repeats=7 if args.repeats is None else args.repeats,
            quick=args.quick,
            threads=_micro_threads(args.threads),
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    result["command"] = "tapegrad bench " + " ".join(args.argv)
    print(micro.markdown(result))
    if args.json:
        write_json(args.json, result)
    return 0
