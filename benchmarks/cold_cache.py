"""Concurrent cold starts: N processes compile tapegrad's kernels at once on an empty cache.

Each round makes a fresh, empty ``NUMBA_CACHE_DIR`` in a temporary folder and starts ``--procs``
processes together. Every process imports tapegrad, builds four presets' models (seed-cnn,
seed-rnn, text-cnn-learned, mlp: convolution, pooling, the recurrent step, the embedding's
scatter, both losses, Adam and SGD), then waits at a barrier until all are ready, so that they
compile at the same moment, and runs three compiled training steps of each on synthetic
batches, each process in another order of presets (so that different variants of one kernel,
two pooling sizes or two layouts, compile at once). It prints a digest of the twelve losses.
After the concurrent processes, one more process runs on the cache they wrote (the warm path a
later run takes).

A round passes when every process exits 0 and every digest (the warm one too) is the same.

    python benchmarks/cold_cache.py --rounds 20                  # the campaign (README's table)
    python benchmarks/cold_cache.py --rounds 3 --mode unlocked   # numba's cache without the lock
    python benchmarks/cold_cache.py --rounds 3 --mode private    # one cache folder per process

``--mode locked`` (the default) is tapegrad as shipped: compilation of a kernel holds a file
lock next to its cache index (``tapegrad.autodiff.kernels.jit``). ``unlocked`` sets
``TAPEGRAD_KERNEL_LOCK=0``; ``private`` gives each process its own empty cache folder (what a
per-process cache with an atomic publish would cost: every process compiles everything).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
PRESETS = ("seed-cnn", "seed-rnn", "text-cnn-learned", "mlp")
MODES = ("locked", "unlocked", "private")


def worker(barrier: str | None, slot: int = 0, steps: int = 3) -> str:
    """Build the presets' compiled steps, wait at ``barrier`` (a folder), train, return a
    digest of the losses. Worker ``slot`` starts with preset ``slot % 4``, so that processes
    compile different variants of one kernel (two pooling sizes, two layouts) at once."""
    import hashlib

    sys.path.insert(0, str(HERE))
    import soak

    order = PRESETS[slot % len(PRESETS) :] + PRESETS[: slot % len(PRESETS)]
    runs = {p: soak.make_step(p, "compiled", 8) for p in order}
    if barrier:
        folder = Path(barrier)
        (folder / f"ready-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while not (folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    losses = {p: [float(step(i)) for i in range(steps)] for p, step in runs.items()}
    return hashlib.sha256(repr(sorted(losses.items())).encode()).hexdigest()[:16]


@dataclass
class Round:
    seconds: float
    cpu_seconds: float  # user + system time of the round's processes, all together
    codes: list[int]
    digests: list[str]
    warm_code: int
    warm_digest: str
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        same = len(set(self.digests + [self.warm_digest])) == 1 and self.warm_digest != ""
        return same and all(c == 0 for c in self.codes) and self.warm_code == 0


def _start(env: dict, barrier: str | None, slot: int = 0) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--worker", "--slot", str(slot)]
    cmd += ["--barrier", barrier] if barrier else []
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen, errors: list[str], timeout: float) -> tuple[int, str]:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        errors.append(f"pid {p.pid}: no answer in {timeout:.0f} s")
        return -999, ""
    if p.returncode != 0:
        errors.append(f"pid {p.pid}: exit {p.returncode}: {err.strip()[-400:]}")
    return p.returncode, out.strip().splitlines()[-1] if out.strip() else ""


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_round(procs: int, mode: str, timeout: float = 300) -> Round:
    """Start ``procs`` workers at once on an empty cache, then one warm worker."""
    with tempfile.TemporaryDirectory(prefix="tg-cold-") as tmp:
        path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
        env = dict(os.environ, PYTHONPATH=path)
        env["NUMBA_CACHE_DIR"] = str(Path(tmp) / "cache")
        if mode == "unlocked":
            env["TAPEGRAD_KERNEL_LOCK"] = "0"
        barrier = Path(tmp) / "barrier"
        barrier.mkdir()
        t0, cpu0 = time.perf_counter(), _children_cpu()
        started = []
        for i in range(procs):
            own = {"NUMBA_CACHE_DIR": str(Path(tmp) / f"cache-{i}")} if mode == "private" else {}
            e = {**env, **own}
            started.append(_start(e, str(barrier), i))
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready-*"))) < procs and time.monotonic() < deadline:
            if any(p.poll() is not None for p in started):
                break
            time.sleep(0.01)
        (barrier / "go").touch()
        errors: list[str] = []
        results = [_finish(p, errors, timeout) for p in started]
        seconds = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
        warm_code, warm_digest = _finish(_start(env, None), errors, timeout)
    return Round(
        seconds,
        cpu,
        [c for c, _ in results],
        [d for _, d in results],
        warm_code,
        warm_digest,
        errors,
    )


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2] if xs else 0.0


def campaign(rounds: int, procs: int = 8, mode: str = "locked", log=print) -> dict:
    """Run ``rounds`` rounds; return the counts (and every round's details)."""
    if mode not in MODES:
        raise ValueError(f"cold_cache: unknown mode {mode!r}; choose one of {MODES}")
    done = []
    for r in range(rounds):
        res = one_round(procs, mode)
        done.append(res)
        if log:
            state = "ok" if res.ok else "FAILED " + "; ".join(res.errors)
            log(
                f"round {r + 1}/{rounds}: {procs} processes in {res.seconds:.1f} s "
                f"({res.cpu_seconds:.1f} CPU s), {state}"
            )
    codes = Counter(c for r in done for c in r.codes + [r.warm_code])
    return {
        "mode": mode,
        "rounds": rounds,
        "processes_per_round": procs,
        "processes": sum(len(r.codes) + 1 for r in done),
        "rounds_ok": sum(r.ok for r in done),
        "exit_codes": {str(k): v for k, v in sorted(codes.items())},
        "distinct_results": len({d for r in done for d in r.digests + [r.warm_digest]}),
        "median_round_seconds": _median([r.seconds for r in done]),
        "median_round_cpu_seconds": _median([r.cpu_seconds for r in done]),
        "details": [asdict(r) for r in done],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--mode", choices=MODES, default="locked")
    ap.add_argument("--json", help="write the counts and rounds here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--barrier", help=argparse.SUPPRESS)
    ap.add_argument("--slot", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(worker(args.barrier, args.slot))
        return 0
    res = campaign(args.rounds, args.procs, args.mode)
    summary = {k: v for k, v in res.items() if k != "details"}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if res["rounds_ok"] == res["rounds"] else 1


if __name__ == "__main__":
    sys.exit(main())
