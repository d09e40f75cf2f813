"""A rank that stops answering ends the job within ``--rank-timeout``, named, with the last
checkpoint resumable; and the launcher's one-line answers (more ranks than CPUs, a GPU)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
from mpi_helpers import env, instrumented_mpiexec

import tapegrad as tg
from tapegrad.distributed import launch

TIMEOUT = 4  # seconds: the short --rank-timeout of these tests (the default is 60)


def _train(folder, *extra: str, timeout: float = 120, **env_extra: str):
    cmd = [sys.executable, "-m", "tapegrad", "train", "mlp", "--ranks", "2", "--epochs", "3"]
    cmd += ["--batch-size", "2000", "--seed", "5", "--checkpoint-dir", str(folder / "ckpt")]
    cmd += ["--save", str(folder / "final.safetensors"), "--rank-timeout", str(TIMEOUT), *extra]
    return subprocess.run(
        cmd, env=env(**env_extra), capture_output=True, text=True, timeout=timeout
    )


def test_a_stopped_rank_ends_the_job_naming_it_and_the_last_checkpoint_resumes(tmp_path, real_data):
    """Rank 1 SIGSTOPs itself after global step 45 (mid-epoch 2 of 30 steps) while rank 0
    waits in the next allreduce: within the timeout (+ a beat) the launcher names rank 1, kills
    it, and the job exits 124; the epoch-1 checkpoint resumes to the weights an uninterrupted
    run (same short timeout: no healthy rank was taken for a silent one) ends with."""
    stalled, reference = tmp_path / "stalled", tmp_path / "reference"
    t0 = time.perf_counter()
    stop = {"TAPEGRAD_TEST_SIGNAL": f"1:45:{int(signal.SIGSTOP)}"}
    done = _train(stalled, **stop, **instrumented_mpiexec(tmp_path))
    took = time.perf_counter() - t0
    assert done.returncode == launch.EXIT_STALLED, done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("tapegrad train:")]
    assert len(lines) == 1, done.stderr
    m = re.fullmatch(
        rf"tapegrad train: rank 1 \(pid (\d+)\) stopped answering \(no heartbeat for \d+ s, "
        rf"--rank-timeout {TIMEOUT}\); stopped every rank",
        lines[0],
    )
    assert m, lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert "BAD TERMINATION" not in done.stdout  # mpiexec's report of the kill is not echoed
    assert not psutil.pid_exists(int(m.group(1))), "the stopped rank was left behind"
    assert took < 60, took  # the whole run, compilation included; the stall costs ~TIMEOUT
    assert not (stalled / "final.safetensors").exists()
    assert len(list((stalled / "ckpt").glob("ckpt-*.safetensors"))) == 1  # after epoch 1

    resumed = _train(stalled, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    uninterrupted = _train(reference)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    a = tg.load(str(stalled / "final.safetensors"))
    b = tg.load(str(reference / "final.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _rank_file(folder, rank: int, pid: int, age: float, done: bool = False) -> None:
    path = folder / f"rank-{rank}.pid"
    path.write_text(str(pid))
    then = time.time() - age
    os.utime(path, (then, then))
    if done:
        path.with_suffix(".done").touch()


def test_the_watchdog_spares_finished_and_dead_ranks_and_kills_a_silent_one(tmp_path):
    """Rank 0 beats, rank 1 finished (waits in MPI_Finalize, beats no more), rank 2 is dead
    (mpiexec's to report), rank 3 is alive and silent: only rank 3 is named and killed."""
    job, finished, silent = _sleeper(), _sleeper(), _sleeper()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        _rank_file(tmp_path, 1, finished.pid, 30, done=True)
        _rank_file(tmp_path, 2, dead.pid, 30)
        _rank_file(tmp_path, 3, silent.pid, 30)
        verdict = _watch(tmp_path, job, 4, timeout=0.6)
        assert verdict is not None and verdict.startswith(
            f"rank 3 (pid {silent.pid}) stopped answering (no heartbeat for 30 s, "
            f"--rank-timeout 0.6)"
        ), verdict
        assert silent.wait(5) == -signal.SIGKILL
        assert finished.poll() is None  # spared
    finally:
        for p in (job, finished, silent):
            p.kill()
            p.wait()


def _watch(folder, job, ranks: int, timeout: float) -> str | None:
    """Run a watchdog over ``folder`` while rank 0 (``job``) beats; its verdict."""
    dog = launch.Watchdog(job, folder, ranks, timeout=timeout)
    until = time.monotonic() + 20
    dog.start()
    while job.poll() is None and time.monotonic() < until:
        _rank_file(folder, 0, job.pid, 0)  # keeps beating
        time.sleep(0.05)
        if dog.verdict:
            job.kill()  # what mpiexec does when a rank is killed
    dog.stop()
    return dog.verdict


def test_a_stopped_rank_is_named_even_after_it_finished(tmp_path):
    """A rank stopped in MPI_Finalize (it finished, so it beats no more) holds the others
    there: stopped for longer than the timeout, it is named all the same."""
    job, stopped = _sleeper(), _sleeper()
    try:
        stopped.send_signal(signal.SIGSTOP)
        _rank_file(tmp_path, 1, stopped.pid, 0, done=True)
        t0 = time.monotonic()
        verdict = _watch(tmp_path, job, 2, timeout=0.5)
        assert verdict is not None and verdict.startswith(f"rank 1 (pid {stopped.pid}) stopped")
        assert 0.5 <= time.monotonic() - t0 < 10
        assert stopped.wait(5) == -signal.SIGKILL
    finally:
        for p in (job, stopped):
            p.kill()
            p.wait()


def _fake_mpiexec(tmp_path) -> dict[str, str]:
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho fake mpiexec ran\n")
    fake.chmod(0o755)
    return {"TAPEGRAD_MPIEXEC": str(fake)}


def _launch(tmp_path, *args: str):
    cmd = [sys.executable, "-m", "tapegrad", "train", "mlp", *args]
    return subprocess.run(
        cmd, env=env(**_fake_mpiexec(tmp_path)), capture_output=True, text=True, timeout=60
    )


def test_more_ranks_than_cpus_warn_in_one_line_unless_meant(tmp_path):
    cpus = len(os.sched_getaffinity(0))
    n = cpus + 1
    warned = _launch(tmp_path, "--ranks", str(n))
    assert warned.returncode == 0 and "fake mpiexec ran" in warned.stdout
    assert warned.stderr.splitlines() == [
        f"tapegrad train: warning: --ranks {n} on {cpus} CPUs: ranks share cores and run "
        f"slower than {cpus} would (--oversubscribe to mean it)"
    ]
    meant = _launch(tmp_path, "--ranks", str(n), "--oversubscribe")
    assert meant.returncode == 0 and meant.stderr == ""
    if cpus >= 2:
        fits = _launch(tmp_path, "--ranks", str(cpus))
        assert fits.returncode == 0 and fits.stderr == ""


def test_ranks_on_a_gpu_are_refused_in_one_line_before_mpi_starts(tmp_path):
    done = _launch(tmp_path, "--ranks", "2", "--device", "cuda")
    assert done.returncode == 2
    assert done.stdout == ""  # mpiexec never ran
    assert done.stderr.splitlines() == [
        "tapegrad train: error: --device cuda: data-parallel training (--ranks) runs on the CPU"
    ]


def test_a_rank_timeout_that_is_not_positive_is_refused(tmp_path):
    done = _launch(tmp_path, "--ranks", "2", "--rank-timeout", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "tapegrad train: error: --rank-timeout must be a positive number of seconds, got 0.0"
    ]
