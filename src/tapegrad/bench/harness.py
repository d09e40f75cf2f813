"""``tapegrad bench``: a seed workload trained by tapegrad and its peers side by side.

The parent process (this module) builds the preset once with
:func:`tapegrad.train.experiment.setup`, exports its initial weights (safetensors, via
``save_arrays``) and the dataset arrays (``.npy``) to a temporary folder, and starts one worker
process per framework and repeat (:mod:`tapegrad.bench.worker`, started by a bootstrap that
pins the CPUs before NumPy loads), alternating the
frameworks A B C A B C ... so slow drift of a shared machine hits all alike. Each worker is
pinned to the same CPUs and thread count. The parent then summarises, checks the frameworks
agree (:func:`check_agreement`: a fast wrong answer can never win), and prints the table with
the physical floor beside it (:mod:`tapegrad.bench.flops`).
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

from ..serialization import atomic_file
from .flops import count_flops

WORKLOADS = ("seed-cnn", "seed-rnn", "text-cnn", "mlp")
PEERS = ("torch", "jax")
EXIT_MISMATCH = 4

# The correctness guard. Same weights and the same first batch: the first-step losses differ
# only by float32 rounding in a different summation order.
LOSS_RTOL = 1e-5
# Final test accuracies, in percentage points. After whole epochs the frameworks' float32
# rounding has compounded into genuinely different trajectories (the presets' seed-to-seed
# spread is about 0.5-1 point): 1.5 points. Runs shorter than an epoch have barely separated
# (a few rounding steps apart), so they get a tighter 1 point.
ACC_BAND_FULL = 1.5
ACC_BAND_SHORT = 1.0

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
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def thread_env(threads: int) -> dict[str, str]:
    """The environment of a worker pinned to ``threads`` threads: every BLAS/OpenMP variable,
    numba's, and XLA's CPU flags (JAX reads them when it starts)."""
    env = dict(os.environ)
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


# The worker's first statements: pin the CPUs before NumPy (and its BLAS threads) load.
_BOOT = (
    "import os, sys\n"
    "cpus = [int(c) for c in os.environ['TAPEGRAD_BENCH_CPUS'].split(',')]\n"
    "if hasattr(os, 'sched_setaffinity'): os.sched_setaffinity(0, cpus)\n"
    "from tapegrad.bench.worker import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def run_worker(
    framework: str,
    spec: dict,
    spec_path: Path,
    timeout: float | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict:
    """Run one worker process pinned to ``spec['threads']`` CPUs; return its JSON result."""
    threads = int(spec["threads"])
    env = thread_env(threads)
    env.update(extra_env or {})
    env["TAPEGRAD_BENCH_CPUS"] = ",".join(str(c) for c in available_cpus()[:threads])
    proc = subprocess.run(
        [sys.executable, "-c", _BOOT, framework, str(spec_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BenchError(f"the {framework} worker failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1])


# -- preparing a workload ---------------------------------------------------------------------
def prepare(workload: str, folder: Path, data_dir=None, seed: int = 0) -> tuple[dict, dict]:
    """Build the preset, export its initial weights and data to ``folder``; return the
    worker spec (minus run options) and facts about the workload (sizes, FLOPs)."""
    from ..serialization import save_arrays
    from ..train.experiment import setup

    exp = setup(workload, data_dir=data_dir, seed=seed, log=None)
    weights = folder / "initial.safetensors"
    save_arrays(weights, exp.model.state_dict(), {"preset": workload, "seed": seed})
    arrays = {
        "train_x": exp.data.train.x,
        "train_y": exp.data.train.y,
        "test_x": exp.data.test.x,
        "test_y": exp.data.test.y,
    }
    paths = {}
    for name, arr in arrays.items():
        paths[name] = str(folder / f"{name}.npy")
        with atomic_file(paths[name]) as f:
            np.save(f, np.ascontiguousarray(arr))
    flops = count_flops(exp.model, exp.data.train.x[0])
    n_train = len(exp.data.train.y)
    spec = {
        "preset": workload,
        "task": exp.preset.task,
        "optimizer": exp.optimizer_name,
        "lr": exp.lr,
        "batch_size": exp.preset.batch_size,
        "seed": seed,
        "config": exp.config,
        "weights": str(weights),
        "data": paths,
    }
    facts = {
        "dataset": exp.dataset,
        "train_samples": n_train,
        "test_samples": len(exp.data.test.y),
        "parameters": int(sum(p.data.size for p in exp.model.parameters())),
        "optimizer": exp.optimizer_name,
        "lr": exp.lr,
        "batch_size": exp.preset.batch_size,
        "flops": {
            "per_sample_train": flops.train_flops_per_sample,
            "per_epoch_train": flops.per_epoch(n_train),
            "layers": [vars(layer) for layer in flops.layers],
        },
    }
    return spec, facts


# -- summaries ----------------------------------------------------------------------------------
def _spread(values: list[float]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def steady_samples(run: dict, steps_mode: bool) -> list[float]:
    """The steady-state times of one run: epochs after the first, or steps after the first."""
    return run["step_seconds"][1:] if steps_mode else run["epoch_seconds"][1:]


def summarise(runs: list[dict], steps_mode: bool) -> dict:
    """One framework's repeats pooled: first epoch/step apart, steady state, memory, results."""
    firsts = [r["step_seconds"][0] if steps_mode else r["epoch_seconds"][0] for r in runs]
    cold = [t for r, t in zip(runs, firsts) if r.get("kernel_cache") == "cold"]
    # the first epoch proper is the warm-cache one; a cold-cache run's is reported apart
    first = [t for r, t in zip(runs, firsts) if r.get("kernel_cache") != "cold"] or firsts
    steady = [t for r in runs for t in steady_samples(r, steps_mode)]
    steady_steps = [
        t
        for r in runs
        for t in (
            r["step_seconds"][r["batches_per_epoch"] :]
            if len(r["epoch_seconds"]) > 1
            else r["step_seconds"][1:]
        )
    ]
    med = statistics.median
    return {
        "first": _spread(first),
        "first_cold": _spread(cold),
        "steady": _spread(steady),
        "steady_step": _spread(steady_steps),
        "peak_rss": med([r["peak_rss"] for r in runs]),
        "rss_before_training": med([r["rss_before_training"] or 0 for r in runs]),
        "alloc_per_epoch": runs[0]["alloc_per_epoch"],
        "alloc_per_step": runs[0]["alloc_per_step"],
        "alloc_method": runs[0]["alloc_method"],
        "first_loss": runs[0]["first_loss"],
        "final_loss": med([r["final_loss"] for r in runs]),
        "test_loss": med([r["test_loss"] for r in runs]),
        "test_accuracy": med([r["test_accuracy"] for r in runs]),
        "test_accuracy_runs": [r["test_accuracy"] for r in runs],
        "mode": runs[0]["mode"],
        "notes": runs[0]["notes"],
        "versions": runs[0]["versions"],
    }


def pair_ratios(runs: dict[str, list[dict]], steps_mode: bool) -> dict:
    """tapegrad time / peer time, repeat by repeat (adjacent runs), for first and steady."""
    out = {}
    base = runs["tapegrad"]
    for peer, peer_runs in runs.items():
        if peer == "tapegrad":
            continue
        first, steady = [], []
        for a, b in zip(base, peer_runs):
            fa = a["step_seconds"][0] if steps_mode else a["epoch_seconds"][0]
            fb = b["step_seconds"][0] if steps_mode else b["epoch_seconds"][0]
            first.append(fa / fb)
            sa, sb = steady_samples(a, steps_mode), steady_samples(b, steps_mode)
            if sa and sb:
                steady.append(statistics.median(sa) / statistics.median(sb))
        out[peer] = {"first": _spread(first), "steady": _spread(steady)}
    return out


def check_agreement(
    summary: dict[str, dict], band_points: float, loss_rtol: float = LOSS_RTOL
) -> list[str]:
    """Every peer against tapegrad: first-step losses to ``loss_rtol`` relative, final test
    accuracies within ``band_points`` percentage points. Returns the failures (empty: agree)."""
    failures = []
    base = summary["tapegrad"]
    for peer, s in summary.items():
        if peer == "tapegrad":
            continue
        a, b = base["first_loss"], s["first_loss"]
        rel = abs(a - b) / max(abs(a), abs(b), 1e-30)
        if not rel <= loss_rtol:  # also catches NaN
            failures.append(
                f"first-step loss: tapegrad {a:.8g} vs {peer} {b:.8g} (relative difference "
                f"{rel:.2e} > {loss_rtol:g}); from the same weights and batch they must agree "
                f"to float32 rounding"
            )
        pa, pb = 100 * base["test_accuracy"], 100 * s["test_accuracy"]
        if not abs(pa - pb) <= band_points:
            failures.append(
                f"final test accuracy: tapegrad {pa:.2f}% vs {peer} {pb:.2f}% (difference "
                f"{abs(pa - pb):.2f} points > the {band_points:g}-point band)"
            )
    return failures


# -- the whole benchmark ------------------------------------------------------------------------
def run_benchmark(
    workload: str,
    peers: list[str],
    *,
    epochs: int | None = None,
    steps: int | None = None,
    repeats: int = 3,
    threads: int | None = None,
    data_dir=None,
    seed: int = 0,
    mode: str = "eager",
    perturb_peer: bool = False,
    log=print,
) -> dict:
    """Run ``workload`` with tapegrad and ``peers``; return the full result (raise nothing for
    a disagreement: the result's ``guard`` says whether the frameworks agreed)."""
    from ..models import get_preset

    if workload not in WORKLOADS:
        raise BenchError(f"unknown workload {workload!r}; choose one of: {', '.join(WORKLOADS)}")
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise BenchError(f"unknown peer(s) {unknown}; choose from: {', '.join(PEERS)}")
    if epochs is not None and steps is not None:
        raise BenchError("give --epochs or --steps, not both")
    for name, v in (("epochs", epochs), ("steps", steps), ("repeats", repeats)):
        if v is not None and v < 1:
            raise BenchError(f"--{name} must be at least 1, got {v}")
    cpus = available_cpus()
    threads = threads or len(cpus)
    if not 1 <= threads <= len(cpus):
        raise BenchError(f"--threads must be in 1..{len(cpus)} (usable CPUs), got {threads}")
    for peer in peers:
        try:
            __import__(peer)
        except ImportError:
            raise BenchError(
                f"{peer} is not installed; pip install 'tapegrad[bench]' installs the peers"
            ) from None
    preset = get_preset(workload)
    steps_mode = steps is not None
    epochs = None if steps_mode else (epochs or preset.epochs)
    frameworks = ["tapegrad", *peers]

    with tempfile.TemporaryDirectory(prefix="tapegrad-bench-") as tmp:
        folder = Path(tmp)
        log(f"{workload}: exporting the initial weights and data ...")
        spec, facts = prepare(workload, folder, data_dir, seed)
        spec.update(threads=threads, epochs=epochs, steps=steps, mode=mode, alloc_samples=4)
        spec_path = folder / "spec.json"
        with atomic_file(spec_path) as f:
            f.write(json.dumps(spec).encode())
        perturbed = folder / "spec-perturbed.json"
        with atomic_file(perturbed) as f:
            f.write(json.dumps({**spec, "perturb": True}).encode())
        runs: dict[str, list[dict]] = {f: [] for f in frameworks}
        # tapegrad's numba kernels compile into a cache of their own here: the first run finds
        # it empty (cold: every kernel compiles), the later ones find it filled (warm)
        kernel_cache = {"NUMBA_CACHE_DIR": str(folder / "numba-cache")}
        gemm_rates: list[float] = []
        for r in range(repeats):
            # The GEMM rate before every repeat, pooled: load on a shared machine comes and goes
            gemm_rates += run_worker("gemm", spec, spec_path)["samples"]
            for fw in frameworks:
                path = perturbed if (perturb_peer and fw != "tapegrad") else spec_path
                if fw == "tapegrad":
                    result = run_worker(fw, spec, path, extra_env=kernel_cache)
                    result["kernel_cache"] = "cold" if r == 0 else "warm"
                else:
                    result = run_worker(fw, spec, path)
                runs[fw].append(result)
                t = result["step_seconds"] if steps_mode else result["epoch_seconds"]
                log(
                    f"  repeat {r + 1}/{repeats} {fw:<9} first {t[0]:.3f}s"
                    + (f", then median {statistics.median(t[1:]):.3f}s" if len(t) > 1 else "")
                    + f", test accuracy {100 * result['test_accuracy']:.2f}%"
                )

    summary = {fw: summarise(rs, steps_mode) for fw, rs in runs.items()}
    ratios = pair_ratios(runs, steps_mode)
    if not steps_mode:  # keep the JSON small: per-epoch step medians instead of every step
        for rs in runs.values():
            for r in rs:
                n, steps_ = r["batches_per_epoch"], r.pop("step_seconds")
                r["step_median_per_epoch"] = [
                    statistics.median(steps_[i : i + n]) for i in range(0, len(steps_), n)
                ]
    short = steps_mode and steps < runs["tapegrad"][0]["batches_per_epoch"]
    band = ACC_BAND_SHORT if short else ACC_BAND_FULL
    failures = check_agreement(summary, band)
    batch = facts["batch_size"]
    per_epoch = facts["flops"]["per_epoch_train"]
    gemm = statistics.median(gemm_rates)
    floor = {
        "gemm_flops_per_second": gemm,
        "gemm_samples": len(gemm_rates),
        "epoch_seconds": per_epoch / gemm,
        "step_seconds": facts["flops"]["per_sample_train"] * batch / gemm,
    }
    return {
        "workload": workload,
        "frameworks": frameworks,
        "unit": "step" if steps_mode else "epoch",
        "epochs": epochs,
        "steps": steps,
        "repeats": repeats,
        "threads": threads,
        "mode": mode,
        "seed": seed,
        "facts": facts,
        "floor": floor,
        "machine": machine_info(),
        "summary": summary,
        "ratios": ratios,
        "guard": {
            "passed": not failures,
            "failures": failures,
            "loss_rtol": LOSS_RTOL,
            "accuracy_band_points": band,
            "perturbed_peers": perturb_peer,
        },
        "runs": runs,
    }


# -- printing -----------------------------------------------------------------------------------
def _mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def _bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _secs(s: dict | None, spread: bool = True) -> str:
    if s is None:
        return "n/a"
    if not spread or s["n"] == 1:
        return f"{s['median']:.3f}s"
    return f"{s['median']:.3f}s [{s['min']:.3f}-{s['max']:.3f}]"


def first_epoch_note(result: dict) -> str | None:
    """tapegrad's first epoch with a cold and a warm kernel cache, against its steady epoch."""
    s = result["summary"]["tapegrad"]
    cold, warm, steady = s.get("first_cold"), s["first"], s["steady"]
    if result["unit"] != "epoch" or not cold or not warm or not steady:
        return None
    if warm == cold:  # every run was cold (one repeat): "first" fell back to them, none is warm
        return None
    return (
        f"First epoch of tapegrad: {warm['median']:.2f}s with a warm kernel cache "
        f"({warm['n']} run(s)), {cold['median']:.2f}s with a cold one (an empty "
        f"NUMBA_CACHE_DIR: every kernel compiles); warm, it costs "
        f"{warm['median'] - steady['median']:+.2f}s over a steady epoch, cold "
        f"{cold['median'] - steady['median']:+.2f}s"
    )


def format_table(result: dict) -> str:
    """The terminal table: one row per framework, ratios, the floor and the guard's verdict."""
    unit = result["unit"]
    head = (
        f"{'framework':<10} {'first ' + unit:>14} {'steady ' + unit + ' median [min-max]':>34} "
        f"{'peak RSS':>11} {'alloc/epoch':>12} {'loss':>8} {'test acc':>9}"
    )
    lines = [head]
    for fw, s in result["summary"].items():
        lines.append(
            f"{fw:<10} {_secs(s['first'], False):>14} {_secs(s['steady']):>34} "
            f"{_mib(s['peak_rss']):>11} {_bytes(s['alloc_per_epoch']):>12} "
            f"{s['final_loss']:>8.4f} {100 * s['test_accuracy']:>8.2f}%"
        )
    for peer, r in result["ratios"].items():
        steady = r["steady"]
        text = (
            f"steady {steady['median']:.2f}x [{steady['min']:.2f}-{steady['max']:.2f}]"
            if steady
            else "steady n/a"
        )
        lines.append(
            f"tapegrad / {peer}: {text}, first {unit} {r['first']['median']:.2f}x "
            f"(time ratio, repeat by repeat; > 1 means tapegrad is slower)"
        )
    note = first_epoch_note(result)
    if note:
        lines.append(note)
    fl = result["floor"]
    key = "epoch_seconds" if unit == "epoch" else "step_seconds"
    lines.append(
        f"floor: {result['facts']['flops']['per_sample_train'] / 1e6:.3f} MFLOP per sample "
        f"trained -> {fl[key]:.3f}s per {unit} at the measured "
        f"{fl['gemm_flops_per_second'] / 1e9:.1f} GFLOP/s float32 GEMM rate"
    )
    g = result["guard"]
    if g["passed"]:
        lines.append(
            f"guard: passed (first-step losses within {g['loss_rtol']:g} relative, test "
            f"accuracies within {g['accuracy_band_points']:g} points)"
        )
    else:
        lines.extend(f"guard FAILED: {f}" for f in g["failures"])
    return "\n".join(lines)
