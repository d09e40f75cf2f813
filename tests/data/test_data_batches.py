"""Batches: coverage per epoch, drop_last, reproducibility per (seed, epoch), resuming."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapegrad.data import Batches, Split


def _data(n):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)  # row i starts with 3*i
    y = np.arange(n, dtype=np.int64)
    return x, y


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60), batch=st.integers(1, 17), shuffle=st.booleans(), epoch=st.integers(0, 5)
)
def test_each_sample_once_per_epoch_and_pairs_stay_aligned(n, batch, shuffle, epoch):
    x, y = _data(n)
    b = Batches(x, y, batch, shuffle=shuffle, seed=3)
    got = list(b.epoch(epoch))
    assert len(got) == len(b) == -(-n // batch)
    ys = np.concatenate([yb for _, yb in got])
    np.testing.assert_array_equal(np.sort(ys), y)  # every sample exactly once
    for xb, yb in got:
        np.testing.assert_array_equal(xb[:, 0], 3 * yb)  # x and y rows belong together
        assert xb.dtype == x.dtype
    assert all(len(yb) == batch for _, yb in got[:-1])
    if not shuffle:
        np.testing.assert_array_equal(ys, y)


def test_drop_last():
    x, y = _data(10)
    b = Batches(x, y, 4, drop_last=True, seed=0)
    assert len(b) == 2
    got = list(b.epoch(0))
    assert [len(yb) for _, yb in got] == [4, 4]
    assert len(np.unique(np.concatenate([yb for _, yb in got]))) == 8
    assert len(Batches(x, y, 4, drop_last=False)) == 3
    assert len(Batches(x, y, 5, drop_last=True)) == 2
    assert (
        len(Batches(x, y, 11, drop_last=True)) == 0
        and list(Batches(x, y, 11, drop_last=True)) == []
    )


def test_order_depends_only_on_seed_and_epoch():
    x, y = _data(50)
    a = Batches(x, y, 8, seed=7)
    orders = [
        np.concatenate([yb for _, yb in epoch_iter]) for epoch_iter in (iter(a) for _ in range(4))
    ]
    assert a.current_epoch == 4
    fresh = Batches(x, y, 8, seed=7)
    for k in (3, 0, 2):  # any epoch, in any order, on its own
        np.testing.assert_array_equal(np.concatenate([yb for _, yb in fresh.epoch(k)]), orders[k])
        np.testing.assert_array_equal(fresh.order(k), orders[k])
    assert not np.array_equal(orders[0], orders[1])  # epochs differ
    other = Batches(x, y, 8, seed=8)
    assert not np.array_equal(other.order(0), orders[0])  # seeds differ
    assert not np.array_equal(orders[0], y)  # actually shuffled


def test_resume_mid_epoch():
    x, y = _data(45)
    full = [yb for _, yb in Batches(x, y, 6, seed=1).epoch(2)]
    resumed = [yb for _, yb in Batches(x, y, 6, seed=1).epoch(2, start=3)]
    assert len(resumed) == len(full) - 3
    for a, b in zip(resumed, full[3:]):
        np.testing.assert_array_equal(a, b)

    b = Batches(x, y, 6, seed=1, epoch=2, start=5)  # as after loading a checkpoint
    first = [yb for _, yb in b]
    assert len(first) == len(full) - 5
    np.testing.assert_array_equal(first[0], full[5])
    after = [yb for _, yb in b]  # the next epoch starts at batch 0
    np.testing.assert_array_equal(np.concatenate(after), Batches(x, y, 6, seed=1).order(3))

    b.set_epoch(2, start=len(full))
    assert list(b) == []
    with pytest.raises(ValueError, match="start must be in 0..8"):
        b.epoch(0, start=9)
    with pytest.raises(ValueError, match="start must be in 0..8"):
        Batches(x, y, 6, start=-1)


def test_one_fancy_index_per_batch_not_per_sample():
    calls = []

    class Counting(np.ndarray):
        def __getitem__(self, idx):
            calls.append(idx)
            return np.asarray(self).__getitem__(idx)

    x, y = _data(100)
    b = Batches(x.view(Counting), y, 32, seed=0)
    assert sum(1 for _ in b.epoch(0)) == 4
    assert len(calls) == 4
    assert all(isinstance(i, np.ndarray) and i.dtype.kind == "i" for i in calls)


def test_unshuffled_batches_are_views():
    x, y = _data(20)
    for xb, yb in Batches(x, y, 8, shuffle=False):
        assert np.shares_memory(xb, x) and np.shares_memory(yb, y)


def test_x_only_and_split_helper():
    x, y = _data(9)
    got = list(Batches(x, None, 4, shuffle=False))
    assert [g.shape for g in got] == [(4, 3), (4, 3), (1, 3)]
    split = Split(x, y)
    assert len(split) == 9
    b = split.batches(4, seed=5)
    np.testing.assert_array_equal(b.order(1), Batches(x, y, 4, seed=5).order(1))


def test_bad_arguments():
    x, y = _data(10)
    with pytest.raises(ValueError, match="x has 10 samples but y has shape \\(9,\\)"):
        Batches(x, y[:9], 4)
    for bad in (0, -2, 2.5):
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            Batches(x, y, bad)
    with pytest.raises(ValueError, match="0-d"):
        Batches(np.float32(1.0), None, 1)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        Batches(x, y, 4).set_epoch(-1)


@pytest.mark.parametrize(
    "make",
    [
        lambda r: r.random((500, 28, 28), dtype=np.float32),  # MNIST's images: the gather
        lambda r: r.random((500, 40)),  # float64 rows: the gather
        lambda r: r.random((40, 500), dtype=np.float32).T,  # not C-contiguous: NumPy
        lambda r: r.integers(0, 9, (500, 7)).astype(np.int32),  # ints: NumPy
        lambda r: r.random(500, dtype=np.float32),  # 1-d: NumPy
        lambda r: r.random((500, 0), dtype=np.float32),  # empty rows
    ],
)
def test_take_rows_is_fancy_indexing(make, threads):
    """The compiled gather gives what ``a[idx]`` gives (values, shape, dtype, a new array), at
    one thread and two (a batch of 300 rows of 784 floats goes parallel)."""
    from tapegrad.data.batches import take_rows

    rng = np.random.default_rng(3)
    a = make(rng)
    for n in (1, 2):
        threads(n)
        for idx in (rng.permutation(500)[:300], np.array([7, 7, 499, 0]), np.arange(0)):
            got, want = take_rows(a, idx), a[idx]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
            assert not np.shares_memory(got, a)


def test_shuffled_batches_of_a_memmap_are_its_rows(tmp_path):
    x = np.lib.format.open_memmap(tmp_path / "x.npy", "w+", np.float32, (50, 6))
    x[:] = np.arange(300, dtype=np.float32).reshape(50, 6)
    b = Batches(x, np.arange(50), 16, seed=2)
    got = np.concatenate([xb for xb, _ in b.epoch(0)])
    np.testing.assert_array_equal(got, np.asarray(x)[b.order(0)])


_THREADS_AFTER_AN_EPOCH = """
import os, sys
import numpy as np
from tapegrad.data import Batches
before = len(os.listdir("/proc/self/task"))
x = np.random.default_rng(0).random((2000, 784), dtype=np.float32)
for xb, yb in Batches(x, np.arange(2000), 100, compiled_gather=sys.argv[1] == "1").epoch(0):
    pass
print(before, len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc (Linux)")
def test_numpys_gather_starts_no_threads_in_a_peers_process():
    """A peer framework's benchmark worker batches with ``compiled_gather=False``: its process
    must not start numba's threads (they would share its cores with the peer's own)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    counts = {}
    for flag in ("0", "1"):
        out = subprocess.run(
            [sys.executable, "-c", _THREADS_AFTER_AN_EPOCH, flag],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        counts[flag] = tuple(map(int, out))
    assert counts["0"][1] == counts["0"][0], counts
    assert counts["1"][1] > counts["1"][0], counts  # the check can see numba's threads start
