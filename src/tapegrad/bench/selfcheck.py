"""The bench checks itself against plain training loops.

A harness can slow the framework it measures (its runner classes, how batches reach the
framework, the environment it starts processes with), and then tapegrad's ratios flatter it.
So beside each peer's worker, ``tapegrad bench`` runs that peer's *plain* loop, a short file
written as the peer's users write a training loop (:mod:`plain_torch <tapegrad.bench.plain_torch>`,
:mod:`plain_jax <tapegrad.bench.plain_jax>`), in its own process, alternating with the workers,
under the same CPU affinity and allocator setting, but with nothing of tapegrad imported and no
thread variables beyond the peer's own call (``torch.set_num_threads``; XLA follows the
affinity). :func:`compare` then sets the worker's steady epoch against the plain loop's: they
must agree within :data:`TOLERANCE`, or the run fails with :data:`EXIT_SELF_CHECK`.
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


def compare(
    worker: list[float],
    plain: list[float],
    tolerance: float = TOLERANCE,
    worker_cpu: list[float] | None = None,
    plain_cpu: list[float] | None = None,
) -> dict[str, float | bool]:
    """The worker's steady times against the plain loop's (both pooled over repeats): the
    medians, their ratio worker / plain, and whether it lies within ``1 +- tolerance``. The
    verdict is on wall time, what a user waits for. With the steady epochs' CPU times too,
    ``cpu_ratio`` says which way a failure points: CPU times that agree while wall times do not
    mean a machine too busy to time (the processes waited for a core), not a slower loop."""
    if not worker or not plain:
        raise ValueError("self-check: no steady times to compare (one epoch or one step only?)")
    w, p = statistics.median(worker), statistics.median(plain)
    ratio = w / p
    out = {
        "worker": w,
        "plain": p,
        "ratio": ratio,
        "tolerance": tolerance,
        "passed": abs(ratio - 1) <= tolerance,
    }
    if worker_cpu and plain_cpu:
        out["cpu_ratio"] = statistics.median(worker_cpu) / statistics.median(plain_cpu)
    return out


def _seconds(x: float) -> str:
    return f"{x:.3f} s" if x >= 0.01 else f"{1e3 * x:.2f} ms"


def describe(peer: str, check: dict, unit: str = "epoch") -> str:
    """One line: the two medians, the difference, and the verdict."""
    verdict = "within" if check["passed"] else "more than"
    cpu = f"; CPU time {100 * (check['cpu_ratio'] - 1):+.1f}%" if "cpu_ratio" in check else ""
    return (
        f"{peer}: the bench's worker {_seconds(check['worker'])} per {unit} against a plain "
        f"{peer} loop's {_seconds(check['plain'])} ({100 * (check['ratio'] - 1):+.1f}%, "
        f"{verdict} {100 * check['tolerance']:.0f}%{cpu})"
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
