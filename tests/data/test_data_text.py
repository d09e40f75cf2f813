"""IMDB on tiny synthetic tarballs and folders: tokenizer, vocabulary, padding, cache, safety."""

from __future__ import annotations

import os
import tarfile

import numpy as np
import pytest
from data_helpers import TINY_REVIEWS, add_tar_bytes, write_acl_folder, write_acl_tar

import tapegrad.data as data
import tapegrad.data.text as text
from tapegrad.data import PAD, UNK, DatasetError, Vocab, pad_sequences, tokenize


@pytest.fixture
def tiny_tar(tmp_path):
    folder = tmp_path / "imdb"
    folder.mkdir()
    return write_acl_tar(folder / "aclImdb_v1.tar.gz", TINY_REVIEWS)


def test_tokenize():
    assert tokenize("Don't <br />STOP_me!<BR/>Great, 7/10.") == [
        "don",
        "t",
        "stop",
        "me",
        "great",
        "7",
        "10",
    ]
    assert tokenize("Café ÉLAN naïve") == ["café", "élan", "naïve"]
    assert tokenize("") == []


def test_vocab_from_train_only_ordered_by_frequency(tiny_tar):
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=8, vocab_size=100)
    words = ds.vocab.id_to_word
    assert words[:2] == ["<pad>", "<unk>"]
    # train counts: bad 4, great 4, film 3, then single words alphabetically
    assert words[2:5] == ["bad", "great", "film"]
    assert words[5:] == sorted(words[5:])
    assert "zebras" not in ds.vocab  # appears only in the test split
    assert ds.vocab["zebras"] == UNK and ds.vocab["great"] == 3
    assert ds.test.x[1, -1] == UNK  # "great film with zebras" (pos, after neg) ends in zebras


def test_vocab_size_counts_pad_and_unk(tiny_tar):
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=8, vocab_size=4)
    assert ds.vocab.id_to_word == ["<pad>", "<unk>", "bad", "great"]
    for split in (ds.train, ds.test):
        assert split.x.min() >= 0 and split.x.max() < 4


def test_order_labels_and_pre_padding(tiny_tar):
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=5, vocab_size=100)
    assert ds.train.x.dtype == np.int32 and ds.train.x.shape == (4, 5)
    assert ds.train.y.dtype == np.int64
    np.testing.assert_array_equal(ds.train.y, [0, 0, 1, 1])
    v = ds.vocab
    # negatives (file ids 0, 1) then positives (file ids 2, 10: numeric order, not "10" < "2")
    assert v.decode(ds.train.x[0]) == "awful film bad bad bad"
    assert v.decode(ds.train.x[1]) == "bad plot boring film"
    assert v.decode(ds.train.x[2]) == "great acting great fun"
    assert v.decode(ds.train.x[3]) == "great great film loved it"
    assert ds.train.x[1, 0] == PAD and (ds.train.x[1, 1:] != PAD).all()  # padded at the front
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=4, vocab_size=100)
    assert v.decode(ds.train.x[0]) == "film bad bad bad"  # the last 4 tokens are kept
    assert v.decode(ds.train.x[3]) == "great film loved it"


def test_post_padding_and_truncation(tiny_tar):
    ds = data.imdb(
        data_dir=tiny_tar.parent, maxlen=3, vocab_size=100, padding="post", truncating="post"
    )
    assert ds.vocab.decode(ds.train.x[3]) == "great great film"  # first 3 tokens kept
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=6, vocab_size=100, padding="post")
    row = ds.train.x[2]  # "great acting great fun": 4 tokens then 2 pads at the end
    assert (row[4:] == PAD).all() and (row[:4] != PAD).all()


def test_stopwords_are_left_out_before_the_vocabulary_and_the_window(tiny_tar):
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=4, vocab_size=100, stopwords={"film", "it"})
    assert "film" not in ds.vocab and "it" not in ds.vocab
    v = ds.vocab
    # "Great great film. Loved it!" without film/it: the window holds 4 remaining words
    assert v.decode(ds.train.x[3]) == "great great loved"
    assert ds.train.x[3, 0] == PAD
    # "Awful film. Bad, bad, bad." keeps its last 4 words once "film" is gone
    assert v.decode(ds.train.x[0]) == "awful bad bad bad"
    with pytest.raises(TypeError, match="not one string"):
        data.imdb(data_dir=tiny_tar.parent, stopwords="film")


def test_oov_drop_keeps_only_vocabulary_words_in_the_window(tiny_tar):
    unk = data.imdb(data_dir=tiny_tar.parent, maxlen=3, vocab_size=4)  # <pad> <unk> bad great
    drop = data.imdb(data_dir=tiny_tar.parent, maxlen=3, vocab_size=4, oov="drop")
    assert unk.vocab.id_to_word == drop.vocab.id_to_word
    # "great acting, GREAT fun": <unk> takes window places, dropping frees them
    np.testing.assert_array_equal(unk.train.x[2], [UNK, 3, UNK])
    np.testing.assert_array_equal(drop.train.x[2], [PAD, 3, 3])
    assert (drop.train.x != UNK).all() and (drop.test.x != UNK).all()
    # the test review "bad bad zebras" loses its unknown word and is padded at the front
    np.testing.assert_array_equal(drop.test.x[0], [PAD, 2, 2])
    with pytest.raises(ValueError, match="oov must be 'unk' or 'drop'"):
        data.imdb(data_dir=tiny_tar.parent, oov="skip")


def test_text_options_get_their_own_cache_entries(tiny_tar):
    plain = data.imdb(data_dir=tiny_tar.parent, maxlen=5)
    stop = data.imdb(data_dir=tiny_tar.parent, maxlen=5, stopwords={"film"})
    other = data.imdb(data_dir=tiny_tar.parent, maxlen=5, stopwords={"bad"})
    again = data.imdb(data_dir=tiny_tar.parent, maxlen=5, stopwords={"film"})
    assert "film" in plain.vocab and "film" not in stop.vocab
    assert "bad" in stop.vocab and "bad" not in other.vocab
    np.testing.assert_array_equal(again.train.x, stop.train.x)
    assert again.vocab.id_to_word == stop.vocab.id_to_word


def test_stopword_list_keeps_negations_and_drops_function_words():
    for word in ("no", "not", "nor", "never", "but", "very", "too", "don", "didn", "isn"):
        assert word not in text.STOPWORDS, word
    for word in ("the", "a", "of", "and", "is", "it", "s", "t", "this", "was"):
        assert word in text.STOPWORDS, word
    # every entry is a token the tokenizer can produce, so none is dead weight
    assert all(tokenize(w) == [w] for w in text.STOPWORDS)


def test_pad_sequences_directly():
    seqs = [[1, 2, 3, 4], [5], []]
    np.testing.assert_array_equal(pad_sequences(seqs, 3), [[2, 3, 4], [0, 0, 5], [0, 0, 0]])
    np.testing.assert_array_equal(
        pad_sequences(seqs, 3, "post", "post"), [[1, 2, 3], [5, 0, 0], [0, 0, 0]]
    )
    with pytest.raises(ValueError, match="padding must be 'pre' or 'post'"):
        pad_sequences(seqs, 3, padding="left")


def test_folder_and_both_tarball_names_agree(tmp_path, tiny_tar):
    ref = data.imdb(data_dir=tiny_tar.parent, maxlen=7, cache=False)
    folder_root = tmp_path / "folder"
    write_acl_folder(folder_root, TINY_REVIEWS)
    labelled = tmp_path / "lab"
    labelled.mkdir()
    write_acl_tar(labelled / "aclImdb_v1_labelled.tar.gz", TINY_REVIEWS)
    for where in (folder_root, labelled):
        got = data.imdb(data_dir=where, maxlen=7, cache=False)
        assert got.vocab.id_to_word == ref.vocab.id_to_word
        for a, b in ((got.train, ref.train), (got.test, ref.test)):
            np.testing.assert_array_equal(a.x, b.x)
            np.testing.assert_array_equal(a.y, b.y)


def test_cache_hit_miss_and_atomicity(tiny_tar, monkeypatch):
    first = data.imdb(data_dir=tiny_tar.parent, maxlen=5)
    cache_files = list((data.cache_dir() / "imdb").iterdir())
    assert len(cache_files) == 1 and cache_files[0].suffix == ".npz"
    with np.load(cache_files[0], allow_pickle=False) as z:
        assert set(z.files) == {"x_train", "y_train", "x_test", "y_test", "vocab"}

    calls = []
    real_read = text.read_reviews
    monkeypatch.setattr(text, "read_reviews", lambda src: calls.append(src) or real_read(src))
    second = data.imdb(data_dir=tiny_tar.parent, maxlen=5)
    assert calls == []  # served from the cache
    np.testing.assert_array_equal(first.train.x, second.train.x)
    assert first.vocab.id_to_word == second.vocab.id_to_word

    data.imdb(data_dir=tiny_tar.parent, maxlen=6)  # other parameters: a new entry
    assert len(calls) == 1
    st = tiny_tar.stat()
    os.utime(tiny_tar, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "new" source file
    data.imdb(data_dir=tiny_tar.parent, maxlen=5)
    assert len(calls) == 2
    names = [p.name for p in (data.cache_dir() / "imdb").iterdir()]
    assert len(names) == 3 and all(n.endswith(".npz") for n in names)  # no temp files left

    data.imdb(data_dir=tiny_tar.parent, maxlen=9, cache=False)
    assert len(list((data.cache_dir() / "imdb").iterdir())) == 3  # cache=False writes nothing


def test_corrupt_cache_file_is_rebuilt(tiny_tar):
    data.imdb(data_dir=tiny_tar.parent, maxlen=5)
    (cached,) = (data.cache_dir() / "imdb").iterdir()
    cached.write_bytes(b"garbage")
    ds = data.imdb(data_dir=tiny_tar.parent, maxlen=5)
    assert ds.train.x.shape == (4, 5)
    with np.load(cached, allow_pickle=False) as z:
        assert z["x_train"].shape == (4, 5)


@pytest.mark.parametrize("evil", ["../evil.txt", "aclImdb/../../evil", "/etc/evil", "./../x"])
def test_tar_with_unsafe_member_is_refused(tmp_path, evil):
    folder = tmp_path / "imdb"
    folder.mkdir()
    tar = write_acl_tar(folder / "aclImdb_v1.tar.gz", TINY_REVIEWS, extra={evil: b"pwned"})
    with pytest.raises(DatasetError, match="unsafe member name") as info:
        data.imdb(data_dir=folder, cache=False)
    assert str(tar) in str(info.value) and evil in str(info.value)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "evil").exists()


def test_link_member_is_refused(tmp_path):
    folder = tmp_path / "imdb"
    folder.mkdir()
    path = folder / "aclImdb_v1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for (split, label), items in TINY_REVIEWS.items():
            for file_id, body in items:
                add_tar_bytes(tar, f"aclImdb/{split}/{label}/{file_id}_7.txt", body.encode())
        link = tarfile.TarInfo("aclImdb/train/pos/99_9.txt")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(DatasetError, match="99_9.txt is not a regular file"):
        data.imdb(data_dir=folder, cache=False)


def test_truncated_and_corrupt_tarballs(tmp_path, tiny_tar):
    blob = tiny_tar.read_bytes()
    for name, payload in (("cut", blob[: len(blob) // 2]), ("junk", b"not a tarball at all")):
        folder = tmp_path / name
        folder.mkdir()
        bad = folder / "aclImdb_v1.tar.gz"
        bad.write_bytes(payload)
        with pytest.raises(DatasetError, match="corrupt or truncated tar archive") as info:
            data.imdb(data_dir=folder, cache=False)
        assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_missing_class_is_an_error(tmp_path):
    folder = tmp_path / "imdb"
    folder.mkdir()
    reviews = {k: v for k, v in TINY_REVIEWS.items() if k != ("test", "pos")}
    write_acl_tar(folder / "aclImdb_v1.tar.gz", reviews)
    with pytest.raises(DatasetError, match="no reviews in aclImdb/test/pos/"):
        data.imdb(data_dir=folder, cache=False)


def test_checksum_mismatch_beside_tarball(tiny_tar):
    (tiny_tar.parent / "SHA256SUMS").write_text(f"{'ab' * 32}  {tiny_tar.name}\n")
    with pytest.raises(DatasetError, match="checksum mismatch") as info:
        data.imdb(data_dir=tiny_tar.parent, cache=False)
    assert str(tiny_tar) in str(info.value)


def test_bad_parameters(tiny_tar):
    with pytest.raises(ValueError, match="maxlen must be >= 1"):
        data.imdb(data_dir=tiny_tar.parent, maxlen=0)
    with pytest.raises(ValueError, match="vocab_size must be >= 2"):
        data.imdb(data_dir=tiny_tar.parent, vocab_size=1)
    with pytest.raises(ValueError, match="truncating must be 'pre' or 'post'"):
        data.imdb(data_dir=tiny_tar.parent, truncating="middle")


def test_vocab_encode_decode():
    v = Vocab(["<pad>", "<unk>", "good", "film"])
    ids = v.encode("Good film, GOOD plot")
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [2, 3, 2, UNK])
    assert v.decode([0, 0, 2, 3, 1]) == "good film <unk>"
    np.testing.assert_array_equal(v.encode("Good film, GOOD plot", oov="drop"), [2, 3, 2])
    assert v.encode("plot twist", oov="drop").shape == (0,)
    assert v.ids(["film", "plot"]) == [3, UNK] and v.ids(["film", "plot"], "drop") == [3]
    with pytest.raises(ValueError, match="oov must be"):
        v.encode("good", oov="ignore")
    with pytest.raises(DatasetError, match="must start with"):
        Vocab(["good", "<pad>"])
