"""Model files: exact round trips, verification of damaged files, atomic writes."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import serialization
from tapegrad.serialization import ModelFileError, load_arrays, read_metadata, save_arrays


class TinyModel:
    """Stand-in for nn.Module: the state_dict / load_state_dict(strict) contract only."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.w = tg.tensor(rng.normal(size=(3, 4)).astype(np.float32), requires_grad=True)
        self.b = tg.tensor(np.zeros(4, np.float32), requires_grad=True)

    def state_dict(self):
        return {"layer.w": self.w.data.copy(), "layer.b": self.b.data.copy()}

    def load_state_dict(self, sd, strict=True):
        mine = {"layer.w": self.w, "layer.b": self.b}
        if set(sd) != set(mine):
            raise KeyError(f"TinyModel: names {sorted(sd)} != {sorted(mine)}")
        for k, v in sd.items():
            if v.shape != mine[k].shape or v.dtype != mine[k].dtype:
                raise ValueError(f"TinyModel: {k} has shape {v.shape}, expected {mine[k].shape}")
        for k, v in sd.items():
            mine[k].data[...] = v


def _arrays():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "f32": np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32),
        "f64": np.array([1e-300, -0.0, np.pi, np.inf, np.nan]),
        "i64": np.array([[-(2**62), 7]], dtype=np.int64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float64),
        "transposed": base.T,
        "strided": base[::2, 1::3],
        "big_endian": np.arange(5, dtype=">f8"),
        "flags": np.array([True, False, True]),
        "u8": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "tensor": tg.tensor(np.ones(3, np.float32)),
    }


def test_round_trip_exact(tmp_path):
    sd = _arrays()
    path = tmp_path / "m.safetensors"
    tg.save(sd, path, metadata={"arch": "tiny"})
    out = tg.load(path)
    assert list(out) == list(sd)  # the saved order is kept
    for k, v in sd.items():
        v = v.data if isinstance(v, tg.Tensor) else v
        assert out[k].shape == v.shape, k
        assert out[k].dtype == v.dtype.newbyteorder("="), k
        assert out[k].tobytes() == np.ascontiguousarray(v).astype(out[k].dtype).tobytes(), k
        assert out[k].flags.writeable
    assert read_metadata(path) == {"arch": "tiny"}
    assert os.listdir(tmp_path) == ["m.safetensors"]


def test_save_and_load_a_model(tmp_path):
    path = tmp_path / "model.safetensors"
    src, dst = TinyModel(0), TinyModel(1)
    tg.save(src, path)
    sd = tg.load(path, model=dst)
    assert np.array_equal(dst.w.data, src.w.data) and set(sd) == {"layer.w", "layer.b"}
    tg.save(
        {"layer.w": np.zeros((3, 5), np.float32), "layer.b": np.zeros(4, np.float32)},
        tmp_path / "other.safetensors",
    )
    with pytest.raises(ValueError, match="expected"):  # strict: the model refuses
        tg.load(tmp_path / "other.safetensors", model=dst)
    assert np.array_equal(dst.w.data, src.w.data)


def test_arrays_and_meta(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    meta = {"epoch": 3, "lrs": [0.1, 0.01], "nested": {"ok": True}, "loss": 0.25}
    save_arrays(path, {"a": np.arange(4.0)}, meta)
    arrays, got = load_arrays(path)
    assert got == meta and np.array_equal(arrays["a"], np.arange(4.0))
    assert serialization.save_arrays is save_arrays and serialization.load_arrays is load_arrays
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_arrays(path, {"a": np.ones(1)}, {"x": object()})


def _saved(tmp_path):
    path = tmp_path / "m.safetensors"
    tg.save({"w": np.arange(100, dtype=np.float32), "b": np.ones(3)}, path)
    return path, path.read_bytes()


def _header_len(data):
    return int.from_bytes(data[:8], "little")


def _assert_rejected(path, match):
    with pytest.raises(ModelFileError, match=match) as info:
        tg.load(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert isinstance(info.value, ValueError)


def test_truncated(tmp_path):
    path, data = _saved(tmp_path)
    for cut in (len(data) - 1, len(data) - 200, 8 + _header_len(data) - 5, 5, 0):
        path.write_bytes(data[:cut])
        _assert_rejected(path, "truncated|too short|invalid safetensors")


def test_flipped_data_byte(tmp_path):
    path, data = _saved(tmp_path)
    for pos in (8 + _header_len(data), len(data) - 1, len(data) // 2 + 100):
        damaged = bytearray(data)
        damaged[pos] ^= 0x10
        path.write_bytes(bytes(damaged))
        _assert_rejected(path, "checksum mismatch")


def test_edited_header(tmp_path):
    path, data = _saved(tmp_path)
    n = _header_len(data)
    header = data[8 : 8 + n].decode()
    edits = [
        ('"F32"', '"I32"'),  # reinterpret the bytes under another dtype of the same size
        ('"w"', '"v"'),  # rename a tensor
        ('"tapegrad.format":"model"', '"tapegrad.format":"xxxxx"'),  # metadata is covered too
    ]
    for old, new in edits:
        assert old in header and len(old) == len(new)
        path.write_bytes(data[:8] + header.replace(old, new).encode() + data[8 + n :])
        _assert_rejected(path, "checksum mismatch")
    # a header that is not JSON at all
    path.write_bytes(data[:8] + b"\xff" * n + data[8 + n :])
    _assert_rejected(path, "not valid JSON")
    # digest removed
    meta = json.loads(header)["__metadata__"]
    stripped = dict(
        json.loads(header), __metadata__={k: v for k, v in meta.items() if k != "tapegrad.sha256"}
    )
    text = json.dumps(stripped).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + n :])
    _assert_rejected(path, "no tapegrad checksum")


def test_wrong_path_and_foreign_bytes(tmp_path):
    _assert_rejected(tmp_path / "missing.safetensors", "cannot read the file")
    _assert_rejected(tmp_path, "cannot read the file")  # a directory
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"PK\x03\x04 this is a zip file, honestly" * 10)
    _assert_rejected(junk, "header length")
    junk.write_bytes((20).to_bytes(8, "little") + b"[1, 2, 3]".ljust(20) + b"data")
    _assert_rejected(junk, "not a JSON object")
    with pytest.raises(ModelFileError, match="missing"):
        load_arrays(tmp_path / "missing")


def test_crash_during_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    tg.save({"w": np.full(1000, 1.0, np.float32)}, path)
    before = path.read_bytes()

    def crash(f, payload):
        f.write(payload[: len(payload) // 2])
        raise OSError("disk on fire")

    monkeypatch.setattr(serialization, "_write_payload", crash)
    with pytest.raises(OSError, match="disk on fire"):
        tg.save({"w": np.full(1000, 2.0, np.float32)}, path)
    with pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(serialization, "_write_payload", _raise_interrupt)
        save_arrays(path, {"w": np.zeros(3)}, {"epoch": 9})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.safetensors"]  # no temporary file left behind
    np.testing.assert_array_equal(tg.load(path)["w"], 1.0)
    monkeypatch.undo()
    tg.save({"w": np.full(1000, 2.0, np.float32)}, path)  # and a normal save replaces it
    np.testing.assert_array_equal(tg.load(path)["w"], 2.0)


def _raise_interrupt(f, payload):
    raise KeyboardInterrupt


def test_save_rejects_bad_input(tmp_path):
    path = tmp_path / "m.safetensors"
    with pytest.raises(TypeError, match="'s' has dtype <U1"):
        tg.save({"s": np.array(["a"])}, path)
    with pytest.raises(TypeError, match="complex128"):
        tg.save({"c": np.zeros(2, complex)}, path)
    # nested checkpoints are saved (tests/test_torch_namespace.py); other objects are refused
    with pytest.raises(TypeError, match=r"the checkpoint\['x'\]\[1\] is a object"):
        tg.save({"x": [1, object()]}, path)
    with pytest.raises(ValueError, match="invalid tensor name"):
        tg.save({"": np.ones(1)}, path)
    with pytest.raises(ValueError, match="reserved"):
        tg.save({"x": np.ones(1)}, path, metadata={"tapegrad.sha256": "0"})
    with pytest.raises(TypeError, match="str -> str"):
        tg.save({"x": np.ones(1)}, path, metadata={"epoch": 3})
    with pytest.raises(TypeError, match="keys must be str or numbers"):
        tg.save([np.ones(1), {(1, 2): 3}], path)
    assert not path.exists() and os.listdir(tmp_path) == []
