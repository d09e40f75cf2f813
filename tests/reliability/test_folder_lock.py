"""One run per checkpoint folder (issue 23): two runs started on one folder cannot destroy each
other's checkpoints; the second refuses in one line naming the owner, and a lock left by a
dead run is taken over with a notice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import write_blobs

from tapegrad.train.checkpoint import CheckpointError, find_latest, list_checkpoints
from tapegrad.train.dirlock import LOCK_NAME, FolderLock, FolderLocked


def _tapegrad(*argv: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "CI": "true"}
    return subprocess.Popen(
        [sys.executable, "-m", "tapegrad", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_lock(lock: Path, pid: int, seconds: float = 120) -> dict:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            record = json.loads(lock.read_text())
            if record.get("pid") == pid:
                return record
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no lock by pid {pid} in {lock} after {seconds} s")


def test_a_second_run_refuses_and_the_first_keeps_its_checkpoints(tmp_path):
    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    ck = tmp_path / "ck"
    common = ["train", "linear", "--dataset", str(npz), "--checkpoint-dir", str(ck)]
    first = _tapegrad(*common, "--epochs", "100000", cwd=tmp_path)  # runs until stopped
    try:
        owner = _wait_for_lock(ck / LOCK_NAME, first.pid)
        second = _tapegrad(*common, "--epochs", "2", "--seed", "1", cwd=tmp_path)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2, err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"is in use by another run: pid {first.pid}" in err
        assert owner["command"] in err and "--epochs 100000" in err
        assert first.poll() is None, "the first run must go on"
        while not list_checkpoints(ck):
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, err
    model, optim, meta = find_latest(ck)  # the first run's, valid, its seed 0
    assert meta["config"]["seed"] == 0 and meta["seed"] == 0
    assert not (ck / LOCK_NAME).exists()  # released on the way out


def test_two_runs_started_together_one_refuses(tmp_path):
    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    ck = tmp_path / "ck"
    runs = [
        _tapegrad(
            "train",
            "linear",
            "--dataset",
            str(npz),
            "--epochs",
            "3",
            "--seed",
            str(seed),
            "--checkpoint-dir",
            str(ck),
            cwd=tmp_path,
        )  # fmt: skip
        for seed in (0, 1)
    ]
    results = [(r.pid, r.wait(timeout=300), r.stderr.read()) for r in runs]
    codes = sorted(code for _, code, _ in results)
    assert codes == [0, 2], results
    (pid_ok, _, _), (_, _, refused) = sorted(results, key=lambda r: r[1])
    # whichever came second met the first's lock, or (if the first had already finished) its
    # checkpoints: either way one line, and nothing of the first run lost
    assert refused.count("\n") == 1 and "Traceback" not in refused
    assert f"pid {pid_ok}" in refused or "holds checkpoints of an earlier run" in refused
    winner_seed = next(s for (pid, code, _), s in zip(results, (0, 1)) if code == 0)
    meta = find_latest(ck)[2]
    assert meta["seed"] == winner_seed and meta["epoch"] == 4  # all three epochs of the winner


def test_a_stale_lock_is_taken_over_with_a_notice(tmp_path):
    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    ck = tmp_path / "ck"
    ck.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = {"pid": dead.pid, "command": "tapegrad train linear --seed 7", "started": "earlier"}
    (ck / LOCK_NAME).write_text(json.dumps(stale))
    run = _tapegrad(
        "train", "linear", "--dataset", str(npz), "--epochs", "1", "--checkpoint-dir", str(ck),
        cwd=tmp_path,
    )  # fmt: skip
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    notice = [line for line in err.splitlines() if "stale lock" in line]
    assert len(notice) == 1 and f"pid {dead.pid}" in notice[0] and "--seed 7" in notice[0]
    assert "no longer running" in notice[0]
    assert list_checkpoints(ck) and not (ck / LOCK_NAME).exists()


def test_the_lock_in_one_process(tmp_path):
    """Two holders in one process conflict too (flock is per open file); release frees it;
    a folder the lock made and nothing else used is removed on release."""
    folder = tmp_path / "new" / "ck"
    notices: list[str] = []
    with FolderLock(folder, "run A", notice=notices.append):
        assert (folder / LOCK_NAME).is_file()
        with pytest.raises(FolderLocked, match=rf"pid {os.getpid()} \(run A\)"):
            FolderLock(folder, "run B").acquire()
    assert not (tmp_path / "new").exists() and notices == []
    folder.mkdir(parents=True)
    with FolderLock(folder, "run B"):
        pass
    assert folder.is_dir() and list(folder.iterdir()) == []  # not made by the lock: kept


def test_a_symlink_planted_as_the_lock_file_is_refused(tmp_path):
    (tmp_path / "elsewhere").write_text("x")
    os.symlink(tmp_path / "elsewhere", tmp_path / LOCK_NAME)
    with pytest.raises(CheckpointError, match="cannot open its lock file"):
        FolderLock(tmp_path, "run").acquire()
    assert (tmp_path / "elsewhere").read_text() == "x"
