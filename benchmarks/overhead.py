"""Eager-mode overhead of a tiny graph: forward and backward of sum(x * y + z).

tapegrad and PyTorch eager are timed in the same process, alternating in rounds, and each round's
per-call time is the median over many calls; the report gives the median over rounds and the
ratio. The arrays are tiny (4 floats), so the figure is pure per-operation framework overhead.

    python benchmarks/overhead.py [--rounds 15] [--calls 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import tapegrad as tg


def time_calls(fn, calls: int) -> float:
    """Median microseconds per call over ``calls`` calls (each timed alone)."""
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def make_tapegrad(n=4):
    rng = np.random.default_rng(0)
    x, y, z = (
        tg.tensor(rng.normal(size=n).astype(np.float32), requires_grad=True) for _ in range(3)
    )

    def step():
        x.grad = y.grad = z.grad = None
        (x * y + z).sum().backward()

    return step


def make_torch(n=4):
    import torch

    torch.set_num_threads(1)
    x, y, z = (torch.randn(n, requires_grad=True) for _ in range(3))

    def step():
        x.grad = y.grad = z.grad = None
        (x * y + z).sum().backward()

    return step


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    runners = {"tapegrad": make_tapegrad()}
    try:
        runners["torch"] = make_torch()
    except ImportError:
        pass
    for fn in runners.values():  # warm up
        time_calls(fn, 200)
    rounds = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, fn in runners.items():  # alternate A B A B
            rounds[name].append(time_calls(fn, args.calls))
    result = {
        name: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
        for name, v in rounds.items()
    }
    print("sum(x * y + z), forward + backward, 4 floats; microseconds per call")
    print(f"{'framework':<10} {'median':>8} {'min':>8} {'max':>8}")
    for name, r in result.items():
        print(f"{name:<10} {r['median_us']:8.1f} {r['min_us']:8.1f} {r['max_us']:8.1f}")
    if "torch" in result:
        ratio = result["tapegrad"]["median_us"] / result["torch"]["median_us"]
        result["ratio_tapegrad_over_torch"] = ratio
        print(f"tapegrad / torch = {ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
