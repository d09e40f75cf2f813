"""The real datasets in ``$TAPEGRAD_DATA`` (CI: ../shared/data): counts, ranges, checksums."""

from __future__ import annotations

import numpy as np
import pytest
from data_helpers import REAL

import tapegrad.data as data
import tapegrad.data.paths as paths


@pytest.fixture(scope="module")
def real_mnist():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAPEGRAD_OFFLINE", "1")
        mp.setenv("TAPEGRAD_DATA", str(REAL))
        return data.mnist()


def test_mnist_counts_shapes_range_and_balance(real_mnist):
    ds = real_mnist
    assert (len(ds.train), len(ds.test)) == (60000, 10000)
    for split in (ds.train, ds.test):
        assert split.x.dtype == np.float32 and split.x.shape[1:] == (28, 28)
        assert split.y.dtype == np.int64
        assert split.x.min() == 0.0 and split.x.max() == 1.0
        share = np.bincount(split.y, minlength=10) / len(split.y)
        assert share.shape == (10,) and (share > 0.05).all() and (share < 0.15).all(), share
    # The well-known training-set pixel mean (the 0.1307 used to normalise MNIST) checks the
    # scaling; the first training label (a 5) and the first test labels check the order.
    assert abs(float(ds.train.x.mean(dtype=np.float64)) - 0.1307) < 5e-4
    assert ds.train.y[0] == 5
    np.testing.assert_array_equal(ds.test.y[:5], [7, 2, 1, 0, 4])


def test_mnist_files_match_their_checksums(real_data):
    for name in paths.MNIST_FILES:
        assert data.verify_checksum(real_data / "mnist" / name)
        assert data.sha256_file(real_data / "mnist" / name) == paths._MNIST_SHA256[name]


def test_describe_finds_the_shared_files(real_data):
    found = data.describe()
    assert found["mnist"] == str(real_data / "mnist")
    assert found["imdb"] == str(real_data / "imdb" / "aclImdb_v1_labelled.tar.gz")
    assert found["glove"] == str(real_data / "glove" / "glove.6B.50d.txt.gz")
    assert found["fashion-mnist"] is None  # not in the shared folder; Debian's is patched away


def test_imdb_counts_balance_ids_and_padding(real_imdb):
    ds, _, _, _, _ = real_imdb
    assert (len(ds.train), len(ds.test)) == (25000, 25000)
    for split in (ds.train, ds.test):
        assert split.x.dtype == np.int32 and split.x.shape == (25000, 130)
        assert split.y.dtype == np.int64
        np.testing.assert_array_equal(np.bincount(split.y), [12500, 12500])
        assert split.x.min() >= 0 and split.x.max() < 20000
        nonpad = split.x != data.PAD
        # pre-padding: once a row has a token, only tokens follow
        assert (np.diff(nonpad.astype(np.int8), axis=1) >= 0).all()
        assert nonpad[:, -1].all()  # every review has at least one token
        assert 0 < (~nonpad).mean() < 0.5
    assert len(ds.vocab) == 20000
    assert ds.vocab.id_to_word[:3] == ["<pad>", "<unk>", "the"]
    assert (ds.train.x == data.UNK).mean() < 0.05


def test_imdb_second_load_comes_from_the_cache(real_imdb):
    first, second, t_first, t_second, cache = real_imdb
    entries = list((cache / "tapegrad" / "imdb").iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".npz"
    np.testing.assert_array_equal(first.train.x, second.train.x)
    np.testing.assert_array_equal(first.test.y, second.test.y)
    assert first.vocab.id_to_word == second.vocab.id_to_word
    assert t_second < t_first / 5, (t_first, t_second)


def test_glove_covers_the_imdb_vocabulary(real_imdb, real_data):
    ds = real_imdb[0]
    vec = data.glove(ds.vocab, dim=50)
    print(f"\nGloVe 6B 50d coverage of the IMDB vocabulary: {vec.coverage:.4f}")
    assert vec.matrix.shape == (20000, 50) and vec.matrix.dtype == np.float32
    assert vec.coverage > 0.95
    assert (vec.matrix[0] == 0).all()
    the = vec.matrix[ds.vocab["the"]]
    assert the[0] == np.float32(0.418)  # the first number of GloVe 6B 50d's first line, "the"
    assert data.verify_checksum(real_data / "glove" / "glove.6B.50d.txt.gz")
