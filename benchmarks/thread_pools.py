"""A compiled training step's time under the thread pools' idle settings, alternating processes.

    python benchmarks/thread_pools.py PRESET [--steps 20] [--rounds 2]
                                      [--configs passive,tapegrad,blas-sleeps,numba-serial]

A process can run two thread pools: OpenBLAS's (NumPy's matrix products) and numba's OpenMP
workers (tapegrad's parallel kernels and, since issue 27's one-pool change, its large matrix
products). Each pool's idle workers may spin on a core waiting for the next call, and a
spinning worker of one pool holds the core the other pool's next parallel region needs. Each
configuration is a set of environment variables given to a fresh process (both pools at 2
threads), which trains the preset's compiled step and reports the median step time and the
cores busy (CPU time over wall time). The configurations:

* ``old``: OpenMP's default spin (``OMP_WAIT_POLICY`` set to an empty value so that tapegrad
  sets nothing; OpenBLAS's default spin, 2^28 cycles);
* ``passive``: numba's workers sleep as soon as a region ends (``OMP_WAIT_POLICY=PASSIVE``,
  tapegrad's setting before the one-pool change);
* ``tapegrad``: what ``import tapegrad`` sets (``GOMP_SPINCOUNT=100000``: a short spin);
* ``blas-sleeps``: also ``OPENBLAS_THREAD_TIMEOUT=4`` (OpenBLAS's workers sleep at once);
* ``numba-serial``: tapegrad's setting with numba on one thread (its kernels serial).

Run it on a quiet machine: other jobs make two-thread times meaningless.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[3])
from tapegrad.train.experiment import setup
from tapegrad.train.trainer import Trainer
from profile_step import training_batches
ex = setup(sys.argv[1], log=None)
tr = Trainer(ex.model, ex.optimizer, ex.preset.task, progress=False, log=None)
b = training_batches(ex.data.train, ex.preset.batch_size, 40)
for i in range(4):
    tr.train_step(*b[i % len(b)])
ts = []
c0, w0 = time.process_time(), time.perf_counter()
for i in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    tr.train_step(*b[i % len(b)])
    ts.append(time.perf_counter() - t0)
busy = (time.process_time() - c0) / (time.perf_counter() - w0)
print(json.dumps({"median": statistics.median(ts), "busy": busy}))
"""

CONFIGS = {
    "old": {"OMP_WAIT_POLICY": "", "OPENBLAS_THREAD_TIMEOUT": "28"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "tapegrad": {},
    "blas-sleeps": {"OPENBLAS_THREAD_TIMEOUT": "4"},
    "numba-serial": {"NUMBA_NUM_THREADS": "1"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--configs", default="passive,tapegrad,blas-sleeps,numba-serial")
    args = ap.parse_args()
    names = args.configs.split(",")
    here = str(Path(__file__).resolve().parent)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names:
            env = {
                k: v
                for k, v in os.environ.items()
                if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
            }
            env.update({v: "2" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
            env.update({"MKL_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2"})
            env.update(CONFIGS[name])
            cmd = [sys.executable, "-c", CHILD, args.preset, str(args.steps), here]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{name}: {done.stderr[-2000:]}")
            d = json.loads(done.stdout.strip().splitlines()[-1])
            results[name].append(d)
            print(f"round {r} {name:13s} {d['median'] * 1e3:9.2f} ms  busy {d['busy']:.2f}")
    print(f"\n{args.preset}, 2 threads, median step over {args.rounds} rounds:")
    for name, runs in results.items():
        ms = statistics.median(d["median"] for d in runs) * 1e3
        busy = statistics.median(d["busy"] for d in runs)
        print(f"| {name} | {ms:.2f} ms | {busy:.2f} |")


if __name__ == "__main__":
    main()
