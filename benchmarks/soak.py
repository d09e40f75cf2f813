"""Soak: thousands of training steps of a preset, with memory sampled, to show nothing leaks.

The preset's own training step (``Trainer.train_step``: forward, loss, backward, optimiser step)
runs ``--steps`` times on synthetic batches shaped like its dataset (MNIST images or IMDB token
ids, fixed seed; no dataset needed). Every ``--sample-every`` steps it records the process's
RSS (psutil) and tracemalloc's *current* traced memory (what Python and NumPy hold live). After
``--warmup`` steps (first-call caches, optimiser state, allocator pools) the curve must be flat:
the report gives both measures at the end of warm-up and at the end, and the least-squares slope
per 1,000 steps. A graph kept alive by a cycle or a cache growing per step shows up as a slope.

    python benchmarks/soak.py                                  # mlp, 5,000 steps (~30 s)
    python benchmarks/soak.py --preset seed-rnn --steps 30000 --json soak.json   # long form
    python benchmarks/soak.py --no-tracemalloc --steps 50000   # RSS only, at full speed

``--mode compiled`` (the default, as ``tapegrad train``) replays a compiled plan; ``--mode
eager`` records and frees a graph every step.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tapegrad.models import build_model, get_preset  # noqa: E402
from tapegrad.train import Trainer  # noqa: E402
from tapegrad.train.experiment import make_optimizer  # noqa: E402

MODES = ("compiled", "eager")


@dataclass
class SoakResult:
    preset: str
    mode: str
    steps: int
    warmup: int
    batch_size: int
    seconds: float
    samples: list[dict] = field(default_factory=list)  # step, rss, traced
    rss_start: int = 0  # after warm-up
    rss_end: int = 0
    traced_start: int | None = None
    traced_end: int | None = None
    rss_slope_per_1000: float = 0.0  # bytes per 1,000 steps, least squares after warm-up
    traced_slope_per_1000: float | None = None
    final_loss: float = 0.0


def synthetic_batches(preset, batch_size: int, n_batches: int = 16, seed: int = 0):
    """A fixed cycle of batches shaped like the preset's dataset, and the model's build kwargs."""
    rng = np.random.default_rng(seed)
    if preset.dataset == "imdb":
        vocab, maxlen = preset.extra.get("vocab_size", 5000), 130
        kwargs = {"vocab_size": vocab, "maxlen": maxlen}
        if preset.needs_glove:
            kwargs["embedding"] = rng.normal(0, 0.3, (vocab, 50)).astype(np.float32)
        xs = [
            rng.integers(0, vocab, (batch_size, maxlen)).astype(np.int32) for _ in range(n_batches)
        ]
        ys = [rng.integers(0, 2, batch_size).astype(np.int64) for _ in range(n_batches)]
    else:
        kwargs = {}
        xs = [rng.random((batch_size, 28, 28), dtype=np.float32) for _ in range(n_batches)]
        ys = [rng.integers(0, 10, batch_size).astype(np.int64) for _ in range(n_batches)]
    return list(zip(xs, ys)), kwargs


def make_step(preset_name: str, mode: str, batch_size: int, seed: int = 0):
    """(step function taking a batch index -> loss, batches) for ``mode``."""
    if mode not in MODES:
        raise ValueError(f"soak: mode {mode!r} is not available yet; choose one of {MODES}")
    preset = get_preset(preset_name)
    batches, kwargs = synthetic_batches(preset, batch_size, seed=seed)
    model = build_model(preset, seed=seed, **kwargs)
    opt = make_optimizer(preset.optimizer, model.parameters(), preset.lr)
    trainer = Trainer(model, opt, preset.task, seed=seed, progress=False, log=None, mode=mode)

    def step(i: int) -> float:
        x, y = batches[i % len(batches)]
        return trainer.train_step(x, y)[0]

    return step


def _slope(xs, ys) -> float:
    if len(xs) < 2:
        return 0.0
    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0]) * 1000


def soak(
    preset: str = "mlp",
    steps: int = 5000,
    batch_size: int = 32,
    mode: str = "compiled",
    warmup: int = 200,
    sample_every: int = 50,
    trace: bool = True,
    seed: int = 0,
    collect: bool = True,
    log=None,
) -> SoakResult:
    """Run the soak and return its samples and summary (see the module docstring)."""
    step = make_step(preset, mode, batch_size, seed)
    proc = psutil.Process()
    res = SoakResult(preset, mode, steps, warmup, batch_size, 0.0)
    at = sorted({i for i in range(sample_every, steps + 1, sample_every)} | {warmup, steps})
    # preallocated, so that recording the samples allocates nothing while tracing
    table = np.zeros((len(at), 3), dtype=np.int64)
    sample_at = np.zeros(steps + 1, dtype=bool)
    sample_at[at] = True
    started_here = trace and not tracemalloc.is_tracing()
    if started_here:
        tracemalloc.start()
    t0 = time.perf_counter()
    loss, row = float("nan"), 0
    try:
        for i in range(1, steps + 1):
            loss = step(i)
            if sample_at[i]:
                if collect:
                    gc.collect()  # also empties CPython's free lists, which fill slowly
                traced = tracemalloc.get_traced_memory()[0] if trace else -1
                table[row] = i, proc.memory_info().rss, traced
                row += 1
                if log and i % (sample_every * 20) == 0:
                    log(
                        f"step {i:>7}: rss {table[row - 1, 1] / 2**20:8.1f} MiB"
                        + (f", traced {traced / 2**20:8.3f} MiB" if trace else "")
                        + f", loss {loss:.4f}"
                    )
    finally:
        if started_here:
            tracemalloc.stop()
    res.samples = [
        {"step": int(i), "rss": int(r), "traced": int(t) if trace else None} for i, r, t in table
    ]
    res.seconds = time.perf_counter() - t0
    res.final_loss = float(loss)
    after = [s for s in res.samples if s["step"] >= warmup]
    res.rss_start, res.rss_end = after[0]["rss"], after[-1]["rss"]
    res.rss_slope_per_1000 = _slope([s["step"] for s in after], [s["rss"] for s in after])
    if trace:
        res.traced_start, res.traced_end = after[0]["traced"], after[-1]["traced"]
        res.traced_slope_per_1000 = _slope([s["step"] for s in after], [s["traced"] for s in after])
    return res


def summary(r: SoakResult) -> str:
    mib = 2**20
    lines = [
        f"soak {r.preset} ({r.mode}): {r.steps} steps of batch {r.batch_size} in {r.seconds:.1f} s "
        f"({1e3 * r.seconds / r.steps:.2f} ms/step), final loss {r.final_loss:.4f}",
        f"  RSS        after {r.warmup}-step warm-up {r.rss_start / mib:8.1f} MiB, end "
        f"{r.rss_end / mib:8.1f} MiB, slope {r.rss_slope_per_1000 / 1024:+8.1f} KiB/1000 steps",
    ]
    if r.traced_start is not None:
        lines.append(
            f"  tracemalloc after warm-up {r.traced_start / mib:8.3f} MiB, end "
            f"{r.traced_end / mib:8.3f} MiB, slope {r.traced_slope_per_1000 / 1024:+8.2f} "
            "KiB/1000 steps"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="mlp")
    p.add_argument("--mode", default="compiled", choices=MODES)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--sample-every", type=int, default=50)
    p.add_argument("--no-tracemalloc", action="store_true", help="RSS only (full speed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-collect", action="store_true", help="sample without gc.collect() before each sample"
    )
    p.add_argument("--json", help="write the samples and the summary here")
    args = p.parse_args(argv)
    r = soak(
        args.preset,
        args.steps,
        args.batch_size,
        args.mode,
        args.warmup,
        args.sample_every,
        not args.no_tracemalloc,
        args.seed,
        not args.no_collect,
        log=print,
    )
    print(summary(r))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(r), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
