"""Dataset / TensorDataset / DataLoader: batching, PyTorch's shuffling defaults, seeded
orders, drop_last, collation of arrays, numbers, tuples and dicts, transforms, random_split,
and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.data import DataLoader, Dataset, Subset, TensorDataset, default_collate, random_split


def _data(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return x, np.arange(n) % 4


def test_batches_in_order_by_default_with_a_short_last_one():
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    assert batches[0][0].base is not None  # unshuffled batches are views
    assert len(DataLoader(TensorDataset(x, y), 4, drop_last=True)) == 2
    assert [len(b[0]) for b in DataLoader(TensorDataset(x, y), 4, drop_last=True)] == [4, 4]


def test_shuffle_draws_a_new_seeded_order_every_pass():
    x, y = _data(20)
    loader = DataLoader(TensorDataset(x, y), 5, shuffle=True, generator=3)
    first = np.concatenate([b[1] for b in loader])
    second = np.concatenate([b[0][:, 0] for b in loader]) // 3
    assert sorted(second.tolist()) == list(range(20)) and not np.array_equal(second, np.arange(20))
    again = DataLoader(TensorDataset(x, y), 5, shuffle=True, generator=3)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in again]), first)
    assert not np.array_equal(
        np.concatenate([b[0] for b in again]), np.concatenate([b[0] for b in again])
    )
    tg.manual_seed(0)
    a = np.concatenate([b[1] for b in DataLoader(TensorDataset(x, y), 5, shuffle=True)])
    tg.manual_seed(0)
    b = np.concatenate([b[1] for b in DataLoader(TensorDataset(x, y), 5, shuffle=True)])
    np.testing.assert_array_equal(a, b)  # no generator: tg.manual_seed reproduces the order


class Words(Dataset):
    """A dataset of dict samples with Python numbers, strings and arrays."""

    def __init__(self, n=5):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {
            "ids": np.full(3, i),
            "label": i % 2,
            "weight": 0.5 * i,
            "text": f"w{i}",
            "pair": (np.float32(i), [i, i + 1]),
        }


def test_collation_of_dicts_tuples_numbers_and_strings():
    batch = next(iter(DataLoader(Words(), batch_size=3)))
    assert batch["ids"].shape == (3, 3) and batch["label"].dtype == np.int64
    assert batch["weight"].dtype == np.float32 and batch["text"] == ["w0", "w1", "w2"]
    assert batch["pair"][0].tolist() == [0, 1, 2] and batch["pair"][1][1].tolist() == [1, 2, 3]
    assert default_collate([tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])]).shape == (2, 2)
    with pytest.raises(ValueError, match="different shapes"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(TypeError, match="cannot batch samples of type object"):
        default_collate([object(), object()])
    loader = DataLoader(Words(), batch_size=2, collate_fn=lambda s: [d["label"] for d in s])
    assert list(loader) == [[0, 1], [0, 1], [0]]


def test_transforms_apply_per_sample():
    x, y = _data(6)
    ds = TensorDataset(x, y, transform=lambda v: v * 2, target_transform=lambda t: t + 100)
    xb, yb = next(iter(DataLoader(ds, batch_size=6)))
    np.testing.assert_array_equal(xb, x * 2)
    np.testing.assert_array_equal(yb, y + 100)
    assert ds[1][1] == y[1] + 100 and len(ds) == 6


def test_random_split_and_subset():
    ds = TensorDataset(*_data(10))
    a, b = random_split(ds, [7, 3], generator=0)
    assert len(a) == 7 and len(b) == 3
    seen = sorted(int(s[1]) for s in a) + sorted(int(s[1]) for s in b)
    assert sorted(np.concatenate([a.indices, b.indices]).tolist()) == list(range(10))
    assert len(seen) == 10
    c, d, e = random_split(ds, [0.5, 0.3, 0.2], generator=1)
    assert (len(c), len(d), len(e)) == (5, 3, 2)
    assert Subset(ds, [9, 0])[0][1] == ds[9][1]
    with pytest.raises(ValueError, match="lengths must be counts summing to 10"):
        random_split(ds, [4, 4])


def test_errors():
    with pytest.raises(ValueError, match=r"share their first axis, got shapes \(3, 2\), \(4,\)"):
        TensorDataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        DataLoader(TensorDataset(np.zeros(3)), 0)
    with pytest.raises(ValueError, match="num_workers must be 0"):
        DataLoader(TensorDataset(np.zeros(3)), num_workers=2)
    with pytest.raises(TypeError, match="__getitem__ and __len__"):
        DataLoader(5)
    with pytest.raises(TypeError, match="generator must be"):
        DataLoader(TensorDataset(np.zeros(3)), shuffle=True, generator="seed")
    with pytest.raises(NotImplementedError, match="Dataset does not define __getitem__"):
        Dataset()[0]
