"""Why identical PyTorch processes train at different speeds here: glibc's malloc.

    python benchmarks/allocator.py [--processes 8] [--steps 300] [--threads 1] [--json out.json]

Starts ``--processes`` pairs of processes, alternating the bench's allocator settings
(``keep``: ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_`` at 1 GiB, what every
``tapegrad bench`` process gets; ``system``: glibc as configured). Each trains seed-cnn's
architecture with plain PyTorch (``torch.optim.Adam``, batch 100, batches gathered from a
tensor) for 50 warm-up steps and ``--steps`` timed ones, and reports per step: wall time, user
and kernel CPU time and minor page faults. The CPU times and the faults do not depend on how
busy the machine is, so this shows the cause even on a shared machine: with glibc's defaults
some processes fault their step's memory in again on every step (kernel time on top of the
same user time), others do not; kept, none does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def child(steps: int, threads: int) -> dict:
    """The measured process: plain PyTorch, seed-cnn's shapes, MNIST-sized random data."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model = nn.Sequential(
        nn.Unflatten(1, (1, 28)),
        nn.Conv2d(1, 6, 3, bias=False),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(6 * 13 * 13, 84, bias=False),
        nn.ReLU(),
        nn.Linear(84, 10, bias=False),
    )
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    X = torch.from_numpy(rng.random((60000, 28, 28), dtype=np.float32))
    Y = torch.from_numpy(rng.integers(0, 10, 60000))
    order = torch.from_numpy(rng.permutation(60000))

    def train(lo, hi):
        for i in range(lo, hi):
            idx = order[(i % 600) * 100 : (i % 600 + 1) * 100]
            opt.zero_grad()
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            loss.item()

    train(0, 50)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    train(50, 50 + steps)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall_ms": 1e3 * wall / steps,
        "user_ms": 1e3 * (r1.ru_utime - r0.ru_utime) / steps,
        "sys_ms": 1e3 * (r1.ru_stime - r0.ru_stime) / steps,
        "faults": (r1.ru_minflt - r0.ru_minflt) / steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=8, help="processes per setting")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.steps, args.threads)))
        return 0
    from tapegrad.bench import harness

    argv_child = [sys.executable, __file__, "--child", "--steps", str(args.steps)]
    argv_child += ["--threads", str(args.threads)]
    runs: dict[str, list[dict]] = {"keep": [], "system": []}
    load = [os.getloadavg()[0]]
    for i in range(args.processes):
        for setting in runs:
            env = harness.thread_env(args.threads, setting)
            cpus = harness.cpus_for(args.threads)
            runs[setting].append(harness.launch("probe", argv_child, env, cpus, 600))
            r = runs[setting][-1]
            print(
                f"{i + 1}/{args.processes} {setting:<6} wall {r['wall_ms']:6.2f} ms  user "
                f"{r['user_ms']:5.2f} ms  kernel {r['sys_ms']:5.2f} ms  "
                f"faults {r['faults']:7.1f} a step",
                flush=True,
            )
    load.append(os.getloadavg()[0])
    print(
        f"\nper step, over {args.processes} processes each (load average {load[0]:.1f} -> "
        f"{load[1]:.1f}): median [min-max]"
    )
    for setting, rs in runs.items():
        cells = []
        for key, unit in (("wall_ms", "ms"), ("user_ms", "ms"), ("sys_ms", "ms"), ("faults", "")):
            v = [r[key] for r in rs]
            cells.append(
                f"{key.split('_')[0]} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]{unit}"
            )
        print(f"{setting:<6} " + ", ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "load_average": load}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
