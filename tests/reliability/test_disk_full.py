"""A full disk or an I/O error while a run writes (issue 23): every failed write is named in one
line, the earlier checkpoint stays intact, the other outputs are still written (the weights
somewhere that works), no temporary or partial file is left, and the run exits 5.

Two ways: the error injected at the write's fsync (where a real EIO or a delayed ENOSPC shows
up), and a real 2 MB tmpfs filled to the brim (where mounting is allowed: root, or a user
namespace that permits it).
"""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_helpers import write_blobs

import tapegrad as tg
from tapegrad.cli import EXIT_OUTPUT, main
from tapegrad.train.checkpoint import find_latest, list_checkpoints


def _leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith(".tmp") or "probe" in p.name]


def _failing_fsync(monkeypatch, code: int, fails) -> list[str]:
    """Make ``os.fsync`` raise ``code`` for files whose path ``fails(path)`` picks; the
    paths that failed are returned (the list fills as the run goes)."""
    real, failed = os.fsync, []

    def fsync(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if fails(path):
            failed.append(path)
            raise OSError(code, os.strerror(code))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_failed_checkpoint_and_json_writes_lose_nothing(tmp_path, monkeypatch, capsys, code):
    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    ck, out = tmp_path / "ck", tmp_path / "out"
    checkpoints: list[str] = []

    def fails(path: str) -> bool:
        if "ckpt-" in path:
            checkpoints.append(path)
            return len(checkpoints) > 1  # the first checkpoint is written, the later ones fail
        return path.endswith(".json.tmp") or ".r.json." in path

    failed = _failing_fsync(monkeypatch, code, fails)
    argv = ["train", "linear", "--dataset", str(npz), "--epochs", "3", "--checkpoint-dir"]
    argv += [str(ck), "--save", str(out / "m.safetensors"), "--json", str(out / "r.json")]
    argv += ["--csv", str(out / "r.csv")]
    assert main(argv) == EXIT_OUTPUT
    err = capsys.readouterr().err
    reason = os.strerror(code)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    warned = [line for line in lines if "could not write the checkpoint" in line]
    assert len(warned) == 2 and all(reason in line for line in warned)  # epochs 2 and 3
    assert any("could not write --json" in line and reason in line for line in lines)
    assert lines[-1].startswith("tapegrad train: error: 2 checkpoint(s) could not be written")
    (first,) = list_checkpoints(ck)  # the epoch-1 checkpoint, intact and valid
    assert find_latest(ck)[2]["epoch"] == 2 and "ckpt-" in first.name
    assert tg.load(out / "m.safetensors").keys() == {"1.weight", "1.bias"}
    assert (out / "r.csv").is_file() and not (out / "r.json").exists()
    assert len(failed) == 3 and not _leftovers(tmp_path)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MB tmpfs mounted for the test (skipped only where this process may not mount)."""
    where = tmp_path / "disk"
    where.mkdir()
    run = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", f"tg-{uuid.uuid4().hex[:8]}", str(where)],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({run.stderr.strip() or run.returncode})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until at most ``leave`` bytes are free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


def test_a_real_full_disk(tiny_disk, tmp_path, monkeypatch, capsys):
    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    ck = tiny_disk / "ck"
    monkeypatch.chdir(tmp_path)  # where --save falls back to when its disk is full
    base = ["train", "mlp", "--dataset", str(npz), "--checkpoint-dir", str(ck)]
    assert main([*base, "--epochs", "1"]) == 0
    (kept,) = list_checkpoints(ck)
    before = kept.read_bytes()
    _fill(tiny_disk, leave=8192)  # room for a small JSON file, not for a checkpoint
    argv = [*base, "--epochs", "2", "--resume", "--save", str(tiny_disk / "m.safetensors")]
    argv += ["--json", str(tiny_disk / "r.json")]
    capsys.readouterr()
    assert main(argv) == EXIT_OUTPUT
    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback" not in err
    assert "could not write the checkpoint" in err and "No space left on device" in err
    assert "could not write --save" in err
    assert (tiny_disk / "r.json").is_file()  # the small output still fitted
    fallback = [p for p in tmp_path.iterdir() if p.name.startswith("mlp-weights-")]
    assert len(fallback) == 1 and f"the trained weights are in {fallback[0]}" in captured.out
    assert list_checkpoints(ck) == [kept] and kept.read_bytes() == before
    assert not _leftovers(tiny_disk) and not (tiny_disk / "m.safetensors").exists()


def test_a_stop_whose_checkpoint_fails_names_the_one_kept(tmp_path, monkeypatch, capsys):
    """SIGINT mid-epoch asks for a checkpoint; the disk refuses it: the stop says so, names
    the newest checkpoint on disk (which a resume uses) and still prints the resume command."""
    import signal

    from tapegrad.train.trainer import Trainer

    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    ck = tmp_path / "ck"
    written: list[str] = []

    def fails(path: str) -> bool:
        if "ckpt-" in path:
            written.append(path)
            return len(written) > 1
        return False

    _failing_fsync(monkeypatch, errno.ENOSPC, fails)
    step = Trainer.train_step

    def train_step(self, *args):
        if self.global_step == 20:  # in epoch 2 (13 steps an epoch), after its checkpoint
            os.kill(os.getpid(), signal.SIGINT)
        return step(self, *args)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    argv = ["train", "linear", "--dataset", str(npz), "--epochs", "3", "--checkpoint-dir"]
    assert main([*argv, str(ck)]) == 128 + signal.SIGINT
    err = capsys.readouterr().err
    (kept,) = list_checkpoints(ck)
    assert "Traceback" not in err and "could not write the checkpoint" in err
    last = err.strip().splitlines()[-1]
    assert "SIGINT: stopped at epoch 2, batch 8 of 13; the checkpoint could not be written" in last
    assert f"the newest one is {kept}" in last and "Resume with: tapegrad train linear" in last
    assert not _leftovers(tmp_path)
