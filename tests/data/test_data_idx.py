"""IDX parsing and the MNIST/Fashion-MNIST loaders on small synthetic files."""

from __future__ import annotations

import gzip
import hashlib
import io
import tracemalloc

import numpy as np
import pytest
from data_helpers import idx_bytes, write_mnist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tapegrad.data as data
from tapegrad.data import DatasetError, parse_idx, read_idx


def test_mnist_roundtrip_values_dtypes_and_scaling(tmp_path):
    written = write_mnist(tmp_path / "m", n_train=12, n_test=6)
    ds = data.mnist(data_dir=tmp_path / "m")
    for split, prefix in ((ds.train, "train"), (ds.test, "t10k")):
        x, y = written[prefix]
        assert split.x.dtype == np.float32 and split.x.shape == x.shape
        assert split.y.dtype == np.int64 and split.y.shape == (len(x),)
        np.testing.assert_array_equal(split.y, y)
        np.testing.assert_allclose(split.x, x / 255.0, rtol=0, atol=1e-7)
        assert len(split) == len(x)
    assert ds.classes == tuple("0123456789")


def test_fashion_mnist_classes_and_data_dir_root_layout(tmp_path):
    write_mnist(tmp_path / "root" / "fashion-mnist", label_offset=3)
    ds = data.fashion_mnist(data_dir=tmp_path / "root")  # root/fashion-mnist/ is searched first
    assert ds.classes[0] == "T-shirt/top" and ds.classes[9] == "Ankle boot"
    assert ds.train.y[0] == 3


def test_plain_uncompressed_idx_is_read(tmp_path):
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    p = tmp_path / "plain.idx"
    p.write_bytes(idx_bytes(arr))
    np.testing.assert_array_equal(read_idx(p, ndim=3), arr)


def _raises(path, match, ndim=1):
    with pytest.raises(DatasetError, match=match) as info:
        read_idx(path, ndim=ndim)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_wrong_magic(tmp_path):
    p = tmp_path / "labels.gz"
    p.write_bytes(gzip.compress(idx_bytes(np.zeros((2, 2, 2)))))  # an image file (0x803)
    msg = _raises(p, "wrong IDX magic", ndim=1)
    assert "0x00000803" in msg and "0x00000801" in msg


def test_wrong_element_type(tmp_path):
    p = tmp_path / "floats.gz"
    p.write_bytes(gzip.compress(idx_bytes(np.zeros(4), magic=0x00000D01)))
    _raises(p, "wrong IDX magic")


def test_truncated_gzip(tmp_path):
    good = gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8)))
    p = tmp_path / "cut.gz"
    p.write_bytes(good[: len(good) - 20])
    _raises(p, "corrupt or truncated gzip")


def test_corrupt_gzip_body(tmp_path):
    good = bytearray(gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8))))
    good[15:25] = b"\xff" * 10
    p = tmp_path / "bad.gz"
    p.write_bytes(bytes(good))
    _raises(p, "corrupt or truncated gzip")


def test_header_claims_more_than_present(tmp_path):
    p = tmp_path / "short.gz"
    p.write_bytes(gzip.compress(idx_bytes(np.arange(5), shape=(60000,))))
    _raises(p, "truncated: header shape \\(60000,\\) needs 60000 data bytes, file has 5")


def test_header_claims_less_than_present(tmp_path):
    p = tmp_path / "long.gz"
    p.write_bytes(gzip.compress(idx_bytes(np.arange(50), shape=(10,))))
    _raises(p, "trailing bytes")


def test_truncated_header(tmp_path):
    p = tmp_path / "hdr.gz"
    p.write_bytes(gzip.compress(bytes([0, 0, 8, 3, 0, 0])))
    _raises(p, "truncated IDX header", ndim=3)


def test_lying_huge_header_allocates_nothing_big(tmp_path):
    p = tmp_path / "huge.gz"
    p.write_bytes(gzip.compress(idx_bytes(np.zeros((1, 1, 1)), shape=(2**32 - 1, 28, 28))))
    _raises(p, "above the .*-byte limit", ndim=3)
    # Below the cap but far larger than the data: memory must follow the bytes present.
    p2 = tmp_path / "big.gz"
    p2.write_bytes(gzip.compress(idx_bytes(np.zeros((3, 28, 28)), shape=(100000, 28, 28))))
    tracemalloc.start()
    try:
        _raises(p2, "truncated", ndim=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak} bytes for a 2 KB payload"


def test_counts_must_agree(tmp_path):
    folder = tmp_path / "m"
    write_mnist(folder, n_train=12)
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(np.zeros(11, np.uint8)))
    )
    with pytest.raises(DatasetError, match="12 images but .*11 labels") as info:
        data.mnist(data_dir=folder)
    assert "train-images-idx3-ubyte.gz" in str(info.value)


def test_image_size_must_be_28x28(tmp_path):
    folder = tmp_path / "m"
    write_mnist(folder)
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(np.zeros((6, 14, 14))))
    )
    with pytest.raises(DatasetError, match="t10k-images.*expected 28x28 images, header says 14x14"):
        data.mnist(data_dir=folder)


def test_label_out_of_range(tmp_path):
    folder = tmp_path / "m"
    write_mnist(folder)
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(np.full(6, 12, np.uint8)))
    )
    with pytest.raises(DatasetError, match="t10k-labels.*label 12 outside 0..9"):
        data.mnist(data_dir=folder)


def test_sha256sums_beside_files_are_checked(tmp_path):
    folder = tmp_path / "m"
    write_mnist(folder)
    names = sorted(p.name for p in folder.iterdir())
    digests = {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}
    (folder / "SHA256SUMS").write_text("".join(f"{digests[n]}  {n}\n" for n in names))
    data.mnist(data_dir=folder)  # all correct
    assert all(data.verify_checksum(folder / n) for n in names)

    wrong = "0" * 64
    (folder / "SHA256SUMS").write_text(
        "".join(f"{wrong if n.startswith('t10k-labels') else digests[n]} *{n}\n" for n in names)
    )
    data.paths._verified.clear()
    with pytest.raises(DatasetError, match="checksum mismatch") as info:
        data.mnist(data_dir=folder)
    msg = str(info.value)
    assert "t10k-labels-idx1-ubyte.gz" in msg and wrong in msg and digests[names[0]] not in msg


def test_malformed_sha256sums_named(tmp_path):
    folder = tmp_path / "m"
    write_mnist(folder)
    (folder / "SHA256SUMS").write_text("not a checksum line\n")
    with pytest.raises(DatasetError, match="SHA256SUMS:1: expected"):
        data.mnist(data_dir=folder)


# --- fuzz: only DatasetError may escape -----------------------------------------------------------

_VALID_PLAIN = idx_bytes(np.arange(12, dtype=np.uint8).reshape(2, 2, 3))
_VALID_GZ = gzip.compress(_VALID_PLAIN)


def _parse_or_error(blob: bytes, ndim: int):
    try:
        arr = parse_idx(io.BytesIO(blob), "fuzz.idx", ndim)
    except DatasetError as err:
        assert "fuzz.idx" in str(err)
        return None
    assert arr.dtype == np.uint8 and arr.ndim == ndim
    return arr


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(blob=st.binary(max_size=300), ndim=st.integers(1, 3))
def test_fuzz_random_bytes(blob, ndim):
    _parse_or_error(blob, ndim)
    _parse_or_error(b"\x1f\x8b" + blob, ndim)  # claims to be gzip


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([_VALID_PLAIN, _VALID_GZ]),
    edits=st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 255), st.sampled_from("sdi")), max_size=6
    ),
    cut=st.integers(0, 200),
)
def test_fuzz_mutated_valid_files(base, edits, cut):
    blob = bytearray(base)
    for pos, value, op in edits:
        pos %= len(blob) + 1
        if op == "s" and pos < len(blob):
            blob[pos] = value
        elif op == "d" and pos < len(blob):
            del blob[pos]
        elif op == "i":
            blob.insert(pos, value)
    blob = bytes(blob[: max(len(blob) - cut, 0)] if cut % 3 == 0 else blob)
    arr = _parse_or_error(blob, 3)
    if blob in (_VALID_PLAIN, _VALID_GZ):
        np.testing.assert_array_equal(arr, np.arange(12).reshape(2, 2, 3))
