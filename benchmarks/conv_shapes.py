"""tapegrad's 2-d convolution primitives in both column layouts against PyTorch, per shape.

    python benchmarks/conv_shapes.py [--threads 2] [--batch 128] [--repeats 3]

For each (C, H, O, stride, padding) of a 3x3 convolution (seed-cnn's, then the small ResNet's
stem and stages): the forward (``conv``'s one forward, columns saved) and the backward a
training step runs (``conv_transpose`` for the input gradient, except for a first layer whose
input needs none, and ``conv_weight`` from the saved columns), each in the per-sample and the
whole-batch column layout (``primitives/conv_layout.py``; the rule ``whole_batch`` forced
either way), against ``torch.nn.functional.conv2d`` and its backward, in one process,
alternating, median of 7 timings per repeat, median over repeats. PyTorch's backward time is
its forward + backward minus its forward. ``rule`` names the layout the library picks.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

SHAPES = [  # (C, H, O, stride, padding, first layer?)
    (1, 28, 6, 1, 0, True),  # seed-cnn's only convolution (batch 100 in its preset)
    (1, 28, 16, 1, 1, True),  # the small ResNet's stem, then its three stages
    (16, 28, 16, 1, 1, False),
    (16, 28, 32, 2, 1, False),
    (32, 14, 32, 1, 1, False),
    (32, 14, 64, 2, 1, False),
    (64, 7, 64, 1, 1, False),
    (4, 28, 16, 1, 1, False),  # between: where the rule's threshold sits
    (8, 28, 16, 1, 1, False),
]


def _median_ms(f, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e3


def _ours(conv, layout, batch, x, w, g, geo, first):
    """The forward and backward closures with the layout forced to ``batch``."""

    def forced(fn):
        def call():
            real = layout.whole_batch
            layout.whole_batch = lambda *a: batch
            try:
                return fn()
            finally:
                layout.whole_batch = real

        return call

    _, cols = forced(lambda: conv._conv_fwd(x, w, **geo))()
    size = x.shape[2:]

    def bwd():
        if not first:
            conv._conv_transpose_fwd(g, w, size=size, **geo)
        conv._conv_weight_fwd(x, g, cols, ksize=w.shape[2:], **geo)

    return forced(lambda: conv._conv_fwd(x, w, **geo)), forced(bwd)


def _measure(torch, conv, layout, shape, n: int, repeats: int) -> str:
    c, h, o, s, p, first = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((o, c, 3, 3)) * 0.1).astype(np.float32)
    geo = dict(stride=(s, s), padding=((p, p), (p, p)), dilation=(1, 1), groups=1)
    y, _ = conv._conv_fwd(x, w, **geo)
    g = rng.standard_normal(y.shape).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=not first), torch.tensor(w, requires_grad=True)
    tgrad = torch.tensor(g)

    def torch_fwd():
        with torch.no_grad():
            torch.nn.functional.conv2d(tx, tw, stride=s, padding=p)

    def torch_both():
        tx.grad = tw.grad = None
        torch.nn.functional.conv2d(tx, tw, stride=s, padding=p).backward(tgrad)

    sf, sb = _ours(conv, layout, False, x, w, g, geo, first)
    bf, bb = _ours(conv, layout, True, x, w, g, geo, first)
    fns = {"sf": sf, "sb": sb, "bf": bf, "bb": bb, "tf": torch_fwd, "tb": torch_both}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up (compilation)
    for _ in range(repeats):
        for k, f in fns.items():  # alternating
            runs[k].append(_median_ms(f))
    m = {k: float(np.median(v)) for k, v in runs.items()}
    tback = max(m["tb"] - m["tf"], 1e-9)
    rule = "whole batch" if layout.whole_batch(x, c, 2) else "per sample"
    return (
        f"N={n} C={c} H={h} O={o} stride={s} pad={p}{' (first layer)' if first else ''}: "
        f"per sample fwd {m['sf']:.2f} + bwd {m['sb']:.2f} = {m['sf'] + m['sb']:.2f} ms; "
        f"whole batch {m['bf']:.2f} + {m['bb']:.2f} = {m['bf'] + m['bb']:.2f} ms; "
        f"PyTorch {m['tf']:.2f} + {tback:.2f} = {m['tf'] + tback:.2f} ms; rule: {rule}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", type=int, nargs="*", help="indices into SHAPES (default: all)")
    args = p.parse_args()
    import torch  # before tapegrad's numba threads start (see the bench harness)

    torch.set_num_threads(args.threads)
    import numba

    from tapegrad import blas
    from tapegrad.autodiff.primitives import conv, conv_layout

    setter = blas.threads_setter()
    if setter is not None:
        setter[0](args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    shapes = SHAPES if args.only is None else [SHAPES[i] for i in args.only]
    for shape in shapes:
        print(_measure(torch, conv, conv_layout, shape, args.batch, args.repeats), flush=True)


if __name__ == "__main__":
    main()
