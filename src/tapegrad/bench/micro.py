"""Gradient micro-benchmarks after seed 004's Table I: how long one gradient evaluation takes.

Five small functions, each differentiated by every framework on the same float32 inputs:

========================  ============================================================  =======
benchmark                 function (gradient taken with respect to the first names)       sizes
========================  ============================================================  =======
``sincos``                ``sin(cos(x))``, wrt ``x``                                      scalar
``loop``                  ``r = 1; repeat 100 times: r = r * sin(x)``, wrt ``x``         scalar
``logsumexp``             ``log(sum(exp(x)))``, wrt ``x``                                 100
``logistic_regression``   ``mean(log(1 + exp(-y * (X @ w + b))))``, wrt ``w, b``         100x10
``mlp``                   ``mean softmax-CE(W2 @ relu(W1 @ x + b1) + b2, labels)``,      100x784
                          wrt ``W1, b1, W2, b2``                                          ->128->10
========================  ============================================================  =======

``BENCHMARKS[name].definition`` holds the exact wording, sizes and inputs; every result carries
it. The functions are tiny on purpose: they measure the cost of the differentiation machinery
(recording, dispatch, the backward sweep), which is what the table compared. ``loop`` keeps the
shape of the table's loop benchmark (a running product with one ``sin`` and one multiply per
iteration, so a tape records 200 scalar operations); ``logsumexp`` uses 100 elements so the
body is a vector operation that is still dominated by per-operation overhead; ``mlp`` is the
``mlp`` preset's network (784-128-10, ReLU) on one batch of the preset's size, 100.

Each framework computes the gradients its idiomatic way:

- ``tapegrad``: ``tg.grad(f, argnums=...)`` over tapegrad operations, eager.
- ``torch``: eager PyTorch, ``torch.autograd.grad(f(...), params)``.
- ``jax``: ``jax.jit(jax.grad(f, argnums=...))``, each call ending in ``block_until_ready``.
- ``autograd`` (HIPS): ``autograd.grad(f, argnum=...)`` over ``autograd.numpy``.

All four run in float32 (HIPS autograd keeps float32 arrays as float32, so no framework needs
float64). A compiled tapegrad is one more entry in :data:`FRAMEWORKS` that reuses the tapegrad
functions (see :func:`_tapegrad_build`'s ``transform``).

Timing (:func:`run`): every framework's gradients are first checked against tapegrad's on the
same inputs (:func:`check_gradients`; a mismatch raises :class:`GradientMismatchError`, because
a fast wrong gradient must never be reported). Then per benchmark: a warm-up (which also
triggers JAX's compilation), a calibration that picks a call count per framework so one sample
lasts about ``0.2 s`` (at least 10 calls), then ``repeats`` samples in which the frameworks
alternate, their order rotating from sample to sample. A sample's value is its mean time per
call; the result is the median over samples, with the min and max as the spread. The whole run
is pinned to ``threads`` CPU threads (default 1): CPU affinity for the process, plus each
library's own setting (``torch.set_num_threads``, NumPy's OpenBLAS, ``XLA_FLAGS``).

``python -m tapegrad.bench.micro [--frameworks tapegrad,torch,jax,autograd] [--repeats 7]
[--quick] [--threads 1] [--json PATH]`` prints the Markdown table (about a minute for all
four frameworks; ``--quick`` is a smoke run of a few seconds whose numbers mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..blas import threads_setter
from .micro_cases import (  # noqa: F401 (the micro-benchmarks' public names, as before the split)
    BENCHMARKS,
    FRAMEWORKS,
    LOGREG_FEATURES,
    LOGREG_SAMPLES,
    LOGSUMEXP_SIZE,
    LOOP_ITERATIONS,
    MLP_BATCH,
    MLP_HIDDEN,
    MLP_IN,
    MLP_OUT,
    PEERS,
    REFERENCE,
    Benchmark,
    Framework,
    Step,
    _tapegrad_build,
)

# -- correctness ---------------------------------------------------------------------------------

RTOL = 1e-4  # float32 arithmetic in different orders: agreement to about 1e-4 relative
ATOL_SCALE = 1e-5  # absolute slack, relative to the largest gradient entry (for entries near 0)


class GradientMismatchError(RuntimeError):
    """A framework's gradient disagrees with tapegrad's on a micro-benchmark."""


def compare_gradients(bench: Benchmark, framework: str, got: Sequence, reference: Sequence) -> None:
    """Raise :class:`GradientMismatchError` unless ``got`` matches ``reference`` entry by entry
    (within float32 tolerance), naming the benchmark, the argument, the worst entry and both
    values."""
    if len(got) != len(bench.wrt):
        raise GradientMismatchError(
            f"micro-benchmark {bench.name!r}: {framework} returned {len(got)} gradients, "
            f"expected {len(bench.wrt)} (wrt {', '.join(bench.wrt)})"
        )
    for name, g, r in zip(bench.wrt, got, reference):
        g = np.asarray(g, dtype=np.float64)
        r = np.asarray(r, dtype=np.float64)
        if g.shape != r.shape:
            raise GradientMismatchError(
                f"micro-benchmark {bench.name!r}: {framework}'s gradient wrt {name} has shape "
                f"{g.shape}, {REFERENCE}'s has shape {r.shape}"
            )
        atol = ATOL_SCALE * max(float(np.max(np.abs(r), initial=0.0)), 1e-30)
        excess = np.abs(g - r) - (atol + RTOL * np.abs(r))
        if not np.all(np.isfinite(g)) or np.any(excess > 0):
            bad = np.where(np.isfinite(g), excess, np.inf)
            idx = np.unravel_index(int(np.argmax(bad)), g.shape) if g.ndim else ()
            raise GradientMismatchError(
                f"micro-benchmark {bench.name!r}: {framework}'s gradient wrt {name} differs from "
                f"{REFERENCE}'s at index {tuple(int(i) for i in idx)}: {framework} "
                f"{g[idx]!r}, {REFERENCE} {r[idx]!r} (allowed |diff| <= "
                f"{atol:.3g} + {RTOL:g} * |{REFERENCE}|)"
            )


def _to_numpy(grads: Sequence) -> list[np.ndarray]:
    out = []
    for g in grads:
        if hasattr(g, "detach"):  # torch tensor
            g = g.detach().cpu().numpy()
        out.append(np.array(g))
    return out


def check_gradients(steps: dict[str, Step], bench: Benchmark) -> dict[str, list[np.ndarray]]:
    """Run each framework's step once and compare its gradients with :data:`REFERENCE`'s
    (which must be among ``steps``). Returns the gradients by framework."""
    grads = {name: _to_numpy(step()) for name, step in steps.items()}
    reference = grads[REFERENCE]
    for name, g in grads.items():
        if name != REFERENCE:
            compare_gradients(bench, name, g, reference)
    return grads


# -- threads -------------------------------------------------------------------------------------


@contextlib.contextmanager
def pinned_threads(n: int, frameworks: Sequence[str]) -> Iterator[list[str]]:
    """Pin this process to ``n`` CPU threads for the duration (and restore afterwards).

    Yields notes about anything that could not be pinned. Environment variables cover libraries
    loaded later (``XLA_FLAGS`` must be set before JAX starts its CPU backend)."""
    notes: list[str] = []
    restore: list[Callable[[], None]] = []
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        old = os.environ.get(var)
        os.environ[var] = str(n)
        restore.append(
            lambda var=var, old=old: (
                os.environ.__setitem__(var, old) if old is not None else os.environ.pop(var, None)
            )
        )
    if hasattr(os, "sched_setaffinity"):
        old_cpus = os.sched_getaffinity(0)
        if n < len(old_cpus):
            os.sched_setaffinity(0, sorted(old_cpus)[:n])
            restore.append(lambda: os.sched_setaffinity(0, old_cpus))
    else:
        notes.append("CPU affinity is not available on this platform")
    blas = threads_setter()
    if blas is not None:
        setter, getter = blas
        old_blas = getter()
        setter(n)
        restore.append(lambda: setter(old_blas))
    else:
        notes.append("NumPy's OpenBLAS thread count could not be set (library not found)")
    if "torch" in frameworks and importlib.util.find_spec("torch") is not None:
        import torch

        old_torch = torch.get_num_threads()
        torch.set_num_threads(n)
        restore.append(lambda: torch.set_num_threads(old_torch))
        with contextlib.suppress(RuntimeError):  # only settable before torch's first parallel op
            torch.set_num_interop_threads(n)
    if "jax" in frameworks:
        if "jax" in sys.modules:
            notes.append(
                "jax was imported before the micro-benchmarks pinned threads; its XLA CPU thread "
                "pool may not follow XLA_FLAGS (CPU affinity still applies)"
            )
        flags = os.environ.get("XLA_FLAGS")
        if "intra_op_parallelism_threads" not in (flags or ""):
            extra = f"intra_op_parallelism_threads={n}"
            if n == 1:
                extra = "--xla_cpu_multi_thread_eigen=false " + extra
            os.environ["XLA_FLAGS"] = ((flags or "") + " " + extra).strip()
            # JAX reads the flags once, when its CPU backend starts (during the run); restoring
            # them keeps them from leaking into subprocesses started later.
            restore.append(
                lambda: (
                    os.environ.__setitem__("XLA_FLAGS", flags)
                    if flags is not None
                    else os.environ.pop("XLA_FLAGS", None)
                )
            )
    try:
        yield notes
    finally:
        for undo in reversed(restore):
            undo()


# -- timing --------------------------------------------------------------------------------------


def _seconds_per_call(step: Step, calls: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls


def _calibrate(step: Step, target_s: float, min_calls: int) -> int:
    """Calls per sample so a sample lasts about ``target_s``: measured on a short burst."""
    calls, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            step()
        elapsed = time.perf_counter() - start
        if elapsed >= target_s / 10 or calls >= 1 << 20:
            break
        calls *= 4
    per_call = max(elapsed / calls, 1e-9)
    return max(min_calls, math.ceil(target_s / per_call))


def _versions(names: Sequence[str]) -> dict[str, str]:
    out = {}
    for name in names:
        dist = FRAMEWORKS[name].version_of
        version = getattr(sys.modules.get(dist), "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                version = "unknown"
        out[name] = str(version)
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def _missing(fw: Framework) -> str | None:
    for mod in fw.requires:
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install 'tapegrad[bench]')"
    return None


def run(
    frameworks: list[str],
    repeats: int = 7,
    quick: bool = False,
    *,
    threads: int = 1,
    benchmarks: Sequence[str] | None = None,
    seed: int = 0,
) -> dict:
    """Check, then time, every benchmark's gradient in every framework.

    Returns ``{"benchmarks": {name: {framework: {"median_us", "min_us", "max_us", "calls"}}},
    "definitions": {name: str}, "threads": int, ...}`` with also ``frameworks`` (those timed),
    ``skipped`` ({framework: why}), ``notes``, ``versions``, ``repeats``, ``quick``,
    ``machine``. ``quick`` is a smoke run (at most 3 samples of about 5 ms each). Missing peer
    packages are skipped, not fatal; gradients that disagree with tapegrad's raise
    :class:`GradientMismatchError` before anything is timed.
    """
    names = _checked(frameworks, benchmarks, repeats, threads)

    frameworks = list(dict.fromkeys(frameworks))  # keep order, drop repeats
    skipped = {fw: why for fw in frameworks if (why := _missing(FRAMEWORKS[fw])) is not None}
    timed = [fw for fw in frameworks if fw not in skipped]
    samples = min(repeats, 3) if quick else repeats

    result: dict = {
        "benchmarks": {},
        "definitions": {b: BENCHMARKS[b].definition for b in names},
        "threads": threads,
        "frameworks": timed,
        "skipped": skipped,
        "notes": [f"{fw} skipped: {why}" for fw, why in skipped.items()],
        "versions": {},
        "repeats": samples,
        "quick": quick,
        "dtype": "float32",
        "machine": _machine(),
    }
    with pinned_threads(threads, timed) as notes:
        result["notes"].extend(notes)
        rng = np.random.default_rng(seed)
        for bname in names:
            bench = BENCHMARKS[bname]
            result["benchmarks"][bname] = _time_one(bench, rng, timed, samples, quick)
    result["versions"] = _versions(timed)
    return result


def _checked(frameworks, benchmarks, repeats: int, threads: int) -> list[str]:
    """The benchmarks to run, once the arguments of :func:`run` are known to be valid."""
    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        raise ValueError(
            f"micro-benchmarks: unknown framework(s) {unknown}; choose from {list(FRAMEWORKS)}"
        )
    names = list(BENCHMARKS) if benchmarks is None else list(benchmarks)
    bad = [b for b in names if b not in BENCHMARKS]
    if bad:
        raise ValueError(
            f"micro-benchmarks: unknown benchmark(s) {bad}; choose from {list(BENCHMARKS)}"
        )
    if repeats < 1:
        raise ValueError(f"micro-benchmarks: repeats must be >= 1, got {repeats}")
    if threads < 1:
        raise ValueError(f"micro-benchmarks: threads must be >= 1, got {threads}")
    return names


def _time_one(bench: Benchmark, rng, timed: list[str], samples: int, quick: bool) -> dict:
    """Check one benchmark's gradients in every framework against the reference's, then time
    them, the frameworks alternating (their order rotating) from sample to sample."""
    target_s, min_calls, warmup = (0.005, 3, 2) if quick else (0.2, 10, 5)
    inputs = bench.make_inputs(rng)
    builders = [REFERENCE] + [fw for fw in timed if fw != REFERENCE]
    steps = {fw: FRAMEWORKS[fw].build(bench, inputs) for fw in builders}
    check_gradients(steps, bench)
    steps = {fw: steps[fw] for fw in timed}
    for step in steps.values():
        for _ in range(warmup):
            step()
    calls = {fw: _calibrate(step, target_s, min_calls) for fw, step in steps.items()}
    times: dict[str, list[float]] = {fw: [] for fw in timed}
    for r in range(samples):
        k = r % len(timed) if timed else 0
        for fw in timed[k:] + timed[:k]:
            times[fw].append(_seconds_per_call(steps[fw], calls[fw]))
    return {
        fw: {
            "median_us": statistics.median(ts) * 1e6,
            "min_us": min(ts) * 1e6,
            "max_us": max(ts) * 1e6,
            "calls": calls[fw],
        }
        for fw, ts in times.items()
    }


# -- report --------------------------------------------------------------------------------------


def _fmt(us: float) -> str:
    if us >= 100:
        return f"{us:,.0f}"
    if us >= 10:
        return f"{us:.1f}"
    return f"{us:.2f}"


def markdown(result: dict) -> str:
    """The result as Markdown: one row per benchmark, one column per framework (median
    microseconds per gradient, min-max over samples in brackets), tapegrad's ratio to each
    peer, then the exact definitions and the run's settings."""
    benches = result["benchmarks"]
    fws: list[str] = result.get("frameworks") or list(
        dict.fromkeys(fw for row in benches.values() for fw in row)
    )
    ours = [fw for fw in (REFERENCE, "tapegrad-compiled") if fw in fws]
    peers = [p for p in fws if p in PEERS] if ours else []
    pairs = [(a, p) for a in ours for p in peers]
    header = ["benchmark"] + [f"{fw} (µs)" for fw in fws] + [f"{a}/{p}" for a, p in pairs]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for bname, row in benches.items():
        cells = [f"`{bname}`"]
        for fw in fws:
            t = row.get(fw)
            cells.append(
                "n/a"
                if t is None
                else f"{_fmt(t['median_us'])} [{_fmt(t['min_us'])}–{_fmt(t['max_us'])}]"
            )
        for ours_fw, p in pairs:
            a, b = row.get(ours_fw), row.get(p)
            cells.append(
                "n/a" if a is None or b is None else f"{a['median_us'] / b['median_us']:.2f}×"
            )
        lines.append("| " + " | ".join(cells) + " |")
    out = [
        "Gradient evaluation time per call: median over "
        f"{result.get('repeats', '?')} samples [min–max], in microseconds; "
        f"{result['threads']} thread(s); {result.get('dtype', 'float32')}"
        + (" (quick smoke run: not a measurement)" if result.get("quick") else "")
        + ". Ratios above 1 mean tapegrad is slower.",
        "",
        *lines,
        "",
        "Definitions:",
        "",
    ]
    out += [f"- `{name}`: {text}" for name, text in result["definitions"].items()]
    versions = result.get("versions") or {}
    if versions:
        out += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."]
    if result.get("machine"):
        out += [f"Machine: {result['machine']}."]
    for note in result.get("notes", []):
        out += [f"Note: {note}."]
    return "\n".join(out) + "\n"


# -- command line --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tapegrad.bench.micro``: run the micro-benchmarks and print the table."""
    parser = argparse.ArgumentParser(
        prog="python -m tapegrad.bench.micro",
        description="Gradient micro-benchmarks (seed 004, Table I): tapegrad vs PyTorch, JAX "
        "and HIPS autograd.",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated, from {','.join(FRAMEWORKS)} (default: all)",
    )
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=7, help="timed samples per framework")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for every framework")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny samples")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(
        [f.strip() for f in args.frameworks.split(",") if f.strip()],
        repeats=args.repeats,
        quick=args.quick,
        threads=args.threads,
        benchmarks=[b.strip() for b in args.benchmarks.split(",") if b.strip()],
    )
    if args.json:
        from ..serialization import atomic_file

        with atomic_file(args.json) as fh:
            fh.write((json.dumps(result, indent=2) + "\n").encode())
    sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
