"""Data-parallel scaling on one machine: N MPI ranks against one process, same preset and seed.

Each configuration is a real ``tapegrad train PRESET --json`` run in its own process (under
``mpiexec -n N`` for N ranks), its thread counts fixed in the environment before anything
imports. The configurations alternate within every repeat (A B C A B C ...), so the drift of a
shared machine hits all alike; the table reports medians over the repeats of the steady-state
epoch time (the first epoch, with compilation, is left out), the speed-ups measured within
the same repeats, the final test accuracy and the per-rank allocation of a steady step.
Used by ``tapegrad bench WORKLOAD --ranks N`` and ``benchmarks/scaling.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..distributed.launch import find_mpiexec, thread_env


class ScalingError(RuntimeError):
    """A run of the scaling benchmark failed (its last line of stderr says why)."""


def configurations(ranks: int, cores: int) -> list[tuple[int, int]]:
    """(ranks, threads per rank): 1 x 1, 1 x all cores, ``ranks`` x cores/ranks."""
    return [(1, 1), (1, cores), (ranks, max(1, cores // ranks))]


def label(ranks: int, threads: int) -> str:
    who = f"{ranks} ranks" if ranks > 1 else "1 process"
    return f"{who} x {threads} thread{'s' if threads > 1 else ''}"


def run_once(
    preset: str,
    ranks: int,
    threads: int,
    *,
    epochs: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    data_dir: str | None = None,
    timeout: float = 1800,
) -> dict:
    """Train ``preset`` once as ``ranks`` ranks of ``threads`` threads; what it measured."""
    with tempfile.TemporaryDirectory(prefix="tapegrad-scaling-") as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "tapegrad", "train", preset, "--json", str(out)]
        cmd += ["--seed", str(seed)]
        if epochs is not None:
            cmd += ["--epochs", str(epochs)]
        if max_steps is not None:
            cmd += ["--max-steps", str(max_steps)]
        if data_dir is not None:
            cmd += ["--data-dir", data_dir]
        if ranks > 1:
            mpiexec = find_mpiexec()
            if mpiexec is None:
                raise ScalingError("mpiexec not found: pip install 'tapegrad[mpi]'")
            cmd = [mpiexec, "-n", str(ranks), *cmd]
        env = {**os.environ, **thread_env(threads), "CI": "1"}  # CI=1: no progress bar
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ScalingError(f"{label(ranks, threads)} {preset} failed: {last}")
        result = json.loads(out.read_text())
    records = result["epochs"]
    steady = [r["seconds"] for r in records if not r["first"]] or [r["seconds"] for r in records]
    allocs = [r["allocated_per_step"] for r in records if r["allocated_per_step"] is not None]
    return {
        "epoch_seconds": statistics.median(steady),
        "first_epoch_seconds": records[0]["seconds"],
        "test_accuracy": records[-1]["test_accuracy"],
        "alloc_per_step": max(allocs) if allocs else None,
        "epochs": len(records),
        "steps_per_epoch": max(r["steps"] for r in records),
        "parameters": result["parameters"],
        "batch_size": result["batch_size"],
    }


def measure(
    presets: list[str],
    ranks: int = 2,
    repeats: int = 3,
    cores: int | None = None,
    log=print,
    **run_kwargs,
) -> dict:
    """Every preset in every configuration, ``repeats`` times, alternating configurations."""
    cores = cores or os.cpu_count() or 1
    configs = configurations(ranks, cores)
    runs: dict[str, dict[str, list[dict]]] = {p: {label(*c): [] for c in configs} for p in presets}
    for r in range(repeats):
        for preset in presets:
            for c in configs:
                got = run_once(preset, *c, **run_kwargs)
                runs[preset][label(*c)].append(got)
                if log:
                    log(
                        f"repeat {r + 1}/{repeats} {preset:<17} {label(*c):<22} "
                        f"epoch {got['epoch_seconds']:.2f}s  test {100 * got['test_accuracy']:.2f}%"
                    )
    return {"ranks": ranks, "cores": cores, "configs": [label(*c) for c in configs], "runs": runs}


def summary(result: dict) -> list[dict]:
    """Per preset: median epoch time per configuration and paired speed-ups of the last one."""
    single, threaded, parallel = result["configs"]
    rows = []
    for preset, by in result["runs"].items():

        def med(cfg, key, by=by):
            return statistics.median(r[key] for r in by[cfg])

        def ratio(cfg, by=by):
            return statistics.median(
                a["epoch_seconds"] / b["epoch_seconds"] for a, b in zip(by[cfg], by[parallel])
            )

        allocs = [r["alloc_per_step"] for r in by[parallel] if r["alloc_per_step"] is not None]
        rows.append(
            {
                "preset": preset,
                "epochs": by[parallel][0]["epochs"],
                "seconds": {c: med(c, "epoch_seconds") for c in result["configs"]},
                "accuracy": {c: med(c, "test_accuracy") for c in result["configs"]},
                "speedup_vs_single": ratio(single),
                "speedup_vs_threads": ratio(threaded),
                "alloc_per_step": max(allocs) if allocs else None,
            }
        )
    return rows


def markdown(result: dict) -> str:
    """The scaling table."""
    single, threaded, parallel = result["configs"]
    head = (
        f"| preset | epochs | epoch time {single} | {threaded} | {parallel} | speed-up vs "
        f"1 x 1 | vs 1 x {result['cores']} threads | test acc {single} | {threaded} | "
        f"{parallel} | alloc/step per rank |"
    )
    lines = [head, "|" + "---|" * 11]
    for row in summary(result):
        s, a = row["seconds"], row["accuracy"]
        alloc = "-" if row["alloc_per_step"] is None else f"{row['alloc_per_step'] / 1024:.1f} KiB"
        lines.append(
            f"| `{row['preset']}` | {row['epochs']} | {s[single]:.2f} s | {s[threaded]:.2f} s | "
            f"{s[parallel]:.2f} s | {row['speedup_vs_single']:.2f}x | "
            f"{row['speedup_vs_threads']:.2f}x | {100 * a[single]:.2f}% | "
            f"{100 * a[threaded]:.2f}% | {100 * a[parallel]:.2f}% | {alloc} |"
        )
    return "\n".join(lines)
