"""The bench checks itself against plain training loops.

A harness can slow the framework it measures (its runner classes, how batches reach the
framework, the environment it starts processes with), and then tapegrad's ratios flatter it.
So beside each peer's worker, ``tapegrad bench`` runs that peer's *plain* loop, a short file
written as the peer's users write a training loop (:mod:`plain_torch <tapegrad.bench.plain_torch>`,
:mod:`plain_jax <tapegrad.bench.plain_jax>`), in its own process, alternating with the workers,
under the same CPU affinity and allocator setting, but with nothing of tapegrad imported and no
thread variables beyond the peer's own call (``torch.set_num_threads``; XLA follows the
affinity). :func:`compare` then sets the worker's steady epoch against the plain loop's, repeat by
repeat: the median ratio must lie within :data:`TOLERANCE` of 1, or the run fails with
:data:`EXIT_SELF_CHECK`.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

TOLERANCE = 0.10
EXIT_SELF_CHECK = 6
SCRIPTS = {"torch": "plain_torch.py", "jax": "plain_jax.py"}


def script(peer: str) -> Path:
    """The plain loop of ``peer`` (a file run as a script, never imported by tapegrad)."""
    if peer not in SCRIPTS:
        raise ValueError(f"no plain loop for {peer!r}; have {', '.join(SCRIPTS)}")
    return Path(__file__).with_name(SCRIPTS[peer])


def command(peer: str, spec_path: Path) -> list[str]:
    return [sys.executable, str(script(peer)), str(spec_path)]


def _paired(worker: list[list[float]], plain: list[list[float]]) -> list[float]:
    """Repeat by repeat, the worker's median over the plain loop's (the two ran one after the
    other, so they saw the same state of the machine)."""
    return [statistics.median(w) / statistics.median(p) for w, p in zip(worker, plain) if w and p]


def compare(
    worker: list[list[float]],
    plain: list[list[float]],
    tolerance: float = TOLERANCE,
    worker_cpu: list[list[float]] | None = None,
    plain_cpu: list[list[float]] | None = None,
) -> dict:
    """The worker's steady times against the plain loop's, each given per repeat (a list of
    steady times for every repeat). The verdict is on the median over repeats of the
    repeat-by-repeat ratio worker / plain, within ``1 +- tolerance``: on a shared machine the
    load drifts between repeats (two-thread runs here moved by 1.5x from one repeat to the
    next, the worker and the plain loop together), so adjacent runs are what compare. Wall
    time decides, what a user waits for; with the steady epochs' CPU times too, ``cpu_ratio``
    (paired the same way) says which way a failure points: CPU times that agree while wall
    times do not mean a machine too busy to time, not a slower loop."""
    ratios = _paired(worker, plain)
    if not ratios:
        raise ValueError("self-check: no steady times to compare (one epoch or one step only?)")
    ratio = statistics.median(ratios)
    out = {
        "worker": statistics.median(t for r in worker for t in r),
        "plain": statistics.median(t for r in plain for t in r),
        "ratio": ratio,
        "ratios": ratios,
        "tolerance": tolerance,
        "passed": abs(ratio - 1) <= tolerance,
    }
    cpu = _paired(worker_cpu or [], plain_cpu or [])
    if cpu:
        out["cpu_ratio"] = statistics.median(cpu)
    return out


def _seconds(x: float) -> str:
    return f"{x:.3f} s" if x >= 0.01 else f"{1e3 * x:.2f} ms"


def describe(peer: str, check: dict, unit: str = "epoch") -> str:
    """One line: the two medians, the difference, and the verdict."""
    verdict = "within" if check["passed"] else "more than"
    cpu = f"; CPU time {100 * (check['cpu_ratio'] - 1):+.1f}%" if "cpu_ratio" in check else ""
    rs = check.get("ratios", [])
    spread = (
        f", repeats {100 * (min(rs) - 1):+.0f}% to {100 * (max(rs) - 1):+.0f}%"
        if len(rs) > 1
        else ""
    )
    return (
        f"{peer}: the bench's worker {_seconds(check['worker'])} per {unit} against a plain "
        f"{peer} loop's {_seconds(check['plain'])} ({100 * (check['ratio'] - 1):+.1f}% repeat "
        f"by repeat{spread}, {verdict} {100 * check['tolerance']:.0f}%{cpu})"
    )


def _diagnosis(peer: str, check: dict, unit: str, threads: int | None) -> str:
    """What a failed check most likely means, from the CPU times where there are some."""
    cpu = check.get("cpu_ratio")
    if cpu is None:
        return f"a machine too busy to time, or the bench slowing {peer}"
    if threads is not None and threads > 1:
        return (
            f"their CPU time per {unit} differs by {100 * (cpu - 1):+.1f}%, but at {threads} "
            f"threads it includes threads spinning while they wait for one another, which "
            f"another job holding a core prolongs, so it cannot tell a busy machine from the "
            f"bench slowing {peer}"
        )
    if abs(cpu - 1) <= check["tolerance"]:
        return (
            f"their CPU time per {unit} agrees ({100 * (cpu - 1):+.1f}%): the processes waited "
            f"for a core, the machine was too busy to time"
        )
    return (
        f"their CPU time per {unit} differs too ({100 * (cpu - 1):+.1f}%): one of the two "
        f"does more work; if it persists on a quiet machine, the bench is slowing {peer}"
    )


def failures(checks: dict[str, dict], unit: str = "epoch", threads: int | None = None) -> list[str]:
    """The failed checks as messages that say what failed and what it most likely means."""
    where = f" at {threads} thread(s)" if threads is not None else ""
    return [
        f"self-check failed{where}: {describe(peer, c, unit)}; the figures for {peer} do not "
        f"show what its users' own loop gets ({_diagnosis(peer, c, unit, threads)}): rerun "
        f"on a quieter machine or with more --repeats"
        for peer, c in checks.items()
        if not c["passed"]
    ]
