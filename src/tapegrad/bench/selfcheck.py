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
    worker: list[float], plain: list[float], tolerance: float = TOLERANCE
) -> dict[str, float | bool]:
    """The worker's steady times against the plain loop's (both pooled over repeats): the
    medians, their ratio worker / plain, and whether it lies within ``1 +- tolerance``."""
    if not worker or not plain:
        raise ValueError("self-check: no steady times to compare (one epoch or one step only?)")
    w, p = statistics.median(worker), statistics.median(plain)
    ratio = w / p
    return {
        "worker": w,
        "plain": p,
        "ratio": ratio,
        "tolerance": tolerance,
        "passed": abs(ratio - 1) <= tolerance,
    }


def _seconds(x: float) -> str:
    return f"{x:.3f} s" if x >= 0.01 else f"{1e3 * x:.2f} ms"


def describe(peer: str, check: dict, unit: str = "epoch") -> str:
    """One line: the two medians, the difference, and the verdict."""
    verdict = "within" if check["passed"] else "more than"
    return (
        f"{peer}: the bench's worker {_seconds(check['worker'])} per {unit} against a plain "
        f"{peer} loop's {_seconds(check['plain'])} ({100 * (check['ratio'] - 1):+.1f}%, "
        f"{verdict} {100 * check['tolerance']:.0f}%)"
    )


def failures(checks: dict[str, dict], unit: str = "epoch", threads: int | None = None) -> list[str]:
    """The failed checks as messages that say what failed and what it means."""
    where = f" at {threads} thread(s)" if threads is not None else ""
    return [
        f"self-check failed{where}: {describe(peer, c, unit)}; the figures for {peer} do not "
        f"show what its users' own loop gets (a machine too busy to time, or the bench slowing "
        f"{peer}): rerun on a quieter machine or with more --repeats"
        for peer, c in checks.items()
        if not c["passed"]
    ]
