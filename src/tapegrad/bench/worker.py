"""One framework's benchmark run, in its own process: ``python -m tapegrad.bench.worker
FRAMEWORK SPEC.json`` prints one JSON line with what it measured.

Every framework goes through the same loop (:func:`run`): the batches are the ones
``tapegrad.data.Batches`` yields for each epoch (the same rows for everyone: gathered by
NumPy in a peer's process, whose numba threads must never start, by tapegrad's compiled
gather in tapegrad's, as in its users' training), each step
is ``runner.step(x, y) -> loss`` (forward, backward, optimiser update, loss read back to Python
so asynchronous frameworks finish the step), timed with ``perf_counter``. After training the
runner evaluates the test set, and only then measures allocation on a few steps (the ones the
Trainer's :class:`~tapegrad.train.measure.AllocationSampler` would sample in the middle of an
epoch), so measuring never touches the timed epochs or the reported accuracy.

``FRAMEWORK`` is ``tapegrad``, ``torch``, ``jax`` or ``gemm`` (this machine's float32
matrix-multiply rate, for the floor). Threads are set by the parent (CPU affinity and the
BLAS/OpenMP environment) and again here through each framework's own setting (numba's for
tapegrad only: a peer's process must not start numba's threading layer, see
:func:`pin_threads`). Each run records its CPU time beside its wall time and which of its
threads did work, the evidence that a thread setting took effect.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

import numpy as np

from ..data import Batches
from ..train.measure import AllocationSampler, peak_rss_bytes


def _current_rss() -> int | None:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # pragma: no cover - psutil is a dependency
        return None


def thread_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user + system) each thread of this process has used so far (Linux
    ``/proc``; empty elsewhere): which threads did the work shows whether a thread setting
    took effect."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # pragma: no cover - not Linux
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def busy_threads(before: dict[int, float], after: dict[int, float], wall: float) -> list[float]:
    """Per-thread CPU seconds spent between two :func:`thread_cpu_seconds` snapshots, largest
    first, keeping the threads busy for at least 5% of ``wall``."""
    spent = sorted((t - before.get(tid, 0.0) for tid, t in after.items()), reverse=True)
    return [round(s, 3) for s in spent if s >= 0.05 * wall]


def load_data(spec: dict) -> dict[str, np.ndarray]:
    """The exported train/test arrays, read fully into memory (every framework alike)."""
    return {
        k: np.load(spec["data"][k], allow_pickle=False)
        for k in ("train_x", "train_y", "test_x", "test_y")
    }


def load_weights(spec: dict) -> dict[str, np.ndarray]:
    """The initial weights tapegrad exported (name -> float32 array, tapegrad/torch names)."""
    from ..serialization import load_arrays

    arrays, _ = load_arrays(spec["weights"])
    if spec.get("perturb"):
        # Testing only: a peer that starts from different weights must trip the guard.
        first = next(iter(arrays))
        arrays[first] = (arrays[first] * np.float32(1.01)).astype(np.float32)
    return arrays


def make_runner(framework: str, spec: dict, weights: dict):
    if framework == "tapegrad":
        from .tapegrad_runner import TapegradRunner

        return TapegradRunner(spec, weights)
    if framework == "torch":
        from .torch_runner import TorchRunner

        return TorchRunner(spec, weights)
    if framework == "jax":
        from .jax_runner import JaxRunner

        return JaxRunner(spec, weights)
    raise ValueError(f"unknown framework {framework!r}; choose tapegrad, torch or jax")


def run(framework: str, spec: dict) -> dict:
    """Train as ``spec`` says with ``framework``; return the measurements as a JSON-able dict."""
    arrays = load_data(spec)
    runner = make_runner(framework, spec, load_weights(spec))
    x, y = arrays["train_x"], arrays["train_y"]
    batches = Batches(
        x,
        y,
        spec["batch_size"],
        shuffle=True,
        seed=spec["seed"],
        compiled_gather=framework == "tapegrad",
    )
    n_batches = len(batches)
    steps_limit = spec.get("steps")
    epochs = -(-steps_limit // n_batches) if steps_limit else spec["epochs"]
    # a workload with dropout: its first training loss depends on each framework's masks, so
    # the frameworks are compared on the first batch's loss in evaluation mode (no dropout)
    reference_loss = None
    if spec.get("stochastic"):
        reference_loss = runner.evaluate(*next(batches.epoch(1)))[0]
    rss_before = _current_rss()

    trained = _train(framework, runner, batches, epochs, steps_limit)

    t0 = time.perf_counter()
    test_loss, test_acc = runner.evaluate(arrays["test_x"], arrays["test_y"])
    eval_seconds = time.perf_counter() - t0
    peak_after_training = peak_rss_bytes()

    # Allocation, after everything reported above: the Trainer's sampled steps of epoch 1.
    alloc_step, method = _allocation(runner, batches, spec.get("alloc_samples", 4))

    return {
        "framework": framework,
        "mode": spec.get("mode", "eager") if framework == "tapegrad" else runner.mode,
        "versions": runner.versions(),
        "threads": spec["threads"],
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "batches_per_epoch": n_batches,
        **trained,
        "reference_loss": reference_loss,
        "final_loss": trained["epoch_losses"][-1],
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "eval_seconds": eval_seconds,
        "rss_before_training": rss_before,
        "peak_rss": peak_after_training,
        "alloc_per_step": alloc_step,
        "alloc_per_epoch": None if alloc_step is None else alloc_step * n_batches,
        "alloc_method": method,
        "notes": runner.notes,
    }


def _train(framework: str, runner, batches, epochs: int, steps_limit) -> dict:
    """The timed training: every step's, epoch's and the whole run's time, CPU time, losses."""
    epoch_seconds, epoch_cpu_seconds, epoch_losses, step_seconds = [], [], [], []
    first_loss = None
    done = 0
    threads_before, cpu_before = thread_cpu_seconds(), time.process_time()
    t_training = time.perf_counter()
    for epoch in range(1, epochs + 1):
        total, seen = 0.0, 0
        t_epoch, cpu_epoch = time.perf_counter(), time.process_time()
        for xb, yb in batches.epoch(epoch):
            t0 = time.perf_counter()
            loss = runner.step(xb, yb)
            step_seconds.append(time.perf_counter() - t0)
            if first_loss is None:
                first_loss = loss
            if not math.isfinite(loss):
                raise RuntimeError(f"{framework}: loss became {loss} at epoch {epoch}")
            total += loss * len(yb)
            seen += len(yb)
            done += 1
            if steps_limit and done >= steps_limit:
                break
        epoch_seconds.append(time.perf_counter() - t_epoch)
        epoch_cpu_seconds.append(time.process_time() - cpu_epoch)
        epoch_losses.append(total / max(seen, 1))
    training_seconds = time.perf_counter() - t_training
    cpu_seconds = time.process_time() - cpu_before
    return {
        "steps": done,
        "epoch_seconds": epoch_seconds,
        "epoch_cpu_seconds": epoch_cpu_seconds,
        "step_seconds": step_seconds,
        "epoch_losses": epoch_losses,
        "training_seconds": training_seconds,
        "cpu_seconds": cpu_seconds,
        "busy_thread_seconds": busy_threads(threads_before, thread_cpu_seconds(), training_seconds),
        "first_loss": first_loss,
    }


def _allocation(runner, batches, samples: int):
    """(median bytes a sampled step of epoch 1 allocates, how it was measured): the steps the
    Trainer samples."""
    sampler = AllocationSampler(samples)
    sampler.start_epoch(len(batches), 0)
    per_step, method = [], None
    for i, (xb, yb) in enumerate(batches.epoch(1)):
        if sampler.wants(i):
            nbytes, method = runner.allocated(xb, yb)
            if nbytes is not None:
                per_step.append(int(nbytes))
    return (int(np.median(per_step)) if per_step else None), method


def gemm(spec: dict) -> dict:
    from .flops import gemm_samples

    rates = gemm_samples(spec.get("gemm_n", 2048))
    return {"framework": "gemm", "flops_per_second": statistics.median(rates), "samples": rates}


def pin_threads(threads: int) -> None:
    """Limit numba, tapegrad's kernel compiler, to ``threads`` threads. Only tapegrad's worker
    calls it: starting numba's threading layer loads its OpenMP runtime into the process, and
    a peer that then shares that runtime is not the peer its users run (PyTorch's two-thread
    steps took about twice as long with numba's layer started first). The peers' runners set
    their own framework's threads."""
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except Exception:  # pragma: no cover - numba is a dependency
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m tapegrad.bench.worker FRAMEWORK SPEC.json", file=sys.stderr)
        return 2
    framework, spec_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    if framework == "tapegrad":
        pin_threads(int(spec["threads"]))
    result = gemm(spec) if framework == "gemm" else run(framework, spec)
    result["pid"] = os.getpid()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
