"""Data-parallel scaling: BENCHMARKS.md's scaling table and its multi-machine model.

    python benchmarks/scaling.py [--repeats 3] [--presets seed-cnn,seed-rnn,...] [--ranks 2]
                                 [--render-only]

For every preset, trains it with the preset's epochs and seed 0 as 1 process x 1 thread,
1 process x all cores' threads and RANKS MPI ranks x cores/RANKS threads, alternating, REPEATS
times (``tapegrad.bench.scaling``); measures this machine's allreduce of each preset's gradient
buffer with RANKS ranks; writes ``benchmarks/results/scaling.json`` and the section between
the scaling markers of BENCHMARKS.md (appended when absent; ``run_all.py`` keeps it), with the
model for N = 2..256 ranks across machines computed from the measured step times. Needs
``tapegrad[mpi]`` and the datasets (``TAPEGRAD_DATA``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import sections  # noqa: E402  (benchmarks/, this script's folder)

from tapegrad.bench import scaling  # noqa: E402
from tapegrad.distributed.launch import find_mpiexec, thread_env  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = sections.markers("scaling")
PRESETS = ("seed-cnn", "seed-rnn", "text-cnn", "text-cnn-learned", "mlp")

# Interconnects of the model: bandwidth per direction (bytes/s) and the latency of one
# message (s) as MPI sees it. Ethernet figures are for MPI over TCP (kernel stack), InfiniBand
# for RDMA; both are typical, not measured here.
LINKS = {
    "10 GbE": (1.25e9, 30e-6),
    "25 GbE": (3.1e9, 20e-6),
    "100 GbE": (12.5e9, 10e-6),
    "InfiniBand HDR (200 Gb/s)": (25e9, 1.5e-6),
}


def ring_allreduce_seconds(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """A ring allreduce of ``nbytes`` over ``n`` ranks: 2(n-1) steps of nbytes/n each."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * latency + 2 * (n - 1) / n * nbytes / bandwidth


def model_rows(step_seconds: float, nbytes: float, batch: int) -> dict:
    """Per interconnect: the speed-up at N = 2..256 ranks (N <= global batch, one sample per
    rank at least), the N where a step is half allreduce, and the N of the largest speed-up."""
    out = {}
    for name, (bw, lat) in LINKS.items():
        speed, half = {}, None
        for n in range(1, min(256, batch) + 1):
            ar = ring_allreduce_seconds(nbytes, n, bw, lat)
            compute = step_seconds / n
            speed[n] = step_seconds / (compute + ar)
            if half is None and n > 1 and ar >= compute:
                half = n
        best = max(speed, key=speed.get)
        out[name] = {
            "speedup": {n: speed[n] for n in (2, 4, 8, 16, 32, 64, 128, 256) if n in speed},
            "half_n": half,
            "best_n": best,
            "best_speedup": speed[best],
        }
    return out


def probe_allreduce(sizes: list[int], ranks: int) -> dict[int, list[float]]:
    """[median, fastest] seconds of one in-place float32 allreduce of each size over 200,
    ``ranks`` ranks here (the slowest rank's figures). On a shared machine the median includes
    waits for a descheduled peer; the fastest is the cost when both ranks run."""
    code = (
        "import sys, time, json, numpy as np\n"
        "from tapegrad.distributed import world\n"
        "c = world(required=True)\n"
        "out = {}\n"
        "for n in map(int, sys.argv[1:]):\n"
        "    a = np.ones(n, np.float32); ts = []\n"
        "    for _ in range(200):\n"
        "        c.barrier(); t = time.perf_counter(); c.allreduce(a)\n"
        "        ts.append(time.perf_counter() - t)\n"
        "    ts = sorted(ts); ts = c.allreduce(np.array([ts[100], ts[0]]), op='max')\n"
        "    out[n] = ts.tolist()\n"
        "if c.rank == 0: print(json.dumps(out))\n"
    )
    cmd = [find_mpiexec() or "mpiexec", "-n", str(ranks), sys.executable, "-c", code]
    cmd += [str(s) for s in sizes]
    env = {**os.environ, **thread_env(1)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=300)
    return {int(k): list(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


STEP_TIMER = (
    "import sys, time, statistics\n"
    "from tapegrad.models import get_preset\n"
    "from tapegrad.train import Trainer\n"
    "from tapegrad.train.experiment import setup\n"
    "name = sys.argv[1]; data_dir = sys.argv[2] or None\n"
    "exp = setup(name, data_dir=data_dir, log=None); p = get_preset(name)\n"
    "tr = Trainer(exp.model, exp.optimizer, p.task, progress=False, log=None)\n"
    "x, y = exp.data.train.x, exp.data.train.y; b = p.batch_size\n"
    "def t(n, steps=60):\n"
    "    for _ in range(3): tr.train_step(x[:n], y[:n])\n"
    "    s = time.perf_counter()\n"
    "    for _ in range(steps): tr.train_step(x[:n], y[:n])\n"
    "    return (time.perf_counter() - s) / steps\n"
)


def two_at_once(preset: str, data_dir: str | None = None) -> float:
    """How much slower one-thread training steps run when two independent processes run them
    at once (no MPI): above 1, this machine does not give two processes two cores' worth."""
    code = STEP_TIMER + "time.sleep(1.0); print(statistics.median(t(b) for _ in range(7)))\n"
    cmd = [sys.executable, "-c", code, preset, data_dir or ""]
    env = {**os.environ, **thread_env(1)}

    def start():
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)

    alone = float(start().communicate(timeout=600)[0].split()[-1])
    pair = [start(), start()]
    together = [float(p.communicate(timeout=600)[0].split()[-1]) for p in pair]
    return statistics.mean(together) / alone


def half_batch_speedup(preset: str, data_dir: str | None = None) -> float:
    """One process, one thread: a compiled step's time at the preset's batch over its time at
    half the batch (median of alternating rounds). The speed-up two ranks could reach if
    communication were free: what does not shrink with the batch (Python dispatch, kernel
    launches, the optimiser when it is not split) stays."""
    code = STEP_TIMER + "print(statistics.median(t(b) / t(b // 2) for _ in range(7)))\n"
    cmd = [sys.executable, "-c", code, preset, data_dir or ""]
    env = {**os.environ, **thread_env(1)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=600)
    return float(proc.stdout.strip().splitlines()[-1])


def _targets(rows: list[dict], cfg: list[str]) -> str:
    """Which presets met the issue's targets in this run, in one sentence."""
    met = [
        r["preset"]
        for r in rows
        if r["speedup_vs_single"] >= 1.6
        and r["speedup_vs_threads"] > 1.0
        and abs(r["accuracy"][cfg[2]] - r["accuracy"][cfg[0]]) <= 0.003
    ]
    acc = max(abs(r["accuracy"][cfg[2]] - r["accuracy"][cfg[0]]) for r in rows)
    return (
        f"Targets (2 ranks >= 1.6x one rank x 1 thread and faster than one process x 2 "
        f"threads, test accuracy within 0.3 points): met in this run by "
        f"{', '.join(f'`{p}`' for p in met) if met else 'no preset'} of {len(rows)}; the "
        f"accuracy part by all (largest difference {100 * acc:.2f} points). The last column "
        f"of the next table bounds each preset's speed-up with free communication; the same "
        f"command on a quiet machine shows how close the code comes to it."
        if acc <= 0.003
        else f"Targets met in this run by {', '.join(met) or 'no preset'}; the largest accuracy "
        f"difference is {100 * acc:.2f} points."
    )


def section(result: dict, command: str) -> str:
    cfg = result["configs"]
    rows = scaling.summary(result)
    lines = [
        BEGIN,
        "## Data-parallel scaling (MPI)",
        "",
        f"Command: `{command}` ({result['repeats']} repeats, alternating; "
        f"{result['date']}, load average {result['load']} at the start and "
        f"{result.get('load_end', '?')} at the end: the machine is shared). Each cell is a whole "
        "`tapegrad train PRESET --json` run with the preset's epochs and seed 0, in its own "
        "process(es); epoch time is the median over the repeats of the median steady-state "
        "epoch (the first, with compilation, left out); speed-ups are medians of ratios within "
        "the same repeat. Accuracy is the test accuracy after the last epoch. "
        "`alloc/step` is the largest rank's tracemalloc peak of a steady step.",
        "",
        scaling.markdown(result),
        "",
        "Reading it: the ranks meet twice per step (the allreduce, and the allgather of the "
        "split optimiser step), so the slower rank sets the pace and a rank the kernel "
        "deschedules stalls the other; one process with one thread waits for no one. The load "
        "averages above and the *two processes at once* column below say how much of two cores "
        "this shared machine gave the run. " + _targets(rows, cfg),
        "",
    ]
    lines += [
        "### One allreduce per step, measured here",
        "",
        f"| preset | parameters | gradient buffer | allreduce, {result['ranks']} ranks here: "
        f"median (fastest) | step ({cfg[0]}) | allreduce / step: median (fastest) | "
        "step at batch B / at B/2 (one process) | two processes at once: step time vs alone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        m = result["model"][row["preset"]]
        med, fast = m["allreduce_here"]
        lines.append(
            f"| `{row['preset']}` | {m['parameters']} | {m['bytes'] / 1024:.0f} KiB | "
            f"{1e6 * med:.0f} us ({1e6 * fast:.0f} us) | {1e3 * m['step_seconds']:.2f} ms | "
            f"{100 * med / m['step_seconds']:.1f}% ({100 * fast / m['step_seconds']:.1f}%) | "
            f"{m['half_batch_speedup']:.2f}x | {m['two_at_once']:.2f}x |"
        )
    lines += [
        "",
        "*Step at batch B / at B/2* bounds what 2 ranks can gain with free communication: one "
        "process's step at the preset's batch over its step at half that batch. What does not "
        "shrink with the batch (the Python that dispatches each kernel of the plan, per-call "
        "overheads of small kernels) stays on every rank; the optimiser step, included here "
        "whole, is split between the ranks, so the true bound is a little higher. *Two "
        "processes at once* runs the same one-thread steps in two independent processes (no "
        "MPI) and divides their step time by that of one process alone: above 1, the machine "
        "does not give two processes two cores' worth of work, and two ranks lose that "
        "factor before any communication.",
        "",
        "The gradient buffer is one flat float32 array (all gradients, plus the loss) reduced "
        "in place after the backward pass. Overlapping the reduction with the backward pass "
        "(bucketed non-blocking allreduces) cannot pay on one machine: the reduction is the "
        "fraction of the step shown above, both ranks' cores are busy computing during the "
        "backward pass, and MPICH makes progress on a non-blocking collective only inside MPI "
        "calls. So tapegrad issues one blocking allreduce; across machines the model below "
        "says when that becomes the bottleneck.",
        "",
        "### Many ranks across machines: a model",
        "",
        "With the global batch fixed (the preset's), N ranks each compute 1/N of a step, "
        "`t_step / N` (measured `t_step` of 1 rank x 1 thread above; per-step Python overhead "
        "that does not shrink is ignored, which flatters large N), then allreduce S bytes. A "
        "ring allreduce takes `2(N-1) a + 2 (N-1)/N S / B`: latency `a` per message and "
        "bandwidth `B` per link (10 GbE: 1.25 GB/s, 30 us; 25 GbE: 3.1 GB/s, 20 us; "
        "100 GbE: 12.5 GB/s, 10 us, MPI over TCP; InfiniBand HDR: 25 GB/s, 1.5 us, RDMA). "
        "Speed-up(N) = `t_step / (t_step/N + allreduce(N))`, for N up to the global batch (one "
        "sample per rank). *Half* is the first N where the allreduce takes as long as the "
        "compute (50% efficiency): the preset stops scaling there; *best* is the N of the "
        "largest speed-up, beyond which more ranks make a step slower.",
        "",
        "| preset | interconnect | speed-up at N = 2 / 8 / 32 / 64 | half (stops scaling) | "
        "best N (speed-up) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        m = result["model"][row["preset"]]
        for link, r in m["links"].items():
            sp = " / ".join(
                f"{r['speedup'][str(n)]:.1f}" if str(n) in r["speedup"] else "-"
                for n in (2, 8, 32, 64)
            )
            half = r["half_n"] or f"> {max(int(k) for k in r['speedup'])}"
            lines.append(
                f"| `{row['preset']}` | {link} | {sp} | {half} | "
                f"{r['best_n']} ({r['best_speedup']:.1f}x) |"
            )
    lines += [
        "",
        "What changes it: the compute of a step grows with the global batch while the "
        "allreduce does not, so a k-times larger global batch moves *half* and *best* about "
        "k times further out (at the price of the optimisation's sample efficiency: the "
        "learning rate has to be retuned). A larger model grows both; a convolution does much "
        "more arithmetic per parameter than a dense layer (seed-cnn's 86k parameters cost "
        "more compute per sample than the MLP's 102k), so convolutional models scale further, "
        "and embedding tables (text-cnn's 5000 x 50 table is 99.5% of its gradient but a sliver "
        "of its compute) scale worst: sending only the rows a batch touched would shrink that "
        "message by the vocabulary's unused fraction. At small N the bandwidth term `2S/B` "
        "dominates; the latency term `2(N-1) a` grows with N and ends the scaling on any "
        "interconnect (a tree or hierarchical allreduce, which MPI libraries pick for small "
        "messages, cuts it to about `2 log2(N) a`).",
        END,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--presets", default=",".join(PRESETS))
    p.add_argument("--epochs", type=int, help="epochs per run (default: each preset's)")
    p.add_argument("--data-dir")
    p.add_argument("--render-only", action="store_true")
    args = p.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "scaling.json"
    command = "python benchmarks/scaling.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.render_only:
        result = json.loads(out.read_text())
    else:
        presets = [x for x in args.presets.split(",") if x]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        result = scaling.measure(
            presets,
            ranks=args.ranks,
            repeats=args.repeats,
            data_dir=args.data_dir,
            epochs=args.epochs,
        )
        result.update(
            repeats=args.repeats, load=f"{load:.1f}", date=time.strftime("%Y-%m-%d %H:%M UTC")
        )
        result["load_end"] = f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "?"
        single = result["configs"][0]
        sizes = {}
        for preset, by in result["runs"].items():
            first = by[single][0]
            sizes[preset] = first["parameters"] + 1  # the loss rides in the same buffer
        probe = probe_allreduce(sorted(set(sizes.values())), args.ranks)
        result["model"] = {}
        for preset, by in result["runs"].items():
            runs = by[single]
            step = statistics.median(r["epoch_seconds"] / r["steps_per_epoch"] for r in runs)
            nbytes = 4 * sizes[preset]
            result["model"][preset] = {
                "parameters": runs[0]["parameters"],
                "bytes": nbytes,
                "step_seconds": step,
                "allreduce_here": probe[sizes[preset]],
                "links": model_rows(step, nbytes, runs[0]["batch_size"]),
                "half_batch_speedup": half_batch_speedup(preset, args.data_dir),
                "two_at_once": two_at_once(preset, args.data_dir),
            }
        result["command"] = command
        out.write_text(json.dumps(result, indent=1) + "\n")
    text = section(json.loads(json.dumps(result)), result.get("command", command))
    sections.write("scaling", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
