"""The kernels today's models spend their time in, against PyTorch in the same process: exact
GELU, the matrix products of attention and of a batched Linear layer (forward and VJP, with
the transposed views the VJPs make), LayerNorm, softmax, and the ResNet preset's 3x3
convolutions (stride 1 at 28x28, 14x14 and 7x7, and stride 2). Prints one table of medians and
ratios (tapegrad / PyTorch) at one and two threads; the two libraries alternate call by call.

    PYTHONPATH=src python benchmarks/kernels_vs_torch.py [--repeats 15] [--threads 1,2] [--step]

Quick and indicative: each case times one eager call (forward) or one backward pass (VJP) of
the operation alone, in CPU time at one thread (``time.process_time``: what a loaded machine's
other jobs disturb least) and wall time at more. Thread counts go to PyTorch, OpenBLAS and
numba alike. ``--step`` adds one whole training step of a 4-layer pre-norm Transformer encoder
with GELU (d 128, 4 heads, feed-forward 512, causal mask, batch 32 x 64 positions, SGD):
eager, compiled and PyTorch, timed the same way.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
import torch

import tapegrad as tg
from tapegrad import blas
from tapegrad.autodiff.graph import gradients
from tapegrad.nn import functional as F


def _pair(shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(shape_a).astype(np.float32),
        rng.standard_normal(shape_b).astype(np.float32),
    )


def _tg_case(fn, arrays):
    """Forward and backward closures of ``fn`` on tapegrad tensors."""
    xs = [tg.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*xs)
    g = tg.tensor(np.random.default_rng(9).standard_normal(y.shape).astype(np.float32))

    def forward():
        with tg.no_grad():
            fn(*xs)

    def backward():
        gradients(y, xs, grad_outputs=g, retain_graph=True)

    return forward, backward


def _torch_case(fn, arrays):
    xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*xs)
    g = torch.tensor(np.random.default_rng(9).standard_normal(tuple(y.shape)).astype(np.float32))

    def forward():
        with torch.no_grad():
            fn(*xs)

    def backward():
        torch.autograd.grad(y, xs, g, retain_graph=True)

    return forward, backward


def _cases():
    """name -> (tapegrad function, PyTorch function, input arrays)."""
    q, k = _pair((32, 4, 64, 32), (32, 4, 64, 32))
    p, v = _pair((32, 4, 64, 64), (32, 4, 64, 32), 1)
    x, w = _pair((32, 64, 128), (512, 128), 2)
    h = np.random.default_rng(3).standard_normal((32 * 64, 512)).astype(np.float32)
    s = np.random.default_rng(4).standard_normal((32, 4, 64, 64)).astype(np.float32)
    ln = np.random.default_rng(5).standard_normal((32 * 64, 128)).astype(np.float32)
    gamma, beta = np.ones(128, np.float32), np.zeros(128, np.float32)
    tnn = torch.nn.functional
    convs = {}
    for (c, o, size, stride), seed in zip(
        [(16, 16, 28, 1), (32, 32, 14, 1), (64, 64, 7, 1), (16, 32, 28, 2), (32, 64, 14, 2)],
        range(10, 15),
    ):
        xc, wc = _pair((100, c, size, size), (o, c, 3, 3), seed)
        convs[f"conv2d (100,{c},{size},{size}) 3x3 -> {o}, stride {stride}"] = (
            lambda a, b, st=stride: F.conv2d(a, b, stride=st, padding=1),
            lambda a, b, st=stride: tnn.conv2d(a, b, stride=st, padding=1),
            [xc, wc],
        )
    norms = {}
    for c, size in [(16, 28), (64, 7)]:
        xb = np.random.default_rng(6).standard_normal((100, c, size, size)).astype(np.float32)
        ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
        norms[f"batch_norm, training (100,{c},{size},{size})"] = (
            lambda a, gm, bt: F.batch_norm(a, None, None, gm, bt, training=True),
            lambda a, gm, bt: tnn.batch_norm(a, None, None, gm, bt, training=True),
            [xb, ones, zeros],
        )
    return {
        **convs,
        **norms,
        "gelu (2048, 512)": (F.gelu, tnn.gelu, [h]),
        "q @ k^T (32,4,64,32)": (
            lambda a, b: a @ b.transpose(-2, -1),
            lambda a, b: a @ b.transpose(-2, -1),
            [q, k],
        ),
        "p @ v (32,4,64,64)@(..,64,32)": (lambda a, b: a @ b, lambda a, b: a @ b, [p, v]),
        "x @ W^T (32,64,128)@(128,512)": (
            lambda a, b: a @ b.transpose(-2, -1),
            lambda a, b: a @ b.transpose(-2, -1),
            [x, w],
        ),
        "softmax (32,4,64,64)": (
            lambda a: tg.softmax(a, axis=-1),
            lambda a: torch.softmax(a, dim=-1),
            [s],
        ),
        "layer_norm (2048, 128)": (
            lambda a, gm, bt: F.layer_norm(a, (128,), gm, bt),
            lambda a, gm, bt: tnn.layer_norm(a, (128,), gm, bt),
            [ln, gamma, beta],
        ),
    }


def _median_pair(f_tg, f_torch, repeats, clock):
    f_tg(), f_torch()  # warm
    a, b = [], []
    for _ in range(repeats):
        t = clock()
        f_tg()
        a.append(clock() - t)
        t = clock()
        f_torch()
        b.append(clock() - t)
    return float(np.median(a)), float(np.median(b))


def _clock(threads: int):
    """One thread: CPU time, which other jobs' preemptions do not inflate (on a loaded machine
    wall time penalises the longer kernels). More: wall time (idle threads spinning in their
    pools would count as CPU time)."""
    if threads == 1:
        return time.process_time, "CPU time"
    return time.perf_counter, "wall time"


def _set_threads(n: int) -> None:
    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    found = blas.threads_setter()
    if found is not None:
        found[0](n)


def _encoder_step(repeats: int, clock) -> str:
    """The Transformer encoder step's medians (ms) and ratios against PyTorch."""
    from tapegrad import nn, optim

    b, t, d, heads, layers = 32, 64, 128, 4, 4
    x = np.random.default_rng(0).standard_normal((b, t, d)).astype(np.float32)
    mask = np.triu(np.full((t, t), -np.inf, np.float32), 1)
    kw = dict(dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, heads, 4 * d, **kw), layers)
    opt = optim.SGD(enc.parameters(), lr=1e-3)

    def step(xa):
        y = enc(tg.tensor(xa), mask=tg.tensor(mask))
        loss = (y * y).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, **kw)
    tenc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    topt = torch.optim.SGD(tenc.parameters(), lr=1e-3)
    tx, tmask = torch.tensor(x), torch.tensor(mask)

    def torch_step():
        y = tenc(tx, mask=tmask)
        loss = (y * y).mean()
        topt.zero_grad()
        loss.backward()
        topt.step()

    compiled = tg.compile(step)
    runs = {"eager": lambda: step(x), "compiled": lambda: compiled(x), "PyTorch": torch_step}
    for f in runs.values():
        f(), f()
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for k, f in runs.items():
            t0 = clock()
            f()
            times[k].append(clock() - t0)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    return (
        f"eager {med['eager']:.1f} ms, compiled {med['compiled']:.1f} ms, PyTorch "
        f"{med['PyTorch']:.1f} ms: eager {med['eager'] / med['PyTorch']:.2f}x, "
        f"compiled {med['compiled'] / med['PyTorch']:.2f}x PyTorch"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--step", action="store_true", help="also time a Transformer encoder step")
    args = ap.parse_args(argv)
    print("| case | threads | part | tapegrad ms | PyTorch ms | tapegrad / PyTorch |")
    print("|---|---|---|---|---|---|")
    for threads in [int(t) for t in args.threads.split(",")]:
        _set_threads(threads)
        for name, (f_tg, f_torch, arrays) in _cases().items():
            if args.only not in name:
                continue
            tg_fwd, tg_bwd = _tg_case(f_tg, arrays)
            t_fwd, t_bwd = _torch_case(f_torch, arrays)
            clock, _ = _clock(threads)
            for part, a, b in (("forward", tg_fwd, t_fwd), ("VJP", tg_bwd, t_bwd)):
                ta, tb = _median_pair(a, b, args.repeats, clock)
                row = f"| {name} | {threads} | {part} | {ta * 1e3:.2f} | {tb * 1e3:.2f} |"
                print(f"{row} {ta / tb:.2f}x |", flush=True)
    if args.step:
        for threads in [int(t) for t in args.threads.split(",")]:
            _set_threads(threads)
            clock, kind = _clock(threads)
            step = _encoder_step(args.repeats, clock)
            print(f"\nTransformer encoder step, {threads} thread(s), {kind}: {step}")


if __name__ == "__main__":
    main()
