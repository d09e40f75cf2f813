"""Malformed files: every input loads or raises the documented error, fast and in bounded memory.

Readers fuzzed: the IDX parser and the MNIST loader (``DatasetError``), the IMDB tar reader
(``DatasetError``), and model files and checkpoints (``tapegrad.load``, ``load_arrays``,
``read_metadata``, ``load_latest``: ``ModelFileError``, or for ``load_latest`` a skip). Inputs:
random bytes, truncations, bit flips, byte edits, appended garbage, and headers that lie (IDX
sizes, tar member and extended-header sizes, safetensors header lengths, shapes and offsets, and
metadata re-signed with a valid checksum so the lie gets past verification). Each call runs under
an alarm (a hang fails the test) and under tracemalloc with a cap on the peak.

``tests/data/test_data_idx.py`` already feeds the IDX parser random and mutated bytes; this file
adds what it lacks: lying sizes under a memory cap, gzip bombs, and the MNIST loader end to end.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import signal
import tarfile
import tracemalloc

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tapegrad as tg
import tapegrad.data as data
from tapegrad.data import DatasetError, parse_idx
from tapegrad.data.idx import MAX_IDX_BYTES
from tapegrad.data.text import read_reviews
from tapegrad.serialization import (
    ModelFileError,
    _digest,
    load_arrays,
    read_metadata,
    save_arrays,
)
from tapegrad.train.checkpoint import load_latest, save_checkpoint

COUNTS: dict[str, int] = {"idx": 0, "mnist": 0, "tar": 0, "model": 0}
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Hang(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: float, max_peak: int, what: str):
    """Fail if the body runs over ``seconds`` or its tracemalloc peak exceeds ``max_peak``."""

    def alarm(signum, frame):
        raise Hang(f"{what}: still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert peak <= max_peak, f"{what}: allocated {peak} bytes at peak, cap {max_peak}"


def mutate(blob: bytes, edits, cut: int, tail: bytes) -> bytes:
    """Apply (position, value, op) edits: s=set byte, f=flip a bit, d=delete, i=insert."""
    b = bytearray(blob)
    for pos, value, op in edits:
        pos %= len(b) + 1
        if op == "s" and pos < len(b):
            b[pos] = value
        elif op == "f" and pos < len(b):
            b[pos] ^= 1 << (value % 8)
        elif op == "d" and pos < len(b):
            del b[pos]
        elif op == "i":
            b.insert(pos, value)
    if cut:
        b = b[: max(len(b) - cut, 0)]
    return bytes(b) + tail


EDITS = st.lists(
    st.tuples(st.integers(0, 1 << 16), st.integers(0, 255), st.sampled_from("sfdi")), max_size=8
)
CUT = st.one_of(st.just(0), st.integers(1, 4096))
TAIL = st.one_of(st.just(b""), st.binary(min_size=1, max_size=64))


# --- IDX and MNIST ----------------------------------------------------------------------------
def idx(shape, payload: bytes, ndim: int | None = None) -> bytes:
    ndim = len(shape) if ndim is None else ndim
    return bytes([0, 0, 8, ndim]) + b"".join(int(s).to_bytes(4, "big") for s in shape) + payload


SIZES = st.sampled_from([0, 1, 2, 3, 28, 255, 60000, 1 << 24, (1 << 31) - 1, (1 << 32) - 1])


@FUZZ
@given(
    shape=st.lists(SIZES, min_size=1, max_size=3),
    payload=st.binary(max_size=64),
    gz=st.booleans(),
)
def test_idx_lying_sizes_cost_no_memory(shape, payload, gz):
    blob = idx(shape, payload)
    blob = gzip.compress(blob) if gz else blob
    count = int(np.prod(shape, dtype=object))
    with bounded(5, 4 << 20, f"IDX shape {shape}"):  # gzip reads in 1 MiB chunks
        try:
            arr = parse_idx(io.BytesIO(blob), "lying.idx", ndim=len(shape))
        except DatasetError as err:
            assert "lying.idx" in str(err)
            # refused only if the header lies about the payload, or names a dimension above the
            # size limit (a 0 elsewhere makes the count 0, but no array of that shape exists)
            assert count != len(payload) or max(shape) > MAX_IDX_BYTES
        else:
            assert arr.shape == tuple(shape) and count == len(payload)
    COUNTS["idx"] += 1


@pytest.mark.parametrize("claimed", [(1 << 16,), (4096, 4096)])
def test_idx_gzip_bomb_is_cut_at_the_limit(claimed):
    # 64 MiB of zeros compress to ~64 KiB; with a 1 MiB limit the reader must stop near 1 MiB
    bomb = io.BytesIO()
    with gzip.GzipFile(fileobj=bomb, mode="wb", compresslevel=9) as g:
        g.write(idx(claimed, b""))
        chunk = bytes(1 << 20)
        for _ in range(64):
            g.write(chunk)
    with bounded(10, 4 << 20, "gzip bomb"), pytest.raises(DatasetError, match="limit"):
        parse_idx(io.BytesIO(bomb.getvalue()), "bomb.gz", ndim=len(claimed), max_bytes=1 << 20)
    COUNTS["idx"] += 1


def _mnist_files(folder):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for prefix, n in (("train", 5), ("t10k", 3)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        files[f"{prefix}-images-idx3-ubyte.gz"] = gzip.compress(idx(x.shape, x.tobytes()))
        files[f"{prefix}-labels-idx1-ubyte.gz"] = gzip.compress(idx(y.shape, y.tobytes()))
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    return files


@FUZZ
@given(which=st.integers(0, 3), edits=EDITS, cut=CUT, tail=TAIL, raw=st.booleans())
def test_mnist_loader_with_one_damaged_file(tmp_path_factory, which, edits, cut, tail, raw):
    folder = tmp_path_factory.mktemp("mnist")
    files = _mnist_files(folder)
    name = sorted(files)[which]
    blob = gzip.decompress(files[name]) if raw else files[name]  # also plain IDX in a .gz name
    (folder / name).write_bytes(mutate(blob, edits, cut, tail))
    with bounded(5, 4 << 20, f"mnist with damaged {name}"):
        try:
            ds = data.mnist(data_dir=folder)
        except DatasetError as err:
            assert str(folder) in str(err) and "\n" not in str(err)
        else:
            assert ds.train.x.shape[1:] == (28, 28) and len(ds.train.x) == len(ds.train.y)
            assert ds.train.y.max() <= 9
    COUNTS["mnist"] += 1


# --- IMDB tar ---------------------------------------------------------------------------------
REVIEWS = {
    "aclImdb/train/pos/1_9.txt": b"great film",
    "aclImdb/train/neg/2_1.txt": b"bad film",
    "aclImdb/test/pos/3_8.txt": b"loved it<br />great",
    "aclImdb/test/neg/4_2.txt": b"boring",
    "aclImdb/README": b"readme",
}


def tar_bytes(members: dict[str, bytes], fmt=tarfile.USTAR_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


VALID_TAR = tar_bytes(REVIEWS)
VALID_PAX = tar_bytes(
    {"aclImdb/train/pos/" + "9" * 120 + "_9.txt": b"x", **REVIEWS}, tarfile.PAX_FORMAT
)


def lie_in_header(blob: bytes, block: int, size: int, type_: bytes | None) -> bytes:
    """Set the size (octal or base-256) and maybe the type of the header at 512-byte ``block``,
    and fix its checksum, so tarfile believes the lie."""
    b = bytearray(blob)
    h = block * 512
    if h + 512 > len(b):
        return blob
    if size < 8**11:
        b[h + 124 : h + 136] = b"%011o\0" % size
    else:
        b[h + 124 : h + 136] = bytes([0x80]) + size.to_bytes(11, "big")
    if type_ is not None:
        b[h + 156 : h + 157] = type_
    b[h + 148 : h + 156] = b" " * 8
    b[h + 148 : h + 156] = b"%06o\0 " % sum(b[h : h + 512])
    return bytes(b)


def _read_tar(tmp_path_factory, blob: bytes, what: str) -> None:
    path = tmp_path_factory.mktemp("tar") / "aclImdb_v1.tar.gz"
    path.write_bytes(blob)
    with bounded(5, 8 << 20, what):
        try:
            out = read_reviews(path)
        except DatasetError as err:
            assert str(path) in str(err) and "\n" not in str(err), err
        else:
            assert set(out) == {"train", "test"}
    COUNTS["tar"] += 1


@FUZZ
@given(
    base=st.sampled_from(["tar", "pax"]),
    gz=st.booleans(),
    edits=EDITS,
    cut=CUT,
    tail=TAIL,
)
def test_imdb_tar_mutations(tmp_path_factory, base, gz, edits, cut, tail):
    blob = mutate(VALID_TAR if base == "tar" else VALID_PAX, edits, cut, tail)
    _read_tar(tmp_path_factory, gzip.compress(blob) if gz else blob, "mutated tar")


@FUZZ
@given(
    base=st.sampled_from(["tar", "pax"]),
    block=st.integers(0, 12),
    size=st.sampled_from([0, 1, 511, 513, 1 << 20, (1 << 20) + 1, 1 << 30, 8**11 - 1, 1 << 62]),
    type_=st.sampled_from([None, b"0", b"x", b"g", b"L", b"K", b"S", b"5", b"2"]),
    gz=st.booleans(),
    pad=st.sampled_from([0, 1 << 16, 3 << 20]),
)
def test_imdb_tar_lying_headers(tmp_path_factory, base, block, size, type_, gz, pad):
    # ``pad`` zeros after the lie: a compressed archive can back a big claim with real bytes
    blob = lie_in_header(VALID_TAR if base == "tar" else VALID_PAX, block, size, type_)
    blob += bytes(pad)
    _read_tar(tmp_path_factory, gzip.compress(blob, 1) if gz else blob, f"tar lie {size}")


@FUZZ
@given(blob=st.binary(max_size=2048), gz=st.booleans())
def test_imdb_tar_random_bytes(tmp_path_factory, blob, gz):
    _read_tar(tmp_path_factory, (b"\x1f\x8b" + blob) if gz else blob, "random tar bytes")


def test_imdb_pax_bomb_allocates_nothing_big(tmp_path):
    # 200 MiB claimed by one pax header, backed by zeros: ~200 KB compressed
    head = lie_in_header(tar_bytes({"aclImdb/README": b""}), 0, 200 << 20, b"x")[:512]
    path = tmp_path / "aclImdb_v1.tar.gz"
    with gzip.open(path, "wb", compresslevel=1) as g:
        g.write(head)
        for _ in range(200):
            g.write(bytes(1 << 20))
    with bounded(10, 4 << 20, "pax bomb"), pytest.raises(DatasetError, match="extended header"):
        read_reviews(path)


@pytest.mark.parametrize("size", [8**11 - 1, 1 << 62])
def test_imdb_member_announcing_more_than_the_file_holds_fails_fast(tmp_path, size):
    # tarfile skips an unread member block by block up to its announced size, past the end
    blob = lie_in_header(tar_bytes({"aclImdb/README": b"x", **REVIEWS}), 0, size, None)
    path = tmp_path / "aclImdb_v1.tar"
    path.write_bytes(blob)
    with bounded(5, 1 << 20, f"member of {size} bytes"), pytest.raises(DatasetError):
        read_reviews(path)


def test_imdb_reader_keeps_no_member_list(tmp_path):
    # 8,000 empty non-review members: memory must not grow with their number
    members = {f"aclImdb/train/unsup/{i}_0.txt": b"" for i in range(8000)}
    path = tmp_path / "aclImdb_v1.tar.gz"
    path.write_bytes(gzip.compress(tar_bytes({**members, **REVIEWS}), 1))
    with bounded(20, 2 << 20, "many members"):
        out = read_reviews(path)
    assert len(out["train"][0]) == 2


# --- model files and checkpoints ----------------------------------------------------------------
def _model_file(tmp_path_factory, kind: str) -> bytes:
    d = tmp_path_factory.mktemp("base")
    rng = np.random.default_rng(0)
    state = {
        "1.weight": rng.normal(size=(4, 3)).astype(np.float32),
        "1.bias": np.zeros(4, np.float32),
        "steps": np.arange(3, dtype=np.int64),
    }
    if kind == "model":
        tg.save(state, d / "f", metadata={"preset": "mlp"})
        return (d / "f").read_bytes()
    if kind == "arrays":
        save_arrays(d / "f", state, {"epoch": 2, "records": [{"loss": 0.5}]})
        return (d / "f").read_bytes()
    p = save_checkpoint(d, 7, state, {"m": np.ones(2), "step": 3}, {"epoch": 1, "start": 0})
    return p.read_bytes()


def crafted(header: dict, payload: bytes) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + payload


def signed(arrays: dict, meta: dict) -> bytes:
    """A file whose metadata lies but whose checksum is valid (the checksum is no signature)."""
    meta = dict(meta)
    meta["tapegrad.sha256"] = _digest(arrays, meta)
    return safetensors.numpy.save(arrays, metadata=meta)


W = {"w": np.ones((2, 3), np.float32)}
LIES = [
    crafted({"w": {"dtype": "F32", "shape": [1 << 40], "data_offsets": [0, 24]}}, bytes(24)),
    crafted({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 1 << 60]}}, bytes(24)),
    crafted({"w": {"dtype": "F32", "shape": [-1, 3], "data_offsets": [0, 24]}}, bytes(24)),
    crafted({"w": {"dtype": "F32", "shape": [(1 << 62), 4], "data_offsets": [0, 0]}}, b""),
    crafted({"w": {"dtype": "Q9", "shape": [6], "data_offsets": [0, 24]}}, bytes(24)),
    crafted({"w": {"dtype": "BF16", "shape": [12], "data_offsets": [0, 24]}}, bytes(24)),
    crafted({"__metadata__": {"a": 1}}, b""),
    crafted({"__metadata__": "x"}, b""),
    crafted([1, 2, 3], b""),
    (1 << 63).to_bytes(8, "little") + b"{}",
    (24).to_bytes(8, "little") + b"[" * 24,
    (200000).to_bytes(8, "little") + b"[" * 100000 + b"]" * 100000,
    signed(W, {"tapegrad.names": "[1, 2]", "tapegrad.format": "model"}),
    signed(W, {"tapegrad.names": "7", "tapegrad.format": "model"}),
    signed(W, {"tapegrad.names": "[" * 50000 + "]" * 50000, "tapegrad.format": "model"}),
    signed(W, {"tapegrad.names": '["w", "w"]', "tapegrad.format": "model"}),
    signed(W, {"tapegrad.names": '["w"]', "tapegrad.meta": "[1]", "tapegrad.format": "arrays"}),
    signed(W, {"tapegrad.names": '["w"]', "tapegrad.meta": "{" * 9999, "tapegrad.format": "x"}),
    signed(W, {"tapegrad.names": '["w"]', "tapegrad.meta": '{"optim_scalars": [1]}'}),
    signed(W, {"tapegrad.names": '["w"]', "tapegrad.meta": '{"global_step": "7"}'}),
    signed({"w": np.ones(3, np.float16)}, {"tapegrad.names": '["w"]'}),
]


def _load_all(tmp_path_factory, blob: bytes, what: str) -> None:
    d = tmp_path_factory.mktemp("model")
    path = d / "ckpt-000000001.safetensors"
    path.write_bytes(blob)
    with bounded(5, 4 * len(blob) + (1 << 20), what):
        for reader in (tg.load, load_arrays, read_metadata):
            try:
                out = reader(path)
            except ModelFileError as err:
                assert str(path) in str(err) and "\n" not in str(err), err
            else:
                assert isinstance(out, (dict, tuple))
                if reader is load_arrays:
                    assert isinstance(out[1], dict)
        found = load_latest(d)  # a damaged newest checkpoint is skipped, never an exception
        assert found is None or isinstance(found[0], dict)
    COUNTS["model"] += 1


@FUZZ
@given(kind=st.sampled_from(["model", "arrays", "checkpoint"]), edits=EDITS, cut=CUT, tail=TAIL)
def test_model_file_mutations(tmp_path_factory, kind, edits, cut, tail):
    blob = _model_file(tmp_path_factory, kind)
    _load_all(tmp_path_factory, mutate(blob, edits, cut, tail), f"mutated {kind} file")


@FUZZ
@given(blob=st.binary(max_size=512), length=st.one_of(st.none(), st.integers(0, (1 << 64) - 1)))
def test_model_file_random_bytes_and_header_lengths(tmp_path_factory, blob, length):
    if length is not None:
        blob = length.to_bytes(8, "little") + blob
    _load_all(tmp_path_factory, blob, "random model bytes")


@pytest.mark.parametrize("i", range(len(LIES)))
def test_model_file_lying_headers(tmp_path_factory, i):
    _load_all(tmp_path_factory, LIES[i], f"lie {i}")


def test_fuzz_case_count():
    """Runs last in this module: how many inputs each reader was fed."""
    print(f"file fuzz cases: {COUNTS} = {sum(COUNTS.values())}")
    assert COUNTS["tar"] >= 300 and COUNTS["model"] >= 300 and COUNTS["idx"] >= 100
