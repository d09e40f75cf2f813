"""Do the bench's thread settings take effect? Each library's parallel work, at each setting.

    python benchmarks/threads.py [--threads all,1] [--repeats 3] [--load] [--json out.json]
                                 [--markdown out.md]

For every library the bench relies on (numba's parallel loops, NumPy's OpenBLAS, PyTorch's
intra-op threads on a GEMM and a convolution, XLA on the same two), a child process does a
fixed amount of parallelisable work, started exactly as ``tapegrad bench`` starts its workers
at that thread setting (``tapegrad.bench.harness.thread_env`` and CPU affinity), and reports
its wall time, its CPU time over the wall time (*cores busy*) and how many of its threads
worked at least 5% of the time. One setting working means: one core busy at one thread, the
work spread over the threads at more, and a shorter wall time. Settings and libraries
alternate within each repeat; medians over the repeats.

``--load`` repeats everything with one busy-looping process beside the child: how a setting
behaves on a shared machine where another job holds a core.
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

from tapegrad.bench import harness  # noqa: E402
from tapegrad.bench.worker import busy_threads, thread_cpu_seconds  # noqa: E402

LIBRARIES = ("numba", "openblas", "torch-gemm", "torch-conv", "xla-gemm", "xla-conv")
N = 1024  # GEMM size
CONV = (100, 1, 28, 28), (24, 1, 3, 3)  # a seed-cnn-like convolution, 4x the channels


def _work(library: str, threads: int):
    """A callable doing the library's work (compiled and warmed up), for the child."""
    if library == "numba":
        import numba
        import numpy as np

        numba.set_num_threads(threads)

        @numba.njit(parallel=True, cache=False)
        def rows(a):
            out = np.empty(a.shape[0], a.dtype)
            for i in numba.prange(a.shape[0]):
                s = 0.0
                for j in range(a.shape[1]):
                    s += np.sin(a[i, j])
                out[i] = s
            return out

        a = np.ones((2000, 2000), np.float32)
        rows(a)
        return lambda: [rows(a) for _ in range(20)]
    if library == "openblas":
        import numpy as np

        a = np.ones((N, N), np.float32)
        return lambda: [a @ a for _ in range(10)]
    if library.startswith("torch"):
        import torch

        torch.set_num_threads(threads)
        if library == "torch-gemm":
            a = torch.ones(N, N)
            return lambda: [a @ a for _ in range(10)]
        x, w = torch.ones(*CONV[0]), torch.ones(*CONV[1])
        return lambda: [torch.conv2d(x, w) for _ in range(40)]
    if library.startswith("xla"):
        import jax
        import jax.numpy as jnp

        if library == "xla-gemm":
            f = jax.jit(lambda a: a @ a)
            a = jnp.ones((N, N))
            f(a).block_until_ready()
            return lambda: [f(a).block_until_ready() for _ in range(10)]
        g = jax.jit(lambda x, w: jax.lax.conv(x, w, (1, 1), "VALID"))
        x, w = jnp.ones(CONV[0]), jnp.ones(CONV[1])
        g(x, w).block_until_ready()
        return lambda: [g(x, w).block_until_ready() for _ in range(40)]
    raise ValueError(f"unknown library {library!r}; have {', '.join(LIBRARIES)}")


def child(library: str, threads: int) -> dict:
    work = _work(library, threads)
    before, cpu, t0 = thread_cpu_seconds(), time.process_time(), time.perf_counter()
    work()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu
    busy = busy_threads(before, thread_cpu_seconds(), wall)
    return {"wall": wall, "cores_busy": cpu / wall, "busy_threads": len(busy)}


def measure(settings: list[int], repeats: int, load: bool) -> dict:
    """{library: {threads: {wall, cores_busy, busy_threads} medians}}."""
    samples: dict = {lib: {t: [] for t in settings} for lib in LIBRARIES}
    spinner = None
    if load:  # another job holding a core
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for _ in range(repeats):
            for lib in LIBRARIES:
                for t in settings:
                    argv = [sys.executable, __file__, "--child", lib, "--child-threads", str(t)]
                    env = harness.thread_env(t)
                    samples[lib][t].append(
                        harness.launch(f"{lib} child", argv, env, harness.cpus_for(t), 600)
                    )
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    med = statistics.median
    return {
        lib: {
            str(t): {
                "wall": med(s["wall"] for s in runs),
                "wall_min": min(s["wall"] for s in runs),
                "wall_max": max(s["wall"] for s in runs),
                "cores_busy": med(s["cores_busy"] for s in runs),
                "busy_threads": max(s["busy_threads"] for s in runs),
            }
            for t, runs in by_t.items()
        }
        for lib, by_t in samples.items()
    }


def markdown(result: dict) -> str:
    settings = result["threads"]
    lines = [
        "## Threads: do the settings take effect?",
        "",
        f"`{result['command']}` ({result['repeats']} repeats, medians; "
        f"{result['cpus']} usable CPUs). Each cell: wall time [min-max], cores busy "
        "(CPU time / wall time), threads that worked. Every child is started as "
        "`tapegrad bench` starts its workers at that setting.",
        "",
    ]
    for key, title in (("quiet", "as the machine was"), ("load", "beside a busy-looping job")):
        if key not in result:
            continue
        lines += [
            f"**{title}**",
            "",
            "| library | "
            + " | ".join(f"{t} thread(s)" for t in settings)
            + (f" | {settings[0]} threads vs 1: speed-up |" if 1 in settings else " |"),
            "|" + "---|" * (len(settings) + 1 + (1 in settings)),
        ]
        for lib, by_t in result[key].items():
            cells = [
                f"{by_t[str(t)]['wall']:.3f}s [{by_t[str(t)]['wall_min']:.3f}-"
                f"{by_t[str(t)]['wall_max']:.3f}], {by_t[str(t)]['cores_busy']:.2f} busy, "
                f"{by_t[str(t)]['busy_threads']} thr"
                for t in settings
            ]
            if 1 in settings:
                cells.append(f"{by_t['1']['wall'] / by_t[str(settings[0])]['wall']:.2f}x")
            lines.append(f"| {lib} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="all,1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--load", action="store_true", help="also measure beside a busy loop")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.child_threads)))
        return 0
    settings = harness.parse_threads(args.threads)
    result = {
        "command": "python benchmarks/threads.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "threads": settings,
        "repeats": args.repeats,
        "cpus": len(harness.available_cpus()),
        "load_average_start": os.getloadavg()[0],
        "quiet": measure(settings, args.repeats, load=False),
    }
    if args.load:
        result["load"] = measure(settings, args.repeats, load=True)
    result["load_average_end"] = os.getloadavg()[0]
    text = markdown(result)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
