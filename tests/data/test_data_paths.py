"""Resolution order, the not-found message, describe() and the (faked) download path."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from data_helpers import write_mnist

import tapegrad.data as data
import tapegrad.data.paths as paths
from tapegrad.data import DatasetError, DatasetNotFoundError


def _first_label(**kw) -> int:
    return int(data.mnist(**kw).train.y[0])


def test_resolution_order(tmp_path, monkeypatch):
    # A distinct label offset marks each place: the loaded labels tell which place won.
    cache = data.cache_dir() / "mnist"
    write_mnist(cache, label_offset=3)
    assert _first_label() == 3

    env_root = tmp_path / "env"
    write_mnist(env_root / "mnist", label_offset=2)
    monkeypatch.setenv("TAPEGRAD_DATA", str(env_root))
    assert _first_label() == 2  # $TAPEGRAD_DATA beats the cache

    explicit = tmp_path / "explicit"
    write_mnist(explicit, label_offset=1)
    assert _first_label(data_dir=explicit) == 1  # data_dir beats $TAPEGRAD_DATA
    assert _first_label(data_dir=str(explicit)) == 1


def test_incomplete_place_is_skipped_not_mixed(tmp_path, monkeypatch):
    write_mnist(data.cache_dir() / "mnist", label_offset=3)
    partial = tmp_path / "env" / "mnist"
    write_mnist(partial, label_offset=2)
    (partial / "t10k-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setenv("TAPEGRAD_DATA", str(tmp_path / "env"))
    found = data.resolve("mnist")
    assert all(p.parent == data.cache_dir() / "mnist" for p in found)
    assert _first_label() == 3


def test_debian_folder_only_for_fashion_mnist(tmp_path, monkeypatch):
    debian = tmp_path / "debian"
    monkeypatch.setattr(paths, "DEBIAN_DATASETS", debian)
    write_mnist(debian / "fashion-mnist", label_offset=4)
    write_mnist(debian / "mnist", label_offset=5)
    assert int(data.fashion_mnist().train.y[0]) == 4
    with pytest.raises(DatasetNotFoundError):
        data.mnist()  # Debian's folder is not a place for MNIST
    write_mnist(data.cache_dir() / "fashion-mnist", label_offset=6)
    assert int(data.fashion_mnist().train.y[0]) == 6  # the cache beats Debian


def test_not_found_message(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_DATA", str(tmp_path / "env"))
    with pytest.raises(DatasetNotFoundError) as info:
        data.mnist()
    err = info.value
    assert isinstance(err, DatasetError) and isinstance(err, ValueError)
    assert isinstance(err, FileNotFoundError)
    msg = str(err)
    assert "\n" not in msg
    for piece in (
        "train-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
        str(tmp_path / "env" / "mnist"),
        str(data.cache_dir() / "mnist"),
        "TAPEGRAD_OFFLINE=1",
        f"Put the file(s) in {data.cache_dir() / 'mnist'}/",
        "pass data_dir=",
    ):
        assert piece in msg, piece


def test_explicit_data_dir_is_used_alone(tmp_path, monkeypatch):
    # the files exist in $TAPEGRAD_DATA and the cache, but a given folder is the only place
    write_mnist(tmp_path / "env" / "mnist")
    write_mnist(data.cache_dir() / "mnist")
    monkeypatch.setenv("TAPEGRAD_DATA", str(tmp_path / "env"))
    for given, state in ((tmp_path / "given", "does not exist"), (tmp_path, "lacks them")):
        with pytest.raises(DatasetNotFoundError) as info:
            data.mnist(data_dir=given)
        msg = str(info.value)
        assert "\n" not in msg and f"{given} {state}" in msg
        assert "train-images-idx3-ubyte.gz" in msg and "the only place searched" in msg


def test_not_found_lists_alternatives(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="aclImdb or aclImdb_v1_labelled.tar.gz or"):
        data.imdb()
    with pytest.raises(DatasetNotFoundError, match="glove.6B.100d.txt.gz or glove.6B.100d.txt"):
        data.glove(["<pad>", "<unk>", "the"], dim=100)


def test_unknown_dataset():
    with pytest.raises(DatasetError, match="unknown dataset 'cifar'"):
        data.resolve("cifar", ["x"])


def test_describe(tmp_path, monkeypatch):
    assert data.describe() == {"mnist": None, "fashion-mnist": None, "imdb": None, "glove": None}
    write_mnist(tmp_path / "root" / "mnist")
    (tmp_path / "root" / "glove").mkdir()
    (tmp_path / "root" / "glove" / "glove.6B.50d.txt").write_text("the 0.1\n")
    monkeypatch.setenv("TAPEGRAD_DATA", str(tmp_path / "root"))
    found = data.describe()
    assert found["mnist"] == str(tmp_path / "root" / "mnist")
    assert found["glove"] == str(tmp_path / "root" / "glove" / "glove.6B.50d.txt")
    assert found["imdb"] is None and found["fashion-mnist"] is None


def test_offline_switch(monkeypatch):
    assert not data.downloads_enabled()  # the test fixture sets TAPEGRAD_OFFLINE=1
    for value, enabled in (("0", True), ("", True), ("no", True), ("yes", False), ("1", False)):
        monkeypatch.setenv("TAPEGRAD_OFFLINE", value)
        assert data.downloads_enabled() is enabled


# --- downloads, with pooch.retrieve replaced by a fake (nothing touches the network) ----------


class FakeRetrieve:
    def __init__(self, payloads: dict[str, bytes]):
        self.payloads = payloads
        self.calls: list[dict] = []

    def __call__(self, url, known_hash, fname, path, progressbar):
        self.calls.append({"url": url, "known_hash": known_hash, "fname": fname})
        target = Path(path) / fname
        target.write_bytes(self.payloads[fname])
        return str(target)


@pytest.fixture
def fake_net(monkeypatch):
    import pooch

    def install(payloads):
        fake = FakeRetrieve(payloads)
        monkeypatch.setattr(pooch, "retrieve", fake)
        monkeypatch.setattr(paths, "_reachable", lambda url, timeout=3.0: True)
        return fake

    return install


def test_offline_never_calls_the_downloader(fake_net):
    fake = fake_net({})
    with pytest.raises(DatasetNotFoundError, match="downloading is off"):
        data.mnist()
    assert fake.calls == []


def test_download_uses_official_sha256_and_the_cache(tmp_path, fake_net, monkeypatch):
    src = tmp_path / "src"
    write_mnist(src, label_offset=7)
    fake = fake_net({f: (src / f).read_bytes() for f in paths.MNIST_FILES})
    monkeypatch.setenv("TAPEGRAD_OFFLINE", "0")
    ds = data.mnist()
    assert int(ds.train.y[0]) == 7
    assert [c["fname"] for c in fake.calls] == list(paths.MNIST_FILES)
    for call in fake.calls:
        official = paths._MNIST_SHA256[call["fname"]]
        assert call["known_hash"] == f"sha256:{official}"
        assert call["url"].endswith(call["fname"]) and call["url"].startswith("https://")
    assert (data.cache_dir() / "mnist" / "train-images-idx3-ubyte.gz").is_file()


def test_official_mnist_checksums_match_the_shared_copy(real_data):
    assert paths.read_sha256sums(real_data / "mnist" / "SHA256SUMS") == paths._MNIST_SHA256


def test_download_failure_is_reported(fake_net, monkeypatch):
    fake = fake_net({})

    def broken(url, known_hash, fname, path, progressbar):
        fake.calls.append(url)
        raise ValueError("SHA256 hash of downloaded file does not match the known hash")

    import pooch

    monkeypatch.setattr(pooch, "retrieve", broken)
    with pytest.raises(DatasetNotFoundError, match="download of .*failed.*does not match") as info:
        data.resolve("imdb", download=True)
    assert "\n" not in str(info.value)
    assert fake.calls == list(paths.DATASETS["imdb"].remotes["aclImdb_v1.tar.gz"].urls)


def test_no_download_without_a_verified_checksum(fake_net):
    fake = fake_net({})
    with pytest.raises(DatasetNotFoundError, match="no verified official checksum"):
        data.resolve("imdb", ["aclImdb_v1_labelled.tar.gz"], download=True)
    assert fake.calls == []


def test_unreachable_host_is_not_attempted(fake_net, monkeypatch):
    fake = fake_net({})
    monkeypatch.setattr(paths, "_reachable", lambda url, timeout=3.0: False)
    with pytest.raises(DatasetNotFoundError, match="unreachable"):
        data.resolve("imdb", download=True)
    assert fake.calls == []


def test_glove_download_extracts_the_member_from_the_zip(fake_net):
    buf = io.BytesIO()
    line = "the " + " ".join(["0.5"] * 50) + "\n"
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("glove.6B.50d.txt", line)
        zf.writestr("glove.6B.100d.txt", "unused")
    fake = fake_net({"glove.6B.zip": buf.getvalue()})
    vec = data.glove(["<pad>", "<unk>", "the"], dim=50, download=True)
    assert fake.calls[0]["known_hash"] == "sha256:" + paths._GLOVE_ZIP_SHA256
    assert vec.coverage == 1.0 and vec.matrix[2, 0] == 0.5
    target = data.cache_dir() / "glove" / "glove.6B.50d.txt"
    assert target.read_text() == line
    assert not list(target.parent.glob("*.tmp"))
