"""tapegrad.distributed in one process: the no-op world, the clear errors, and the seams
(sharded batches, the plan's gradient reduction) that data-parallel training rests on."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import distributed as dist
from tapegrad import nn, optim
from tapegrad.autodiff.plan import reduce_gradients
from tapegrad.data import Batches
from tapegrad.distributed.launch import thread_env, threads_per_rank


def test_single_world_collectives_are_the_identity():
    w = dist.SingleWorld()
    a = np.arange(5, dtype=np.float32)
    assert w.allreduce(a) is a and a.tolist() == [0, 1, 2, 3, 4]
    assert w.bcast({"k": 1}) == {"k": 1} and w.allgather(3) == [3]
    assert (w.rank, w.size, w.distributed) == (0, 1, False)
    dist.agree(w, {"anything": object()})  # nothing to disagree with


def test_world_outside_mpi_is_single_and_never_imports_mpi4py():
    code = (
        "import sys; from tapegrad.distributed import world; w = world(); "
        "print(type(w).__name__, w.size, 'mpi4py' in sys.modules)"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("PMI_SIZE", "PMI_RANK")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["SingleWorld", "1", "False"], out.stderr


def _cli_without_mpi4py(args: list[str], **env_extra: str):
    import os

    code = (
        "import sys; sys.modules['mpi4py'] = None\n"  # as if mpi4py were not installed
        "from tapegrad.cli import main\n"
        f"sys.exit(main({args!r}))\n"
    )
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_launched_by_mpiexec_without_mpi4py_is_one_clear_line(real_data):
    out = _cli_without_mpi4py(["train", "mlp", "--max-steps", "1"], PMI_SIZE="2", PMI_RANK="0")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "2 MPI ranks" in lines[0] and "pip install 'tapegrad[mpi]'" in lines[0]
    # the other rank prints nothing: one line per job, not per rank
    other = _cli_without_mpi4py(["train", "mlp", "--max-steps", "1"], PMI_SIZE="2", PMI_RANK="1")
    assert other.returncode == 2 and other.stderr == ""


def test_ranks_without_mpiexec_is_one_clear_line():
    out = _cli_without_mpi4py(["train", "mlp", "--ranks", "2"], TAPEGRAD_MPIEXEC="")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "tapegrad train: error: --ranks 2 needs MPI's mpiexec, which was not found: "
        "pip install 'tapegrad[mpi]' (mpi4py and mpich)"
    )
    bad = _cli_without_mpi4py(["train", "mlp", "--ranks", "0"])
    assert bad.returncode == 2 and "--ranks must be at least 1, got 0" in bad.stderr


def test_ranks_1_is_the_plain_run(tmp_path, real_data):
    """``--ranks 1`` starts no mpiexec and trains exactly as the plain command."""
    outs = []
    for extra, name in (([], "plain"), (["--ranks", "1"], "ranks1")):
        cmd = [sys.executable, "-m", "tapegrad", "train", "mlp", "--epochs", "1"]
        cmd += ["--max-steps", "20", "--batch-size", "500", "--save", str(tmp_path / name)]
        out = subprocess.run(
            cmd + extra,
            capture_output=True,
            text=True,
            env={**__import__("os").environ, "TAPEGRAD_MPIEXEC": ""},
        )
        assert out.returncode == 0, out.stderr
        outs.append(out.stdout.splitlines())
    assert outs[0][0] == outs[1][0] and "ranks" not in outs[0][0]  # the same header
    a = tg.load(str(tmp_path / "plain"))
    b = tg.load(str(tmp_path / "ranks1"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_shard_and_sharded_batches_cover_each_global_batch_once():
    assert [dist.shard(10, r, 3) for r in range(3)] == [slice(0, 3), slice(3, 6), slice(6, 10)]
    x = np.arange(23)
    whole = Batches(x, None, 5, seed=4)
    parts = [Batches(x, None, 5, seed=4, shard=(r, 3)) for r in range(3)]
    for i, batch in enumerate(whole.epoch(2)):
        pieces = [p for p in (list(part.epoch(2))[i] for part in parts)]
        assert np.array_equal(np.concatenate(pieces), batch)
        assert whole.global_size(i) == len(batch)
    with pytest.raises(ValueError, match="shard must be"):
        Batches(x, None, 5, shard=(3, 3))


def test_threads_per_rank_fill_the_cores():
    assert threads_per_rank(2, cores=16) == 8 and threads_per_rank(3, cores=2) == 1
    assert set(thread_env(4).values()) == {"4"}


class Recorder(dist.GradientAverager):
    """A gradient averager in one process that remembers the loss of every call."""

    def __init__(self, params):
        super().__init__(dist.SingleWorld(), params)
        self.seen = []

    def __call__(self, loss):
        super().__call__(loss)
        self.seen.append(float(loss))


def _model_and_data():
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(6, 8, rng=rng), nn.ReLU(), nn.Linear(8, 3, rng=rng))
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=16)
    return model, x, y


@pytest.mark.parametrize("compiled", [True, False])
def test_plan_accumulates_gradients_in_the_reducers_flat_buffer(compiled):
    model, x, y = _model_and_data()
    params = list(model.parameters())
    reducer = Recorder(params)
    opt = optim.SGD(params, lr=0.1)

    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        reduce_gradients(reducer, loss)
        return loss

    run = tg.compile(step) if compiled else (lambda x, y: step(tg.tensor(x), y))
    losses = []
    for _ in range(3):
        losses.append(float(run(x, y).item()))
        # every gradient is a view of the one flat buffer the reduction reduces
        for p, view in zip(params, reducer.views):
            assert p.grad is view and np.shares_memory(p.grad, reducer.flat)
        opt.step()
    assert reducer.seen == losses and reducer.loss == losses[-1]
    assert len(set(losses)) == 3  # the replays trained


def test_compiled_reduction_equals_eager_bit_for_bit():
    weights = []
    for compiled in (True, False):
        model, x, y = _model_and_data()
        params = list(model.parameters())
        reducer = dist.GradientAverager(dist.SingleWorld(), params)
        opt = optim.Adam(params, lr=0.01)

        def step(x, y, model=model, opt=opt, reducer=reducer):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            reduce_gradients(reducer, loss)
            return loss

        run = tg.compile(step) if compiled else (lambda x, y, step=step: step(tg.tensor(x), y))
        for _ in range(4):
            run(x, y)
            opt.step()
        weights.append([p.data.copy() for p in params])
    assert all(np.array_equal(a, b) for a, b in zip(*weights))


def test_gradient_averager_scales_by_the_ranks_share_and_refuses_mixed_dtypes():
    a = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    b = tg.tensor(np.ones(2, np.float32), requires_grad=True)
    avg = dist.GradientAverager(dist.SingleWorld(), [a, b])
    a.grad = np.array([2.0, 4.0, 6.0], np.float32)  # b has no gradient: it contributes zeros
    avg.weight = 0.5
    avg(np.float32(3.0))
    assert a.grad.tolist() == [1.0, 2.0, 3.0] and b.grad.tolist() == [0.0, 0.0]
    assert avg.loss == 1.5
    c = tg.tensor(np.ones(2, np.float64), requires_grad=True)
    with pytest.raises(dist.DistributedError, match="one dtype"):
        dist.GradientAverager(dist.SingleWorld(), [a, c])
