"""Stalled ranks: SIGSTOP one rank of ``tapegrad train --ranks 2`` at a random moment.

Each run starts ``tapegrad train mlp --ranks 2 --epochs 3 --batch-size 2000`` with a checkpoint
folder and ``--rank-timeout T``, waits a random time, then stops a random rank with SIGSTOP from
outside (a frozen process: it neither dies nor answers). Every other run counts its wait from
the start (to past the end of a normal run: start-up, data loading, compilation, steps), the
others from the first checkpoint (mid-training, later checkpoints, evaluation, the final save).
A run counts as held when

* the job ends by itself within ``T`` + 15 s of the stop, exit 124, with one line naming the
  stopped rank and its pid, no traceback, and no process of the job left (stopped or not);
* ``--resume`` then finishes (exit 0), from the last checkpoint or from the start when the stop
  came before the first one, with the weights of an uninterrupted run, bit for bit.

A stop that comes after the job already ended counts apart ("finished first"). Needs MNIST
(``TAPEGRAD_DATA``) and MPI (``tapegrad[mpi]``).

    python benchmarks/rank_stalls.py --runs 10            # README's reliability table
    python benchmarks/rank_stalls.py --runs 3 --timeout 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

SRC = Path(__file__).resolve().parents[1] / "src"
ARGS = ["mlp", "--ranks", "2", "--epochs", "3", "--batch-size", "2000", "--seed", "5"]


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "CI": "1"}


def _cmd(folder: Path, timeout: float, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "tapegrad", "train", *ARGS, "--rank-timeout", f"{timeout:g}"]
    cmd += ["--checkpoint-dir", str(folder / "ckpt"), "--save", str(folder / "final.safetensors")]
    return cmd + list(extra)


def _ranks(launcher: psutil.Process) -> dict[int, psutil.Process]:
    """The job's rank processes by rank (read from their MPI environment)."""
    out = {}
    for p in launcher.children(recursive=True):
        try:
            rank = p.environ().get("PMI_RANK")
            if rank is not None and "tapegrad" in " ".join(p.cmdline()):
                out[int(rank)] = p
        except psutil.Error:
            continue
    return out


def _weights(path: Path) -> dict:
    sys.path.insert(0, str(SRC))
    import tapegrad as tg

    return tg.load(str(path))


def one_run(
    folder: Path, timeout: float, delay: float, rank: int, reference: dict, after_ckpt: bool
) -> dict:
    """Stop ``rank`` ``delay`` seconds after the start (``after_ckpt``: after the first
    checkpoint appeared); check the job ends and resumes."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        _cmd(folder, timeout), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    launcher, stopped_pid, stopped_at = psutil.Process(proc.pid), None, None
    every_rank: list[psutil.Process] = []
    waited_for_ckpt = after_ckpt
    while proc.poll() is None and time.monotonic() - t0 < delay + 60:
        if after_ckpt and any((folder / "ckpt").glob("ckpt-*.safetensors")):
            t0, after_ckpt = time.monotonic(), False  # the delay counts from here
        if stopped_pid is None and not after_ckpt and time.monotonic() - t0 >= delay:
            ranks = _ranks(launcher)
            victim = ranks.get(rank)
            if victim is not None:
                every_rank = list(ranks.values())
                victim.send_signal(signal.SIGSTOP)
                stopped_pid, stopped_at = victim.pid, time.monotonic()
        time.sleep(0.02)
    job = [launcher] + launcher.children(recursive=True) if proc.poll() is None else []
    out, err = proc.communicate(timeout=5) if proc.poll() is not None else ("", "")
    res = {"rank": rank, "delay": round(delay, 2), "code": proc.returncode, "problems": []}
    res["after_checkpoint"] = waited_for_ckpt and not after_ckpt and stopped_pid is not None
    if proc.returncode is None:  # the job hangs: the very thing this campaign looks for
        for p in job:
            p.kill()
        out, err = proc.communicate()
        res["problems"].append(
            f"the job did not end within 60 s of the stop (pid {stopped_pid}); "
            f"stdout: {out.strip()[-300:]!r}, stderr: {err.strip()[-300:]!r}"
        )
        return res
    if stopped_pid is None:
        res["finished_first"] = True
        res["problems"] += [] if proc.returncode == 0 else [f"exit {proc.returncode}: {err}"]
        return res
    res["ended_after"] = round(time.monotonic() - stopped_at, 1)
    lines = [ln for ln in err.splitlines() if ln.startswith("tapegrad train:")]
    want = rf"tapegrad train: rank {rank} \(pid {stopped_pid}\) stopped answering \(.*"
    if proc.returncode != 124 or len(lines) != 1 or not re.fullmatch(want, lines[0]):
        res["problems"].append(f"exit {proc.returncode}, stderr: {err.strip()[-300:]}")
    if "Traceback" in out + err:
        res["problems"].append("a traceback")
    if res["ended_after"] > timeout + 15:
        res["problems"].append(f"ended {res['ended_after']} s after the stop")
    for p in every_rank:
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
            res["problems"].append(f"a rank (pid {p.pid}) was left behind")
            p.kill()
    resumed = subprocess.run(
        _cmd(folder, timeout, "--resume"), env=_env(), capture_output=True, text=True, timeout=300
    )
    res["resumed_from_checkpoint"] = "resumed from" in resumed.stdout
    if resumed.returncode != 0:
        res["problems"].append(f"resume: exit {resumed.returncode}: {resumed.stderr[-300:]}")
    else:
        got = _weights(folder / "final.safetensors")
        if got.keys() != reference.keys() or not all(
            np.array_equal(got[k], reference[k]) for k in got
        ):
            res["problems"].append("resumed weights differ from the uninterrupted run's")
    return res


def campaign(runs: int, timeout: float = 5.0, seed: int = 0, log=print) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="tg-stalls-") as tmp:
        ref = Path(tmp, "reference")
        t0 = time.monotonic()
        done = subprocess.run(_cmd(ref, timeout), env=_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the uninterrupted run failed: {done.stderr}")
        normal = time.monotonic() - t0
        reference = _weights(ref / "final.safetensors")
        results = []
        for i in range(runs):
            folder = Path(tmp, f"run-{i}")
            # every other run stops a rank after the first checkpoint (mid-training, a later
            # checkpoint, evaluation, the final save), the others from the start (start-up,
            # data loading, compilation too)
            after = i % 2 == 1
            delay = rng.uniform(0.0, normal / 5) if after else rng.uniform(1.0, normal * 1.1)
            rank = rng.randrange(2)
            r = one_run(folder, timeout, delay, rank, reference, after)
            results.append(r)
            shutil.rmtree(folder, ignore_errors=True)
            if log:
                state = "ok" if not r["problems"] else "PROBLEM " + "; ".join(r["problems"])
                when = (
                    "finished first"
                    if r.get("finished_first")
                    else f"ended {r.get('ended_after')} s later"
                )
                at = f"{delay:.1f} s after the first checkpoint" if after else f"at {delay:.1f} s"
                log(f"run {i + 1}/{runs}: rank {rank} stopped {at}, {when}: {state}")
    stopped = [r for r in results if not r.get("finished_first")]
    return {
        "runs": runs,
        "rank_timeout": timeout,
        "normal_run_seconds": round(normal, 1),
        "stopped": len(stopped),
        "finished_first": runs - len(stopped),
        "held": sum(not r["problems"] for r in stopped),
        "resumed_from_checkpoint": sum(bool(r.get("resumed_from_checkpoint")) for r in stopped),
        "max_seconds_to_end": max((r.get("ended_after", 0) for r in stopped), default=0),
        "problems": [p for r in results for p in r["problems"]],
        "details": results,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=5.0, help="--rank-timeout of each run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the counts and runs here")
    args = ap.parse_args(argv)
    res = campaign(args.runs, args.timeout, args.seed)
    print(json.dumps({k: v for k, v in res.items() if k != "details"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if not res["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
