"""Two real MPI ranks on this machine (``mpiexec -n 2``): identical weights on every rank, the
single-process result within float32 summation error, compiled = eager, and the faults (a rank
that raises, a rank that dies, ranks that disagree) ending every rank within seconds."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest
from mpi_helpers import MPIEXEC, WORKER, instrumented_mpiexec, mpirun, run

import tapegrad as tg

K = 12  # optimiser steps: two epochs of 6 (the last global batch of 330 is 10 samples)
U = 2.0**-24  # float32 unit roundoff


def _weights(folder, rank=0) -> dict[str, np.ndarray]:
    with np.load(folder / f"rank-{rank}.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """SGD and Adam, compiled and eager, on 2 ranks; SGD compiled in one process."""
    root = tmp_path_factory.mktemp("mpi")
    out = {}
    for mode in ("compiled", "eager"):
        for opt in ("sgd", "adam"):
            folder = root / f"{mode}-{opt}"
            done = mpirun(2, [str(WORKER), str(folder), mode, opt, str(K)])
            assert done.returncode == 0, done.stderr
            out[mode, opt] = folder
    folder = root / "compiled-adam-2groups"
    done = mpirun(2, [str(WORKER), str(folder), "compiled", "adam-2groups", str(K)])
    assert done.returncode == 0, done.stderr
    out["compiled", "adam-2groups"] = folder
    single = root / "single-sgd"
    done = run([str(WORKER), str(single), "compiled", "sgd", str(K)])
    assert done.returncode == 0, done.stderr
    out["single", "sgd"] = single
    return out


@pytest.mark.parametrize("mode", ["compiled", "eager"])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_every_rank_ends_with_identical_weights(runs, mode, opt):
    # the ranks built their models from different seeds: rank 0's were broadcast
    a, b = _weights(runs[mode, opt], 0), _weights(runs[mode, opt], 1)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    # metrics are reduced: both ranks report the same records
    ra = json.loads((runs[mode, opt] / "records-0.json").read_text())
    rb = json.loads((runs[mode, opt] / "records-1.json").read_text())
    assert ra == rb and [r[3] for r in ra] == [6, 6]
    # a steady step, allreduces included, allocates at most 64 KiB on the largest rank
    assert all(0 <= r[4] <= 64 * 1024 for r in ra), ra


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_compiled_and_eager_agree_under_mpi(runs, opt):
    a, b = _weights(runs["compiled", opt]), _weights(runs["eager", opt])
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_splitting_the_optimiser_step_across_ranks_changes_no_bit(runs):
    """Adam with one group runs 1/2 of its step on each rank (sharded.py); with two groups
    every rank runs all of it. Weights and the gathered optimiser state are identical."""
    split, whole = _weights(runs["compiled", "adam"]), _weights(runs["compiled", "adam-2groups"])
    assert split.keys() == whole.keys() and any(k.startswith("opt/") for k in split)
    for k in split:
        assert np.array_equal(split[k], whole[k]), k


def test_two_ranks_equal_one_process_within_float32_summation_error(runs):
    """The same global batches in one process: the gradients differ by summation order only.

    Bound: a step's gradient is a float32 sum of B = 64 per-sample terms in both runs, in
    different orders, so the two differ by at most 2 B u G per entry (u = 2^-24, G a bound on
    a per-sample gradient entry: 10 here, with standard-normal inputs and weights below 1);
    K SGD steps of learning rate lr move the weights apart by at most K lr 2 B u G (the
    feedback through the different weights is of second order: K lr L << 1). The loss the
    ranks report is the global batch's mean, equal to the single process's within 2 B u.
    """
    lr, batch, grad_bound = 0.05, 64, 10.0
    bound = K * lr * 2 * batch * U * grad_bound
    two, one = _weights(runs["compiled", "sgd"]), _weights(runs["single", "sgd"])
    for k in one:
        if k == "losses":
            assert np.allclose(two[k], one[k], rtol=2 * batch * U, atol=0), k
        else:
            assert np.max(np.abs(two[k] - one[k])) <= bound, (k, np.max(np.abs(two[k] - one[k])))


def test_an_exception_in_one_rank_stops_every_rank_naming_it(tmp_path):
    t0 = time.perf_counter()
    done = mpirun(
        2, [str(WORKER), str(tmp_path), "compiled", "sgd", str(K)], TAPEGRAD_TEST_RAISE="1:3"
    )
    assert time.perf_counter() - t0 < 30
    assert done.returncode != 0
    assert "RuntimeError: injected failure at step 3 (rank 1 of 2 failed; stopping every rank)" in (
        done.stderr
    )
    assert not (tmp_path / "rank-0.npz").exists()  # rank 0 did not finish on its own


def test_ranks_that_disagree_refuse_to_start_in_one_line(real_data):
    # MPMD launch: rank 0 asks for mlp, rank 1 for seed-rnn
    args = ["-m", "tapegrad", "train"]
    cmd = [MPIEXEC, "-n", "1", sys.executable, *args, "mlp", "--max-steps", "1", ":"]
    cmd += ["-n", "1", sys.executable, *args, "seed-rnn", "--max-steps", "1"]
    import subprocess

    from mpi_helpers import env

    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=120)
    assert time.perf_counter() - t0 < 30
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tapegrad train: error: ranks disagree on preset: rank 0 has 'mlp', rank 1 has "
        "'seed-rnn'; every rank must start with the same settings"
    ]


def _train(folder, *extra: str, **env_extra: str):
    import subprocess

    from mpi_helpers import env

    cmd = [sys.executable, "-m", "tapegrad", "train", "mlp", "--ranks", "2", "--epochs", "3"]
    cmd += ["--batch-size", "2000", "--seed", "5", "--checkpoint-dir", str(folder / "ckpt")]
    cmd += ["--save", str(folder / "final.safetensors"), *extra]
    return subprocess.run(cmd, env=env(**env_extra), capture_output=True, text=True, timeout=120)


def test_killing_one_rank_mid_epoch_stops_all_and_resume_is_bit_identical(tmp_path, real_data):
    """Rank 1 SIGKILLs itself at global step 45 (mid-epoch 2 of 30 steps): every rank exits
    non-zero within seconds, naming rank 1; resuming from the epoch-1 checkpoint under MPI ends
    bit for bit where an uninterrupted 2-rank run ends."""
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    t0 = time.perf_counter()
    done = _train(
        killed,
        TAPEGRAD_TEST_DIE="1:45",
        **instrumented_mpiexec(tmp_path),
    )
    assert time.perf_counter() - t0 < 30
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("tapegrad train:")]
    assert len(lines) == 1 and "rank 1 (pid " in lines[0] and "signal 9" in lines[0], (
        done.stdout + done.stderr
    )
    assert not (killed / "final.safetensors").exists()
    assert len(list((killed / "ckpt").glob("ckpt-*.safetensors"))) == 1  # after epoch 1
    resumed = _train(killed, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    uninterrupted = _train(reference)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    a = tg.load(str(killed / "final.safetensors"))
    b = tg.load(str(reference / "final.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step_and_resumes_exactly(
    tmp_path, real_data
):
    """Rank 1 alone gets SIGINT after global step 40 (mid-epoch 2 of 30 steps): the request
    travels with the next step's allreduce, so both ranks stop after step 41, rank 0 writes
    the mid-epoch checkpoint and prints the resume command once; resuming with it ends bit for
    bit where an uninterrupted 2-rank run ends."""
    stopped, reference = tmp_path / "stopped", tmp_path / "reference"
    t0 = time.perf_counter()
    done = _train(stopped, TAPEGRAD_TEST_SIGNAL="1:40:2", **instrumented_mpiexec(tmp_path))
    assert time.perf_counter() - t0 < 30
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"tapegrad train: SIGINT: stopped at epoch 2, batch 11 of 30; saved checkpoint "
        f"{stopped / 'ckpt' / 'ckpt-000000041.safetensors'}. Resume with: tapegrad train mlp "
        f"--epochs 3 --batch-size 2000 --seed 5 --checkpoint-dir {stopped / 'ckpt'} --save "
        f"{stopped / 'final.safetensors'} --resume --ranks 2"
    ]
    assert not (stopped / "final.safetensors").exists()
    resumed = _train(stopped, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "batch 11" in resumed.stdout
    uninterrupted = _train(reference)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    a = tg.load(str(stopped / "final.safetensors"))
    b = tg.load(str(reference / "final.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
