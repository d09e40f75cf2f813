"""The bench's summaries: each framework's runs reduced to medians and spreads, the peers'
ratios to tapegrad, and the correctness guard (first-step losses; final accuracies, a short
run's mean training losses, or validation losses) that makes ``tapegrad bench`` exit 4 when
the frameworks disagree."""

from __future__ import annotations

import statistics

# The correctness guard. Same weights and the same first batch: the first-step losses differ
# only by float32 rounding in a different summation order.
LOSS_RTOL = 1e-5
# Final test accuracies, in percentage points. After whole epochs the frameworks' float32
# rounding has compounded into genuinely different trajectories (the presets' seed-to-seed
# spread is about 0.5-1 point): 1.5 points.
ACC_BAND_FULL = 1.5
# Runs shorter than an epoch (``--steps``) are judged on their mean training loss over the run
# instead, within this relative band: a model a few dozen steps into training is still in its
# transient, where the test accuracy hangs on rounding. Measured (2026-12-07): resnet's 60
# steps from one weight moved by one ulp took tapegrad's own test accuracy from 32.5% to 43.7%
# while the mean training loss of the last ten steps moved 0.3%; the bench's three frameworks
# read 54.6 / 42.6 / 68.4% against mean losses within 0.43% of each other.
SHORT_LOSS_RTOL = 0.02
# A language model has no accuracy: its final validation losses (nats per character) are
# compared instead. Its dropout masks differ between frameworks from the first step, so the
# runs separate sooner than rounding makes them: 0.05 nats, a first guess to be calibrated
# against the run-to-run spread once full runs are measured.
LM_LOSS_BAND = 0.05


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
        "reference_loss": runs[0].get("reference_loss"),
        "final_loss": med([r["final_loss"] for r in runs]),
        "test_loss": med([r["test_loss"] for r in runs]),
        "test_accuracy": _median_or_none([r["test_accuracy"] for r in runs]),
        "test_accuracy_runs": [r["test_accuracy"] for r in runs],
        "mode": runs[0]["mode"],
        "notes": runs[0]["notes"],
        "versions": runs[0]["versions"],
        **thread_use(runs),
    }


def _median_or_none(values: list):
    """The median, or None when the values are None (a language model has no accuracy)."""
    return None if any(v is None for v in values) else statistics.median(values)


def thread_use(runs: list[dict]) -> dict:
    """How many cores a framework kept busy while training (its CPU time over the wall time,
    median over runs) and how many of its threads did work (those busy for at least 5% of the
    time): whether a thread setting took effect. Empty for runs that did not record it."""
    out = {}
    used = [r["cpu_seconds"] / r["training_seconds"] for r in runs if r.get("training_seconds")]
    if used:
        out["cores_busy"] = statistics.median(used)
    busy = [len(r["busy_thread_seconds"]) for r in runs if r.get("busy_thread_seconds")]
    if busy:
        out["busy_threads"] = max(busy)
    return out


def summarise_plain(runs: list[dict], steps_mode: bool) -> dict:
    """A plain loop's repeats pooled: first and steady times, losses, cores kept busy."""
    return {
        "first": _spread(
            [r["step_seconds"][0] if steps_mode else r["epoch_seconds"][0] for r in runs]
        ),
        "steady": _spread([t for r in runs for t in steady_samples(r, steps_mode)]),
        "first_loss": runs[0]["first_loss"],
        "reference_loss": runs[0].get("reference_loss"),
        "final_loss": statistics.median(r["final_loss"] for r in runs),
        "mode": "plain loop",
        "versions": {k: v for k, v in runs[0].items() if k in ("torch", "jax")},
        **thread_use(runs),
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


def loss_disagreement(a_name: str, a: float, b_name: str, b: float, rtol: float) -> str | None:
    """A message if first-step losses ``a`` and ``b`` differ by more than ``rtol`` relative
    (or either is NaN); None when they agree."""
    rel = abs(a - b) / max(abs(a), abs(b), 1e-30)
    if rel <= rtol:
        return None
    return (
        f"first-step loss: {a_name} {a:.8g} vs {b_name} {b:.8g} (relative difference "
        f"{rel:.2e} > {rtol:g}); from the same weights and batch they must agree "
        f"to float32 rounding"
    )


def agreement_terms(guard: dict, summary: dict[str, dict]) -> str:
    """What a passed guard compared after the first-step losses, in words."""
    if summary["tapegrad"]["test_accuracy"] is None:
        return (
            f"validation losses within {LM_LOSS_BAND:g} nats; dropout: losses of the first "
            f"batch in evaluation mode"
        )
    if guard.get("short_loss_rtol") is not None:
        return (
            f"mean training losses over the run within {guard['short_loss_rtol']:.0%} "
            f"relative: a run under an epoch is not judged on its test accuracy"
        )
    return f"test accuracies within {guard['accuracy_band_points']:g} points"


def check_agreement(
    summary: dict[str, dict],
    band_points: float,
    loss_rtol: float = LOSS_RTOL,
    plain: dict[str, dict] | None = None,
    short: bool = False,
) -> list[str]:
    """Every peer against tapegrad: first-step losses to ``loss_rtol`` relative, final test
    accuracies within ``band_points`` percentage points (a ``short`` run, under an epoch: mean
    training losses over the run within :data:`SHORT_LOSS_RTOL` relative instead); every plain
    loop (``plain``, which evaluates nothing) on its first-step loss. Returns the failures
    (empty: agree).

    A workload with dropout is compared on its ``reference_loss`` (the first batch in
    evaluation mode, before training) instead of its first training loss, whose dropout masks
    differ between frameworks; one without accuracy (a language model) on its final
    validation loss, within :data:`LM_LOSS_BAND` nats."""
    failures = []
    base = summary["tapegrad"]

    def first(s):
        return s["first_loss"] if s.get("reference_loss") is None else s["reference_loss"]

    for peer, s in summary.items():
        if peer == "tapegrad":
            continue
        msg = loss_disagreement("tapegrad", first(base), peer, first(s), loss_rtol)
        if msg:
            failures.append(msg)
        if base["test_accuracy"] is None or s["test_accuracy"] is None:
            la, lb = base["test_loss"], s["test_loss"]
            if not abs(la - lb) <= LM_LOSS_BAND:
                failures.append(
                    f"final validation loss: tapegrad {la:.4f} vs {peer} {lb:.4f} (difference "
                    f"{abs(la - lb):.4f} > the {LM_LOSS_BAND:g}-nat band)"
                )
            continue
        if short:
            la, lb = base["final_loss"], s["final_loss"]
            if not abs(la - lb) <= SHORT_LOSS_RTOL * abs(lb):
                failures.append(
                    f"mean training loss over the run: tapegrad {la:.4f} vs {peer} {lb:.4f} "
                    f"(relative difference {abs(la - lb) / abs(lb):.2%} > {SHORT_LOSS_RTOL:.0%})"
                )
            continue
        pa, pb = 100 * base["test_accuracy"], 100 * s["test_accuracy"]
        if not abs(pa - pb) <= band_points:
            failures.append(
                f"final test accuracy: tapegrad {pa:.2f}% vs {peer} {pb:.2f}% (difference "
                f"{abs(pa - pb):.2f} points > the {band_points:g}-point band)"
            )
    for peer, s in (plain or {}).items():
        name = f"the plain {peer} loop"
        msg = loss_disagreement("tapegrad", first(base), name, first(s), loss_rtol)
        if msg:
            failures.append(msg)
    return failures
