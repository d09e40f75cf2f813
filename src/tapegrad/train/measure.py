"""What the trainer measures per epoch besides loss and accuracy: time, allocation, peak RSS.

Allocation is measured with ``tracemalloc`` (which sees NumPy's array buffers) on a few sampled
steps in the middle of each epoch, because tracing every step would distort the timing. For a
sampled step the figure is the high-water mark of memory allocated during the step above what
was live when it began: the working memory the step needed. ``allocated`` per epoch is the
median sampled step times the number of steps. A step that reuses preallocated buffers scores
(almost) zero; one that builds and frees a graph scores the size of its largest live set.
"""

from __future__ import annotations

import resource
import statistics
import sys
import tracemalloc
from collections.abc import Callable


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far, in bytes.

    ``VmHWM`` of /proc/self/status where there is one, not ``getrusage``'s ``ru_maxrss``
    alone: Linux carries a parent's high-water mark into a forked child's ``ru_maxrss`` across
    ``exec``, so a run started by a large parent would report the parent's size.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def traced_step(fn: Callable[[], object]) -> tuple[object, int]:
    """Run ``fn`` under tracemalloc; return its result and the bytes of its allocation peak."""
    already = tracemalloc.is_tracing()
    if not already:
        tracemalloc.start()
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not already:
            tracemalloc.stop()
    return result, max(peak - start, 0)


class AllocationSampler:
    """Chooses which steps of an epoch to trace and summarises what they allocated."""

    def __init__(self, samples: int = 4):
        self.samples = samples
        self.bytes: list[int] = []
        self.chosen: frozenset[int] = frozenset()

    def start_epoch(self, steps_in_epoch: int, first_step: int = 0) -> None:
        mid = first_step + max((steps_in_epoch - first_step) // 2, 0)
        self.chosen = frozenset(s for s in range(mid, mid + self.samples) if s < steps_in_epoch)
        self.bytes = []

    def wants(self, step_index: int) -> bool:
        return step_index in self.chosen

    def record(self, nbytes: int) -> None:
        self.bytes.append(nbytes)

    def per_step(self) -> int | None:
        return int(statistics.median(self.bytes)) if self.bytes else None


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
