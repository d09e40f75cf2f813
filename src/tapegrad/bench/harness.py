"""``tapegrad bench``: a seed workload trained by tapegrad and its peers side by side.

The parent process (this module) builds the preset once with
:func:`tapegrad.train.experiment.setup`, exports its initial weights (safetensors, via
``save_arrays``) and the dataset arrays (``.npy``) to a temporary folder, and starts one worker
process per framework, thread setting and repeat (:mod:`tapegrad.bench.worker`), alternating
them A B C A B C ... so slow drift of a shared machine hits all alike. Beside each peer's
worker runs that peer's plain training loop (:mod:`tapegrad.bench.selfcheck`): the bench fails
if its worker and the plain loop disagree by more than 10%. The parent then summarises, checks
the frameworks agree (:func:`check_agreement`: a fast wrong answer can never win), and prints
the table with the physical floor beside it (:mod:`tapegrad.bench.flops`).

Every process starts with the same environment: the thread count in every BLAS/OpenMP/numba
variable and XLA's flags (workers), the same CPU affinity (all usable CPUs, or N of them for
N threads, moving on at every repeat: XLA sizes its thread pool by the affinity, not by its
flags), and glibc's malloc
told to keep the memory it frees (:data:`ALLOCATOR_ENV`). Without that last setting PyTorch,
whose CPU tensors come straight from ``malloc``, runs at two speeds: glibc hands the top of
its heap back to the kernel when a step's temporaries are freed (its trim threshold is
adjusted as the process runs), and in some processes, not others, the next step faults those
pages in again. Measured on seed-cnn at one thread (``benchmarks/allocator.py``): 0 to 2,000
page faults a step, 0 to 3.7 ms of kernel time on top of the same 3-4 ms of user time, so
identical processes ran 1.0x to 2x the fastest one; with the setting every process runs at
the fast speed. tapegrad's compiled steps allocate almost nothing, so it matters mostly to
PyTorch (and to eager mode); every process gets it alike.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..blas import SET_HERE
from ..blas import describe as describe_blas
from ..serialization import atomic_file
from . import selfcheck
from .flops import count_flops
from .summary import (  # noqa: F401 (the bench's public names, as before the split)
    ACC_BAND_FULL,
    LM_LOSS_BAND,
    LOSS_RTOL,
    SHORT_LOSS_RTOL,
    check_agreement,
    loss_disagreement,
    pair_ratios,
    steady_samples,
    summarise,
    summarise_plain,
    thread_use,
)
from .table import _score, first_epoch_note, format_table  # noqa: F401

WORKLOADS = ("seed-cnn", "seed-rnn", "text-cnn", "mlp", "char-lm", "resnet")
PEERS = ("torch", "jax")
EXIT_MISMATCH = 4
# Workloads a wider variant exists for (``--width``): every hidden size times the width.
WIDENABLE = ("seed-cnn", "mlp")

# glibc's malloc keeps what it frees: no trimming of the heap's top, and blocks up to 1 GiB
# come from the heap rather than from a fresh mmap (see the module docstring for why).
ALLOCATOR_ENV = {"MALLOC_TRIM_THRESHOLD_": str(2**30), "MALLOC_MMAP_THRESHOLD_": str(2**30)}
ALLOCATORS = ("keep", "system")


_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


class BenchError(RuntimeError):
    """The benchmark could not run (a worker failed, a peer is not installed, bad options)."""


class GuardError(RuntimeError):
    """The frameworks disagree: different first-step losses or final accuracies."""


# -- machine and threads ----------------------------------------------------------------------
def available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    return {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(available_cpus()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "blas": describe_blas(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def process_env(allocator: str = "keep") -> dict[str, str]:
    """The environment every process of a benchmark starts with: this one, plus glibc's
    allocator setting (``allocator="keep"``; ``"system"`` leaves malloc as it is)."""
    if allocator not in ALLOCATORS:
        raise BenchError(
            f"unknown allocator setting {allocator!r}; choose {' or '.join(ALLOCATORS)}"
        )
    env = dict(os.environ)
    for var, value in SET_HERE.items():  # tapegrad's own setting: its workers set it again
        if env.get(var) == value:
            del env[var]
    if allocator == "keep":
        env.update(ALLOCATOR_ENV)
    else:
        for var in ALLOCATOR_ENV:
            env.pop(var, None)
    return env


def keep_freed_memory() -> bool:
    """Give this process the allocator setting of :data:`ALLOCATOR_ENV` now (``mallopt``),
    for benchmarks that time frameworks in-process. False where glibc's malloc is not there."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    return bool(
        mallopt(m_trim_threshold, int(ALLOCATOR_ENV["MALLOC_TRIM_THRESHOLD_"]))
        and mallopt(m_mmap_threshold, int(ALLOCATOR_ENV["MALLOC_MMAP_THRESHOLD_"]))
    )


def thread_env(threads: int, allocator: str = "keep") -> dict[str, str]:
    """The environment of a worker limited to ``threads`` threads: every BLAS/OpenMP variable,
    numba's, and XLA's CPU flags (JAX reads them when it starts), on :func:`process_env`."""
    env = process_env(allocator)
    for var in _THREAD_VARS:
        env[var] = str(threads)
    eigen = "false" if threads == 1 else "true"
    xla = f"--xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={threads}"
    env["XLA_FLAGS"] = f"{env['XLA_FLAGS']} {xla}" if env.get("XLA_FLAGS") else xla
    env["TF_CPP_MIN_LOG_LEVEL"] = env.get("TF_CPP_MIN_LOG_LEVEL", "2")
    env["TAPEGRAD_BENCH_THREADS"] = str(threads)
    src = str(Path(__file__).resolve().parents[2])  # the folder holding this tapegrad
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def cpus_for(threads: int, turn: int = 0) -> list[int]:
    """The CPUs a process of ``threads`` threads may use: all usable ones for all threads (as
    a user's process), else ``threads`` consecutive ones starting further on at every
    ``turn`` (the repeat), so every framework of a repeat runs on the same CPUs and no one CPU,
    busier than the others with another job, weighs on every repeat."""
    cpus = available_cpus()
    start = (turn * threads) % len(cpus)
    return [cpus[(start + i) % len(cpus)] for i in range(min(threads, len(cpus)))]


# Sets the CPU affinity, then becomes the program (exec keeps the affinity): the program starts
# on its CPUs, before any library sizes a thread pool.
_PIN = (
    "import os, sys; os.sched_setaffinity(0, map(int, sys.argv[1].split(','))); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def launch(
    what: str, argv: list[str], env: dict[str, str], cpus: list[int], timeout: float | None
) -> dict:
    """Run ``argv`` under the CPU affinity ``cpus``; return the last JSON line it printed."""
    if hasattr(os, "sched_setaffinity") and set(cpus) != set(available_cpus()):
        argv = [sys.executable, "-c", _PIN, ",".join(map(str, cpus)), *argv]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BenchError(f"the {what} failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1])


# A worker's first statements: a peer framework is imported before anything of tapegrad, so
# it loads its own libraries (PyTorch its OpenMP runtime) as in its users' processes.
_BOOT = (
    "import sys\n"
    "if sys.argv[1] in ('torch', 'jax'): __import__(sys.argv[1])\n"
    "from tapegrad.bench.worker import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def run_worker(
    framework: str,
    spec: dict,
    spec_path: Path,
    timeout: float | None = None,
    extra_env: dict[str, str] | None = None,
    turn: int = 0,
) -> dict:
    """Run one worker process limited to ``spec['threads']`` threads and as many CPUs
    (:func:`cpus_for` the ``turn``); return its JSON result."""
    threads = int(spec["threads"])
    env = thread_env(threads, spec.get("allocator", "keep"))
    env.update(extra_env or {})
    argv = [sys.executable, "-c", _BOOT, framework, str(spec_path)]
    return launch(f"{framework} worker", argv, env, cpus_for(threads, turn), timeout)


# -- preparing a workload ---------------------------------------------------------------------
def prepare(
    workload: str,
    folder: Path,
    data_dir=None,
    seed: int = 0,
    *,
    batch_size: int | None = None,
    width: int = 1,
) -> tuple[dict, dict]:
    """Build the preset (``width`` times wider where asked), export its initial weights and
    data to ``folder``; return the worker spec (minus run options) and facts about the
    workload (sizes, FLOPs). ``batch_size`` overrides the preset's."""
    from .. import nn
    from ..data.chars import windows_at
    from ..serialization import save_arrays
    from ..train.experiment import setup
    from .tapegrad_runner import workload_model

    exp = setup(workload, data_dir=data_dir, seed=seed, log=None)
    model = exp.model if width == 1 else workload_model(workload, seed, exp.config, width)
    batch_size = batch_size or exp.preset.batch_size
    weights = folder / "initial.safetensors"
    save_arrays(weights, model.state_dict(), {"preset": workload, "seed": seed})
    train = exp.data.train
    if hasattr(train, "starts"):  # windows drawn per epoch: every framework gets epoch 1's
        train_x, train_y = windows_at(train.text, train.starts(seed, 1), train.context)
    else:
        train_x, train_y = train.x, train.y
    arrays = {
        "train_x": train_x,
        "train_y": train_y,
        "test_x": exp.data.test.x,
        "test_y": exp.data.test.y,
    }
    paths = {}
    for name, arr in arrays.items():
        paths[name] = str(folder / f"{name}.npy")
        with atomic_file(paths[name]) as f:
            np.save(f, np.ascontiguousarray(arr))
    flops = count_flops(model, train_x[0])
    n_train = len(train_y)
    spec = {
        "preset": workload,
        "task": exp.preset.task,
        "optimizer": exp.optimizer_name,
        "lr": exp.lr,
        "momentum": exp.momentum,
        "weight_decay": exp.weight_decay,
        "stochastic": any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()),
        "batch_size": batch_size,
        "width": width,
        "seed": seed,
        "config": exp.config,
        "weights": str(weights),
        "data": paths,
    }
    facts = {
        "dataset": exp.dataset,
        "train_samples": n_train,
        "test_samples": len(exp.data.test.y),
        "parameters": int(sum(p.data.size for p in model.parameters())),
        "optimizer": exp.optimizer_name,
        "lr": exp.lr,
        "batch_size": batch_size,
        "width": width,
        "flops": {
            "per_sample_train": flops.train_flops_per_sample,
            "per_epoch_train": flops.per_epoch(n_train),
            "layers": [vars(layer) for layer in flops.layers],
        },
    }
    return spec, facts


# -- the whole benchmark ------------------------------------------------------------------------
def parse_threads(text: str | int | None, cpus: int | None = None) -> list[int]:
    """``--threads``: ``N``, ``all`` (the usable CPUs, the default), or several separated by
    commas (``all,1``: both settings in one run, alternating)."""
    cpus = cpus or len(available_cpus())
    if text is None:
        return [cpus]
    if isinstance(text, int):
        items = [text]
    else:
        items = []
        for part in str(text).split(","):
            part = part.strip()
            if part == "all":
                items.append(cpus)
            elif part.isdigit():
                items.append(int(part))
            else:
                raise BenchError(f"--threads takes numbers or 'all', separated by commas: {text!r}")
    for t in items:
        if not 1 <= t <= cpus:
            raise BenchError(f"--threads must be in 1..{cpus} (usable CPUs), got {t}")
    if len(set(items)) != len(items):
        raise BenchError(f"--threads names a setting twice: {text!r}")
    return items


def _validate(workload, peers, epochs, steps, repeats, batch_size, width) -> None:
    if workload not in WORKLOADS:
        raise BenchError(f"unknown workload {workload!r}; choose one of: {', '.join(WORKLOADS)}")
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise BenchError(f"unknown peer(s) {unknown}; choose from: {', '.join(PEERS)}")
    if epochs is not None and steps is not None:
        raise BenchError("give --epochs or --steps, not both")
    for name, v in (
        ("epochs", epochs),
        ("steps", steps),
        ("repeats", repeats),
        ("batch-size", batch_size),
        ("width", width),
    ):
        if v is not None and v < 1:
            raise BenchError(f"--{name} must be at least 1, got {v}")
    if width not in (None, 1) and workload not in WIDENABLE:
        raise BenchError(
            f"--width: {workload} has no wider variant; {' and '.join(WIDENABLE)} have"
        )
    for peer in peers:
        try:
            __import__(peer)
        except ImportError:
            raise BenchError(
                f"{peer} is not installed; pip install 'tapegrad[bench]' installs the peers"
            ) from None


def run_benchmark(workload: str, peers: list[str], *, threads=None, **options) -> dict:
    """Run ``workload`` with tapegrad and ``peers`` at one thread setting (``threads``, default
    all usable CPUs); return the full result (raise nothing for a disagreement: the result's
    ``guard`` says whether the frameworks agreed, its ``self_check`` whether the bench's
    workers matched the plain loops). Options as :func:`run_benchmarks`."""
    settings = parse_threads(threads)
    if len(settings) != 1:
        raise BenchError("run_benchmark measures one thread setting; use run_benchmarks")
    return run_benchmarks(workload, peers, threads=settings, **options)["results"][0]


def run_benchmarks(
    workload: str,
    peers: list[str],
    *,
    threads: list[int] | None = None,
    epochs: int | None = None,
    steps: int | None = None,
    repeats: int = 3,
    data_dir=None,
    seed: int = 0,
    mode: str = "eager",
    batch_size: int | None = None,
    width: int | None = None,
    self_check: bool = True,
    allocator: str = "keep",
    perturb_peer: bool = False,
    log=print,
) -> dict:
    """Run ``workload`` with tapegrad and ``peers`` at each thread setting in ``threads``
    (default: all usable CPUs), every repeat running every setting and framework in turn
    (tapegrad, torch, torch's plain loop, jax, jax's plain loop; settings in the order given).
    Returns ``{"workload", "threads", "results": [one result per setting]}``."""
    from ..models import get_preset

    _validate(workload, peers, epochs, steps, repeats, batch_size, width)
    settings = threads or parse_threads(None)
    process_env(allocator)  # validates the setting
    preset = get_preset(workload)
    steps_mode = steps is not None
    epochs = None if steps_mode else (epochs or preset.epochs)
    frameworks = ["tapegrad", *peers]
    plains = [p for p in peers if self_check]
    order = [x for fw in frameworks for x in ([fw, f"{fw}-plain"] if fw in plains else [fw])]

    with tempfile.TemporaryDirectory(prefix="tapegrad-bench-") as tmp:
        folder = Path(tmp)
        log(f"{workload}: exporting the initial weights and data ...")
        spec, facts = prepare(
            workload, folder, data_dir, seed, batch_size=batch_size, width=width or 1
        )
        spec.update(epochs=epochs, steps=steps, mode=mode, alloc_samples=4, allocator=allocator)
        n_batches = -(-facts["train_samples"] // spec["batch_size"])
        paths = _write_specs(folder, spec, settings)
        runs = {t: {name: [] for name in order} for t in settings}
        gemm_rates: dict[int, list[float]] = {t: [] for t in settings}
        # tapegrad's numba kernels compile into a cache of their own here: the first run finds
        # it empty (cold: every kernel compiles), the later ones find it filled (warm)
        kernel_cache = {"NUMBA_CACHE_DIR": str(folder / "numba-cache")}
        for r in range(repeats):
            for t in settings:
                spec_t = {**spec, "threads": t}
                # the GEMM rate before every repeat, pooled: load on a shared machine comes and goes
                gemm_rates[t] += run_worker("gemm", spec_t, paths[t, False], turn=r)["samples"]
                for name in order:
                    path = paths[t, perturb_peer and name in peers]
                    cache = kernel_cache if name == "tapegrad" else None
                    result = _run_framework(name, spec_t, path, r, n_batches, allocator, cache)
                    if name == "tapegrad":
                        result["kernel_cache"] = "cold" if r == 0 and t == settings[0] else "warm"
                    runs[t][name].append(result)
                    log(_progress(result, r, repeats, t, name, steps_mode))

    options = dict(epochs=epochs, steps=steps, repeats=repeats, mode=mode, seed=seed)
    options.update(allocator=allocator, perturb_peer=perturb_peer)
    results = [
        _result(workload, frameworks, plains, runs[t], gemm_rates[t], facts, threads=t, **options)
        for t in settings
    ]
    return {"workload": workload, "threads": settings, "results": results}


def _write_specs(folder: Path, spec: dict, settings: list[int]) -> dict:
    """One worker spec file per thread setting, plain and perturbed: ``{(threads, perturbed):
    path}``."""
    paths = {}
    for t in settings:
        for perturb in (False, True):
            paths[t, perturb] = folder / f"spec-{t}{'-perturbed' if perturb else ''}.json"
            with atomic_file(paths[t, perturb]) as f:
                f.write(json.dumps({**spec, "threads": t, "perturb": perturb}).encode())
    return paths


def _run_framework(name, spec_t, path, turn, n_batches, allocator, kernel_cache) -> dict:
    """One run of ``name``: tapegrad's or a peer's worker, or a peer's plain loop
    (``torch-plain``, ``jax-plain``)."""
    if name.endswith("-plain"):
        peer = name.removesuffix("-plain")
        result = launch(
            f"plain {peer} loop",
            selfcheck.command(peer, path),
            process_env(allocator),
            cpus_for(spec_t["threads"], turn),
            None,
        )
        result["batches_per_epoch"] = n_batches
        result["training_seconds"] = sum(result["epoch_seconds"])
        return result
    if kernel_cache is not None:
        return run_worker(name, spec_t, path, extra_env=kernel_cache, turn=turn)
    return run_worker(name, spec_t, path, turn=turn)


def _progress(result: dict, r: int, repeats: int, t: int, name: str, steps_mode: bool) -> str:
    times = result["step_seconds"] if steps_mode else result["epoch_seconds"]
    then = f", then median {statistics.median(times[1:]):.3f}s" if len(times) > 1 else ""
    return (
        f"  repeat {r + 1}/{repeats} {t} thread(s) {name:<12} first {times[0]:.3f}s"
        + then
        + _score(result)
    )


def _self_checks(runs: dict, plains: list[str], steps_mode: bool) -> dict:
    """Each peer's worker against its plain loop, over the steady epochs (or steps)."""

    def steady(name: str) -> list[list[float]]:  # per repeat
        return [steady_samples(r, steps_mode) for r in runs[name]]

    def steady_cpu(name: str) -> list[list[float]]:
        return [] if steps_mode else [r["epoch_cpu_seconds"][1:] for r in runs[name]]

    return {
        p: selfcheck.compare(
            steady(p),
            steady(f"{p}-plain"),
            worker_cpu=steady_cpu(p),
            plain_cpu=steady_cpu(f"{p}-plain"),
        )
        for p in plains
    }


def _step_medians(runs: dict) -> None:
    """Replace each run's step times by their median per epoch (in place)."""
    for rs in runs.values():
        for r in rs:
            n, steps = r["batches_per_epoch"], r.pop("step_seconds")
            r["step_median_per_epoch"] = [
                statistics.median(steps[i : i + n]) for i in range(0, len(steps), n)
            ]


def _result(
    workload,
    frameworks,
    plains,
    runs,
    gemm_rates,
    facts,
    *,
    threads,
    epochs,
    steps,
    repeats,
    mode,
    seed,
    allocator,
    perturb_peer,
) -> dict:
    """One thread setting's summary, ratios, guard and self-check."""
    steps_mode = steps is not None
    summary = {fw: summarise(runs[fw], steps_mode) for fw in frameworks}
    plain = {p: summarise_plain(runs[f"{p}-plain"], steps_mode) for p in plains}
    ratios = pair_ratios(runs, steps_mode)
    unit = "step" if steps_mode else "epoch"

    checks = _self_checks(runs, plains, steps_mode)
    if not steps_mode:  # keep the JSON small: per-epoch step medians instead of every step
        _step_medians(runs)
    short = steps_mode and steps < runs["tapegrad"][0]["batches_per_epoch"]
    failures = check_agreement(summary, ACC_BAND_FULL, plain=plain, short=short)
    batch = facts["batch_size"]
    gemm = statistics.median(gemm_rates)
    floor = {
        "gemm_flops_per_second": gemm,
        "gemm_samples": len(gemm_rates),
        "epoch_seconds": facts["flops"]["per_epoch_train"] / gemm,
        "step_seconds": facts["flops"]["per_sample_train"] * batch / gemm,
    }
    return {
        "workload": workload,
        "frameworks": frameworks,
        "unit": unit,
        "epochs": epochs,
        "steps": steps,
        "repeats": repeats,
        "threads": threads,
        "mode": mode,
        "seed": seed,
        "allocator": allocator,
        "facts": facts,
        "floor": floor,
        "machine": machine_info(),
        "summary": summary,
        "plain": plain,
        "ratios": ratios,
        "guard": {
            "passed": not failures,
            "failures": failures,
            "loss_rtol": LOSS_RTOL,
            "accuracy_band_points": None if short else ACC_BAND_FULL,
            "short_loss_rtol": SHORT_LOSS_RTOL if short else None,
            "perturbed_peers": perturb_peer,
        },
        "self_check": {
            "passed": all(c["passed"] for c in checks.values()),
            "checks": checks,
            "failures": selfcheck.failures(checks, unit, threads),
        },
        "runs": runs,
    }
