"""The kill harness: SIGKILL a real ``tapegrad train`` run again and again, then check the result.

One campaign (:func:`campaign`):

1. starts the uninterrupted reference run, ``python -m tapegrad train PRESET --max-steps N
   --checkpoint-dir REF --resume --save REF.safetensors --seed S``, in the background;
2. ``kills`` times: starts the *same* command on its own checkpoint folder through
   ``kill_launcher.py`` and SIGKILLs it at a seeded random moment of one of three kinds:
   ``write`` (paused in the middle of the process's first write, a checkpoint or, when training
   is over, the ``--save`` file: deterministic; the first kill of a campaign always hits the
   fresh run's first checkpoint this way), ``step`` (at a random global step among those left)
   or ``time`` (a random delay after the start: import, data loading, training, evaluation,
   saving; on a fast machine it may come after the end). After each kill it checks the folder
   (:func:`check_folder`): every checkpoint loads and verifies, the newest is what
   ``load_latest`` resumes from, at most one temporary file exists (the one the victim was
   writing), the newest step never goes back, and the ``--save`` file is absent or whole. A run
   that completed while kills remain is finished and compared as in 3, and a new round starts;
3. runs the same command once more, uninterrupted, and checks that it succeeds, leaves no
   temporary file, and that its saved weights and its last checkpoint's weights and optimiser
   state equal the reference's bit for bit.

Used by ``test_kill_safety.py`` (a short campaign) and ``benchmarks/kill_harness.py`` (long).
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tapegrad.serialization import load, load_arrays, read_metadata
from tapegrad.train.checkpoint import load_latest
from tapegrad.train.dirlock import LOCK_NAME

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LAUNCHER = HERE / "kill_launcher.py"
CHUNKS = 8


@dataclass
class Config:
    """What one campaign trains and how it kills."""

    preset: str = "mlp"
    max_steps: int = 140
    batch_size: int = 2000  # 30 steps per MNIST epoch: a checkpoint every ~30 steps
    epochs: int | None = None  # None: the preset's (mlp: 5, so at most 150 steps)
    seed: int = 3
    kills: int = 6
    kill_seed: int = 0
    max_time_kill: float = 4.0  # a `time` kill comes 0.2..max_time_kill s after the start
    run_timeout: float = 120.0  # no single run may take longer (a hang fails the campaign)
    data_dir: str | None = None  # the datasets (TAPEGRAD_DATA); default: env, ../shared/data


@dataclass
class Kill:
    kind: str
    detail: str
    killed: bool  # False when the run finished before the chosen moment came
    newest_step: int | None  # newest checkpoint's global step after the kill
    temp_files: int
    partial: str | None = None  # for a `write` kill: the half-written temporary file


@dataclass
class Report:
    kills: list[Kill] = field(default_factory=list)
    seconds: float = 0.0
    final_step: int = 0
    checkpoints_checked: int = 0
    rounds: int = 0

    @property
    def survived(self) -> int:
        return sum(k.killed for k in self.kills)


def child_env(cfg: Config) -> dict[str, str]:
    env = dict(os.environ)
    env["CI"] = "true"
    env["TAPEGRAD_OFFLINE"] = "1"
    data = cfg.data_dir or os.environ.get("TAPEGRAD_DATA") or str(REPO.parent / "shared" / "data")
    env["TAPEGRAD_DATA"] = str(Path(data).resolve())
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TAPEGRAD_KILL_PAUSE_AT", None)
    return env


def train_args(cfg: Config, ckpt: Path, out: Path) -> list[str]:
    return [
        "train",
        cfg.preset,
        "--max-steps",
        str(cfg.max_steps),
        "--batch-size",
        str(cfg.batch_size),
        "--checkpoint-dir",
        str(ckpt),
        "--resume",
        "--save",
        str(out),
        "--seed",
        str(cfg.seed),
        *(["--epochs", str(cfg.epochs)] if cfg.epochs else []),
    ]


class Child:
    """A subprocess whose stdout lines arrive on a queue (read by a thread), killable any time."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=REPO, bufsize=0
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, wanted, deadline: float) -> bool:
        """Read lines until ``wanted(line)``: True; False when the process ended first."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise TimeoutError(f"run {self.proc.args} exceeded its time limit")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                return False
            if wanted(line):
                return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.finish(30)

    def finish(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise TimeoutError(f"run {self.proc.args} exceeded its time limit") from None
        self.proc.stdout.close()
        self.log.close()
        return rc


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".tmp")) if folder.is_dir() else []


def check_folder(ckpt: Path, out: Path) -> tuple[int | None, int, int]:
    """Assert the checkpoint folder and the save file are whole; (newest step, temps, files read).

    Every file in ``ckpt`` is a checkpoint that loads and verifies, or a temporary file (at most
    one); ``load_latest`` resumes from the newest checkpoint, not an older one; ``out`` is absent
    or a verified model file.
    """
    temps = temp_files(ckpt) + temp_files(out.parent)
    assert len(temps) <= 1, f"temporary files accumulate: {[p.name for p in temps]}"
    ckpts = (
        sorted(
            p for p in ckpt.iterdir() if not p.name.endswith(".tmp") and p.name != LOCK_NAME
        )  # the lock file of a killed run: the next run takes it over
        if ckpt.is_dir()
        else []
    )
    steps = []
    for p in ckpts:
        assert p.name.startswith("ckpt-") and p.suffix == ".safetensors", f"stray file {p}"
        arrays, meta = load_arrays(p)  # raises ModelFileError if half-written or damaged
        assert any(k.startswith("model/") for k in arrays), p
        steps.append(int(meta["global_step"]))
    latest = load_latest(ckpt)
    if ckpts:
        assert latest is not None and latest[2]["path"] == str(ckpts[-1]), (
            f"load_latest skipped the newest checkpoint {ckpts[-1]}"
        )
    else:
        assert latest is None
    if out.exists():
        load(out)  # a complete, verified model file or nothing
    return (max(steps) if steps else None), len(temps), len(ckpts) + out.exists()


def _plan(cfg: Config) -> list[tuple[str, object]]:
    """Seeded kinds and arguments: write -> chunk, step -> fraction of what is left, time -> s."""
    rng = random.Random(cfg.kill_seed)
    kinds = ["write", "step", "time"] * (cfg.kills // 3 + 1)
    kinds = kinds[: cfg.kills]
    rng.shuffle(kinds)
    if "write" in kinds:  # the first kill: mid-way through the first checkpoint of a fresh run
        kinds.remove("write")
        kinds.insert(0, "write")
    plan: list[tuple[str, object]] = []
    for kind in kinds:
        if kind == "write":
            plan.append((kind, rng.randrange(CHUNKS - 1)))
        elif kind == "step":
            plan.append((kind, rng.random()))
        else:
            plan.append((kind, round(rng.uniform(0.2, cfg.max_time_kill), 3)))
    return plan


def _one_kill(cfg: Config, kind: str, arg, ckpt: Path, out: Path, logs: Path) -> Kill:
    """Start the run and kill it as planned. ``write`` kills pause the process's first write
    (a checkpoint, or the --save file when training is over); ``step`` kills come at a global
    step drawn from what is left, so both always land; ``time`` kills may come too late."""
    before = check_folder(ckpt, out)[0]
    done = before or 0
    if kind == "step" and done >= cfg.max_steps:
        kind, arg = "write", int(arg * (CHUNKS - 1))  # no step left: kill the --save instead
    env = child_env(cfg)
    if kind == "write":
        env["TAPEGRAD_KILL_PAUSE_AT"] = f"0:{arg}"
    argv = [sys.executable, str(LAUNCHER), *train_args(cfg, ckpt, out)]
    child = Child(argv, env, logs / "killed.log")
    deadline = time.monotonic() + cfg.run_timeout
    if kind == "write":
        reached = child.wait_for(lambda s: s == "@@PAUSED", deadline)
        detail = f"first write, after chunk {arg} of {CHUNKS}"
    elif kind == "step":
        target = min(done + 1 + int(arg * (cfg.max_steps - done)), cfg.max_steps)
        reached = child.wait_for(
            lambda s: s.startswith("@@STEP ") and int(s.split()[1]) >= target, deadline
        )
        detail = f"at global step {target}"
    else:
        time.sleep(arg)
        reached = child.proc.poll() is None
        detail = f"{arg:.2f} s after the start"
    partial = None
    if reached:
        if kind == "write":  # the victim is in the middle of a write: its partial file exists
            found = temp_files(ckpt) + temp_files(out.parent)
            assert len(found) == 1, f"expected one file being written, found {found}"
            partial = found[0].name
        child.kill()
    else:
        rc = child.finish(cfg.run_timeout)
        assert rc == 0, f"run ended with status {rc} before its kill; see {logs / 'killed.log'}"
    newest, temps, _ = check_folder(ckpt, out)
    if before is not None:
        assert newest is not None and newest >= before, (
            f"newest checkpoint went back from step {before} to {newest}"
        )
    return Kill(kind, detail, reached, newest, temps, partial)


def _arrays_equal(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), f"{what}: names differ: {sorted(a)} vs {sorted(b)}"
    for k in a:
        if not isinstance(a[k], np.ndarray):  # optimiser scalars (step count, lr, ...)
            assert a[k] == b[k], f"{what}: {k}: {a[k]!r} vs {b[k]!r}"
            continue
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, f"{what}: {k}"
        assert np.array_equal(a[k], b[k]), f"{what}: {k} differs from the uninterrupted run"


def _finish_and_compare(cfg: Config, ckpt: Path, out: Path, reference: Child, ref: Path, log):
    """Run the command to its end, uninterrupted, and compare with the reference run."""
    final = Child(
        [sys.executable, "-m", "tapegrad", *train_args(cfg, ckpt, out)],
        child_env(cfg),
        ckpt.parent / "final.log",
    )
    rc = final.finish(cfg.run_timeout)
    assert rc == 0, f"the final run failed ({rc}); see {ckpt.parent / 'final.log'}"
    assert reference.proc.wait(cfg.run_timeout) == 0, f"reference failed; see {ref.parent}"
    newest, temps, checked = check_folder(ckpt, out)
    assert temps == 0, "a temporary file was left behind after the final run"
    assert newest == cfg.max_steps, f"final checkpoint at step {newest}, not {cfg.max_steps}"
    ref_ckpt, ref_out = ref / "ckpt", ref / "final.safetensors"
    _arrays_equal(load(out), load(ref_out), "saved weights")
    # Not the files' bytes: safetensors orders the header's metadata differently per process.
    assert read_metadata(out) == read_metadata(ref_out), "saved files' metadata differ"
    mine, theirs = load_latest(ckpt), load_latest(ref_ckpt)
    _arrays_equal(mine[0], theirs[0], "checkpoint weights")
    _arrays_equal(mine[1], theirs[1], "checkpoint optimiser state")
    log(f"  run complete at step {newest}: weights and optimiser state equal the reference's")
    return checked


def campaign(cfg: Config, workdir: Path, log=print) -> Report:
    """Run a campaign in ``workdir`` (see the module docstring); AssertionError on damage.

    When the killed run has finished (its --save file exists) while kills remain, it is
    compared with the reference and a new round starts from an empty folder, so every kill
    lands on a run with work left, however fast the machine.
    """
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    ref = workdir / "ref"
    ref.mkdir(exist_ok=True)
    reference = Child(
        [
            sys.executable,
            "-m",
            "tapegrad",
            *train_args(cfg, ref / "ckpt", ref / "final.safetensors"),
        ],
        child_env(cfg),
        workdir / "reference.log",
    )
    report = Report()
    rounds = 0

    def new_round():
        nonlocal rounds
        rounds += 1
        folder = workdir / f"round-{rounds}"
        (folder / "out").mkdir(parents=True)
        return folder / "ckpt", folder / "out" / "final.safetensors"

    ckpt, out = new_round()
    for i, (kind, arg) in enumerate(_plan(cfg)):
        if out.exists():
            report.checkpoints_checked += _finish_and_compare(cfg, ckpt, out, reference, ref, log)
            ckpt, out = new_round()
        k = _one_kill(cfg, kind, arg, ckpt, out, ckpt.parent)
        report.kills.append(k)
        log(
            f"kill {i + 1}/{cfg.kills} (round {rounds}): {kind:5} {k.detail:34} "
            f"{'killed' if k.killed else 'finished first'}; newest checkpoint step "
            f"{k.newest_step}, temp files {k.temp_files}"
        )
    report.checkpoints_checked += _finish_and_compare(cfg, ckpt, out, reference, ref, log)
    reference.finish(cfg.run_timeout)
    report.final_step = cfg.max_steps
    report.rounds = rounds
    report.seconds = time.monotonic() - t0
    return report
