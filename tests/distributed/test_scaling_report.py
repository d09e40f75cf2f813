"""The scaling benchmark's bookkeeping: configurations, paired speed-ups, the table; and
``tapegrad bench --ranks`` refusing what it cannot measure."""

from __future__ import annotations

import pytest

from tapegrad.bench import scaling
from tapegrad.cli import main


def _run(seconds: float, acc: float) -> dict:
    return {
        "epoch_seconds": seconds,
        "first_epoch_seconds": 2 * seconds,
        "test_accuracy": acc,
        "alloc_per_step": 2048,
        "epochs": 3,
        "steps_per_epoch": 600,
        "parameters": 1000,
        "batch_size": 100,
    }


def test_configurations_fill_the_cores():
    assert scaling.configurations(2, 2) == [(1, 1), (1, 2), (2, 1)]
    assert scaling.configurations(4, 16) == [(1, 1), (1, 16), (4, 4)]
    assert (
        scaling.label(2, 1) == "2 ranks x 1 thread"
        and scaling.label(1, 2) == "1 process x 2 threads"
    )


def test_speedups_are_medians_of_ratios_within_each_repeat():
    configs = [scaling.label(*c) for c in scaling.configurations(2, 2)]
    # repeat 2 ran on a loaded machine: every configuration slowed down alike
    by = {
        configs[0]: [_run(2.0, 0.98), _run(4.0, 0.98), _run(2.2, 0.98)],
        configs[1]: [_run(1.6, 0.97), _run(3.2, 0.97), _run(1.6, 0.97)],
        configs[2]: [_run(1.0, 0.98), _run(2.0, 0.98), _run(1.0, 0.96)],
    }
    result = {"ranks": 2, "cores": 2, "configs": configs, "runs": {"mlp": by}}
    (row,) = scaling.summary(result)
    assert row["speedup_vs_single"] == pytest.approx(2.0)  # ratios 2, 2, 2.2 -> 2
    assert row["speedup_vs_threads"] == pytest.approx(1.6)
    assert row["seconds"][configs[2]] == 1.0 and row["accuracy"][configs[2]] == 0.98
    table = scaling.markdown(result)
    assert "| `mlp` | 3 | 2.20 s | 1.60 s | 1.00 s | 2.00x | 1.60x |" in table
    assert table.count("\n") == 2 and "2.0 KiB" in table


def test_bench_ranks_refuses_fewer_than_two(capsys):
    assert main(["bench", "mlp", "--ranks", "1"]) == 2
    assert "bench --ranks compares N >= 2 ranks with one process, got 1" in capsys.readouterr().err
