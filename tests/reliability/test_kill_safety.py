"""Kill safety: SIGKILL real training runs, also mid-checkpoint, and resume to identical weights.

The short campaign here (6 kills, ~15 s) is what CI runs; ``benchmarks/kill_harness.py`` runs the
same harness with many more kills. The harness itself is described in ``killing.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import killing
import numpy as np
import pytest

from tapegrad.serialization import load_arrays, remove_stale_temp_files, save_arrays
from tapegrad.train.checkpoint import load_latest, save_checkpoint


def test_sigkill_campaign_resumes_to_identical_weights(tmp_path, real_data):
    # 20 steps per epoch, stop mid-epoch 5: five checkpoints, each run short
    cfg = killing.Config(kills=6, batch_size=3000, max_steps=90, data_dir=str(real_data))
    report = killing.campaign(cfg, tmp_path, log=print)
    assert [k.kind for k in report.kills].count("time") == 2
    # write and step kills land by construction; a time kill may come after a fast run's end
    assert all(k.killed for k in report.kills if k.kind != "time"), report.kills
    # at least one kill hit a checkpoint while it was half-written
    assert any(k.partial and k.partial.startswith(".ckpt-") for k in report.kills), report.kills
    assert report.survived >= 4
    print(f"kills survived: {report.survived} in {report.rounds} round(s), {report.seconds:.1f} s")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _state(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(3, 4)).astype(np.float32)}


def test_leftover_of_a_killed_writer_is_removed_on_save_and_resume(tmp_path):
    save_checkpoint(tmp_path, 10, _state(0), {"m": np.zeros(2)}, {"epoch": 1})
    dead = tmp_path / f".ckpt-000000020.safetensors.{_dead_pid()}.0123abcd.tmp"
    dead.write_bytes(b"half a checkpoint")
    foreign = tmp_path / ".notes.txt.12.0123abcd.tmp"  # not a checkpoint's: left alone
    foreign.write_bytes(b"x")
    assert load_latest(tmp_path)[2]["global_step"] == 10
    assert not dead.exists() and foreign.exists()
    dead.write_bytes(b"half again")
    save_checkpoint(tmp_path, 20, _state(1), {"m": np.zeros(2)}, {"epoch": 2})
    assert not dead.exists()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        ".notes.txt.12.0123abcd.tmp",
        "ckpt-000000010.safetensors",
        "ckpt-000000020.safetensors",
    ]


def test_a_live_writers_temp_file_is_kept(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".model.safetensors.{sleeper.pid}.0123abcd.tmp"
        live.write_bytes(b"being written")
        mine = tmp_path / f".model.safetensors.{os.getpid()}.0123abcd.tmp"  # ours, not in progress
        mine.write_bytes(b"left by an earlier process with our pid")
        removed = remove_stale_temp_files(tmp_path)
        assert removed == [str(mine)] and live.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert remove_stale_temp_files(tmp_path) == [str(live)]


def test_save_removes_leftovers_of_its_own_target_only(tmp_path):
    dead = _dead_pid()
    own = tmp_path / f".a.safetensors.{dead}.0123abcd.tmp"
    other = tmp_path / f".b.safetensors.{dead}.0123abcd.tmp"
    own.write_bytes(b"x")
    other.write_bytes(b"x")
    save_arrays(tmp_path / "a.safetensors", _state(0))
    assert not own.exists() and other.exists()


_SLOW_SAVE = """
import sys, time
import numpy as np
import tapegrad.serialization as s
def slow(f, payload):
    f.write(payload[: len(payload) // 2]); f.flush()
    print("half", flush=True); time.sleep(60)
s._write_payload = slow
s.save_arrays(sys.argv[1], {"w": np.full((256, 256), 2.0, np.float32)}, {"v": 2})
"""


def test_sigkill_mid_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "state.safetensors"
    save_arrays(target, {"w": np.ones((256, 256), np.float32)}, {"v": 1})
    env = {**os.environ, "PYTHONPATH": str(killing.REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_SAVE, str(target)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout.readline().strip() == b"half"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    arrays, meta = load_arrays(target)  # the old file, whole
    assert meta == {"v": 1} and np.all(arrays["w"] == 1)
    assert len(list(tmp_path.glob(".*.tmp"))) == 1  # the victim's partial file ...
    save_arrays(target, {"w": np.zeros((2,), np.float32)})
    assert list(tmp_path.glob(".*.tmp")) == []  # ... removed by the next write


@pytest.mark.parametrize("cut", [0.0, 0.5, 0.999])
def test_a_truncated_newest_checkpoint_is_skipped(tmp_path, cut):
    # Not a state atomic writes can produce, but a disk can: resume from the one before.
    save_checkpoint(tmp_path, 1, _state(0), {}, {"epoch": 1})
    newest = save_checkpoint(tmp_path, 2, _state(1), {}, {"epoch": 2})
    blob = newest.read_bytes()
    newest.write_bytes(blob[: int(len(blob) * cut)])
    assert load_latest(tmp_path)[2]["global_step"] == 1
