"""A campaign of hostile files against the ``tapegrad`` command (issue 23).

Each case puts one file where tapegrad will read it (a checkpoint under ``--resume``, weights for
``evaluate``, an ``.npz`` for ``--dataset``) and runs the command in this process, its output
captured. The files: fixed kinds (a FIFO named like a checkpoint, ``/dev/zero``, a folder, a
4 GiB sparse file, a zip bomb, a zip of a newer version, labels of 1e9 and 2**64-1, 1-D
features, NaN features, five million features, checkpoints re-signed with ``epoch: "seven"``
or ``start: 1e9``) and, from a seeded generator, random mutations of valid files: bytes
flipped, zeroed, inserted or deleted, truncations, garbage appended, header lengths
rewritten; checkpoints and weights re-signed (valid checksum) with random metadata values;
``.npz`` files with random dtypes, shapes, labels, NaNs.

Every case must end with an exit status in the documented set (0, 2 for a refused file, 3 for
a diverged run), a refusal in exactly one ``error`` line, every stderr line tapegrad's own (no
traceback, no stray warning), within a few seconds (a hang fails), and no partial file: no
temporary file, no lock, no file the command did not announce.

Run it as a script for a longer campaign: ``python tests/reliability/hostile_campaign.py
--cases 2000`` prints the counts README's reliability table quotes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import sys
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

EXIT_CODES = {0, 2, 3}
SECONDS_PER_CASE = 20.0


@dataclass
class Case:
    kind: str
    argv: list[str]
    folder: Path  # what the command may touch; checked for leftovers afterwards


@dataclass
class Tally:
    cases: Counter = field(default_factory=Counter)
    codes: Counter = field(default_factory=Counter)  # (kind, exit status) -> cases
    failures: list[str] = field(default_factory=list)


class Hang(Exception):
    pass


# -- the valid files the mutations start from ----------------------------------------------------
def prepare(root: Path) -> dict[str, Path]:
    """A small dataset, the checkpoint and weights of a real run on it."""
    from cli_helpers import write_blobs

    from tapegrad.cli import main

    root.mkdir(parents=True, exist_ok=True)
    npz = write_blobs(root / "blobs.npz", classes=3, features=5, n=200)
    ck, weights = root / "ck", root / "w.safetensors"
    argv = ["train", "linear", "--dataset", str(npz), "--epochs", "1", "--checkpoint-dir"]
    with _quiet():
        code = main([*argv, str(ck), "--save", str(weights)])
    assert code == 0, "the run the campaign starts from failed"
    (ckpt,) = sorted(ck.iterdir())
    return {"npz": npz, "ckpt": ckpt, "weights": weights}


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


# -- cases ---------------------------------------------------------------------------------------
def _resume_case(kind: str, folder: Path, valid: dict, name: str, data: bytes | None) -> Case:
    ck = folder / "ck"
    ck.mkdir(parents=True)
    if data is None:
        os.mkfifo(ck / name)
    else:
        (ck / name).write_bytes(data)
    argv = ["train", "linear", "--dataset", str(valid["npz"]), "--epochs", "1"]
    return Case(kind, [*argv, "--checkpoint-dir", str(ck), "--resume"], folder)


def _evaluate_case(kind: str, folder: Path, valid: dict, data: bytes) -> Case:
    folder.mkdir(parents=True)
    (folder / "w.safetensors").write_bytes(data)
    argv = ["evaluate", str(folder / "w.safetensors"), "--dataset", str(valid["npz"])]
    return Case(kind, argv, folder)


def _npz_case(kind: str, folder: Path, data: bytes | dict) -> Case:
    folder.mkdir(parents=True)
    path = folder / "d.npz"
    if isinstance(data, dict):
        np.savez(path, **data)
    else:
        path.write_bytes(data)
    return Case(kind, ["train", "linear", "--dataset", str(path), "--max-steps", "2"], folder)


def _resigned(valid: dict, edit: dict) -> bytes:
    """The valid checkpoint with ``edit`` in its metadata, re-signed (its checksum valid)."""
    from tapegrad.serialization import load_arrays, save_arrays

    arrays, meta = load_arrays(valid["ckpt"])
    tmp = valid["ckpt"].parent.parent / "resigned.safetensors"
    save_arrays(tmp, arrays, {**meta, **edit})
    data = tmp.read_bytes()
    tmp.unlink()
    return data


def _blobs(valid: dict) -> dict[str, np.ndarray]:
    with np.load(valid["npz"]) as f:
        return {k: f[k] for k in f.files}


def _zip_bomb(megabytes: int = 96) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x_train.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_2_0(
                f, {"descr": "<f8", "fortran_order": False, "shape": (megabytes, 1 << 17)}
            )
            for _ in range(megabytes):
                f.write(bytes(1 << 20))
        for k in ("y_train", "x_test", "y_test"):
            with z.open(f"{k}.npy", "w") as f:
                np.lib.format.write_array(f, np.zeros(4 if k == "y_train" else 2, np.int64))
    return buf.getvalue()


def fixed_cases(root: Path, valid: dict) -> list[Case]:
    """One case of each hostile kind the issue names."""
    b, ckpt = _blobs(valid), valid["ckpt"].name
    x, y = b["x_train"], b["y_train"]
    cases = [
        _resume_case("fifo checkpoint", root / "f-fifo", valid, "ckpt-000000999.safetensors", None),
        Case("device as weights", ["evaluate", "/dev/zero"], root / "f-dev"),
        Case("folder as weights", ["evaluate", str(root)], root / "f-dir"),
        _resume_case("epoch seven", root / "f-seven", valid, ckpt,
                     _resigned(valid, {"epoch": "seven"})),
        _resume_case("start 1e9", root / "f-start", valid, ckpt, _resigned(valid, {"start": 1e9})),
        _npz_case("zip bomb", root / "f-bomb", _zip_bomb()),
        _npz_case("label 1e9", root / "f-l9", {**b, "y_train": np.where(y == 1, 10**9, y)}),
        _npz_case("label 2**64-1", root / "f-l64",
                  {**b, "y_train": np.where(y == 1, 2**64 - 1, y).astype(np.uint64)}),
        _npz_case("1-D x_train", root / "f-1d", {**b, "x_train": x[:, 0]}),
        _npz_case("NaN features", root / "f-nan", {**b, "x_train": np.where(x > 2, np.nan, x)}),
        _npz_case("NaN test data", root / "f-nant",
                  {**b, "x_test": np.where(b["x_test"] > 2, np.nan, b["x_test"])}),
        _npz_case("5e6 features", root / "f-wide",
                  {**b, "x_train": np.zeros((2, 5_000_000), np.uint8),
                   "y_train": y[:2], "x_test": np.zeros((1, 5_000_000), np.uint8),
                   "y_test": b["y_test"][:1]}),
        _npz_case("integer features", root / "f-int",
                  {**b, "x_train": (x * 10).astype(np.int32),
                   "x_test": (b["x_test"] * 10).astype(np.int16)}),
    ]  # fmt: skip
    # a zip that needs a newer reader ("version needed to extract" 17.3), as a mutation found
    blob = bytearray(valid["npz"].read_bytes())
    at = blob.find(b"PK\x01\x02")  # the central directory's first entry
    blob[at + 6 : at + 8] = (173).to_bytes(2, "little")
    cases.append(_npz_case("zip of a newer version", root / "f-zipver", bytes(blob)))
    sparse = root / "f-sparse"
    sparse.mkdir()
    with open(sparse / "w.safetensors", "wb") as f:
        f.truncate(4 << 30)  # 4 GiB of nothing: a hole, not disk space
    cases.append(Case("4 GiB sparse weights", ["evaluate", str(sparse / "w.safetensors")], sparse))
    return cases


def mutate(blob: bytes, rng: np.random.Generator) -> bytes:
    """One to three random byte-level edits of ``blob``."""
    b = bytearray(blob)
    for _ in range(int(rng.integers(1, 4))):
        op = rng.choice(["flip", "zero", "insert", "delete", "truncate", "append", "length"])
        pos = int(rng.integers(0, max(len(b), 1)))
        if op == "flip":
            for _ in range(int(rng.integers(1, 9))):
                i = int(rng.integers(0, len(b)))
                b[i] ^= 1 << int(rng.integers(0, 8))
        elif op == "zero":
            b[pos : pos + int(rng.integers(1, 64))] = bytes(min(63, len(b) - pos))
        elif op == "insert":
            b[pos:pos] = rng.bytes(int(rng.integers(1, 32)))
        elif op == "delete":
            del b[pos : pos + int(rng.integers(1, 32))]
        elif op == "truncate":
            del b[pos:]
        elif op == "append":
            b += rng.bytes(int(rng.integers(1, 4096)))
        else:  # a safetensors header length or a zip offset that lies
            b[:8] = int(rng.integers(0, 1 << 62)).to_bytes(8, "little")
    return bytes(b)


def _hostile_meta(rng: np.random.Generator) -> dict:
    values = [None, "seven", -1, 0, 1, 1e9, 10**12, 2**63, [], {}, True, 1.5, "", [1, 2]]
    key = str(rng.choice(["epoch", "start", "global_step", "seed", "batch_size", "partial",
                          "records", "config", "scheduler", "task"]))  # fmt: skip
    return {key: values[int(rng.integers(0, len(values)))]}


def _resigned_weights(valid: dict, rng: np.random.Generator) -> bytes:
    """The valid weights with one random value in their metadata, re-signed."""
    import tapegrad as tg
    from tapegrad.serialization import read_metadata

    meta = read_metadata(valid["weights"])
    values = ["seven", "mnist", "linear", "regression", "", "{}", "[]", "null", "1e9", "-3"]
    key = str(rng.choice(["preset", "dataset", "task", "config", "inputs", "classes"]))
    if key in ("inputs", "classes"):
        config = json.loads(meta["config"])
        config[key] = [None, "seven", -1, 0, 10**12, 1.5, True][int(rng.integers(0, 7))]
        meta["config"] = json.dumps(config)
    else:
        meta[key] = values[int(rng.integers(0, len(values)))]
    tmp = valid["weights"].parent / "resigned-w.safetensors"
    tg.save(tg.load(valid["weights"]), tmp, metadata=meta)
    data = tmp.read_bytes()
    tmp.unlink()
    return data


def _hostile_npz(b: dict, rng: np.random.Generator) -> dict:
    out = dict(b)
    key = str(rng.choice(list(b)))
    a = b[key]
    op = rng.choice(["dtype", "shape", "value", "length", "empty"])
    if op == "dtype":
        dtype = rng.choice(["int8", "uint8", "int64", "uint64", "float16", "float64", "bool"])
        out[key] = a.astype(str(dtype))
    elif op == "shape":
        out[key] = a.reshape(-1) if a.ndim > 1 else a.reshape(len(a), 1, -1)
    elif op == "value":
        a = a.astype(np.float64) if key.startswith("x") else a.copy()
        special = [np.nan, np.inf, -1, 2**40, 1e300]
        if key.startswith("y"):
            special = [-1, 2**31, 3, 99_999, 100_000]
        a.reshape(-1)[int(rng.integers(0, a.size))] = special[int(rng.integers(0, len(special)))]
        out[key] = a
    elif op == "length":
        out[key] = a[: int(rng.integers(0, len(a)))]
    else:
        out[key] = a[:0]
    return out


def random_case(i: int, root: Path, valid: dict, rng: np.random.Generator) -> Case:
    folder = root / f"m{i:06d}"
    kind = str(rng.choice(["checkpoint bytes", "checkpoint metadata", "weights bytes",
                           "weights metadata", "npz bytes", "npz arrays"]))  # fmt: skip
    ckpt = valid["ckpt"].name
    if kind == "checkpoint bytes":
        return _resume_case(kind, folder, valid, ckpt, mutate(valid["ckpt"].read_bytes(), rng))
    if kind == "checkpoint metadata":
        return _resume_case(kind, folder, valid, ckpt, _resigned(valid, _hostile_meta(rng)))
    if kind == "weights bytes":
        return _evaluate_case(kind, folder, valid, mutate(valid["weights"].read_bytes(), rng))
    if kind == "weights metadata":
        return _evaluate_case(kind, folder, valid, _resigned_weights(valid, rng))
    if kind == "npz bytes":
        return _npz_case(kind, folder, mutate(valid["npz"].read_bytes(), rng))
    return _npz_case(kind, folder, _hostile_npz(_blobs(valid), rng))


# -- running a case ------------------------------------------------------------------------------
def _files(folder: Path) -> set[str]:
    if not folder.exists():
        return set()
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir()}


def run_case(case: Case) -> tuple[int | None, str | None]:
    """(exit status, None) or (status or None, what went wrong)."""
    from tapegrad.cli import main

    before = _files(case.folder)
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise Hang(f"still running after {SECONDS_PER_CASE} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_CASE)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(case.argv))
    except BaseException as e:  # a traceback the user would have seen
        return None, f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, _problems(case, code, err.getvalue(), before)


def _problems(case: Case, code, err: str, before: set[str]) -> str | None:
    lines = err.splitlines()
    if code not in EXIT_CODES:
        return f"exit {code}: {err.strip()[-300:]!r}"
    if "Traceback" in err or any(not line.startswith("tapegrad") for line in lines):
        return f"stderr not tapegrad's one-line messages: {err.strip()[-300:]!r}"
    errors = [line for line in lines if ": error:" in line or "diverged" in line]
    if code != 0 and len(errors) != 1:
        return f"exit {code} with {len(errors)} error lines: {err.strip()[-300:]!r}"
    new = _files(case.folder) - before
    partial = [n for n in new if n.endswith(".tmp") or ".tapegrad-" in n]
    if partial:
        return f"left {partial}"
    return None


def campaign(root: Path, cases: int, seed: int = 0, budget: float | None = None) -> Tally:
    """The fixed kinds, then ``cases`` random ones (fewer if ``budget`` seconds run out)."""
    os.environ.setdefault("CI", "true")  # no progress bars
    tally = Tally()
    valid = prepare(root / "valid")
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    todo = fixed_cases(root, valid)
    i = 0
    while todo or i < cases:
        if not todo:
            if budget is not None and time.monotonic() - start > budget:
                break
            todo.append(random_case(i, root, valid, rng))
            i += 1
        case = todo.pop(0)
        code, problem = run_case(case)
        tally.cases[case.kind] += 1
        tally.codes[case.kind, code] += 1
        if problem is not None:
            tally.failures.append(f"{case.kind} ({' '.join(case.argv)}): {problem}")
        shutil.rmtree(case.folder, ignore_errors=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=500, help="random cases after the fixed ones")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", help="where the files go (default: a temporary folder)")
    args = p.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t0 = time.monotonic()
        tally = campaign(Path(tmp), args.cases, args.seed)
        seconds = time.monotonic() - t0
    total = sum(tally.cases.values())
    print(f"{total} hostile-file cases (seed {args.seed}) in {seconds:.0f} s")
    for kind, n in sorted(tally.cases.items()):
        codes = sorted((c, k) for (kk, c), k in tally.codes.items() if kk == kind)
        shown = ", ".join(f"exit {c}: {k}" for c, k in codes)
        print(f"  {kind:<24} {n:>6}  ({shown})")
    print(f"failures: {len(tally.failures)}")
    for f in tally.failures[:50]:
        print(f"  {f}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # cli_helpers
    sys.exit(main())
