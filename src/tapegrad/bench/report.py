"""BENCHMARKS.md from ``tapegrad bench --json`` results: tables and bar charts.

:func:`markdown` renders the workload tables (per framework and plain loop: first epoch, steady
epoch median [min-max], steady step, cores busy, peak RSS, allocation per epoch, loss, test
accuracy, tapegrad's time ratio to it; then the floor, the guard and the self-check), one table
per thread setting, the most threads first, plus the micro-benchmark table; :func:`charts` draws
the seed papers' three figures (time per epoch, memory per epoch, accuracy) as PNGs from the
headline setting.
"""

from __future__ import annotations

from pathlib import Path

from ..serialization import atomic_file
from . import selfcheck
from .harness import ALLOCATOR_ENV
from .summary import agreement_terms
from .table import _bytes, first_epoch_note

COLORS = {"tapegrad": "#d95f02", "torch": "#1b9e77", "jax": "#7570b3", "autograd": "#e7298a"}


def _score(s: dict) -> str:
    """A framework's test accuracy, or (a language model) its validation loss."""
    if s.get("test_accuracy") is None:
        return f"val loss {s['test_loss']:.4f}"
    return f"{100 * s['test_accuracy']:.2f}%"


def _s(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3f} s" if x >= 0.01 else f"{1e3 * x:.2f} ms"


def _spread(d: dict | None) -> str:
    if d is None:
        return "n/a"
    if d["n"] == 1:
        return _s(d["median"])
    return f"{_s(d['median'])} [{_s(d['min'])} - {_s(d['max'])}]"


def _ratio(r: dict | None) -> str:
    if not r:
        return "n/a"
    if r["n"] == 1:
        return f"{r['median']:.2f}x"
    return f"{r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]"


def flatten(results: list[dict]) -> list[dict]:
    """Per-setting results from ``tapegrad bench --json`` files: a run of several thread
    settings holds one result per setting under ``results``."""
    out = []
    for r in results:
        out.extend(r["results"] if "results" in r else [r])
    return out


def by_workload(results: list[dict]) -> dict[str, list[dict]]:
    """Results grouped by workload (first-seen order), each group the most threads first."""
    groups: dict[str, list[dict]] = {}
    for r in flatten(results):
        groups.setdefault(r["workload"], []).append(r)
    return {w: sorted(rs, key=lambda r: -r["threads"]) for w, rs in groups.items()}


def headline(results: list[dict]) -> list[dict]:
    """Each workload's result with the most threads (the user's default: every core)."""
    return [rs[0] for rs in by_workload(results).values()]


def threads_label(threads: int, cpus: int | None) -> str:
    if cpus and threads == cpus:
        return f"both cores ({threads} threads)" if threads == 2 else f"all {threads} cores"
    return "one thread" if threads == 1 else f"{threads} threads"


def _cores(s: dict) -> str:
    if "cores_busy" not in s:
        return "n/a"
    return f"{s['cores_busy']:.2f}" + (f" / {s['busy_threads']}" if "busy_threads" in s else "")


def workload_table(result: dict, title: str | None = None) -> str:
    """One workload's table at one thread setting: rows, the floor, the guard, the
    self-check, the settings."""
    unit = result["unit"]
    facts, floor = result["facts"], result["floor"]
    cpus = result.get("machine", {}).get("usable_cpus")
    width = f", {facts['width']}x wider" if facts.get("width", 1) != 1 else ""
    lines = [] if title == "" else [title or f"### {result['workload']}", ""]
    lines += [
        f"**{threads_label(result['threads'], cpus)}**: {facts['dataset']}, "
        f"{facts['train_samples']} training samples, {facts['parameters']} parameters{width}, "
        f"{facts['optimizer']} lr {facts['lr']:g}, batch {facts['batch_size']}, "
        + (f"{result['epochs']} epochs" if unit == "epoch" else f"{result['steps']} steps")
        + f", {result['repeats']} repeats, {result['threads']} thread(s).",
        "",
        f"| framework | first {unit} | steady {unit}: median [min - max] | steady step | "
        "cores busy / threads | peak RSS (before training) | alloc/epoch | train loss | "
        "test acc | tapegrad time / this |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fw, s in result["summary"].items():
        ratio = "1" if fw == "tapegrad" else _ratio(result["ratios"][fw]["steady"])
        lines.append(
            f"| {fw} ({s['mode']}) | {_s(s['first']['median'])} | {_spread(s['steady'])} | "
            f"{_s(s['steady_step']['median']) if s['steady_step'] else 'n/a'} | {_cores(s)} | "
            f"{s['peak_rss'] / 2**20:.0f} MiB ({s['rss_before_training'] / 2**20:.0f}) | "
            f"{_bytes(s['alloc_per_epoch'])} | "
            f"{s['final_loss']:.4f} | {_score(s)} | {ratio} |"
        )
    for peer, s in result.get("plain", {}).items():
        ratio = _ratio(result["ratios"].get(f"{peer}-plain", {}).get("steady"))
        lines.append(
            f"| {peer}, plain loop | {_s(s['first']['median'])} | {_spread(s['steady'])} | "
            f"n/a | {_cores(s)} | n/a | n/a | {s['final_loss']:.4f} | n/a | {ratio} |"
        )
    key = "epoch_seconds" if unit == "epoch" else "step_seconds"
    tg = result["summary"]["tapegrad"]["steady"] or result["summary"]["tapegrad"]["first"]
    lines += [
        "",
        f"Floor: {facts['flops']['per_epoch_train'] / 1e9:.1f} GFLOP per training epoch "
        f"({facts['flops']['per_sample_train'] / 1e6:.3f} MFLOP per sample) at "
        f"{floor['gemm_flops_per_second'] / 1e9:.1f} GFLOP/s = **{_s(floor[key])} per {unit}**; "
        f"tapegrad's steady {unit} is {tg['median'] / floor[key]:.1f}x the floor.",
        "",
    ]
    note = first_epoch_note(result)
    if note:
        lines += [note + ".", ""]
    g = result["guard"]
    if g["passed"]:
        lines.append(
            f"Guard: passed (first-step losses agree within {g['loss_rtol']:g} relative: "
            + ", ".join(f"{fw} {s['first_loss']:.7f}" for fw, s in result["summary"].items())
            + "".join(
                f", {p}'s plain loop {s['first_loss']:.7f}"
                for p, s in result.get("plain", {}).items()
            )
            + f"; {agreement_terms(g, result['summary'])})."
        )
    else:
        lines += [f"**Guard FAILED**: {f}" for f in g["failures"]]
    lines += ["", self_check_line(result)]
    return "\n".join(lines) + "\n"


def self_check_line(result: dict) -> str:
    """The self-check's verdict for one table."""
    check = result.get("self_check")
    if check is None:
        return "Self-check: not recorded (a result from before the bench checked itself)."
    if not check["checks"]:
        return "Self-check: not run (no peer, or `--no-self-check`)."
    verdict = "passed" if check["passed"] else "**FAILED**"
    return (
        f"Self-check {verdict}: "
        + "; ".join(selfcheck.describe(p, c, result["unit"]) for p, c in check["checks"].items())
        + "."
    )


def workload_section(results: list[dict]) -> str:
    """A workload's tables, the most threads (the headline) first."""
    return "\n".join(workload_table(r, None if i == 0 else "") for i, r in enumerate(results))


def _methods(results: list[dict]) -> list[str]:
    seen = {}
    for r in results:
        for fw, s in r["summary"].items():
            seen.setdefault(fw, (s["alloc_method"], s["notes"], s["versions"]))
    return [
        f"  - **{fw}**: {notes}; allocation: {method}." for fw, (method, notes, _) in seen.items()
    ]


def versions(results: list[dict]) -> dict:
    out = {}
    for r in results:
        for s in r["summary"].values():
            out.update(s["versions"])
    return out


def method_lines(results: list[dict]) -> list[str]:
    """The "How it is measured" section (its body), for the runs in ``results``."""
    settings = sorted({r["threads"] for r in results}, reverse=True)
    gib = int(ALLOCATOR_ENV["MALLOC_TRIM_THRESHOLD_"]) // 2**30
    allocators = {r.get("allocator", "system") for r in results}
    return [
        "Each framework trains the identical architecture from the **same initial weights** "
        "(built by tapegrad's preset and exported as safetensors), with the same optimiser, "
        "learning rate, batch size and **batch order** (`tapegrad.data.Batches(..., seed=0)`), "
        "each in its own process. The processes alternate: every repeat runs every thread "
        "setting (" + ", then ".join(f"{t} thread(s)" for t in settings) + ") and within it "
        "tapegrad, torch, torch's plain loop, jax, jax's plain loop, so the drift of a shared "
        "machine hits all alike.",
        "",
        "- *Threads*: the headline table of each workload uses every core, a user's default "
        "(each framework's own thread count, nothing pinned); the table below it limits every "
        "process to one CPU (affinity, set before the program starts, the next CPU at every "
        "repeat: XLA sizes its thread pool by it and ignores thread flags) and one thread "
        "(`OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS`, `torch.set_num_threads`, "
        "`numba.set_num_threads`). *cores busy / threads*: the process's CPU time over the "
        "wall time while it trained, and how many of its threads worked at least 5% of that "
        "time: the check that a setting took effect. A peer's worker imports its framework "
        "before anything of tapegrad and leaves numba's threads alone: starting numba's "
        "OpenMP layer first made PyTorch share the system's OpenMP runtime instead of its own, "
        "and its two-thread steps took about twice as long.",
        "- *Allocator*: "
        + (
            f"every process runs with glibc's malloc keeping the memory it frees "
            f"(`MALLOC_TRIM_THRESHOLD_` and `MALLOC_MMAP_THRESHOLD_` at {gib} GiB). PyTorch's "
            "CPU tensors come straight from malloc; with glibc's defaults, in some processes "
            "and not others, the top of the heap is handed back to the kernel at the end of "
            "every step and faulted in again in the next (seed-cnn, one thread: 0 to 2,000 "
            "page faults a step, 0 to 3.7 ms of kernel time on 3-4 ms of work; "
            "`python benchmarks/allocator.py` measures it), so identical "
            "PyTorch processes ran 1.0x to 2x the fastest one's time. With the setting every "
            "process runs at the fast speed; `tapegrad bench --allocator system` measures "
            "without it."
            if allocators == {"keep"}
            else "glibc's malloc as configured (`--allocator system`): PyTorch's steady epoch "
            "varies between processes by up to 2x (see `tapegrad/bench/harness.py`)."
        ),
        "- *Self-check*: beside each peer's worker runs that peer's plain training loop "
        "(`src/tapegrad/bench/plain_torch.py`, `plain_jax.py`: short scripts written as the "
        "peer's users write a loop, importing nothing of tapegrad; the same data, weights, "
        "batch order, CPUs and allocator). The run fails (exit 6) if a worker's steady epoch "
        "over its plain loop's, repeat by repeat (the two run one after the other), is more "
        f"than {100 * selfcheck.TOLERANCE:.0f}% off 1 in the median; the plain loop's first "
        "loss must equal tapegrad's (the guard).",
        "- *first epoch* is reported apart: it includes warm-up and compilation (numba kernels, "
        "XLA). tapegrad's kernels compile into a numba cache made for the run: its first "
        "run starts with that cache empty (*cold*, reported below each table), the later "
        "ones find it filled (*warm*, the table's first epoch). *steady epoch* pools epochs 2.. "
        "of all repeats. Times are the training loop only (batch gather, forward, backward, "
        "update, loss read back).",
        "- *tapegrad time / this*: tapegrad's steady epoch over the framework's (or plain "
        "loop's), repeat by repeat (adjacent runs), median [min-max]; above 1 means tapegrad "
        "is slower.",
        "- *peak RSS*: the worker's maximum resident set (`VmHWM`: dataset, framework, training, "
        "evaluation); in brackets its RSS just before the first step (imports and data). "
        "*alloc/epoch*: the step's working memory (high-water mark of bytes "
        "allocated during a step above what was live before it; median of 4 steps sampled "
        "mid-epoch, measured after training) times the steps per epoch, the Trainer's "
        "definition. Each framework's method:",
        *_methods(results),
        "- *Floor*: training FLOPs per epoch counted from the architecture "
        "(`tapegrad/bench/flops.py`: conv/linear/recurrent multiply-adds, forward + weight "
        "gradients + input gradients where needed, 2 FLOPs each) over this machine's float32 "
        "GEMM rate (median of 9 `np.matmul` 2048x2048 before each repeat, pooled, under the "
        "same threads).",
        "- *Guard*: the run fails (exit 4) if a peer's first-step loss differs from tapegrad's "
        "by more than 1e-5 relative, or its final test accuracy by more than 1.5 points; a "
        "run shorter than an epoch (`--steps`) is judged on its mean training loss instead, "
        "within 2% relative (a few dozen steps into training the test accuracy hangs on "
        "rounding: resnet's 60 steps from one weight moved by one ulp read 32.5% and 43.7%), "
        "and a language model on its validation loss, within 0.05 nats.",
    ]


def markdown(
    results: list[dict],
    micro: dict | None = None,
    micro_markdown: str | None = None,
    commands: list[str] | None = None,
    notes: list[str] | None = None,
    sections: list[str] | None = None,
) -> str:
    """The whole BENCHMARKS.md: ``results`` are ``tapegrad bench --json`` results (one thread
    setting or several); ``sections`` are more Markdown sections placed after the
    micro-benchmarks (eager mode, scaling)."""
    results = flatten(results)
    m = results[0]["machine"]
    vers = {**versions(results), "python": m["python"]}
    mode = results[0].get("mode", "eager")
    lines = [
        "# Benchmarks: tapegrad side by side with PyTorch and JAX",
        "",
        "Regenerate everything (tables, JSON, charts) with one command from the repository root:",
        "",
        "```bash",
        "python benchmarks/run_all.py",
        "```",
        "",
        f"- Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs; {m['platform']}. The machine "
        "is shared with other jobs and noisy: read differences under ~20% as noise.",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())) + ".",
        *([f"- NumPy's BLAS (tapegrad's matrix products): {m['blas']}."] if "blas" in m else []),
        f"- Date: {m['date']}.",
        f"- tapegrad runs in **{mode} mode** here ("
        + (
            "its training step traced once per batch shape, then replayed over buffers "
            "allocated once; `tapegrad bench WORKLOAD --eager` measures eager mode"
            if mode == "compiled"
            else "a graph recorded and freed every step"
        )
        + ").",
        "",
        "## How it is measured",
        "",
        *method_lines(results),
        "",
    ]
    for note in notes or []:
        lines += [note, ""]
    if commands:
        lines += ["Commands run (by `benchmarks/run_all.py`):", "", "```bash", *commands, "```", ""]
    lines += [
        "## Seed workloads",
        "",
        "![time per epoch](benchmarks/figures/time_per_epoch.png)",
        "![memory per epoch](benchmarks/figures/memory_per_epoch.png)",
        "![test accuracy](benchmarks/figures/accuracy.png)",
        "",
    ]
    for group in by_workload(results).values():
        lines.append(workload_section(group))
    lines += ["## Gradient micro-benchmarks", ""]
    if micro_markdown:
        lines.append(micro_markdown.strip())
    else:
        lines.append("Not run in this build: `tapegrad.bench.micro` is not available yet.")
    for section in sections or []:
        lines += ["", section.strip()]
    return "\n".join(lines).rstrip() + "\n"


def charts(results: list[dict], folder: str | Path) -> list[Path]:
    """Bar charts like the seed papers' figures: time per epoch (with the floor), memory per
    epoch (allocation and peak RSS) and test accuracy, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = headline(results)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(results)
    out = []

    def bars(ax, r, values, errs=None):
        fws = list(r["summary"])
        colors = [COLORS.get(f, "grey") for f in fws]
        ax.bar(fws, values, color=colors, yerr=errs, capsize=3)
        ax.set_title(r["workload"])
        ax.tick_params(axis="x", labelsize=8)
        return fws

    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.4), squeeze=False)
    for ax, r in zip(axes[0], results):
        unit = r["unit"]
        med, lo, hi, first = [], [], [], []
        for s in r["summary"].values():
            st = s["steady"] or s["first"]
            med.append(st["median"])
            lo.append(st["median"] - st["min"])
            hi.append(st["max"] - st["median"])
            first.append(s["first"]["median"])
        fws = bars(ax, r, med, [lo, hi])
        ax.scatter(fws, first, marker="_", s=300, color="black", zorder=3, label=f"first {unit}")
        floor = r["floor"]["epoch_seconds" if unit == "epoch" else "step_seconds"]
        ax.axhline(floor, color="red", ls="--", lw=1, label="FLOP floor")
        ax.set_ylabel(f"seconds per {unit}")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        "Time per epoch: steady median (bars, min-max), first epoch (black tick), floor (red)"
    )
    fig.tight_layout()
    out.append(folder / "time_per_epoch.png")
    with atomic_file(out[-1]) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(2, n, figsize=(3.2 * n, 6), squeeze=False)
    for j, r in enumerate(results):
        s = r["summary"].values()
        bars(axes[0][j], r, [(x["alloc_per_epoch"] or 0) / 2**30 for x in s])
        axes[0][j].set_ylabel("GiB allocated per epoch")
        bars(axes[1][j], r, [x["peak_rss"] / 2**20 for x in s])
        axes[1][j].set_ylabel("peak RSS, MiB")
    fig.suptitle("Memory: working memory allocated per epoch (top), peak RSS (bottom)")
    fig.tight_layout()
    out.append(folder / "memory_per_epoch.png")
    with atomic_file(out[-1]) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.4), squeeze=False)
    for ax, r in zip(axes[0], results):
        if any(x["test_accuracy"] is None for x in r["summary"].values()):
            ax.set_title(f"{r['workload']}: no accuracy (see its validation loss)", fontsize=8)
            continue
        acc = [100 * x["test_accuracy"] for x in r["summary"].values()]
        bars(ax, r, acc)
        ax.set_ylim(max(0.0, min(acc) - 5), min(100.0, max(acc) + 2))
        ax.set_ylabel("test accuracy, %")
        for i, a in enumerate(acc):
            ax.text(i, a, f"{a:.2f}", ha="center", va="bottom", fontsize=7)
    fig.suptitle("Test accuracy after training")
    fig.tight_layout()
    out.append(folder / "accuracy.png")
    with atomic_file(out[-1]) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return out
