"""Ctrl-C and SIGTERM during ``tapegrad train``, as real signals to a real process: a mid-epoch
checkpoint, the exact command to resume printed, and a resumed run that ends bit-identical to an
uninterrupted one."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.train.checkpoint import find_latest

ARGS = ["--epochs", "2", "--batch-size", "1", "--max-steps", "9000"]


def _env():
    return {**os.environ, "CI": "true", "PYTHONUNBUFFERED": "1"}


def _tapegrad(argv):
    return [sys.executable, "-m", "tapegrad", *argv]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """6000 samples of 20 features in 3 classes: one-sample steps make an epoch last ~1 s."""
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=2.0, size=(3, 20))
    y = rng.integers(0, 3, 7000)
    x = (centers[y] + rng.normal(size=(7000, 20))).astype(np.float32)
    path = tmp_path_factory.mktemp("npz") / "blobs.npz"
    np.savez(path, x_train=x[:6000], y_train=y[:6000], x_test=x[6000:], y_test=y[6000:])
    return path


@pytest.fixture(scope="module")
def uninterrupted(dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "w.safetensors"
    argv = ["train", "mlp", "--dataset", str(dataset), *ARGS, "--save", str(out)]
    r = subprocess.run(_tapegrad(argv), capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return tg.load(out)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_epoch_checkpoints_and_the_printed_command_resumes_exactly(
    dataset, uninterrupted, tmp_path, signum
):
    argv = ["train", "mlp", "--dataset", str(dataset), *ARGS]
    argv += ["--checkpoint-dir", "ck", "--save", "w.safetensors"]
    p = subprocess.Popen(
        _tapegrad(argv),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    header = p.stdout.readline()
    assert header.startswith("mlp on ") and "blobs.npz: 6000 train" in header, header
    p.stdout.readline()  # the table's column names: training has begun
    time.sleep(0.3)
    p.send_signal(signum)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 128 + signum, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"{signal.Signals(signum).name}: stopped at epoch 1, batch " in err
    meta = find_latest(tmp_path / "ck")[2]
    assert meta["epoch"] == 1 and 0 < meta["start"] < 6000  # a mid-epoch checkpoint
    assert meta["path"].endswith(".safetensors") and meta["path"].split("/")[-1] in err
    assert not (tmp_path / "w.safetensors").exists()

    command = shlex.split(err.split("Resume with: ", 1)[1])
    assert command[:2] == ["tapegrad", "train"] and command[-1] == "--resume"
    r = subprocess.run(
        _tapegrad(command[1:]), cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert f"batch {meta['start']}" in r.stdout  # "resumed from ... (epoch 1, batch N, ...)"
    got = tg.load(tmp_path / "w.safetensors")
    assert got.keys() == uninterrupted.keys()
    for k in got:
        np.testing.assert_array_equal(got[k], uninterrupted[k], err_msg=k)
