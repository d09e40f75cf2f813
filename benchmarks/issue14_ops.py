"""Forward + backward time of issue 14's operations, tapegrad (eager) against PyTorch (CPU), on
the same float32 inputs, alternating, median of ``--repeats`` runs each.

    OPENBLAS_NUM_THREADS=1 python benchmarks/issue14_ops.py [--repeats 15] [--threads 1]

Prints a markdown table: milliseconds per forward + backward and the ratio tapegrad / PyTorch.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import tapegrad as tg

RNG = np.random.default_rng(0)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def cases():
    x = _arr(256, 1024)
    pos = RNG.uniform(0.5, 1.5, (256, 1024)).astype(np.float32)
    idx = RNG.integers(0, 1024, (256, 64))
    rows = RNG.integers(0, 4096, 1000)
    table = _arr(4096, 256)
    a, b = _arr(32, 128, 128), _arr(32, 128, 128)
    q, k = _arr(8, 8, 128, 64), _arr(8, 8, 128, 64)
    img = _arr(16, 32, 64, 64)
    src = _arr(256, 64)
    w = _arr(64, 64) * 0.1
    return [
        ("cumsum (256, 1024), dim 1", [x], lambda t: t.cumsum(dim=1)),
        ("cumprod (256, 1024), dim 1", [pos], lambda t: t.cumprod(dim=1)),
        ("logcumsumexp (256, 1024), dim 1", [x], lambda t: t.logcumsumexp(dim=1)),
        ("prod (256, 1024), dim 1", [pos], lambda t: t.prod(dim=1)),
        ("sort (256, 1024), dim 1", [x], lambda t: t.sort(dim=1)[0]),
        ("topk 10 of (256, 1024)", [x], lambda t: t.topk(10, dim=1)[0]),
        ("gather (256, 64) from (256, 1024)", [x], lambda t, i=idx: t.gather(1, _idx(t, i))),
        (
            "scatter_reduce amax (256, 64) into (256, 1024)",
            [x, src],
            lambda t, s, i=idx: t.scatter_reduce(1, _idx(t, i), s, "amax"),
        ),
        (
            "index_select 1000 of (4096, 256)",
            [table],
            lambda t, r=rows: t.index_select(0, _idx(t, r)),
        ),
        ("einsum bij,bjk->bik (32, 128, 128)", [a, b], lambda s, t: _einsum("bij,bjk->bik", s, t)),
        (
            "einsum bhqd,bhkd->bhqk (8, 8, 128, 64)",
            [q, k],
            lambda s, t: _einsum("bhqd,bhkd->bhqk", s, t),
        ),
        ("pad reflect (16, 32, 64, 64) by 2", [img], _reflect),
        ("x[t] = h for 100 steps of a (64,) state", [w], _fill_loop),
    ]


def _idx(like, index):
    return torch.tensor(index) if isinstance(like, torch.Tensor) else index


def _einsum(spec, *xs):
    return torch.einsum(spec, *xs) if isinstance(xs[0], torch.Tensor) else tg.einsum(spec, *xs)


def _reflect(t):
    if isinstance(t, torch.Tensor):
        return torch.nn.functional.pad(t, (2, 2, 2, 2), mode="reflect")
    return tg.pad(t, ((0, 0), (0, 0), (2, 2), (2, 2)), mode="reflect")


def _fill_loop(w):
    if isinstance(w, torch.Tensor):
        h, out = torch.ones(64), torch.zeros(100, 64)
        for step in range(100):
            h = torch.tanh(w @ h)
            out[step] = h
        return out
    h, out = tg.tensor(np.ones(64, np.float32)), tg.zeros(100, 64)
    for step in range(100):
        h = tg.tanh(w @ h)
        out[step] = h
    return out


def run(fn, arrays, framework) -> float:
    if framework == "torch":
        xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    else:
        xs = [tg.tensor(a, requires_grad=True) for a in arrays]
    start = time.perf_counter()
    y = fn(*xs)
    y.sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| operation | tapegrad ms | PyTorch ms | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, arrays, fn in cases():
        for framework in ("tg", "torch"):
            run(fn, arrays, framework)  # warm: numba kernels, allocator
        times = {"tg": [], "torch": []}
        for _ in range(args.repeats):
            for framework in ("tg", "torch"):
                times[framework].append(run(fn, arrays, framework))
        t, p = statistics.median(times["tg"]), statistics.median(times["torch"])
        print(f"| {name} | {t * 1e3:.2f} | {p * 1e3:.2f} | {t / p:.1f} |")


if __name__ == "__main__":
    main()
