"""benchmarks/overhead.py and benchmarks/threads.py: the eager models compute the same thing,
the thread settings the bench uses take effect, and both render their sections. No timing
assertions: benchmarks are not tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tapegrad.bench import harness

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def overhead():
    return _script("overhead")


@pytest.fixture(scope="module")
def threads():
    return _script("threads")


# -- eager mode ------------------------------------------------------------------------------------
def test_lstm_models_agree_step_after_step(overhead):
    # the same weights and data: every runner's loss matches tapegrad's for several SGD steps,
    # so the timed programs are the same computation
    weights = overhead.lstm_weights()
    x, y = overhead.sine_batch(6)
    steps = {name: make(weights, x, y) for name, make in overhead.LSTM_RUNNERS.items()}
    for _ in range(3):
        losses = {name: step() for name, step in steps.items()}
        for name, loss in losses.items():
            assert loss == pytest.approx(losses["tapegrad"], rel=1e-5), name


def test_lstm_refuses_disagreeing_frameworks(overhead, monkeypatch):
    broken = dict(overhead.LSTM_RUNNERS)
    make = broken["torch (nn.LSTMCell)"]

    def wrong(w, x, y):
        return make(w, x, 2 * y)

    broken["torch (nn.LSTMCell)"] = wrong
    monkeypatch.setattr(overhead, "LSTM_RUNNERS", broken)
    with pytest.raises(SystemExit, match="first losses disagree: tapegrad"):
        overhead.lstm([4], rounds=1)


def test_overhead_markdown(overhead):
    one = {"median_s": 1.0, "min_s": 0.9, "max_s": 1.1, "n": 3}
    result = {
        "command": "python benchmarks/overhead.py",
        "threads": 1,
        "tiny": {
            "tapegrad": {"median_us": 24.0, "min_us": 23.0, "max_us": 25.0},
            "torch": {"median_us": 20.0, "min_us": 19.0, "max_us": 21.0},
        },
        "lstm": {
            "999": {
                "first_loss": {},
                "tapegrad": {**one, "median_s": 1.5},
                "tapegrad (gc paused)": one,
                "torch (nn.LSTMCell)": {**one, "median_s": 0.75},
            }
        },
    }
    text = overhead.markdown(result)
    assert "| torch | 20.0 [19.0-21.0] | 1.20x |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 999 |"))
    assert row.endswith("| 2.00x | 1502 us |") and row.count("x |") == 1


# -- thread settings -----------------------------------------------------------------------------
@pytest.mark.parametrize("library", ["numba", "openblas", "torch-gemm", "torch-conv"])
def test_one_thread_setting_takes_effect_without_pinning(threads, library):
    # started with the bench's one-thread environment but free to use every CPU, only one of
    # the process's threads does the work: the setting itself, not the affinity, limits it
    argv = [sys.executable, threads.__file__, "--child", library, "--child-threads", "1"]
    got = harness.launch("child", argv, harness.thread_env(1), harness.available_cpus(), 300)
    assert got["busy_threads"] == 1, got


@pytest.mark.skipif(len(harness.available_cpus()) < 2, reason="needs two CPUs")
def test_two_thread_setting_spreads_the_work(threads):
    argv = [sys.executable, threads.__file__, "--child", "openblas", "--child-threads", "2"]
    got = harness.launch("child", argv, harness.thread_env(2), harness.available_cpus(), 300)
    assert got["busy_threads"] == 2, got


def test_threads_markdown(threads):
    cell = {"wall": 1.0, "wall_min": 0.9, "wall_max": 1.2, "cores_busy": 1.9, "busy_threads": 2}
    one = {**cell, "wall": 1.8, "cores_busy": 1.0, "busy_threads": 1}
    result = {
        "command": "python benchmarks/threads.py",
        "threads": [2, 1],
        "repeats": 3,
        "cpus": 2,
        "quiet": {"openblas": {"2": cell, "1": one}},
        "load": {"openblas": {"2": {**cell, "wall": 3.6}, "1": one}},
    }
    text = threads.markdown(result)
    assert "| openblas | 1.000s [0.900-1.200], 1.90 busy, 2 thr | 1.800s" in text
    assert "| 1.80x |" in text and "| 0.50x |" in text  # quiet: 2 threads win; beside a job: lose
    assert "beside a busy-looping job" in text
