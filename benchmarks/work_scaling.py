"""How tapegrad's lead changes as the work grows: each seed model at batch 32, 100 and 512, and
the MLP and the CNN four times wider, tapegrad / PyTorch / JAX side by side.

    python benchmarks/work_scaling.py [--repeats 3] [--threads all] [--epochs 2 | --steps N]
                                      [--cells seed-cnn@32,mlp@100x4,...] [--vs torch,jax]
                                      [--render-only] [--markdown out.md]

Each cell is one ``tapegrad bench WORKLOAD --batch-size B [--width W]`` run (its own
processes, alternating, the plain loops' self-check included), its JSON kept in
``benchmarks/results/work-scaling/``. The table gives the steady time per training sample (an
epoch's time over its samples, so cells of different batch sizes compare directly) for every
framework, tapegrad's ratio to each (median of the repeat-by-repeat ratios) and the
self-check's verdict. ``--render-only`` re-renders from the JSON already there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tapegrad.bench.harness import WIDENABLE, WORKLOADS  # noqa: E402
from tapegrad.bench.report import flatten  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "work-scaling"
BATCHES = (32, 100, 512)
WIDTH = 4


def default_cells() -> list[str]:
    """Every workload (the seeds' and the general ones) at each batch size, then the wider
    models at the presets' batch."""
    cells = [f"{w}@{b}" for w in WORKLOADS for b in BATCHES]
    return cells + [f"{w}@100x{WIDTH}" for w in WIDENABLE]


def parse_cell(text: str) -> tuple[str, int, int]:
    """``WORKLOAD@BATCH`` or ``WORKLOAD@BATCHxWIDTH`` -> (workload, batch, width)."""
    try:
        workload, rest = text.split("@")
        batch, _, width = rest.partition("x")
        cell = (workload, int(batch), int(width or 1))
    except ValueError:
        raise ValueError(
            f"--cells: {text!r} is not WORKLOAD@BATCH or WORKLOAD@BATCHxWIDTH"
        ) from None
    if workload not in WORKLOADS:
        raise ValueError(f"--cells: unknown workload {workload!r}; have {', '.join(WORKLOADS)}")
    if cell[1] < 1 or cell[2] < 1 or (cell[2] != 1 and workload not in WIDENABLE):
        raise ValueError(
            f"--cells: {text!r}: batch and width must be >= 1, width only for "
            f"{' and '.join(WIDENABLE)}"
        )
    return cell


def cell_name(workload: str, batch: int, width: int) -> str:
    return f"{workload}-b{batch}" + (f"-x{width}" if width != 1 else "")


def command(cell: tuple[str, int, int], args) -> list[str]:
    workload, batch, width = cell
    cmd = ["bench", workload, "--vs", args.vs, "--batch-size", str(batch)]
    if width != 1:
        cmd += ["--width", str(width)]
    cmd += ["--repeats", str(args.repeats), "--threads", args.threads]
    cmd += ["--steps", str(args.steps)] if args.steps else ["--epochs", str(args.epochs)]
    cmd += ["--json", str((RESULTS / f"{cell_name(*cell)}.json").relative_to(ROOT))]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    return cmd


def per_sample_us(result: dict, framework: str, plain: bool = False) -> float | None:
    """Steady microseconds per training sample of one framework in one result."""
    s = (result["plain"] if plain else result["summary"]).get(framework)
    if not s or not s["steady"]:
        return None
    if result["unit"] == "epoch":
        return 1e6 * s["steady"]["median"] / result["facts"]["train_samples"]
    return 1e6 * s["steady"]["median"] / result["facts"]["batch_size"]


def markdown(results: list[dict], commands: list[str] | None = None) -> str:
    """The scaling section: one row per cell and thread setting."""
    rows = flatten(results)
    peers = list(dict.fromkeys(p for r in rows for p in r["frameworks"] if p != "tapegrad"))
    lines = [
        "## Scaling with the work: batch size and width",
        "",
        "Steady time per training sample (an epoch's time over its samples) in microseconds, "
        "median over the repeats; *tapegrad / peer*: median of the repeat-by-repeat ratios, "
        "above 1 means tapegrad is slower; *self-check*: each peer's worker against its plain "
        "loop (within 10%). Wider: every hidden size 4x (seed-cnn 24 channels and 336 units, "
        "mlp 512 units).",
        "",
    ]
    if commands:
        lines += ["```bash", *commands, "```", ""]
    head = ["workload", "batch", "threads", "tapegrad (us/sample)"]
    head += [f"{p} (us/sample)" for p in peers] + [f"tapegrad / {p}" for p in peers]
    head += ["self-check"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        f = r["facts"]
        name = r["workload"] + (f" x{f['width']} wide" if f.get("width", 1) != 1 else "")
        cells = [name, str(f["batch_size"]), str(r["threads"])]
        for fw in ["tapegrad", *peers]:
            us = per_sample_us(r, fw)
            cells.append("n/a" if us is None else f"{us:.1f}")
        for p in peers:
            ratio = r["ratios"].get(p, {}).get("steady")
            cells.append("n/a" if not ratio else f"{ratio['median']:.2f}x")
        check = r.get("self_check")
        if check is None or not check["checks"]:
            cells.append("not run")
        else:
            cells.append(
                ", ".join(
                    f"{p} {100 * (c['ratio'] - 1):+.0f}%" + ("" if c["passed"] else " **failed**")
                    for p, c in check["checks"].items()
                )
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def load(cells: list[tuple[str, int, int]]) -> list[dict]:
    out = []
    for cell in cells:
        path = RESULTS / f"{cell_name(*cell)}.json"
        if path.exists():
            out.append(json.loads(path.read_text()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=",".join(default_cells()))
    ap.add_argument("--vs", default="torch,jax")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="all")
    length = ap.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, default=2)
    length.add_argument("--steps", type=int)
    ap.add_argument("--data-dir")
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--markdown", help="write the section here (default: print it)")
    args = ap.parse_args(argv)
    try:
        cells = [parse_cell(c) for c in args.cells.split(",") if c]
    except ValueError as e:
        ap.error(str(e))
    RESULTS.mkdir(parents=True, exist_ok=True)
    commands, failed = [], []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    for cell in cells:
        cmd = command(cell, args)
        commands.append("tapegrad " + " ".join(cmd))
        if args.render_only:
            continue
        print("$ tapegrad " + " ".join(cmd), flush=True)
        if subprocess.run([sys.executable, "-m", "tapegrad", *cmd], cwd=ROOT, env=env).returncode:
            failed.append(cell_name(*cell))
    text = markdown(load(cells), commands)
    if args.markdown:
        Path(args.markdown).write_text(text)
        print(f"wrote {args.markdown}")
    else:
        print(text)
    if failed:
        print(f"failed or flagged (see above): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
