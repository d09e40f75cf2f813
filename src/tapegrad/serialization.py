"""Model files and checkpoint arrays in the safetensors format (no pickle anywhere).

Writes are atomic: the bytes go to a temporary file in the target's directory, which is
flushed, fsynced and then renamed over the target with ``os.replace``, so a crash leaves either
the old file or the new one at ``path``, never half of one. Every file carries, in its
safetensors metadata, a SHA-256 over the tensors' names, dtypes, shapes and bytes and over the
rest of the metadata; loading recomputes it, so truncation, flipped bits and edited headers are
reported as :class:`ModelFileError` with a one-line message naming the file.

``save``/``load`` handle a model's state dict (name -> ndarray, order kept);
``save_arrays``/``load_arrays`` add a JSON-encoded ``meta`` dict, for training checkpoints;
``save_object``/``load_object`` (``tapegrad.save``/``tapegrad.load``) also take nested
checkpoints (dicts, lists and tuples of tensors, numbers and strings) and file objects.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
import safetensors
import safetensors.numpy

from .autodiff import Tensor
from .safefile import describe_bytes, memory_limit, open_regular

__all__ = [
    "ModelFileError",
    "save",
    "load",
    "read_metadata",
    "read_file",
    "save_arrays",
    "load_arrays",
    "remove_stale_temp_files",
    "atomic_file",
    "save_object",
    "load_object",
]

_DIGEST = "tapegrad.sha256"
_NAMES = "tapegrad.names"
_META = "tapegrad.meta"
_FORMAT = "tapegrad.format"

# safetensors dtype codes <-> NumPy dtypes (the ones both sides support)
_CODES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U64": np.uint64,
    "U32": np.uint32,
    "U16": np.uint16,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_SUPPORTED = {np.dtype(t).name for t in _CODES.values()}


class ModelFileError(ValueError):
    """A model or checkpoint file that cannot be read, or whose contents fail verification."""


# -- writing ---------------------------------------------------------------------------------
def _arrays_from(obj: Any, fn: str) -> dict[str, np.ndarray]:
    """name -> C-contiguous little-endian ndarray, from a Module or a mapping."""
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        obj = obj.state_dict()
    if not isinstance(obj, Mapping):
        raise TypeError(f"{fn}: expected a model or a dict of arrays, got {type(obj).__name__}")
    out: dict[str, np.ndarray] = {}
    for name, value in obj.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError(f"{fn}: invalid tensor name {name!r}")
        arr = value.data if isinstance(value, Tensor) else value
        if not isinstance(arr, (np.ndarray, np.generic)):
            raise TypeError(f"{fn}: {name!r} is a {type(value).__name__}, expected an ndarray")
        arr = np.asarray(arr)
        if arr.dtype.name not in _SUPPORTED:
            raise TypeError(
                f"{fn}: {name!r} has dtype {arr.dtype}, which a model file cannot hold "
                f"(supported: {', '.join(sorted(_SUPPORTED))})"
            )
        out[name] = np.asarray(arr, dtype=arr.dtype.newbyteorder("<"), order="C")
    return out


def _digest(arrays: Mapping[str, np.ndarray], meta: Mapping[str, str]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes (by name) and the metadata."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = arrays[name]
        record = json.dumps([name, a.dtype.name, list(a.shape), a.nbytes]).encode()
        h.update(len(record).to_bytes(8, "little") + record)
        if a.nbytes:
            h.update(a.reshape(-1).view(np.uint8))
    record = json.dumps(sorted((k, v) for k, v in meta.items() if k != _DIGEST)).encode()
    h.update(len(record).to_bytes(8, "little") + record)
    return h.hexdigest()


def _write_payload(f, payload: bytes) -> None:
    """Write all of ``payload`` to the open file ``f`` (a seam the crash tests replace)."""
    f.write(payload)


# A temporary file of an atomic write: ".<target name>.<writer's pid>.<8 hex digits>.tmp".
_TEMP = re.compile(r"^\.(?P<target>.+)\.(?P<pid>[1-9]\d{0,9})\.[0-9a-f]{8}\.tmp$")
_writing: set[str] = set()  # temporary files this process is writing right now


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":  # cannot probe safely: treat every other writer as alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def remove_stale_temp_files(directory: str | os.PathLike, target=None) -> list[str]:
    """Delete the temporary files that killed writers left in ``directory``; return their paths.

    An atomic write that is killed (SIGKILL, out-of-memory killer) between creating its
    temporary file and renaming it cannot clean up. Such a file is recognised by its name and
    removed when the process that wrote it no longer exists, or is this process and is not
    writing it now. ``target`` (a callable on the target file's name) limits which are touched.
    """
    directory = os.fspath(directory)
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    me = os.getpid()
    for name in names:
        m = _TEMP.match(name)
        if m is None or (target is not None and not target(m["target"])):
            continue
        full = os.path.join(directory, name)
        pid = int(m["pid"])
        stale = full not in _writing if pid == me else not _pid_alive(pid)
        if stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(full)
                removed.append(full)
    return removed


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike):
    """Write ``path`` atomically: yields a binary file open on a temporary file beside it.

    When the block ends normally the file is flushed, fsynced and renamed over ``path`` (then
    the directory is fsynced, best effort); when it raises, the temporary file is removed. A
    process killed inside the block leaves ``path`` untouched and a temporary file that the
    next write to ``path`` removes (see :func:`remove_stale_temp_files`).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    remove_stale_temp_files(directory, target=lambda name: name == base)
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    _writing.add(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        _writing.discard(tmp)
    # make the rename itself durable (best effort: not every platform can fsync a directory)
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _atomic_write(path: str | os.PathLike, payload: bytes) -> None:
    with atomic_file(path) as f:
        _write_payload(f, payload)


def _write(path, arrays: dict[str, np.ndarray], meta: dict[str, str]) -> None:
    meta = {**meta, _NAMES: json.dumps(list(arrays))}
    meta[_DIGEST] = _digest(arrays, meta)
    _atomic_write(path, safetensors.numpy.save(arrays, metadata=meta))


def _user_metadata(metadata: Mapping[str, str] | None, fn: str) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{fn}: metadata must be a dict of str -> str, got {type(metadata)}")
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{fn}: metadata must map str -> str, got {k!r}: {v!r}")
        if k.startswith("tapegrad."):
            raise ValueError(f"{fn}: metadata key {k!r} is reserved (prefix 'tapegrad.')")
    return dict(metadata)


def save(model_or_state_dict: Any, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write a model's ``state_dict()`` (or a dict name -> ndarray) to ``path`` atomically, as
    safetensors with a SHA-256 digest; ``metadata`` (str -> str) is stored alongside."""
    arrays = _arrays_from(model_or_state_dict, "tapegrad.save")
    meta = _user_metadata(metadata, "tapegrad.save")
    _write(path, arrays, {**meta, _FORMAT: "model"})


def save_arrays(path: str | os.PathLike, arrays: dict, meta: dict | None = None) -> None:
    """Write ``arrays`` (name -> ndarray) and ``meta`` (any JSON-serialisable dict) to ``path``
    atomically, verified like :func:`save`; for checkpoints (optimiser state, epoch, ...)."""
    fn = "tapegrad.serialization.save_arrays"
    data = _arrays_from(arrays, fn)
    try:
        encoded = json.dumps({} if meta is None else meta)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fn}: meta must be JSON-serialisable ({e})") from None
    _write(path, data, {_FORMAT: "arrays", _META: encoded})


# -- reading ---------------------------------------------------------------------------------
#: The largest safetensors header read (the format's own readers stop at 100 MB as well).
MAX_HEADER_BYTES = 100 << 20


def _read_bytes(path, fail) -> bytes:
    """The whole file, once its header is read and found consistent with the file's size: a
    FIFO or device is refused unopened, a header length beyond the file or the limit before
    anything else is read, and data beyond the memory available before it is read."""
    with open_regular(path, ModelFileError) as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise fail(f"too short for a safetensors file ({size} bytes)")
        head = f.read(8)
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise fail(
                f"header length {n} exceeds the file's {size - 8} remaining bytes "
                "(truncated, or not a safetensors file)"
            )
        if n > MAX_HEADER_BYTES:
            raise fail(f"header length {n} is over the {MAX_HEADER_BYTES}-byte limit")
        header = f.read(n)
        data_end = _data_end(header, fail)
        if data_end is not None and data_end != size - 8 - n:
            raise fail(
                f"its header describes {data_end} data bytes, the file holds {size - 8 - n} "
                "(truncated or padded)"
            )
        limit = memory_limit()
        if size > limit:
            raise fail(f"is {describe_bytes(size)}, more than the {describe_bytes(limit)} free")
        return head + header + f.read()


def _data_end(header: bytes, fail) -> int | None:
    """The end of the data the header describes (None when the header cannot tell: the
    full parse below names the problem)."""
    try:
        parsed = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise fail("header is not valid JSON (not a safetensors file?)") from None
    if not isinstance(parsed, dict):
        raise fail("header is not a JSON object (not a safetensors file?)")
    end = 0
    for name, entry in parsed.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(type(o) is int and o >= 0 for o in offsets)
        ):
            raise fail(f"tensor {name!r} has no valid data_offsets in the header")
        end = max(end, offsets[1])
    return end


def _read(
    path: str | os.PathLike, checksum: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Parse and verify a file; return (name -> writable ndarray in saved order, metadata).
    ``checksum=False`` also accepts a plain safetensors file without tapegrad's checksum
    (one with a checksum is still verified)."""
    shown = os.fspath(path)

    def fail(problem: str) -> ModelFileError:
        return ModelFileError(f"{shown}: {problem}")

    data = _read_bytes(path, fail)
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise fail("header metadata is not a map of strings")
    try:
        items = safetensors.deserialize(data)
    except Exception as e:  # the library reports inconsistent offsets, sizes, dtypes
        raise fail(f"invalid safetensors contents ({str(e).splitlines()[0]})") from None
    del data
    arrays: dict[str, np.ndarray] = {}
    for name, view in items:
        dtype = _CODES.get(view["dtype"])
        if dtype is None:
            raise fail(f"tensor {name!r} has dtype {view['dtype']}, which tapegrad cannot load")
        arrays[name] = np.frombuffer(view["data"], dtype=dtype).reshape(view["shape"])
    stored = meta.get(_DIGEST)
    if stored is None:
        if not checksum:
            order = [k for k in header if k != "__metadata__" and k in arrays]
            return {k: arrays[k] for k in order}, meta
        raise fail("has no tapegrad checksum (not written by tapegrad.save or save_arrays)")
    if _digest(arrays, meta) != stored:
        raise fail("checksum mismatch: the file was modified or corrupted after it was written")
    try:
        names = json.loads(meta[_NAMES])
    except (KeyError, json.JSONDecodeError, RecursionError):
        raise fail("metadata lacks a valid tensor name list") from None
    if not isinstance(names, list) or not all(isinstance(k, str) for k in names):
        raise fail("metadata's tensor name list is not a list of names")
    if sorted(names) != sorted(arrays):
        raise fail("metadata's tensor name list does not match the tensors")
    return {k: arrays[k] for k in names}, meta


def load(path: str | os.PathLike, model: Any = None) -> dict[str, np.ndarray]:
    """Read and verify a file written by :func:`save`; return its state dict (name -> ndarray,
    in saved order). With ``model=``, also ``model.load_state_dict(sd)`` (strict)."""
    arrays, _ = _read(path)
    if model is not None:
        model.load_state_dict(arrays)
    return arrays


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The user metadata a verified file was saved with (``tapegrad.*`` entries left out)."""
    _, meta = _read(path)
    return {k: v for k, v in meta.items() if not k.startswith("tapegrad.")}


def read_file(
    path: str | os.PathLike, checksum: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, str], str]:
    """``(arrays, user metadata, kind)`` of a verified file of either kind: ``"model"`` (from
    :func:`save`) or ``"arrays"`` (from :func:`save_arrays`; its ``meta`` dict is returned
    JSON-encoded under the key ``"meta"``). ``checksum=False`` also accepts a plain
    safetensors file written by another program (kind ``"plain"``, nothing to verify it by)."""
    arrays, meta = _read(path, checksum)
    if _DIGEST not in meta:
        return arrays, dict(meta), "plain"
    user = {k: v for k, v in meta.items() if not k.startswith("tapegrad.")}
    if meta.get(_FORMAT) == "arrays":
        user["meta"] = meta.get(_META, "{}")
    return arrays, user, meta.get(_FORMAT, "model")


def load_arrays(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read and verify a file written by :func:`save_arrays`; return ``(arrays, meta)``."""
    arrays, meta = _read(path)
    try:
        decoded = json.loads(meta.get(_META, "{}"))
    except (json.JSONDecodeError, RecursionError):
        raise ModelFileError(f"{os.fspath(path)}: metadata 'meta' is not valid JSON") from None
    if not isinstance(decoded, dict):
        raise ModelFileError(
            f"{os.fspath(path)}: metadata 'meta' is a JSON {type(decoded).__name__}, not an object"
        )
    return arrays, decoded


# -- nested checkpoints (issue 26): what tapegrad.save/tapegrad.load accept ----------------------
# A checkpoint such as {"model": sd, "optimizer": opt.state_dict(), "step": n} is stored as one
# verified safetensors file: every tensor or array under the name of its position ("0", "1",
# ...), and the structure around them (dicts, lists, tuples, numbers, strings, None) as JSON in
# the metadata. Nothing is pickled: loading builds only these types.
_TREE = "tapegrad.tree"
_TREE_HOLDS = "tensors, arrays, numbers, strings, None, and dicts, lists and tuples of them"


def _is_state_dict(obj: Any) -> bool:
    """A Module, or a flat dict of arrays/Tensors: the model-file format of :func:`save`."""
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return True
    return isinstance(obj, Mapping) and all(
        isinstance(v, (np.ndarray, np.generic, Tensor)) for v in obj.values()
    )


def _leaf_array(obj: Any, where: str, arrays: list) -> int:
    from .autodiff.backend import to_host

    arr = np.asarray(to_host(obj.data) if isinstance(obj, Tensor) else obj)
    if arr.dtype.name not in _SUPPORTED:
        raise TypeError(
            f"tapegrad.save: {where} has dtype {arr.dtype}, which a checkpoint cannot hold "
            f"(supported: {', '.join(sorted(_SUPPORTED))})"
        )
    arrays.append(np.asarray(arr, dtype=arr.dtype.newbyteorder("<"), order="C"))
    return len(arrays) - 1


def _encode_tree(obj: Any, where: str, arrays: list) -> Any:
    """The JSON description of ``obj``, its arrays appended to ``arrays``."""
    if isinstance(obj, Tensor):
        return {"tensor": _leaf_array(obj, where, arrays), "requires_grad": obj.requires_grad}
    if isinstance(obj, np.ndarray):
        return {"array": _leaf_array(obj, where, arrays)}
    if isinstance(obj, np.generic):
        return {"scalar": _leaf_array(obj, where, arrays)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return _encode_tree(obj.state_dict(), where, arrays)
    if isinstance(obj, Mapping):
        items = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (bool, int, float, str))):
                raise TypeError(
                    f"tapegrad.save: {where} has a key {k!r}; keys must be str or numbers"
                )
            items.append([k, _encode_tree(v, f"{where}[{k!r}]", arrays)])
        return {"dict": items}
    if isinstance(obj, (list, tuple)):
        parts = [_encode_tree(v, f"{where}[{i}]", arrays) for i, v in enumerate(obj)]
        return {"tuple" if isinstance(obj, tuple) else "list": parts}
    raise TypeError(
        f"tapegrad.save: {where} is a {type(obj).__name__}; a checkpoint holds {_TREE_HOLDS}"
    )


def _decode_tree(node: Any, arrays: list, fail) -> Any:
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise fail("its structure metadata is malformed")
    if "value" in node:
        return node["value"]
    if "dict" in node:
        return {k: _decode_tree(v, arrays, fail) for k, v in node["dict"]}
    if "list" in node or "tuple" in node:
        parts = [_decode_tree(v, arrays, fail) for v in node.get("list", node.get("tuple"))]
        return parts if "list" in node else tuple(parts)
    kind = next(iter(node))
    idx = node[kind]
    if kind not in ("tensor", "array", "scalar") or not isinstance(idx, int):
        raise fail("its structure metadata is malformed")
    if not 0 <= idx < len(arrays):
        raise fail(f"its structure names tensor {idx}, which it does not hold")
    arr = arrays[idx]
    if kind == "array":
        return arr
    if kind == "scalar":
        return arr[()]
    grad = bool(node.get("requires_grad")) and arr.dtype.kind == "f"
    return Tensor(arr, requires_grad=grad)


def _tree_payload(obj: Any, metadata: Mapping[str, str] | None) -> tuple[dict, dict]:
    arrays: list = []
    tree = _encode_tree(obj, "the checkpoint", arrays)
    meta = _user_metadata(metadata, "tapegrad.save")
    named = {str(i): a for i, a in enumerate(arrays)}
    return named, {**meta, _FORMAT: "tree", _TREE: json.dumps(tree)}


def save_object(obj: Any, f, metadata: Mapping[str, str] | None = None) -> None:
    """``tapegrad.save``: write ``obj`` to ``f`` (a path, atomically; or a binary file object)
    as verified safetensors, never pickle. A Module or a flat dict of arrays is a model file
    (:func:`save`); anything else is a checkpoint of tensors, arrays, numbers, strings, None
    and dicts, lists and tuples of them, such as ``{"model": model.state_dict(), "optimizer":
    opt.state_dict(), "scheduler": sched.state_dict(), "step": n}``."""
    if _is_state_dict(obj):
        if not hasattr(f, "write"):
            save(obj, f, metadata)
            return
        arrays = _arrays_from(obj, "tapegrad.save")
        meta = {**_user_metadata(metadata, "tapegrad.save"), _FORMAT: "model"}
    else:
        arrays, meta = _tree_payload(obj, metadata)
        if not hasattr(f, "write"):
            _write(f, arrays, meta)
            return
    meta = {**meta, _NAMES: json.dumps(list(arrays))}
    meta[_DIGEST] = _digest(arrays, meta)
    f.write(safetensors.numpy.save(arrays, metadata=meta))


def _read_any(f) -> tuple[dict[str, np.ndarray], dict[str, str], str]:
    """:func:`_read` of a path or of a binary file object's remaining bytes."""
    if not hasattr(f, "read"):
        arrays, meta = _read(f)
        return arrays, meta, os.fspath(f)
    import tempfile

    shown = getattr(f, "name", None) or f"<{type(f).__name__}>"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.safetensors")
        with atomic_file(path) as out:  # a private scratch copy for the verifying reader
            out.write(f.read())
        try:
            arrays, meta = _read(path)
        except ModelFileError as e:
            raise ModelFileError(str(e).replace(path, str(shown), 1)) from None
    return arrays, meta, str(shown)


def load_object(f, model: Any = None, map_location=None, weights_only: bool | None = None) -> Any:
    """``tapegrad.load``: read and verify what :func:`save_object` (or :func:`save`) wrote to
    ``f`` (a path or a binary file object). A checkpoint comes back with its structure (its
    tensors as Tensors, arrays as arrays); a model file as its state dict (name -> ndarray),
    loaded into ``model`` too when given. ``map_location`` and ``weights_only`` are accepted
    for PyTorch's calls: the values land on the CPU, and nothing but data is ever loaded."""
    arrays, meta, shown = _read_any(f)
    if meta.get(_FORMAT) != "tree":
        if model is not None:
            model.load_state_dict(arrays)
        return arrays

    def fail(problem: str) -> ModelFileError:
        return ModelFileError(f"{shown}: {problem}")

    try:
        tree = json.loads(meta[_TREE])
    except (KeyError, json.JSONDecodeError, RecursionError):
        raise fail("its structure metadata is not valid JSON") from None
    ordered = [arrays[str(i)] for i in range(len(arrays)) if str(i) in arrays]
    if len(ordered) != len(arrays):
        raise fail("its tensors are not named by position")
    obj = _decode_tree(tree, ordered, fail)
    if model is not None:
        model.load_state_dict(obj)
    return obj
