"""BENCHMARKS.md's GPU table: steady epoch time of tapegrad compiled on CUDA against PyTorch CUDA
eager and ``torch.compile``, on every seed preset and on an MLP of width 4096 at batch 1024
(large enough to be compute-bound).

Each framework trains the same architecture from the same initial weights on the same batch
order (the preset's, from tapegrad's seeded shuffler); frameworks alternate, one epoch each, for
``--epochs`` rounds, and the table shows the median of the epochs after the first (the first
holds compilation: tapegrad's trace, numba-cuda's kernels, torch.compile's graphs). Each epoch
ends with a device synchronisation, so times are the GPU's, not the launch queue's.

    python benchmarks/gpu_bench.py                     # every workload, markdown to stdout
    python benchmarks/gpu_bench.py --workloads mlp --epochs 3 --no-compile
    python benchmarks/gpu_bench.py --markdown BENCHMARKS-gpu.md

Needs a CUDA GPU, CuPy and numba-cuda (tapegrad), and PyTorch with CUDA; the data as for
``tapegrad train`` (``$TAPEGRAD_DATA``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import tapegrad as tg  # noqa: E402
from tapegrad import nn  # noqa: E402
from tapegrad.data import Batches  # noqa: E402
from tapegrad.train import Trainer  # noqa: E402
from tapegrad.train.experiment import make_optimizer, setup  # noqa: E402

PRESETS = ["seed-cnn", "seed-rnn", "text-cnn", "text-cnn-learned", "mlp"]
WIDE = "mlp-4096"  # 784 -> 4096 -> 4096 -> 10, ReLU, Adam 1e-3, batch 1024, MNIST


def _wide_model(seed: int) -> nn.Module:
    rng = np.random.default_rng(seed)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 4096, rng=rng),
        nn.ReLU(),
        nn.Linear(4096, 4096, rng=rng),
        nn.ReLU(),
        nn.Linear(4096, 10, rng=rng),
    )


def _torch_wide():
    from torch import nn as tnn

    return tnn.Sequential(
        tnn.Flatten(),
        tnn.Linear(784, 4096),
        tnn.ReLU(),
        tnn.Linear(4096, 4096),
        tnn.ReLU(),
        tnn.Linear(4096, 10),
    )


def workload(name: str):
    """(tapegrad model, optimizer name, lr, task, batch size, train (x, y), torch builder)."""
    from tapegrad.bench.torch_runner import build

    preset = "mlp" if name == WIDE else name
    exp = setup(preset, log=None)
    x, y = exp.data.train.x, exp.data.train.y
    weights = exp.model.state_dict()
    if name == WIDE:
        model = _wide_model(0)
        return model, "adam", 1e-3, "multiclass", 1024, (x, y), _torch_wide
    bs = exp.preset.batch_size
    return (
        exp.model,
        exp.optimizer_name,
        exp.lr,
        exp.task,
        bs,
        (x, y),
        lambda: build(preset, weights),
    )


class TapegradRun:
    label = "tapegrad compiled"

    def __init__(self, model, opt_name, lr, task, batch, data):
        opt = make_optimizer(opt_name, model.parameters(), lr, 0.0, 0.0)
        self.trainer = Trainer(model, opt, task, progress=False, log=None, device="cuda")
        self.batches = Batches(*data, batch, shuffle=True, seed=0)

    def epoch(self, k: int) -> float:
        import cupy

        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        loss = 0.0
        for xb, yb in self.batches.epoch(k):
            loss, _ = self.trainer.train_step(xb, yb)
        cupy.cuda.Device().synchronize()
        self.last_loss = loss
        return time.perf_counter() - t0


class TorchRun:
    def __init__(self, build, weights, opt_name, lr, task, batch, data, compiled: bool):
        import torch
        import torch.nn.functional as F

        from tapegrad.bench.torch_runner import load_tapegrad_weights

        self.torch = torch
        model = build()
        load_tapegrad_weights(model, weights)
        self.model = model.cuda().train()
        make = torch.optim.Adam if opt_name == "adam" else torch.optim.SGD
        self.opt = make(self.model.parameters(), lr=lr)
        binary = task == "binary"

        def step(x, y):
            self.opt.zero_grad(set_to_none=True)
            logits = self.model(x)
            if binary:
                loss = F.binary_cross_entropy_with_logits(logits.reshape(-1), y.to(logits.dtype))
            else:
                loss = F.cross_entropy(logits, y)
            loss.backward()
            self.opt.step()
            return loss

        self.step = torch.compile(step) if compiled else step
        self.label = "PyTorch torch.compile" if compiled else "PyTorch CUDA eager"
        self.batches = Batches(*data, batch, shuffle=True, seed=0)

    def epoch(self, k: int) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = None
        for xb, yb in self.batches.epoch(k):
            x = torch.from_numpy(xb).cuda(non_blocking=True)
            y = torch.from_numpy(yb).cuda(non_blocking=True)
            loss = self.step(x, y)
            loss.item()  # tapegrad's trainer reads the loss every step too
        torch.cuda.synchronize()
        self.last_loss = float(loss)
        return time.perf_counter() - t0


def bench(name: str, epochs: int, compiled_peer: bool) -> dict:
    model, opt_name, lr, task, batch, data, torch_build = workload(name)
    weights = model.state_dict()
    runs = [TapegradRun(model, opt_name, lr, task, batch, data)]
    runs.append(TorchRun(torch_build, weights, opt_name, lr, task, batch, data, False))
    if compiled_peer:
        runs.append(TorchRun(torch_build, weights, opt_name, lr, task, batch, data, True))
    times: dict[str, list[float]] = {r.label: [] for r in runs}
    for k in range(1, epochs + 1):
        for r in runs:
            times[r.label].append(r.epoch(k))
    steady = {label: statistics.median(t[1:]) if len(t) > 1 else t[0] for label, t in times.items()}
    losses = {r.label: r.last_loss for r in runs}
    return {"name": name, "batch": batch, "first": {k: t[0] for k, t in times.items()},
            "steady": steady, "losses": losses}  # fmt: skip


LABELS = ["tapegrad compiled", "PyTorch CUDA eager", "PyTorch torch.compile"]


def markdown(results: list[dict], device: str, epochs: int) -> str:
    """The table; a framework left out of a workload (or a workload that failed) shows '-'."""
    head = "| workload | batch | " + " | ".join(LABELS) + " | tapegrad / eager |"
    head += " tapegrad / torch.compile |"
    lines = [
        f"GPU: {device}; steady epoch (median of epochs 2-{epochs}), seconds; first epochs "
        f"(with compilation) in parentheses.",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | - | failed: {r['error']} |" + " - |" * 4)
            continue
        s, f = r["steady"], r["first"]
        cells = [f"{s[k]:.3f} ({f[k]:.1f})" if k in s else "-" for k in LABELS]
        ratios = [f"{s[LABELS[0]] / s[k]:.2f}x" if k in s else "-" for k in LABELS[1:]]
        lines.append(f"| {r['name']} | {r['batch']} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(PRESETS + [WIDE]))
    ap.add_argument("--epochs", type=int, default=3, help="epochs per framework (default 3)")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    ap.add_argument(
        "--compile-workloads",
        help="only these workloads (comma-separated) also run torch.compile (default: all)",
    )
    ap.add_argument("--markdown", help="also write the table to this file (after each workload)")
    args = ap.parse_args(argv)
    if not tg.cuda.is_available():
        sys.exit(f"gpu_bench: {tg.cuda.unavailable_reason()}")
    import cupy
    import torch

    device = f"{torch.cuda.get_device_name(0)}, CuPy {cupy.__version__}, torch {torch.__version__}"
    compiled = None if args.compile_workloads is None else args.compile_workloads.split(",")
    results = []
    for name in args.workloads.split(","):
        peer = not args.no_compile and (compiled is None or name in compiled)
        try:
            r = bench(name, args.epochs, peer)
            print(name, {k: round(v, 4) for k, v in r["steady"].items()}, r["losses"], flush=True)
        except Exception as e:  # one workload's failure still leaves the others' rows
            traceback.print_exc()
            r = {"name": name, "error": f"{type(e).__name__}: {str(e)[:120]}"}
        results.append(r)
        table = markdown(results, device, args.epochs)
        if args.markdown:
            Path(args.markdown).write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
