"""Safe files: no pickle, no extraction to disk, checksummed downloads only, atomic writes.

The first tests read the library's source (``ast``) so a later change that breaks a rule fails
here by file and line; the others simulate crashes in the middle of each kind of write.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapegrad.data._cache as cache
import tapegrad.data.paths as paths
from tapegrad.train import report

SRC = Path(__file__).resolve().parents[2] / "src" / "tapegrad"
FILES = sorted(SRC.rglob("*.py"))


def _trees():
    for f in FILES:
        yield f.relative_to(SRC.parent), ast.parse(f.read_text(), filename=str(f))


def _name(node: ast.AST) -> str:
    """Dotted name of a call's function: np.load, os.fdopen, tar.extractall, open, ..."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, _name(node.func)


def _kw(call: ast.Call, key: str):
    return next((k.value for k in call.keywords if k.arg == key), None)


def test_the_scan_sees_the_library():
    names = {str(f.relative_to(SRC)) for f in FILES}
    assert {"serialization.py", "data/text.py", "data/paths.py", "train/checkpoint.py"} <= names


def test_no_pickle_and_no_pickling_loaders():
    banned = {"pickle", "cPickle", "_pickle", "dill", "joblib", "shelve", "marshal", "cloudpickle"}
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [
                    f"{path}:{node.lineno}" for a in node.names if a.name.split(".")[0] in banned
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in banned:
                found.append(f"{path}:{node.lineno}")
        for call, name in _calls(tree):
            if name in ("torch.load", "pickle.loads", "np.load.__call__"):
                found.append(f"{path}:{call.lineno} {name}")
    assert not found, f"pickle-capable imports or calls: {found}"


def test_every_np_load_refuses_pickles():
    seen, bad = 0, []
    for path, tree in _trees():
        for call, name in _calls(tree):
            if name in ("np.load", "numpy.load"):
                seen += 1
                v = _kw(call, "allow_pickle")
                if not (isinstance(v, ast.Constant) and v.value is False):
                    bad.append(f"{path}:{call.lineno}")
    assert seen >= 1 and not bad, f"np.load without allow_pickle=False at {bad}"


def test_no_archive_extraction_to_disk():
    bad = [
        f"{path}:{call.lineno} {name}"
        for path, tree in _trees()
        for call, name in _calls(tree)
        if name.rsplit(".", 1)[-1] in ("extractall", "extract", "unpack_archive")
    ]
    assert not bad, f"archives extracted to disk at {bad}"


def test_downloads_only_through_the_checksummed_path():
    network = ("urlopen", "urlretrieve", "requests", "httpx", "http.client", "urllib.request")
    bad, retrieves = [], []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(m.startswith(n) for m in mods for n in network):
                    bad.append(f"{path}:{node.lineno} imports {mods}")
        for call, name in _calls(tree):
            if name.rsplit(".", 1)[-1] in ("urlopen", "urlretrieve", "fetch"):
                bad.append(f"{path}:{call.lineno} {name}")
            if name.endswith("retrieve"):
                retrieves.append((path, call))
    assert not bad, bad
    assert [str(p) for p, _ in retrieves] == ["tapegrad/data/paths.py"]
    for _, call in retrieves:  # pooch verifies the hash before the file is moved into place
        h = _kw(call, "known_hash")
        assert h is not None and not (isinstance(h, ast.Constant) and h.value is None)
    for info in paths.DATASETS.values():
        for remote in info.remotes.values():
            assert re.fullmatch(r"[0-9a-f]{64}", remote.sha256), remote


WRITERS = {"np.save", "np.savez", "np.savez_compressed", "tempfile.mkstemp", "shutil.copyfile"}


def _writes(tree):
    """(function, line, what) for every call that writes a file."""
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for call, name in _calls(fn):
            last = name.rsplit(".", 1)[-1]
            mode = call.args[1] if len(call.args) > 1 else _kw(call, "mode")
            text = ast.unparse(mode) if mode is not None else ""
            writes = (
                (last in ("open", "fdopen") and name != "os.open" and re.search("[wax+]", text))
                or (name == "os.open" and re.search("O_WRONLY|O_RDWR|O_CREAT", text))
                or last in ("write_text", "write_bytes", "savefig")
                or name in WRITERS
            )
            if writes:
                yield fn, call.lineno, name


READERS = {"open", "gzip.open", "np.load", "zipfile.ZipFile", "safetensors.safe_open"}
#: Reads of files tapegrad did not write itself that need no check, and why.
UNCHECKED_READS = {
    ("tapegrad/train/measure.py", "peak_rss_bytes"),  # /proc/self/status
    ("tapegrad/train/experiment.py", "_read_npz"),  # np.load of the file open_regular opened
    ("tapegrad/data/text.py", "_reviews_from_folder"),  # read_bytes of an is_file() review
    ("tapegrad/data/_cache.py", "load"),  # np.load of the file open_regular opened
    ("tapegrad/data/paths.py", "_extract_member"),  # a download, its checksum verified first
}


def test_every_user_file_is_opened_through_the_regular_file_check():
    """Model files, checkpoints and data are opened by ``tapegrad.safefile.open_regular`` (a
    FIFO or a device refused at once, never waited on), not by a bare open or loader."""
    bad = []
    for path, tree in _trees():
        if not str(path).startswith(("tapegrad/data/", "tapegrad/train/", "tapegrad/seri")):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call, name in _calls(fn):
                last = name.rsplit(".", 1)[-1]
                reads = name in READERS or last in ("read_bytes", "read_text")
                if reads and (str(path), fn.name) not in UNCHECKED_READS:
                    bad.append(f"{path}:{call.lineno} {fn.name}() calls {name}")
    assert not bad, f"reads without the regular-file check: {bad}"


def test_open_regular_refuses_at_once_what_is_not_a_regular_file(tmp_path):
    from tapegrad.safefile import open_regular

    os.mkfifo(tmp_path / "pipe")  # opening it for reading would wait for a writer forever
    signal.alarm(10)
    try:
        for target, words in (
            (tmp_path / "pipe", "FIFO"),
            ("/dev/zero", "character device"),
            (tmp_path, "folder"),
            (tmp_path / "none", "No such file"),
        ):
            with pytest.raises(ValueError, match=words):
                open_regular(target)
    finally:
        signal.alarm(0)
    (tmp_path / "big").write_bytes(bytes(100))
    with pytest.raises(ValueError, match="100 bytes, more than the 99 bytes"):
        open_regular(tmp_path / "big", limit=99)
    with open_regular(tmp_path / "big", limit=100) as f:
        assert f.read() == bytes(100)


#: Writes that must happen in place: a checkpoint folder's lock file is the file its owner
#: holds a flock on, so it cannot be replaced by a rename (another run would lock the new one);
#: so is the kernel cache's compile lock (``kernels/jit.py``), an empty file that only carries it.
IN_PLACE = {
    ("tapegrad/train/dirlock.py", "acquire"),
    ("tapegrad/autodiff/kernels/jit.py", "acquire"),
}


def test_every_file_write_is_atomic():
    """A function that writes a file must be the atomic writer itself or rename into place."""
    bad, seen = [], 0
    for path, tree in _trees():
        for fn, line, what in _writes(tree):
            seen += 1
            if (str(path), fn.name) in IN_PLACE:
                continue
            renames = any(n in ("os.replace", "os.rename") for _, n in _calls(fn))
            if not renames and not _inside_atomic_file(fn, line):
                bad.append(f"{path}:{line} {fn.name}() calls {what} without a rename")
    assert seen >= 4
    assert not bad, f"non-atomic writes: {bad}"


def _inside_atomic_file(fn, line: int) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.With) and node.lineno <= line <= node.end_lineno:
            if any(
                _name(i.context_expr.func) == "atomic_file"
                for i in node.items
                if isinstance(i.context_expr, ast.Call)
            ):
                return True
    return False


# --- crashes in the middle of writes ------------------------------------------------------------
class Crash(BaseException):
    pass


def test_cache_write_crash_leaves_no_file(tmp_path, monkeypatch):
    target = tmp_path / "imdb" / "imdb-x.npz"
    cache.save(target, {"a": np.arange(3)})

    def half(f, **arrays):
        f.write(b"PK\x03\x04 half a zip")
        raise Crash

    monkeypatch.setattr(cache.np, "savez", half)
    with pytest.raises(Crash):
        cache.save(target, {"a": np.arange(5)})
    assert cache.load(target)["a"].tolist() == [0, 1, 2]  # the old file, whole
    assert sorted(p.name for p in target.parent.iterdir()) == ["imdb-x.npz"]


_KILLED_CACHE = """
import sys, time
from pathlib import Path
import numpy as np
import tapegrad.data._cache as cache
def slow(f, **arrays):
    f.write(b"PK\\x03\\x04 partial"); f.flush(); print("half", flush=True); time.sleep(60)
cache.np.savez = slow
cache.save(Path(sys.argv[1]), {"a": np.arange(4)})
"""


def test_cache_write_sigkill_then_next_write_cleans_up(tmp_path):
    target = tmp_path / "c.npz"
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CACHE, str(target)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout.readline().strip() == b"half"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert cache.load(target) is None  # nothing at the target: the cache is simply rebuilt
    assert len(list(tmp_path.iterdir())) == 1  # the victim's partial temporary file
    cache.save(target, {"a": np.arange(2)})
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]
    assert cache.load(target)["a"].tolist() == [0, 1]


def test_report_write_crash_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    report.write_json(target, [], {"run": 1})
    before = target.read_text()

    def crash(*a, **k):
        raise Crash

    monkeypatch.setattr(report.os, "replace", crash)
    with pytest.raises(Crash):
        report.write_json(target, [], {"run": 2})
    assert target.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_plot_crash_leaves_no_partial_png(tmp_path, monkeypatch):
    """FAILS today: report.plot calls fig.savefig(path) straight onto the target."""
    import matplotlib.figure

    real = matplotlib.figure.Figure.savefig

    def crash_half_way(self, fname, *a, **k):
        real(self, fname, *a, **k)
        if isinstance(fname, (str, os.PathLike)):
            blob = Path(fname).read_bytes()
            Path(fname).write_bytes(blob[: len(blob) // 2])  # the process dies mid-write
        raise Crash

    rec = report.EpochRecord(1, 1, 1.0, 1.0, None, None, 1, 0.5, 0.5, None, None, 0.0, True)
    target = tmp_path / "plot.png"
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", crash_half_way)
    with pytest.raises(Crash):
        report.plot(target, [rec])
    assert not target.exists(), "a half-written PNG was left at the target path"
