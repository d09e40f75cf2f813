"""Regenerate BENCHMARKS.md: every table, chart and JSON result, with one command.

    python benchmarks/run_all.py [--repeats 5] [--threads all,1] [--vs torch,jax]
                                 [--workloads seed-cnn,seed-rnn,text-cnn,mlp]
                                 [--skip micro,eager,threads,scaling] [--scaling-repeats 3]
                                 [--data-dir DIR] [--render-only]

Runs, each as its own command so BENCHMARKS.md can quote exactly what ran:

1. ``tapegrad bench WORKLOAD --threads all,1`` for each seed workload: tapegrad, PyTorch and
   JAX at both cores (the headline: a user's default) and at one thread, alternating, each
   peer's worker checked against that peer's plain training loop (the run fails when they are
   more than 10% apart); JSON in ``benchmarks/results/WORKLOAD.json``;
2. ``tapegrad bench micro``: the gradient micro-benchmarks;
3. ``benchmarks/overhead.py``: eager mode, a tiny graph and a ~40,000-operation LSTM step;
4. ``benchmarks/threads.py --load``: whether each library's thread setting takes effect, and
   how two threads fare beside another job;
5. ``benchmarks/work_scaling.py``: each workload at batch 32, 100 and 512, and 4x wider models;

then renders BENCHMARKS.md and ``benchmarks/figures/*.png`` from the JSON (sections between
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` markers are kept: the data-parallel scaling
that ``benchmarks/scaling.py`` writes, the GPU table, checkpointing). ``--render-only`` re-renders
from the JSON already there; ``--skip`` leaves parts out (their sections are rendered from
older JSON if there is some). Exits 1 if any command failed, a self-check included. Needs the
datasets (``TAPEGRAD_DATA`` or ``--data-dir``) and the peers (``pip install -e '.[bench]'``).
A full run takes about an hour on a quiet 2-core machine, longer on a busy one.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import sections  # noqa: E402  (benchmarks/: the kept sections of BENCHMARKS.md)

from tapegrad.bench.harness import WORKLOADS  # noqa: E402
from tapegrad.bench.report import charts, headline, markdown  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
FIGURES = ROOT / "benchmarks" / "figures"
PARTS = ("micro", "eager", "threads", "scaling")

THREADS_NOTE = (
    "Threads: each workload's first table runs every framework on **both cores** with its own "
    "default thread count (what a user gets); the second limits every process to one core "
    "and one thread. This machine is shared with other jobs: at two threads an OpenMP "
    "framework waits at every parallel region for a thread another job has descheduled, so "
    "the two-core tables move with the machine's load far more than the one-thread ones "
    "(the *Threads* section below measures it beside a busy-looping job). Read the one-thread "
    "tables for the steadiest comparison and the two-core ones for what a user sees."
)

CAVEATS = (
    "Caveats: the three *alloc/epoch* instruments (tracemalloc for tapegrad, torch.profiler's "
    "tensor timeline for PyTorch, XLA's static buffer assignment for JAX) aim at the same "
    "quantity but are not the same tool: compare them as magnitudes, not to the percent. "
    "Other jobs shared this machine while it ran, so absolute times are slower than on a quiet "
    "machine; every framework saw the same conditions, alternating, which is what the ratios "
    "rest on."
)

# The performance round's targets (issue "Performance, round 2"): tapegrad's steady epoch over
# each peer's plain loop, both cores.
TORCH_TARGET = {"seed-cnn": 0.5, "seed-rnn": 0.5, "text-cnn": 0.5, "mlp": 0.5}
# issue 27's general workloads: compiled at most PyTorch's epoch time
TORCH_TARGET.update({"char-lm": 1.0, "resnet": 1.0})
JAX_TARGET = 1.0
FLOOR_TARGET = 3.0
FIRST_EPOCH_TARGET = 2.0  # seconds above a steady epoch, warm kernel cache
ALLOC_TARGET = 64 * 1024  # bytes allocated by a steady compiled step


def _ratio(result: dict, peer: str) -> tuple[float, str] | None:
    """tapegrad over ``peer``: against its plain loop where the run has one, else its worker."""
    for key, what in ((f"{peer}-plain", f"{peer}'s plain loop"), (peer, f"{peer}'s worker")):
        r = result.get("ratios", {}).get(key, {}).get("steady")
        if r:
            return r["median"], what
    return None


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def targets_note(results: list[dict], micro: dict | None, eager: dict | None = None) -> str:
    """The round's targets against what this run measured (the headline, both-cores tables)."""
    lines = ["**Targets** (both cores, steady epoch, this run):", ""]
    for r in headline(results):
        w, parts = r["workload"], []
        torch_ratio = _ratio(r, "torch")
        if w in TORCH_TARGET and torch_ratio:
            x, what = torch_ratio
            parts.append(
                f"{x:.2f}x {what} (<= {TORCH_TARGET[w]:g}x: {_verdict(x <= TORCH_TARGET[w])})"
            )
        jax_ratio = _ratio(r, "jax")
        if jax_ratio:
            x, what = jax_ratio
            parts.append(f"{x:.2f}x {what} (<= {JAX_TARGET:g}x: {_verdict(x <= JAX_TARGET)})")
        s = r["summary"]["tapegrad"]
        floor = r["floor"]["epoch_seconds" if r["unit"] == "epoch" else "step_seconds"]
        if s["steady"]:
            x = s["steady"]["median"] / floor
            parts.append(
                f"{x:.1f}x its FLOP floor (<= {FLOOR_TARGET:g}x: {_verdict(x <= FLOOR_TARGET)})"
            )
        if (
            r["unit"] == "epoch"
            and s.get("first_cold")
            and s["steady"]
            and s["first"] != s["first_cold"]
        ):
            d = s["first"]["median"] - s["steady"]["median"]
            ok = _verdict(d <= FIRST_EPOCH_TARGET)
            parts.append(f"first epoch {d:+.2f} s (<= +{FIRST_EPOCH_TARGET:g} s: {ok})")
        if s.get("alloc_per_step") is not None and s.get("mode") == "compiled":
            a = s["alloc_per_step"]
            parts.append(f"{a / 1024:.1f} KiB a step (<= 64 KiB: {_verdict(a <= ALLOC_TARGET)})")
        lines.append(f"- {w}: " + "; ".join(parts) + ".")
    if eager:
        tiny = eager.get("tiny", {})
        if "torch" in tiny:
            x = tiny["tapegrad"]["median_us"] / tiny["torch"]["median_us"]
            lines.append(f"- eager, tiny graph: {x:.2f}x PyTorch (<= 1x: {_verdict(x <= 1)}).")
        lstm = eager.get("lstm", {})
        if lstm:
            longest = max(lstm, key=int)
            row = lstm[longest]
            ref = "torch (nn.LSTMCell)"
            if ref in row:
                x = row["tapegrad"]["median_s"] / row[ref]["median_s"]
                ok = _verdict(x <= 1)
                lines.append(
                    f"- eager, {longest}-step LSTM ({ref}): {x:.2f}x PyTorch (<= 1x: {ok})."
                )
    if micro:
        rows = micro.get("benchmarks", {})
        for mode, name in (("tapegrad-compiled", "compiled"), ("tapegrad", "eager")):
            over = [
                (b, row[mode]["median_us"] / row["torch"]["median_us"])
                for b, row in rows.items()
                if mode in row and "torch" in row
            ]
            if over:
                lines.append(
                    f"- micro-benchmarks, each gradient ({name}) at most PyTorch eager's time: "
                    + ", ".join(f"{b} {x:.2f}x" for b, x in over)
                    + f" ({_verdict(all(x <= 1 for _, x in over))})."
                )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="repeats per workload (default 5)")
    p.add_argument("--threads", default="all,1", help="thread settings (default all,1)")
    p.add_argument("--vs", default="torch,jax")
    p.add_argument("--micro-vs", default="torch,jax,autograd")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--skip", default="", help=f"parts to leave out: {','.join(PARTS)}")
    p.add_argument("--scaling-repeats", type=int, default=3)
    p.add_argument("--data-dir")
    p.add_argument("--render-only", action="store_true")
    args = p.parse_args(argv)
    args.skip = [x for x in args.skip.split(",") if x]
    unknown = sorted(set(args.skip) - set(PARTS))
    if unknown:
        p.error(f"--skip: unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    args.workloads = [w for w in args.workloads.split(",") if w]
    bad = sorted(set(args.workloads) - set(WORKLOADS))
    if bad:
        p.error(f"--workloads: unknown {bad}; choose from {', '.join(WORKLOADS)}")
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """The commands to run, as (part, argv) with argv starting ``tapegrad`` or ``python``."""
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    out = []
    for w in args.workloads:
        cmd = ["tapegrad", "bench", w, "--vs", args.vs, "--repeats", str(args.repeats)]
        cmd += ["--threads", args.threads, "--json", f"benchmarks/results/{w}.json", *data]
        out.append((w, cmd))
    if "micro" not in args.skip:
        cmd = ["tapegrad", "bench", "micro", "--vs", args.micro_vs]
        out.append(("micro", [*cmd, "--json", "benchmarks/results/micro.json"]))
    if "eager" not in args.skip:
        cmd = ["python", "benchmarks/overhead.py", "--json", "benchmarks/results/overhead.json"]
        out.append(("eager", cmd))
    if "threads" not in args.skip:
        cmd = ["python", "benchmarks/threads.py", "--load", "--threads", args.threads]
        out.append(("threads", [*cmd, "--json", "benchmarks/results/threads.json"]))
    if "scaling" not in args.skip:
        cmd = ["python", "benchmarks/work_scaling.py", "--repeats", str(args.scaling_repeats)]
        out.append(("scaling", [*cmd, "--vs", args.vs, *data]))
    return out


def run(argv: list[str]) -> int:
    print("$ " + " ".join(argv), flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    head = [sys.executable, "-m", "tapegrad"] if argv[0] == "tapegrad" else [sys.executable]
    return subprocess.run([*head, *argv[1:]], cwd=ROOT, env=env).returncode


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def render(args: argparse.Namespace, steps: list[tuple[str, list[str]]]) -> str:
    """BENCHMARKS.md from the JSON results (and the kept sections)."""
    import overhead
    import threads
    import work_scaling

    results = [r for w in args.workloads if (r := _json(RESULTS / f"{w}.json"))]
    if not results:
        raise SystemExit("run_all.py: no workload results to render")
    micro = _json(RESULTS / "micro.json")
    micro_md = None
    if micro:
        from tapegrad.bench import micro as micro_module

        micro_md = micro_module.markdown(micro)
    eager = _json(RESULTS / "overhead.json")
    thread_check = _json(RESULTS / "threads.json")
    parts = []
    if eager:
        parts.append(overhead.markdown(eager))
    if thread_check:
        parts.append(threads.markdown(thread_check))
    cells = [work_scaling.parse_cell(c) for c in work_scaling.default_cells()]
    scaled = work_scaling.load(cells)
    if scaled:
        parts.append(
            work_scaling.markdown(scaled, [r["command"] for r in scaled if "command" in r])
        )
    # quote the command that made each figure (a workload re-run alone may have used other flags)
    recorded = {r["workload"]: r["command"] for r in results if r.get("command")}
    commands = [recorded.get(part, " ".join(cmd)) for part, cmd in steps]
    charts(results, FIGURES)
    notes = [targets_note(results, micro, eager), THREADS_NOTE, CAVEATS]
    text = markdown(results, micro, micro_md, commands, notes=notes, sections=parts)
    for kept in sections.kept():  # sections other scripts wrote survive a re-render
        text = text.rstrip() + "\n\n" + kept + "\n"
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    steps = plan(args)
    failed = []
    if not args.render_only:
        for part, cmd in steps:
            if run(cmd) != 0:
                failed.append(part)
    text = render(args, steps)
    (ROOT / "BENCHMARKS.md").write_text(text)
    print(f"wrote {ROOT / 'BENCHMARKS.md'} and {FIGURES}/*.png")
    if failed:
        print(f"failed or flagged (see above): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
