"""Did every seed preset train on the GPU to the accuracy it reaches on the CPU? Reads the
``--json`` files of ``tapegrad train PRESET --device cuda`` runs (seed 0) and README.md's
accuracy table (CPU, seeds 0-2: mean and range), and passes a preset whose GPU test accuracy
lies within the CPU range widened by ``--slack`` percentage points (default 0.3: float32
rounding on another device moves a run by about as much as another seed does).

    python benchmarks/gpu_accuracy.py runs/*.json          # exit 1 if a preset falls outside
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
ROW = re.compile(r"^\| `([\w.-]+)` \|[^|]*\| \*\*([\d.]+)%\*\* \[([\d.]+)-([\d.]+)\]")


def cpu_table(readme: Path = README) -> dict[str, tuple[float, float, float]]:
    """preset -> (mean, low, high) test accuracy in percent, from README's accuracy table."""
    text = readme.read_text()
    table = text[text.index("<!-- accuracy-table -->") : text.index("<!-- /accuracy-table -->")]
    out = {}
    for line in table.splitlines():
        m = ROW.match(line)
        if m:
            out[m.group(1)] = tuple(float(v) for v in m.group(2, 3, 4))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="--json files of GPU runs")
    ap.add_argument("--slack", type=float, default=0.3, help="percentage points (default 0.3)")
    args = ap.parse_args(argv)
    cpu = cpu_table()
    failed = 0
    print("| preset | GPU test accuracy (seed 0) | CPU mean [range], seeds 0-2 | within |")
    print("|---|---|---|---|")
    for path in args.runs:
        run = json.loads(Path(path).read_text())
        preset = run.get("preset") or Path(path).stem
        acc = 100 * run["epochs"][-1]["test_accuracy"]
        mean, lo, hi = cpu[preset]
        ok = lo - args.slack <= acc <= hi + args.slack
        failed += not ok
        within = "yes" if ok else "NO"
        print(f"| `{preset}` | {acc:.2f}% | {mean:.2f}% [{lo:.2f}-{hi:.2f}] | {within} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
