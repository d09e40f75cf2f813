"""GloVe matrices from tiny synthetic files: found rows, the missing-word rule, coverage, errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import tapegrad.data as data
import tapegrad.data.embeddings as embeddings
from tapegrad.data import DatasetError, Vocab

DIM = 50
RNG = np.random.default_rng(1)
FILE_WORDS = ["the", "film", ",", "great", "café", "zebra"]
FILE_VECS = RNG.standard_normal((len(FILE_WORDS), DIM)).astype(np.float32)


def glove_text(words=FILE_WORDS, vecs=FILE_VECS) -> str:
    return "".join(
        w + " " + " ".join(f"{v:.6f}" for v in vec) + "\n" for w, vec in zip(words, vecs)
    )


@pytest.fixture(params=["txt", "txt.gz"])
def glove_dir(request, tmp_path):
    folder = tmp_path / "glove"
    folder.mkdir()
    body = glove_text().encode()
    name = f"glove.6B.{DIM}d.{request.param}"
    (folder / name).write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    return folder


VOCAB = Vocab(["<pad>", "<unk>", "the", "great", "missing", "café", "film"])


def test_found_rows_missing_rule_and_coverage(glove_dir):
    vec = data.glove(VOCAB, dim=DIM, data_dir=glove_dir)
    m = vec.matrix
    assert m.dtype == np.float32 and m.shape == (len(VOCAB), DIM)
    for word in ("the", "great", "café", "film"):
        expected = FILE_VECS[FILE_WORDS.index(word)]
        np.testing.assert_allclose(m[VOCAB[word]], expected, atol=1e-6)
    assert (m[0] == 0).all()  # padding row
    for word_id in (1, VOCAB.word_to_id["missing"]):  # <unk> and a missing word: small random
        assert 0 < np.abs(m[word_id]).max() < 0.6
    assert vec.coverage == pytest.approx(4 / 5)  # 4 of the 5 real words (not <pad>, <unk>)
    matrix, coverage = vec  # a plain tuple too
    assert coverage == vec.coverage


def test_missing_rows_are_seeded(glove_dir):
    a = data.glove(VOCAB, dim=DIM, data_dir=glove_dir, cache=False).matrix
    b = data.glove(VOCAB, dim=DIM, data_dir=glove_dir, cache=False).matrix
    c = data.glove(VOCAB, dim=DIM, data_dir=glove_dir, cache=False, seed=1).matrix
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[1], c[1])
    np.testing.assert_array_equal(a[2], c[2])  # found rows do not depend on the seed


def test_oov_scale(glove_dir):
    words = ["<pad>", "<unk>"] + [f"nope{i}" for i in range(400)]
    m = data.glove(words, dim=DIM, data_dir=glove_dir, oov_scale=0.25, cache=False).matrix
    assert abs(m[1:].std() - 0.25) < 0.01 and abs(m[1:].mean()) < 0.01


def test_vocab_forms_agree(glove_dir):
    ref = data.glove(VOCAB, dim=DIM, data_dir=glove_dir, cache=False).matrix
    as_list = data.glove(VOCAB.id_to_word, dim=DIM, data_dir=glove_dir, cache=False).matrix
    as_dict = data.glove(VOCAB.word_to_id, dim=DIM, data_dir=glove_dir, cache=False).matrix
    np.testing.assert_array_equal(ref, as_list)
    np.testing.assert_array_equal(ref, as_dict)
    with pytest.raises(DatasetError, match="vocabulary ids must be 0..1"):
        data.glove({"a": 0, "b": 5}, dim=DIM, data_dir=glove_dir)


def test_cache(glove_dir, monkeypatch):
    first = data.glove(VOCAB, dim=DIM, data_dir=glove_dir)

    def fail(*args, **kwargs):
        raise AssertionError("parsed again although cached")

    monkeypatch.setattr(embeddings, "read_vectors", fail)
    second = data.glove(VOCAB, dim=DIM, data_dir=glove_dir)
    np.testing.assert_array_equal(first.matrix, second.matrix)
    assert first.coverage == second.coverage
    with pytest.raises(AssertionError, match="parsed again"):  # another vocabulary misses
        data.glove(Vocab(["<pad>", "<unk>", "the"]), dim=DIM, data_dir=glove_dir)


def _bad_file(tmp_path, content: bytes, gz=False):
    folder = tmp_path / "badglove"
    folder.mkdir()
    name = f"glove.6B.{DIM}d.txt" + (".gz" if gz else "")
    (folder / name).write_bytes(content)
    return folder, folder / name


def test_wrong_dimension(tmp_path):
    folder, path = _bad_file(tmp_path, ("the " + " ".join(["0.1"] * 100) + "\n").encode())
    with pytest.raises(DatasetError, match=":1: expected a word and 50 numbers, got 100") as info:
        data.glove(VOCAB, dim=DIM, data_dir=folder)
    assert str(path) in str(info.value)


def test_bad_number_and_short_line(tmp_path):
    text = glove_text() + "film " + " ".join(["x"] * DIM) + "\n"
    text = text.replace("film ", "notfilm ", 1)  # the bad line is the one that is used
    folder, path = _bad_file(tmp_path, text.encode())
    with pytest.raises(DatasetError, match=r":7: not a number") as info:
        data.glove(VOCAB, dim=DIM, data_dir=folder)
    assert str(path) in str(info.value)
    folder2 = tmp_path / "short"
    folder2.mkdir()
    (folder2 / f"glove.6B.{DIM}d.txt").write_text(glove_text() + "great 0.1 0.2\n")
    with pytest.raises(DatasetError, match=":7: expected 50 numbers, got 2"):
        data.glove(VOCAB, dim=DIM, data_dir=folder2)


def test_truncated_gzip_and_empty_file(tmp_path):
    blob = gzip.compress(glove_text().encode())
    folder, path = _bad_file(tmp_path, blob[:-12], gz=True)
    with pytest.raises(DatasetError, match="corrupt or truncated file") as info:
        data.glove(VOCAB, dim=DIM, data_dir=folder)
    assert str(path) in str(info.value)
    folder2 = tmp_path / "empty"
    folder2.mkdir()
    (folder2 / f"glove.6B.{DIM}d.txt").write_text("")
    with pytest.raises(DatasetError, match="empty file"):
        data.glove(VOCAB, dim=DIM, data_dir=folder2)


def test_dim_must_be_a_glove_6b_size(glove_dir):
    with pytest.raises(ValueError, match="dim must be one of"):
        data.glove(VOCAB, dim=64, data_dir=glove_dir)
