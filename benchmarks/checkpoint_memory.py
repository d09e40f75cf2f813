"""Peak memory and time of one training step of a deep MLP with and without gradient
checkpointing (``tg.checkpoint`` around each group of blocks), eager and compiled.

    python benchmarks/checkpoint_memory.py [--depth 48] [--width 256] [--batch 2048] [--every 4]

Memory is tracemalloc's high-water mark during a steady step (NumPy's buffers are traced) minus
the weights: gradients, optimiser state, a compiled plan's buffers and the step's temporaries.
Time is the median of ``--repeats`` steps. Prints a markdown table; run it with one BLAS thread
(``OPENBLAS_NUM_THREADS=1``) on a busy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

import tapegrad as tg
from tapegrad import nn, optim


def build(depth: int, width: int) -> list[nn.Module]:
    tg.manual_seed(0)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)]


def make_step(blocks, every: int, compiled: bool):
    params = [p for b in blocks for p in b.parameters()]
    opt = optim.SGD(params, lr=1e-3)
    size = every or len(blocks)
    groups = [nn.Sequential(*blocks[i : i + size]) for i in range(0, len(blocks), size)]

    def step(x):
        h = tg.tensor(x)
        for g in groups:
            h = tg.checkpoint(g, h) if every else g(h)
        loss = (h * h).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return tg.compile(step) if compiled else step


def measure(depth, width, batch, every, compiled, repeats):
    """(peak bytes beyond the weights during a steady step, median step seconds)."""
    tracemalloc.start()
    blocks = build(depth, width)
    weights = sum(p.data.nbytes for b in blocks for p in b.parameters())
    step = make_step(blocks, every, compiled)
    x = np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32)
    step(x)
    step(x)  # traced (compiled) and warm: a plan's buffers are live from here on
    tracemalloc.reset_peak()
    step(x)
    peak = tracemalloc.get_traced_memory()[1] - weights
    tracemalloc.stop()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step(x)
        times.append(time.perf_counter() - t)
    return peak, statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=48)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--every", type=int, default=4, help="blocks per checkpointed segment")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(
        f"MLP of {a.depth} x (Linear {a.width} + Tanh), batch {a.batch}, float32, SGD; "
        f"checkpoint every {a.every} blocks\n"
    )
    print("| mode | checkpointing | peak memory beyond the weights | step time (median) |")
    print("|---|---|---|---|")
    for compiled in (False, True):
        rows = {}
        for every in (0, a.every):
            rows[every] = measure(a.depth, a.width, a.batch, every, compiled, a.repeats)
            peak, t = rows[every]
            label = f"every {every} blocks" if every else "none"
            mode = "compiled" if compiled else "eager"
            print(f"| {mode} | {label} | {peak / 2**20:.1f} MiB | {t * 1e3:.1f} ms |")
        (p0, t0), (p1, t1) = rows[0], rows[a.every]
        print(
            f"| {'compiled' if compiled else 'eager'} | saving | {p0 / max(p1, 1):.1f}x less "
            f"| {t1 / t0:.2f}x the time |"
        )


if __name__ == "__main__":
    main()
