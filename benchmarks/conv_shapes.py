"""tapegrad's 2-d convolution primitives against PyTorch on the small ResNet's shapes.

    python benchmarks/conv_shapes.py [--threads 2] [--batch 128] [--repeats 3]

For each (N, C, H, O, stride) of a 3x3, padding-1 convolution: the forward (``conv``'s one
forward, columns saved) and the first-order backward (``conv_backward``: input and weight
gradients) against ``torch.nn.functional.conv2d`` and its backward, in one process,
alternating, median of 7 timings per repeat, median over repeats. PyTorch's backward time is
its forward + backward minus its forward.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

SHAPES = [  # (C, H, O, stride): the stem, then the three stages of the small ResNet
    (1, 28, 16, 1),
    (16, 28, 16, 1),
    (16, 28, 32, 2),
    (32, 14, 32, 1),
    (32, 14, 64, 2),
    (64, 7, 64, 1),
]


def _median_ms(f, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e3


def _measure(torch, conv, shape, n: int, repeats: int) -> str:
    c, h, o, s = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((o, c, 3, 3)) * 0.1).astype(np.float32)
    geo = dict(stride=(s, s), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    y, cols = conv._conv_fwd(x, w, **geo)
    g = rng.standard_normal(y.shape).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tgrad = torch.tensor(g)

    def fwd():
        conv._conv_fwd(x, w, **geo)

    def bwd():
        conv._conv_backward_fwd(g, x, w, cols, needs=(True, True, False), **geo)

    def torch_fwd():
        with torch.no_grad():
            torch.nn.functional.conv2d(tx, tw, stride=s, padding=1)

    def torch_both():
        tx.grad = tw.grad = None
        torch.nn.functional.conv2d(tx, tw, stride=s, padding=1).backward(tgrad)

    fns = {"f": fwd, "tf": torch_fwd, "b": bwd, "tb": torch_both}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up (compilation)
    for _ in range(repeats):
        for k, f in fns.items():  # alternating
            runs[k].append(_median_ms(f))
    f, tf, b, tb = (float(np.median(runs[k])) for k in ("f", "tf", "b", "tb"))
    tback = max(tb - tf, 1e-9)
    return (
        f"N={n} C={c} H={h} O={o} stride={s}: forward {f:.2f} ms, PyTorch {tf:.2f} "
        f"({f / tf:.2f}x); backward {b:.2f} ms, PyTorch {tback:.2f} ({b / tback:.2f}x)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch  # before tapegrad's numba threads start (see the bench harness)

    torch.set_num_threads(args.threads)
    import numba

    from tapegrad import blas
    from tapegrad.autodiff.primitives import conv

    setter = blas.threads_setter()
    if setter is not None:
        setter[0](args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    for shape in SHAPES:
        print(_measure(torch, conv, shape, args.batch, args.repeats))


if __name__ == "__main__":
    main()
