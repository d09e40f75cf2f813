"""Checkpoints of 2-rank runs: they carry the run configuration like a single process's, and a
resume under MPI with other settings is refused in one line by every rank (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from mpi_helpers import env

from tapegrad.train.checkpoint import find_latest, list_checkpoints


def _train(*args: str, **env_extra: str):
    cmd = [sys.executable, "-m", "tapegrad", "train", *args, "--ranks", "2"]
    return subprocess.run(cmd, env=env(**env_extra), capture_output=True, text=True, timeout=120)


def _errors(done) -> list[str]:
    return done.stderr.strip().splitlines()


def test_a_two_rank_checkpoint_carries_the_run_configuration_and_refuses_another_lr(
    tmp_path, real_data
):
    ckpt = tmp_path / "ckpt"
    base = ["mlp", "--epochs", "2", "--batch-size", "2000", "--max-steps", "3", "--seed", "4"]
    done = _train(*base, "--lr", "0.05", "--checkpoint-dir", str(ckpt))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith(", seed 4, 2 ranks x 1 thread")
    assert len(list_checkpoints(ckpt)) == 1  # rank 0 alone wrote it (mid-epoch, at step 3)
    _, _, meta = find_latest(ckpt)
    config = meta["config"]
    assert config["preset"] == "mlp" and config["dataset"] == "mnist"
    assert (config["lr"], config["batch_size"], config["seed"]) == (0.05, 2000, 4)
    assert config["optimizer"] == "adam" and config["task"] == "multiclass"
    assert isinstance(config["data"], str) and config["data"]
    assert meta["global_step"] == 3

    refused = _train(*base, "--lr", "0.1", "--checkpoint-dir", str(ckpt), "--resume")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert _errors(refused) == [
        f"tapegrad train: error: checkpoint {meta['path']} is from another run configuration: "
        f"lr 0.05 (checkpoint) vs 0.1 (now). Resume with its settings, or use another "
        f"--checkpoint-dir"
    ]
    assert "Traceback" not in refused.stdout + refused.stderr
    assert len(list_checkpoints(ckpt)) == 1  # nothing written

    resumed = _train(*base, "--lr", "0.05", "--checkpoint-dir", str(ckpt), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout


def test_a_resume_on_other_data_is_refused_by_every_rank_after_rank_0_read_it(tmp_path):
    """The data fingerprint is compared once the data is loaded, by the trainer: rank 0 reads
    the checkpoint and broadcasts it, and every rank refuses alike."""
    rng = np.random.default_rng(0)

    def write(path, shift: float):
        x = rng.standard_normal((64, 5)).astype(np.float32) + shift
        y = (x[:, 0] > shift).astype(np.int64)
        np.savez(path, x_train=x[:48], y_train=y[:48], x_test=x[48:], y_test=y[48:])

    data, ckpt = tmp_path / "data.npz", tmp_path / "ckpt"
    write(data, 0.0)
    args = ["linear", "--dataset", str(data), "--epochs", "2", "--batch-size", "16"]
    args += ["--checkpoint-dir", str(ckpt)]
    done = _train(*args)
    assert done.returncode == 0, done.stderr
    write(data, 1.0)  # same file, other samples
    refused = _train(*args, "--resume")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = _errors(refused)
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("tapegrad train: error: checkpoint ") and " data " in lines[0]
    assert "from another run configuration" in lines[0]
