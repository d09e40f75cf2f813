"""Steady epoch time, allocation per step and test accuracy of ``tapegrad train PRESET --epochs 2``
at two git revisions, alternating, one thread: did a change move a compiled training step?

    python benchmarks/compare_revisions.py BASE [NEW] [--presets seed-cnn,seed-rnn,mlp,text-cnn]
                                           [--repeats 3] [--threads 1]

``BASE`` and ``NEW`` are git revisions (``NEW`` defaults to the working tree); each is checked
out into a temporary worktree (the working tree is used as it is). Prints a markdown table with
medians over the repeats and the ratio NEW / BASE of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_epoch(src: Path, preset: str, threads: int, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    done = subprocess.run(
        [sys.executable, "-m", "tapegrad", "train", preset, "--epochs", "2", "--json", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    if done.returncode:
        sys.exit(f"compare_revisions: tapegrad train {preset} failed with {src} (see above)")
    last = json.loads(out.read_text())["epochs"][-1]
    return {
        "seconds": last["seconds"],
        "bytes_per_step": last["allocated_bytes"] / max(last["steps"], 1),
        "test_accuracy": last["test_accuracy"],
    }


def _medians(runs: list[dict]) -> dict:
    """Each figure's median over the runs (None where a preset has none: a language model's
    accuracy)."""
    out = {}
    for k in runs[0]:
        values = [x[k] for x in runs if x[k] is not None]
        out[k] = statistics.median(values) if values else None
    return out


def _figure(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new", nargs="?", default=None)
    ap.add_argument("--presets", default="seed-cnn,seed-rnn,mlp,text-cnn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        srcs = {}
        for label, rev in (("base", a.base), ("new", a.new)):
            if rev is None:
                srcs[label] = ROOT / "src"
                continue
            tree = tmp / label
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev],
                check=True,
            )
            srcs[label] = tree / "src"
        try:
            print(
                f"base {a.base}, new {a.new or 'working tree'}; {a.threads} thread(s), "
                f"medians of {a.repeats} alternating runs of `tapegrad train PRESET --epochs 2`\n"
            )
            print(
                "| preset | steady epoch base | new | new / base | bytes/step base | new "
                "| test acc base | new |"
            )
            print("|---|---|---|---|---|---|---|---|")
            for preset in a.presets.split(","):
                got: dict[str, list[dict]] = {"base": [], "new": []}
                for r in range(a.repeats):
                    for label in ("base", "new"):
                        out = tmp / f"{preset}-{label}-{r}.json"
                        got[label].append(run_epoch(srcs[label], preset, a.threads, out))
                med = {label: _medians(runs) for label, runs in got.items()}
                b, n = med["base"], med["new"]
                print(
                    f"| {preset} | {b['seconds']:.3f} s | {n['seconds']:.3f} s | "
                    f"{n['seconds'] / b['seconds']:.2f}x | {b['bytes_per_step']:.0f} | "
                    f"{n['bytes_per_step']:.0f} | {_figure(b['test_accuracy'])} | "
                    f"{_figure(n['test_accuracy'])} |",
                    flush=True,
                )
        finally:
            for label in ("base", "new"):
                if (tmp / label).exists():
                    subprocess.run(
                        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / label)],
                        check=False,
                    )


if __name__ == "__main__":
    main()
