"""The bench's self-check and measuring machinery: the plain loops' verdict on synthetic
timings, the plain loops' independence from tapegrad, the allocator setting (the cause of the
harness's slow PyTorch), thread accounting, CPU pinning, the two-setting report, the scaling
table and run_all's plan. No timing assertions: benchmarks are not tests."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tapegrad.bench import harness, report, selfcheck
from tapegrad.bench.worker import busy_threads

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the self-check's verdict ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "worker,plain,passed",
    [
        ([1.0, 1.1, 1.05], [1.0, 0.99, 1.01], True),  # +0%, +11%, +4%: median +4%
        ([1.09], [1.0], True),  # +9%: inside
        ([1.11], [1.0], False),  # +11%: outside
        ([0.91], [1.0], True),  # -9%
        ([0.89], [1.0], False),  # -11%: a worker faster than the plain loop is as suspect
        ([1.6, 1.7, 1.65], [1.0, 1.02, 0.98], False),  # the 1.6x the round started from
    ],
)
def test_compare_applies_the_ten_percent_band(worker, plain, passed):
    # one steady epoch per repeat
    check = selfcheck.compare([[w] for w in worker], [[p] for p in plain])
    assert check["passed"] is passed
    assert check["ratios"] == pytest.approx([w / p for w, p in zip(worker, plain)])
    assert check["tolerance"] == 0.10


def test_compare_pairs_runs_of_the_same_repeat():
    # measured at two threads: the machine's state moved both by 1.5x between repeats; pooled
    # medians would compare a slow worker with a fast plain loop, adjacent runs agree
    worker = [[0.209], [0.304], [0.312]]
    plain = [[0.204], [0.200], [0.315]]
    check = selfcheck.compare(worker, plain)
    assert check["ratio"] == pytest.approx(0.209 / 0.204) and check["passed"]
    assert check["worker"] / check["plain"] == pytest.approx(0.304 / 0.204)  # pooled: +49%


def test_compare_takes_each_repeats_median_so_one_outlier_does_not_decide():
    check = selfcheck.compare([[1.0, 1.02, 9.0]], [[1.0, 0.98, 1.01]])
    assert check["ratio"] == pytest.approx(1.02) and check["passed"]


def test_compare_refuses_empty_samples():
    with pytest.raises(ValueError, match="no steady times"):
        selfcheck.compare([[]], [[1.0]])


def test_failures_name_the_peer_the_numbers_and_what_to_do():
    checks = {
        "torch": selfcheck.compare([[4.7], [4.9]], [[2.9], [3.0]]),
        "jax": selfcheck.compare([[1.0]], [[1.0]]),
    }
    (msg,) = selfcheck.failures(checks, "epoch", threads=1)
    assert msg.startswith("self-check failed at 1 thread(s): torch:")
    assert "4.800 s per epoch" in msg and "2.950 s" in msg
    assert "+62.7% repeat by repeat, repeats +62% to +63%, more than 10%" in msg
    assert "rerun on a quieter machine" in msg


def test_a_failure_with_agreeing_cpu_times_blames_a_busy_machine():
    # measured at load 7: wall +26%, CPU time per epoch within 10%
    checks = {
        "torch": selfcheck.compare([[3.596]], [[2.858]], worker_cpu=[[1.90]], plain_cpu=[[1.80]])
    }
    (msg,) = selfcheck.failures(checks, "epoch")
    assert "+25.8% repeat by repeat, more than 10%; CPU time +5.6%)" in msg
    assert "their CPU time per epoch agrees (+5.6%)" in msg and "too busy to time" in msg


def test_a_failure_with_differing_cpu_times_points_at_the_work():
    checks = {"torch": selfcheck.compare([[4.7]], [[2.9]], worker_cpu=[[4.7]], plain_cpu=[[2.9]])}
    (msg,) = selfcheck.failures(checks, "epoch")
    assert "differs too (+62.1%)" in msg and "the bench is slowing torch" in msg


def test_at_several_threads_cpu_times_do_not_decide():
    # measured at two threads beside other jobs: spinning OpenMP threads burn CPU while waiting
    checks = {"torch": selfcheck.compare([[4.02]], [[1.54]], worker_cpu=[[4.1]], plain_cpu=[[1.5]])}
    (msg,) = selfcheck.failures(checks, "epoch", threads=2)
    assert "at 2 threads it includes threads spinning" in msg
    assert "cannot tell a busy machine from the bench slowing torch" in msg


def test_describe_shows_small_times_in_milliseconds():
    text = selfcheck.describe("torch", selfcheck.compare([[0.0012]], [[0.0011]]), "step")
    assert (
        "1.20 ms per step" in text
        and "1.10 ms" in text
        and "+9.1% repeat by repeat, within" in text
    )


# -- the plain loops are the peers' users' code, not tapegrad's ----------------------------------
@pytest.mark.parametrize("peer", sorted(selfcheck.SCRIPTS))
def test_plain_loops_import_nothing_of_tapegrad(peer):
    tree = ast.parse(selfcheck.script(peer).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import would pull in tapegrad"
            imported.add(node.module.split(".")[0])
    assert "tapegrad" not in imported and peer in imported
    assert imported <= {"json", "sys", "time", "functools", "numpy", "safetensors", "optax", peer}


def test_plain_loop_command_runs_the_file_not_the_package(tmp_path):
    argv = selfcheck.command("torch", tmp_path / "spec.json")
    assert argv[0] == sys.executable and argv[1].endswith("plain_torch.py") and "-m" not in argv
    with pytest.raises(ValueError, match="no plain loop for 'mxnet'"):
        selfcheck.script("mxnet")


# -- the allocator setting: the root cause of the harness's slow PyTorch --------------------------
_FAULTS = """
import json, resource, numpy as np
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(40 << 20, np.uint8)
f0 = faults()
for _ in range(5):
    a = np.ones(40 << 20, np.uint8)
    del a
print(json.dumps({"faults_per_alloc": (faults() - f0) / 5}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc settings")
def test_allocator_setting_keeps_freed_memory():
    # 40 MiB is above glibc's largest dynamic mmap threshold: by default every such block is a
    # fresh mmap whose pages fault in again (10,240 pages); kept, it is reused without a fault
    def faults(allocator):
        env = harness.process_env(allocator)
        argv = [sys.executable, "-c", _FAULTS]
        return harness.launch("probe", argv, env, harness.available_cpus(), 60)["faults_per_alloc"]

    assert faults("keep") < 10
    assert faults("system") > 100


def test_process_env_sets_or_clears_the_allocator(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "123")
    assert harness.process_env("keep")["MALLOC_TRIM_THRESHOLD_"] == str(2**30)
    assert "MALLOC_TRIM_THRESHOLD_" not in harness.process_env("system")
    with pytest.raises(harness.BenchError, match="unknown allocator setting 'jemalloc'"):
        harness.process_env("jemalloc")
    env = harness.thread_env(1)
    assert env["OMP_NUM_THREADS"] == "1" and env["MALLOC_MMAP_THRESHOLD_"] == str(2**30)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt")
def test_keep_freed_memory_in_process():
    code = "from tapegrad.bench.harness import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


# -- threads and CPUs ------------------------------------------------------------------------------
def test_busy_threads_counts_threads_that_worked():
    before = {1: 10.0, 2: 5.0, 3: 0.0}
    after = {1: 12.0, 2: 5.01, 3: 0.9, 4: 0.5}  # thread 4 started during the run
    assert busy_threads(before, after, wall=2.0) == [2.0, 0.9, 0.5]
    assert busy_threads(before, after, wall=20.0) == [2.0]


def test_thread_use_summarises_cpu_over_wall():
    runs = [
        {"cpu_seconds": 2.0, "training_seconds": 1.0, "busy_thread_seconds": [1.0, 1.0]},
        {"cpu_seconds": 1.8, "training_seconds": 1.0, "busy_thread_seconds": [1.8]},
        {"cpu_seconds": 1.0, "training_seconds": 1.0, "busy_thread_seconds": [1.0]},
    ]
    assert harness.thread_use(runs) == {"cores_busy": 1.8, "busy_threads": 2}
    assert harness.thread_use([{"epoch_seconds": [1.0]}]) == {}


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_launch_pins_the_program_to_its_cpus():
    code = "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0))}))"
    env = harness.process_env()
    cpus = harness.available_cpus()
    one = harness.launch("probe", [sys.executable, "-c", code], env, cpus[:1], 60)
    every = harness.launch("probe", [sys.executable, "-c", code], env, cpus, 60)
    assert one["cpus"] == cpus[:1] and every["cpus"] == cpus


def test_one_thread_moves_to_the_next_cpu_every_repeat(monkeypatch):
    monkeypatch.setattr(harness, "available_cpus", lambda: [0, 1])
    assert [harness.cpus_for(1, turn) for turn in range(3)] == [[0], [1], [0]]
    assert harness.cpus_for(2, 0) == [0, 1] and sorted(harness.cpus_for(2, 1)) == [0, 1]


def test_launch_reports_a_failing_program():
    argv = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(harness.BenchError, match=r"the probe failed \(exit 3\):\nboom"):
        harness.launch("probe", argv, harness.process_env(), harness.available_cpus(), 60)


# -- the report: both cores first, one thread below, plain loops and the self-check ---------------
def _result(threads: int, ratio_plain: float = 1.02, passed: bool = True) -> dict:
    spread = {"median": 1.0, "min": 0.9, "max": 1.1, "n": 6}
    fw = {
        "first": spread,
        "first_cold": None,
        "steady": spread,
        "steady_step": {"median": 0.002, "min": 0.002, "max": 0.002, "n": 10},
        "cores_busy": 0.98 * threads,
        "busy_threads": threads,
        "peak_rss": 400 * 2**20,
        "rss_before_training": 300 * 2**20,
        "alloc_per_epoch": 2**20,
        "alloc_per_step": 2048,
        "alloc_method": "m",
        "first_loss": 2.3,
        "final_loss": 0.1,
        "test_accuracy": 0.97,
        "mode": "compiled",
        "notes": "n",
        "versions": {"x": "1"},
    }
    plain = {
        "first": spread,
        "steady": spread,
        "first_loss": 2.3,
        "final_loss": 0.1,
        "mode": "plain loop",
        "versions": {},
        "cores_busy": 1.0,
        "busy_threads": 1,
    }
    check = selfcheck.compare([[ratio_plain]], [[1.0]])
    return {
        "workload": "mlp",
        "frameworks": ["tapegrad", "torch"],
        "unit": "epoch",
        "epochs": 3,
        "steps": None,
        "repeats": 2,
        "threads": threads,
        "mode": "compiled",
        "allocator": "keep",
        "facts": {
            "dataset": "mnist",
            "train_samples": 60000,
            "parameters": 101770,
            "optimizer": "adam",
            "lr": 0.001,
            "batch_size": 100,
            "width": 1,
            "flops": {"per_epoch_train": 2.4e10, "per_sample_train": 4e5},
        },
        "floor": {"gemm_flops_per_second": 1e11, "epoch_seconds": 0.24, "step_seconds": 4e-4},
        "machine": {
            "cpu": "c",
            "logical_cpus": 2,
            "usable_cpus": 2,
            "platform": "p",
            "python": "3",
            "date": "d",
        },
        "summary": {"tapegrad": fw, "torch": {**fw, "mode": "eager"}},
        "plain": {"torch": plain},
        "ratios": {
            "torch": {"first": spread, "steady": {**spread, "median": 0.5}},
            "torch-plain": {"first": spread, "steady": {**spread, "median": 0.49}},
        },
        "guard": {"passed": True, "failures": [], "loss_rtol": 1e-5, "accuracy_band_points": 1.5},
        "self_check": {
            "passed": passed,
            "checks": {"torch": check},
            "failures": selfcheck.failures({"torch": check}),
        },
    }


def test_report_puts_both_cores_first_then_one_thread():
    combined = {"workload": "mlp", "threads": [1, 2], "results": [_result(1), _result(2)]}
    text = report.markdown([combined], commands=["tapegrad bench mlp --threads 1,2"])
    both, one = text.index("**both cores (2 threads)**"), text.index("**one thread**")
    assert text.index("### mlp") < both < one
    assert text.count("### mlp") == 1
    assert "| torch, plain loop |" in text and "0.49x [0.90-1.10]" in text
    assert "| 1.96 / 2 |" in text and "| 0.98 / 1 |" in text  # cores busy / threads
    assert "Self-check passed: torch: the bench's worker 1.020 s per epoch" in text
    assert "every thread setting (2 thread(s), then 1 thread(s))" in text
    assert "`MALLOC_TRIM_THRESHOLD_` and `MALLOC_MMAP_THRESHOLD_` at 1 GiB" in text
    assert [r["threads"] for r in report.headline([combined])] == [2]


def test_report_flags_a_failed_self_check():
    text = report.workload_table(_result(2, ratio_plain=1.6, passed=False))
    assert (
        "Self-check **FAILED**: torch:" in text and "+60.0% repeat by repeat, more than 10%" in text
    )


def test_report_reads_results_from_before_the_self_check():
    old = _result(1)
    for key in ("plain", "self_check", "allocator"):
        del old[key]
    old["ratios"].pop("torch-plain")
    text = report.markdown([old])
    assert "Self-check: not recorded" in text and "glibc's malloc as configured" in text


# -- the scaling table -----------------------------------------------------------------------------
def test_scaling_cells_cover_every_workload_batch_and_the_wider_models():
    ws = _script("work_scaling")
    cells = [ws.parse_cell(c) for c in ws.default_cells()]
    assert ("seed-cnn", 32, 1) in cells and ("text-cnn", 512, 1) in cells
    assert ("seed-cnn", 100, 4) in cells and ("mlp", 100, 4) in cells
    assert ("char-lm", 32, 1) in cells and ("resnet", 512, 1) in cells  # the general ones
    assert len(cells) == 6 * 3 + 2
    with pytest.raises(ValueError, match="width only for seed-cnn and mlp"):
        ws.parse_cell("seed-rnn@100x4")
    with pytest.raises(ValueError, match="not WORKLOAD@BATCH"):
        ws.parse_cell("mlp-100")
    with pytest.raises(ValueError, match="unknown workload 'resnet50'"):
        ws.parse_cell("resnet50@32")


def test_scaling_table_reports_time_per_sample_and_ratios():
    ws = _script("work_scaling")
    r = _result(2)
    r["facts"]["width"], r["facts"]["batch_size"] = 4, 512
    text = ws.markdown([r], ["tapegrad bench mlp --batch-size 512 --width 4"])
    row = next(line for line in text.splitlines() if line.startswith("| mlp x4 wide"))
    # a 1.0 s epoch of 60000 samples is 16.7 us a sample; the ratio is tapegrad / torch's
    assert row == "| mlp x4 wide | 512 | 2 | 16.7 | 16.7 | 0.50x | torch +2% |"
    assert "--width 4" in text


# -- run_all's plan -------------------------------------------------------------------------------
def test_run_all_plans_both_settings_and_every_part():
    run_all = _script("run_all")
    steps = run_all.plan(run_all.parse_args([]))
    parts = [p for p, _ in steps]
    assert parts == [
        "seed-cnn",
        "seed-rnn",
        "text-cnn",
        "mlp",
        "char-lm",
        "resnet",
        "micro",
        "eager",
        "threads",
        "scaling",
    ]
    bench = dict(steps)["seed-cnn"]
    assert bench[:3] == ["tapegrad", "bench", "seed-cnn"]
    assert bench[bench.index("--threads") + 1] == "all,1"
    assert bench[bench.index("--repeats") + 1] == "5"
    assert "--no-self-check" not in bench
    skipped = run_all.plan(run_all.parse_args(["--skip", "eager,scaling", "--workloads", "mlp"]))
    assert [p for p, _ in skipped] == ["mlp", "micro", "threads"]
    with pytest.raises(SystemExit):
        run_all.parse_args(["--skip", "everything"])


def test_run_all_targets_use_the_plain_loops():
    run_all = _script("run_all")
    note = run_all.targets_note([_result(2)], None)
    assert "- mlp: 0.49x torch's plain loop (<= 0.5x: met)" in note
    assert "4.2x its FLOP floor (<= 3x: **missed**)" in note


def test_json_of_several_settings_round_trips_through_the_report(tmp_path):
    combined = {"workload": "mlp", "threads": [2, 1], "results": [_result(2), _result(1)]}
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(combined))
    again = json.loads(path.read_text())
    assert [r["threads"] for r in report.flatten([again])] == [2, 1]


def test_micro_takes_one_thread_setting(capsys):
    from tapegrad.cli import main

    assert main(["bench", "micro", "--threads", "all,1"]) == 2
    assert "bench micro runs one thread setting at a time" in capsys.readouterr().err
