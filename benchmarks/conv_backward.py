"""Conv + ReLU + max-pool, forward and backward: the conv backward through BLAS against the
direct kernel, in a compiled plan.

At the two real workloads' shapes (seed-cnn: Conv2d 1->6 3x3 no bias on (100, 1, 28, 28), ReLU,
MaxPool2d(2), no input gradient; text-cnn: Conv1d 50->8 width 3 with bias on the permuted
embedding output (64, 50, 130), ReLU, MaxPool1d(8), input gradient needed) it times one forward
and backward of a compiled conv -> relu -> pool -> sum -> backward step:

* ``blas``: with the conv backward through BLAS (im2col / shifted matmuls; the direct kernel
  switched off);
* ``plan``: the library as it is (the conv backward through ``kernels/cpu/conv.py's conv_backward``
  wherever the rule picks it: the text CNN's channels-last input, a sparse gradient).

(A third variant timed fused conv + ReLU + max-pool kernels called directly: 1.8x slower than
``plan`` on seed-cnn and 3.8x on text-cnn, one thread, so those kernels were removed.)

The variants alternate within each round; each round's figure is the median of ``--calls``
calls, and the table gives the median over ``--rounds`` rounds. Thread counts must be fixed
before NumPy loads, so ``--threads`` sets OPENBLAS_NUM_THREADS / NUMBA_NUM_THREADS (and the
like) first; run the script once per thread count.

    python benchmarks/conv_backward.py [--threads N] [--rounds 9] [--calls 30]
"""

from __future__ import annotations

import argparse
import os
import sys


def _set_threads(argv) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--threads", type=int, default=1)
    n = ap.parse_known_args(argv)[0].threads
    for var in (
        "OPENBLAS_NUM_THREADS",
        "NUMBA_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    ):
        os.environ[var] = str(n)
    return n


THREADS = _set_threads(sys.argv[1:]) if __name__ == "__main__" else None

import statistics  # noqa: E402

import numpy as np  # noqa: E402
from overhead import time_calls  # noqa: E402  (this folder: median microseconds per call)

import tapegrad as tg  # noqa: E402
from tapegrad.autodiff.primitives import conv as nn_prims  # noqa: E402

WORKLOADS = {
    # name: (x shape as the conv sees it, weight shape, bias?, pool, input grad?)
    "seed-cnn": ((100, 1, 28, 28), (6, 1, 3, 3), False, (2, 2), False),
    "text-cnn": ((64, 50, 130), (8, 50, 3), True, (8,), True),
}


def _data(name: str, rng):
    xs, ws, has_bias, pool, need_x = WORKLOADS[name]
    if len(xs) == 3:  # the embedding output (N, L, C), seen by the conv as a permuted view
        base = rng.normal(size=(xs[0], xs[2], xs[1])).astype(np.float32)
        x = base.transpose(0, 2, 1)
    else:
        base = x = rng.uniform(0, 1, size=xs).astype(np.float32)
    fan_in = int(np.prod(ws[1:]))
    w = (rng.uniform(-1, 1, size=ws) / np.sqrt(fan_in)).astype(np.float32)
    b = (rng.uniform(-1, 1, size=ws[0]) / np.sqrt(fan_in)).astype(np.float32) if has_bias else None
    return base, x, w, b, pool, need_x


def make_plan(name: str, blas: bool):
    """A compiled conv -> relu -> pool -> sum -> backward step at the workload's shape."""
    rng = np.random.default_rng(0)
    base, x, w, b, pool, need_x = _data(name, rng)
    wt = tg.tensor(w, requires_grad=True)
    bt = tg.tensor(b, requires_grad=True) if b is not None else None
    conv = tg.nn.functional.conv1d if x.ndim == 3 else tg.nn.functional.conv2d
    pool_fn = tg.nn.functional.max_pool1d if x.ndim == 3 else tg.nn.functional.max_pool2d
    params = [wt] + ([bt] if bt is not None else [])
    if need_x:  # the conv input is a permuted view of a tensor whose gradient is needed
        xt = tg.tensor(base, requires_grad=True)
        params.append(xt)

        def step():
            y = pool_fn(tg.relu(conv(tg.permute(xt, (0, 2, 1)), wt, bt)), pool)
            y.sum().backward()
            return y

        args = ()
    else:

        def step(img):
            y = pool_fn(tg.relu(conv(img, wt, bt)), pool)
            y.sum().backward()
            return y

        args = (tg.tensor(x),)
    compiled = tg.compile(step)
    real = nn_prims.direct_backward_applies

    def run():
        for p in params:
            p.grad = None
        if blas:  # the conv backward decides on every call: switch the direct kernel off
            nn_prims.direct_backward_applies = lambda *a: False
        try:
            compiled(*args)
        finally:
            nn_prims.direct_backward_applies = real

    run()  # trace
    return run


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args(argv)
    results = {}
    for name in WORKLOADS:
        variants = {
            "blas": make_plan(name, blas=True),
            "plan": make_plan(name, blas=False),
        }
        for fn in variants.values():  # warm up (numba compile / cache load, BLAS pools)
            for _ in range(5):
                fn()
        per = {k: [] for k in variants}
        for _ in range(args.rounds):
            for k, fn in variants.items():
                per[k].append(time_calls(fn, args.calls) / 1e3)  # ms
        results[name] = {k: statistics.median(v) for k, v in per.items()}
    print(f"threads={args.threads} rounds={args.rounds} calls/round={args.calls} (ms, fwd+bwd)")
    print(f"{'workload':10} {'blas':>8} {'plan':>8} {'blas/plan':>10}")
    for name, r in results.items():
        print(f"{name:10} {r['blas']:8.3f} {r['plan']:8.3f} {r['blas'] / r['plan']:10.2f}")
    return results


if __name__ == "__main__":
    main()
