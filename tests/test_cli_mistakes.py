"""Every CLI mistake, run as a real ``tapegrad`` subprocess: exit 2, one line on stderr naming the
problem, no traceback, no file left behind, and for an output that cannot be written, nothing
loaded or trained first (no header printed, within a few seconds).

The cases are the user mistakes of issue 12 ("Nothing lost at the edges") and the ones its fixes
added. Each is a process of its own, forked from one of four servers that have imported tapegrad
(cli_forkserver.py: ``python -m tapegrad`` without paying Python's start per case), four at a
time, so the table costs a few seconds.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from cli_forkserver import ForkServer
from cli_helpers import write_blobs

import tapegrad as tg
from tapegrad.serialization import load_arrays, read_metadata, save_arrays
from tapegrad.train.checkpoint import list_checkpoints

OUTPUT_SECONDS = 2.0  # CPU time: an output error comes before any data loads (~0.4 s here)


DATA: list[str] = []  # the real datasets' folder, set by the fixture below


def _env() -> dict[str, str]:
    return {**os.environ, "CI": "true", "TAPEGRAD_DATA": DATA[0] if DATA else ""}


@pytest.fixture(scope="module")
def made(tmp_path_factory, real_data) -> dict[str, Path]:
    """A real run's checkpoint folder and weights, and damaged or foreign variants of both."""
    root = tmp_path_factory.mktemp("made")
    DATA[:] = [str(real_data)]
    run = subprocess.run(
        [sys.executable, "-m", "tapegrad", "train", "mlp", "--max-steps", "3",
         "--checkpoint-dir", str(root / "ck"), "--save", str(root / "mlp.safetensors")],
        capture_output=True, text=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    ckpt = list_checkpoints(root / "ck")[-1]
    blob = ckpt.read_bytes()
    for name, data in (("truncated", blob[: len(blob) // 2]), ("flipped", _flip(blob))):
        (root / name).mkdir()
        (root / name / ckpt.name).write_bytes(data)
    weights = tg.load(root / "mlp.safetensors")
    meta = read_metadata(root / "mlp.safetensors")
    tg.save(weights, root / "no-meta.safetensors")
    safetensors.numpy.save_file(weights, root / "plain.safetensors")  # another program's
    tg.save(weights, root / "says-cnn.safetensors", metadata={**meta, "preset": "seed-cnn"})
    tg.save({k: v.astype(np.float64) for k, v in weights.items()}, root / "f64.safetensors",
            metadata=meta)  # fmt: skip
    tg.save(dict(list(weights.items())[1:]), root / "missing-key.safetensors", metadata=meta)
    tg.save(weights, root / "bad-json.safetensors", metadata={**meta, "config": "{oops"})
    tg.save(weights, root / "list-json.safetensors", metadata={**meta, "config": "[1, 2]"})
    np.savez(root / "no-y-test.npz", x_train=np.zeros((4, 3)), y_train=np.zeros(4, np.int64),
             x_test=np.zeros((2, 3)))  # fmt: skip
    (root / "not-npz.npz").write_bytes(b"PK\x03\x04 this is no zip")
    (root / "a-file").write_text("x")
    (root / "a-folder").mkdir()
    (root / "empty-data").mkdir()
    _hostile(root, ckpt)
    mnist = root / "fifo-data" / "mnist"  # real MNIST files, but the training images a FIFO
    mnist.mkdir(parents=True)
    for f in (Path(DATA[0]) / "mnist").glob("*-ubyte.gz"):
        if f.name.startswith("train-images"):
            os.mkfifo(mnist / f.name)
        else:
            os.symlink(f, mnist / f.name)
    return {"root": root, "ck": root / "ck", "ckpt": ckpt}


def _hostile(root: Path, ckpt: Path) -> None:
    """Files of issue 23: what tapegrad must refuse before reading them whole."""
    os.symlink("loop", root / "loop")  # a symbolic link to itself
    os.mkfifo(root / "pipe.safetensors")
    os.mkfifo(root / "pipe.npz")
    (root / "fifo-ck").mkdir()
    os.mkfifo(root / "fifo-ck" / "ckpt-000000999.safetensors")
    arrays, meta = load_arrays(ckpt)
    for name, edit in (("seven", {"epoch": "seven"}), ("start", {"start": 1e9})):
        (root / name).mkdir()
        save_arrays(root / name / ckpt.name, arrays, {**meta, **edit})  # a valid checksum
    rng = np.random.default_rng(0)
    x, xt, y, yt = rng.random((40, 5)), rng.random((10, 5)), np.arange(40) % 3, np.arange(10) % 3
    npz = {
        "one-d": dict(x_train=x[:, 0], x_test=xt[:, 0]),
        "label-1e9": dict(y_train=np.where(y == 2, 10**9, y)),
        "label-u64": dict(y_train=np.where(y == 2, 2**64 - 1, y).astype(np.uint64)),
        "nan-x-test": dict(x_test=np.where(xt > 0.9, np.nan, xt)),
        "nan-x-train": dict(x_train=np.where(x > 0.9, np.nan, x)),
        "five-million": dict(x_train=np.zeros((2, 5_000_000), np.uint8),
                             x_test=np.zeros((1, 5_000_000), np.uint8),
                             y_train=np.zeros(2, np.int64), y_test=np.zeros(1, np.int64)),
        "wide": dict(x_train=rng.random((40, 20)), x_test=rng.random((10, 20))),
    }  # fmt: skip
    for name, arrays in npz.items():
        np.savez(
            root / f"{name}.npz", **{**dict(x_train=x, y_train=y, x_test=xt, y_test=yt), **arrays}
        )
    _zip_bomb(root / "bomb.npz")
    config = json.dumps({"inputs": 5, "classes": 3})
    meta = {"preset": "linear", "dataset": "five.npz", "task": "multiclass", "config": config}
    tg.save({"1.weight": np.zeros((3, 5), np.float32), "1.bias": np.zeros(3, np.float32)},
            root / "five-wide.safetensors", metadata=meta)  # fmt: skip


def _zip_bomb(path: Path) -> None:
    """An .npz whose x_train inflates 128 MiB of zeros from ~130 KiB (declared in the zip
    directory, and truly so: the refusal must come from the directory, not from inflating)."""
    small = {
        "y_train": np.zeros(4, np.int64),
        "x_test": np.zeros((2, 8)),
        "y_test": np.zeros(2, np.int64),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x_train.npy", "w", force_zip64=True) as f:
            header = {"descr": "<f8", "fortran_order": False, "shape": (4, 1 << 22)}
            np.lib.format.write_array_header_2_0(f, header)
            for _ in range(32):
                f.write(bytes(1 << 22))
        for k, a in small.items():
            with z.open(f"{k}.npy", "w") as f:
                np.lib.format.write_array(f, a)


def _flip(blob: bytes) -> bytes:
    b = bytearray(blob)
    b[len(b) - 50] ^= 0x10
    return bytes(b)


# (name, argv with {root} for the fixture folder, words the one line must hold, output error?)
CASES = [
    # 1. outputs checked before anything loads
    ("save under a file", "train mlp --save {root}/a-file/m.safetensors", "--save", True),
    ("json is a folder", "train mlp --json {root}/a-folder", "is a folder", True),
    ("csv is a folder", "train mlp --csv {root}/a-folder", "is a folder", True),
    ("json unwritable", "train mlp --json /proc/tapegrad/r.json", "cannot create files", True),
    ("plot unwritable", "train mlp --plot /proc/r.png", "--plot /proc/r.png", True),
    ("save unwritable", "train mlp --save /proc/m.safetensors", "--save", True),
    ("checkpoint-dir is a file", "train mlp --checkpoint-dir {root}/a-file", "is a file", True),
    ("checkpoint-dir unwritable", "train mlp --checkpoint-dir /proc/ck", "cannot create", True),
    ("two outputs one path", "train mlp --json {root}/r.out --csv {root}/r.out", "both", True),
    ("empty output path", ["train", "mlp", "--json", ""], "--json was given an empty path", True),
    ("earlier run's checkpoints", "train mlp --checkpoint-dir {root}/ck", "--resume", True),
    # 2. a resume with other settings names each difference
    ("resume other lr", "train mlp --lr 0.1 --checkpoint-dir {root}/ck --resume", "lr 0.001", 0),
    ("resume other batch", "train mlp --batch-size 50 --checkpoint-dir {root}/ck --resume",
     "batch size 100 (checkpoint) vs 50", 0),
    ("resume other optimiser", "train mlp --optimizer sgd --checkpoint-dir {root}/ck --resume",
     "optimizer adam (checkpoint) vs sgd (now)", 0),
    ("resume other preset", "train seed-rnn --checkpoint-dir {root}/ck --resume",
     "preset mlp (checkpoint) vs seed-rnn (now)", 0),
    ("resume other seed and schedule",
     "train mlp --seed 4 --scheduler cosine --checkpoint-dir {root}/ck --resume",
     "seed 0 (checkpoint) vs 4 (now)", 0),
    # 3. damaged checkpoints only: refuse, never start afresh
    ("only a truncated checkpoint", "train mlp --checkpoint-dir {root}/truncated --resume",
     "no valid checkpoint", 0),
    ("only a bit-flipped checkpoint", "train mlp --checkpoint-dir {root}/flipped --resume",
     "checksum mismatch", 0),
    # 4. an explicit --data-dir is used alone
    ("data-dir missing", "train mlp --data-dir {root}/nowhere", "--data-dir", 0),
    ("data-dir empty", "train mlp --data-dir {root}/empty-data", "only place searched", 0),
    # 5. bad values and combinations
    ("lr inf", "train mlp --lr inf", "--lr: must be finite", 0),
    ("lr nan", "train mlp --lr nan", "--lr: must be finite", 0),
    ("lr zero", "train mlp --lr 0", "--lr: must be positive", 0),
    ("momentum negative", "train seed-rnn --momentum -5", "--momentum: must be >= 0", 0),
    ("momentum with adam", "train mlp --momentum 0.9", "--momentum applies to sgd", 0),
    ("weight decay negative", "train mlp --weight-decay -1", "--weight-decay", 0),
    ("epochs zero", "train mlp --epochs 0", "--epochs: must be positive", 0),
    ("batch size text", "train mlp --batch-size ten", "--batch-size", 0),
    ("threads too many", "train mlp --threads 4096", "--threads 4096", 0),
    ("unknown preset", "train nope", "unknown preset 'nope'", 0),
    ("unknown option", "train mlp --bogus", "--bogus", 0),
    ("unknown scheduler", "train mlp --scheduler linear", "--scheduler", 0),
    ("wrong dataset", "train mlp --dataset imdb", "preset mlp trains on", 0),
    ("resume without folder", "train mlp --resume", "--resume needs --checkpoint-dir", 0),
    ("generic model without data", "train linear", "--dataset path/to/data.npz", 0),
    ("npz missing", "train mlp --dataset {root}/none.npz", "no such file", 0),
    ("npz lacks an array", "train linear --dataset {root}/no-y-test.npz", "lacks array(s)", 0),
    ("npz not a zip", "train linear --dataset {root}/not-npz.npz", "not a readable .npz", 0),
    # 6. evaluate: weights of another kind, damaged metadata
    ("evaluate missing file", "evaluate {root}/none.safetensors", "no such file", 0),
    ("evaluate other architecture", "evaluate {root}/says-cnn.safetensors",
     "weights of preset mlp", 0),
    ("evaluate other preset", "evaluate {root}/mlp.safetensors --preset seed-cnn",
     "weights of preset mlp, not seed-cnn", 0),
    ("evaluate no preset", "evaluate {root}/no-meta.safetensors", "fit preset mlp", 0),
    ("evaluate float64", "evaluate {root}/f64.safetensors", "float64", 0),
    ("evaluate missing key", "evaluate {root}/missing-key.safetensors", "no 1.weight", 0),
    ("evaluate bad json", "evaluate {root}/bad-json.safetensors", "'config' is not valid JSON", 0),
    ("evaluate list json", "evaluate {root}/list-json.safetensors", "not an object", 0),
    ("evaluate checkpoint flipped", "evaluate {root}/flipped/{ckpt}", "checksum mismatch", 0),
    # 7. issue 23: hostile files refused before they are read whole, never a hang
    ("evaluate the zero device", "evaluate /dev/zero", "it is a character device", 0),
    ("evaluate a FIFO", "evaluate {root}/pipe.safetensors", "it is a FIFO", 0),
    ("evaluate a folder", "evaluate {root}/a-folder", "it is a folder", 0),
    ("resume a FIFO checkpoint", "train mlp --checkpoint-dir {root}/fifo-ck --resume",
     "it is a FIFO", 0),
    ("checkpoint epoch seven", "train mlp --checkpoint-dir {root}/seven --resume",
     'epoch is "seven"', 0),
    ("checkpoint start 1e9", "train mlp --checkpoint-dir {root}/start --resume",
     "start is 1000000000.0", 0),
    ("evaluate epoch seven", "evaluate {root}/seven/{ckpt}", 'epoch is "seven"', 0),
    ("npz 1-D x_train", "train mlp --dataset {root}/one-d.npz", "x_train is 1-D", 0),
    ("npz label 1e9", "train mlp --dataset {root}/label-1e9.npz", "label 1000000000", 0),
    ("npz label 2**64-1", "train linear --dataset {root}/label-u64.npz",
     "label 18446744073709551615", 0),
    ("npz NaN in x_test", "train mlp --dataset {root}/nan-x-test.npz",
     "data problem: x_test holds NaN", 0),
    ("npz NaN in x_train", "train mlp --dataset {root}/nan-x-train.npz",
     "data problem: x_train holds NaN", 0),
    ("npz five million features", "train mlp --dataset {root}/five-million.npz",
     "5000000 values per sample", 0),
    ("npz zip bomb", "train mlp --dataset {root}/bomb.npz", "refused as a zip bomb", 0),
    ("npz a FIFO", "train mlp --dataset {root}/pipe.npz", "it is a FIFO", 0),
    ("MNIST file a FIFO", "train mlp --data-dir {root}/fifo-data", "it is a FIFO", 0),
    ("evaluate other width", "evaluate {root}/five-wide.safetensors --dataset {root}/wide.npz",
     "takes 5 values per sample", 0),
    ("plain safetensors, no preset", "evaluate {root}/plain.safetensors",
     "pass --preset NAME", 0),
    # 8. issue 23: values accepted silently before, names that crashed
    ("seed negative", "train mlp --seed -1", "argument --seed: must be >= 0", 0),
    ("momentum 2", "train seed-rnn --optimizer sgd --momentum 2", "momentum must be below 1", 0),
    ("step-every alone", "train mlp --step-every 2", "add --scheduler step", 0),
    ("step-every with cosine", "train mlp --scheduler cosine --step-every 2",
     "add --scheduler step", 0),
    ("save under a symlink loop", "train mlp --save {root}/loop/m.safetensors", "leads nowhere",
     True),
    *[(f"{flag} name over 255 bytes", f"train mlp {flag} {{root}}/{'n' * 300}{ext}",
       "over the 255", True)
      for flag, ext in (("--save", "/m.safetensors"), ("--json", ".json"), ("--csv", "/r.csv"),
                        ("--plot", "/r.png"), ("--checkpoint-dir", ""))],
]  # fmt: skip


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _run(argv: list[str], cwd: Path, server: ForkServer) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, CPU seconds) of one ``tapegrad`` process, forked by
    ``server`` (see cli_forkserver.py). CPU time, not wall time, tells whether it worked before
    failing: the machine may be busy. It counts the command's own work, not Python's start."""
    out, err = cwd.parent / f"{cwd.name}.out", cwd.parent / f"{cwd.name}.err"
    code, cpu = server.run(argv, cwd, out, err)
    return code, out.read_text(), err.read_text(), cpu


@pytest.fixture(scope="module")
def servers(real_data):
    """Four fork servers (see cli_forkserver.py): the commands below run four at a time, each
    a process of its own, without paying Python's and tapegrad's start-up per command."""
    DATA[:] = [str(real_data)]
    pool: queue.Queue[ForkServer] = queue.Queue()
    started = [ForkServer(_env()) for _ in range(4)]
    for server in started:
        pool.put(server)
    yield pool
    for server in started:
        server.close()


def _run_in_turn(group: list, work: dict, servers: queue.Queue) -> list:
    server = servers.get()
    try:
        return [(name, _run(argv, work[name], server)) for name, argv in group]
    finally:
        servers.put(server)


def _run_on(servers: queue.Queue, argv: list[str], cwd: Path) -> tuple:
    return _run_in_turn([(None, argv)], {None: cwd}, servers)[0][1]


def test_every_mistake_is_one_line_and_status_2(made, servers, tmp_path):
    root = made["root"]
    before = _snapshot(root)
    work = {}
    for name, *_ in CASES:
        work[name] = tmp_path / name.replace(" ", "-")
        work[name].mkdir()
    # Cases on one checkpoint folder run one after another: run at once, all but one would
    # (rightly) be refused because another run holds the folder's lock.
    groups: dict[str, list] = {}
    for name, command, *_ in CASES:
        argv = (
            command
            if isinstance(command, list)
            else command.format(root=root, ckpt=made["ckpt"].name).split()
        )
        folder = argv[argv.index("--checkpoint-dir") + 1] if "--checkpoint-dir" in argv else name
        groups.setdefault(folder, []).append((name, argv))
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = [pool.submit(_run_in_turn, group, work, servers) for group in groups.values()]
        results = {name: result for run in runs for name, result in run.result()}
    failures = []
    for name, _, words, output in CASES:
        code, stdout, stderr, seconds = results[name]
        err = stderr.strip()
        problems = []
        if code != 2:
            problems.append(f"exit {code}")
        if "Traceback" in stderr or "\n" in err:
            problems.append(f"not one line: {err!r}")
        if words not in err:
            problems.append(f"{words!r} not in {err!r}")
        if list(work[name].iterdir()):
            problems.append(f"left {[p.name for p in work[name].iterdir()]}")
        if output and (stdout or seconds > OUTPUT_SECONDS):
            problems.append(f"output error after {seconds:.1f} CPU s, stdout {stdout!r}")
        print(f"{seconds:5.2f}s {name}")
        if problems:
            failures.append(f"{name}: {'; '.join(problems)}")
    assert not failures, "\n".join(failures)
    assert _snapshot(root) == before, "a mistake changed the fixture files"
    assert len(CASES) >= 40


# The items of issue 12 that are not mistakes but edges of a run that works: each as a real
# process (exit status, the line that must be printed, the files that must exist afterwards).
EDGES = [
    # 1. one rule for missing folders: every output creates them, and says where it went
    ("outputs into new folders",
     "train linear --dataset {npz} --epochs 1 --save new/a/m.safetensors --csv new/b/r.csv "
     "--json new/c/r.json --plot new/d/r.png",
     0, "save: wrote new/a/m.safetensors", ["new/a/m.safetensors", "new/b/r.csv", "new/d/r.png"]),
    # 3. a damaged newest checkpoint is named and skipped; the older valid one is used
    ("damaged newest checkpoint", "train linear --dataset {npz} --epochs 2 --checkpoint-dir ck "
     "--resume", 0, "is corrupt (checksum mismatch", ["ck"]),
    # 7. what runs is what is reported
    ("batch beyond the data", "train linear --dataset {npz} --epochs 1 --batch-size 1000000",
     0, "batch 400 (the whole training set; 1000000 asked)", []),
    # 7. a huge lr: the run diverges in one line, or its table stays aligned
    ("adam at lr 1e9", "train linear --dataset {npz} --epochs 2 --lr 1e9", None, "", []),
]  # fmt: skip


def _damaged_checkpoints(folder: Path, npz: Path, servers: queue.Queue) -> None:
    """An older valid checkpoint and a newer one with a flipped bit, from a real run."""
    argv = ["train", "linear", "--dataset", str(npz), "--epochs", "2", "--checkpoint-dir", "ck"]
    code, _, err, _ = _run_on(servers, [*argv, "--max-steps", "20"], folder)
    assert code == 0, err
    newest = list_checkpoints(folder / "ck")[-1]
    newest.write_bytes(_flip(newest.read_bytes()))


def test_edges_of_a_working_run(servers, tmp_path):
    npz = write_blobs(tmp_path / "blobs.npz", classes=3, features=5)
    work = {name: tmp_path / name.replace(" ", "-") for name, *_ in EDGES}
    for folder in work.values():
        folder.mkdir()
    _damaged_checkpoints(work["damaged newest checkpoint"], npz, servers)
    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [
            (edge, pool.submit(_run_on, servers, edge[1].format(npz=npz).split(), work[edge[0]]))
            for edge in EDGES
        ]
    failures = []
    for (name, _, want, words, files), job in jobs:
        code, out, err, _ = job.result()
        ok = code == want and words in out + err and "Traceback" not in err
        ok = ok and all((work[name] / f).exists() for f in files)
        if want is None:  # diverged in one line (exit 3), or trained with an aligned table
            rows = [r for r in out.splitlines() if r.startswith(("epoch", "   1", "   2"))]
            ok = (code == 3 and err.count("\n") == 1 and "diverged" in err) or (
                code == 0 and len({len(r) for r in rows}) == 1
            )
        if not ok:
            failures.append(f"{name}: exit {code}, stdout {out!r}, stderr {err!r}")
    assert not failures, "\n".join(failures)


def test_evaluate_takes_a_plain_safetensors_file_with_preset(made, servers, tmp_path):
    """A safetensors file written by another program (no tapegrad checksum) is evaluated with
    --preset, as evaluate's help says, after a one-line note that it is read unverified."""
    argv = ["evaluate", str(made["root"] / "plain.safetensors"), "--preset", "mlp"]
    code, out, err, _ = _run_on(servers, argv, tmp_path)
    assert code == 0, err
    assert err.count("\n") == 1 and "no tapegrad checksum" in err and "unverified" in err
    assert out.startswith("mlp on mnist test set (10000 samples): loss ")
