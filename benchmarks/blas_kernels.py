"""The seed workloads with NumPy's OpenBLAS on its AVX2 kernels and on its AVX-512 kernels,
tapegrad's ratios against PyTorch and JAX beside each other; writes BENCHMARKS.md's ``blas``
section.

    python benchmarks/blas_kernels.py [--repeats 3] [--workloads seed-cnn,seed-rnn,text-cnn,mlp]
                                      [--render-only]

This machine's environment sets ``OPENBLAS_CORETYPE=Haswell`` (OpenBLAS's AVX2 kernels), which
``tapegrad bench`` and BENCHMARKS.md's tables run under. ``import tapegrad`` would otherwise pick
the AVX-512 ("SkylakeX") kernels on this CPU (``src/tapegrad/blas.py``). This script runs
``tapegrad bench WORKLOAD --threads all,1`` once with the variable unset (AVX-512, its JSON in
``benchmarks/results/avx512/``) and reads the main tables' JSON (``benchmarks/results/``, AVX2)
for the other column. PyTorch (MKL, oneDNN) and JAX (XLA) compute with their own kernels
either way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import sections  # benchmarks/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
AVX512 = RESULTS / "avx512"
BEGIN, END = sections.markers("blas")


def run(workload: str, repeats: int) -> int:
    AVX512.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    argv = ["bench", workload, "--vs", "torch,jax", "--repeats", str(repeats)]
    argv += ["--threads", "all,1", "--json", str(AVX512 / f"{workload}.json")]
    print("$ env -u OPENBLAS_CORETYPE tapegrad " + " ".join(argv), flush=True)
    return subprocess.run([sys.executable, "-m", "tapegrad", *argv], cwd=ROOT, env=env).returncode


def _rows(path: Path) -> dict[int, dict]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {r["threads"]: r for r in data["results"]}


def _cell(r: dict | None, peer: str) -> str:
    if r is None or peer not in r["ratios"]:
        return "-"
    return f"{r['ratios'][peer]['steady']['median']:.2f}x"


def _epoch(r: dict | None) -> str:
    if r is None:
        return "-"
    return f"{r['summary']['tapegrad']['steady']['median']:.3f} s"


def markdown(workloads: list[str], repeats: int) -> str:
    lines = [
        BEGIN,
        "## NumPy's BLAS kernels: AVX2 (this machine's setting) against AVX-512",
        "",
        f"`python benchmarks/blas_kernels.py --repeats {repeats}` (runs `env -u OPENBLAS_CORETYPE "
        "tapegrad bench WORKLOAD --vs torch,jax --threads all,1`; the AVX2 columns are the "
        "tables above). This machine's environment sets `OPENBLAS_CORETYPE=Haswell`, so "
        "tapegrad's matrix products run on OpenBLAS's AVX2 kernels in every table above, while "
        "PyTorch (MKL, oneDNN) and JAX (XLA) use AVX-512. Unset, `import tapegrad` picks "
        "OpenBLAS's AVX-512 kernels on this CPU (`src/tapegrad/blas.py`): its GEMMs run 1.8x "
        "faster (one thread, (100, 784) x (784, 128): 156 -> 91 us). tapegrad's steady epoch "
        "and its ratio to each peer's (steady epoch, median of repeat-by-repeat ratios; the "
        "peers' own times do not depend on the setting):",
        "",
        "| workload | threads | tapegrad AVX2 | tapegrad AVX-512 | / PyTorch AVX2 | AVX-512 "
        "| / JAX AVX2 | AVX-512 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in workloads:
        base, fast = _rows(RESULTS / f"{w}.json"), _rows(AVX512 / f"{w}.json")
        for t in sorted(set(base) | set(fast), reverse=True):
            b, f = base.get(t), fast.get(t)
            lines.append(
                f"| {w} | {t} | {_epoch(b)} | {_epoch(f)} | {_cell(b, 'torch')} | "
                f"{_cell(f, 'torch')} | {_cell(b, 'jax')} | {_cell(f, 'jax')} |"
            )
    lines += ["", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workloads", default="seed-cnn,seed-rnn,text-cnn,mlp")
    p.add_argument("--render-only", action="store_true")
    args = p.parse_args(argv)
    workloads = args.workloads.split(",")
    failed = [] if args.render_only else [w for w in workloads if run(w, args.repeats) != 0]
    sections.write("blas", markdown(workloads, args.repeats))
    print("wrote the blas section of BENCHMARKS.md")
    if failed:
        print(f"failed or flagged: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
