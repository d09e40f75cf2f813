"""The seed CNN's pooling and weight-gradient kernels against the general paths they replace,
in one process, alternating: ReLU + 2x2 max pooling at stride 2 (the pairs of
``kernels/cpu/pool.py`` against the window-at-a-time loops, forward and backward) and the
few-channel weight gradient (``kernels/cpu/few_channels.py`` against the batch's columns and
their product), on seed-cnn's shapes (batch 100, one input channel, six 3x3 filters).

    PYTHONPATH=src python benchmarks/seed_cnn_kernels.py [--rounds 10] [--calls 300] [--threads 2,1]

Each round times ``--calls`` calls of every variant in turn (the median call); the table gives
the median over rounds, per thread count (numba's and the BLAS's alike), and the ratio
new / old. The variants read the same arrays, so each starts with what the others left in the
caches, as kernels of a training step do.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from tapegrad import blas
from tapegrad.autodiff.kernels.cpu import few_channels, pool
from tapegrad.autodiff.primitives import conv_layout as L


def _median_call(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def _cases() -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 1, 28, 28)).astype(np.float32)
    g = rng.standard_normal((100, 6, 26, 26)).astype(np.float32)
    g[g < 0.7] = 0  # about a quarter nonzero, as ReLU and max pooling leave it
    gw = np.empty((6, 1, 3, 3), np.float32)
    batch = L.whole_batch(x, 1, 2)
    pad = ((0, 0), (0, 0))
    cols = np.empty(L.cols_shape(batch, x.shape, (3, 3), (26, 26)), np.float32)

    def columns():
        c = L.fill_cols(batch, x, (3, 3), (1, 1), pad, (1, 1), (26, 26), cols, None)
        L.weight_product(batch, g, c, gw, 1, None)

    planes = rng.standard_normal((600, 26, 26)).astype(np.float32)
    out = np.empty((600, 13, 13), np.float32)
    arg = np.empty(out.shape, np.uint8)
    gp = rng.standard_normal(out.shape).astype(np.float32)
    gx = np.empty_like(planes)
    windows_forward, windows_backward = pool.window_kernels(2, 2, 2, 2, 1, 1)
    kept: dict = {}

    def scratch(key, shape, dtype=np.float32):  # a plan's workspace
        if key not in kept:
            kept[key] = np.empty(shape, dtype)
        return kept[key]

    geo = ((2, 2), (2, 2), (1, 1), True, scratch)
    return {
        "relu + max pool forward": (
            lambda: windows_forward(planes, out, arg, True),
            lambda: pool.pool_planes_forward(planes, out, arg, *geo),
        ),
        "relu + max pool backward": (
            lambda: windows_backward(gp, arg, out, gx, True),
            lambda: pool.pool_planes_backward(gp, arg, out, gx, *geo),
        ),
        "conv weight gradient": (
            columns,
            lambda: few_channels.conv_few_weight(x, g, gw, (0, 0), scratch),
        ),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--threads", default="2,1")
    args = p.parse_args(argv)
    cases = _cases()
    blas_threads = blas.threads_setter()
    print(f"{'kernel':<26} {'threads':>7} {'old us':>8} {'new us':>8} {'new/old':>8}")
    for threads in (int(t) for t in args.threads.split(",")):
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        if blas_threads is not None:
            blas_threads[0](threads)
        for old, new in cases.values():  # compiled and warm before timing
            old(), new()
        rounds = {name: ([], []) for name in cases}
        for _ in range(args.rounds):
            for name, (old, new) in cases.items():
                rounds[name][0].append(_median_call(old, args.calls))
                rounds[name][1].append(_median_call(new, args.calls))
        for name, (old, new) in rounds.items():
            o, n = np.median(old), np.median(new)
            print(f"{name:<26} {threads:>7} {o:>8.0f} {n:>8.0f} {n / o:>8.2f}")


if __name__ == "__main__":
    main()
