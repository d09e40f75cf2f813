"""Benchmarks: the seed workloads trained by tapegrad, PyTorch and JAX side by side
(:mod:`~tapegrad.bench.harness`, one worker process per framework and repeat, checked against
the peers' plain training loops by :mod:`~tapegrad.bench.selfcheck`), the physical floor
(:mod:`~tapegrad.bench.flops`), and the gradient micro-benchmarks (:mod:`~tapegrad.bench.micro`).
``tapegrad bench WORKLOAD --vs torch,jax`` runs them; the peers are imported only inside their
own processes, never by tapegrad itself.
"""

from .flops import FlopCount, count_flops, gemm_rate
from .harness import (
    EXIT_MISMATCH,
    PEERS,
    WORKLOADS,
    BenchError,
    GuardError,
    check_agreement,
    format_table,
    run_benchmark,
    run_benchmarks,
)

__all__ = [
    "EXIT_MISMATCH",
    "PEERS",
    "WORKLOADS",
    "BenchError",
    "FlopCount",
    "GuardError",
    "check_agreement",
    "count_flops",
    "format_table",
    "gemm_rate",
    "run_benchmark",
    "run_benchmarks",
]
