"""Kill safety, long form: SIGKILL a real training run many times and resume it to the same weights.

Each campaign trains ``PRESET`` on MNIST with ``--checkpoint-dir D --resume --save OUT`` and kills
it with SIGKILL at seeded random moments of three kinds, in equal numbers and shuffled order:

* ``write``: in the middle of the child's first write, a checkpoint (or the ``--save`` file when
  training is over): the child, started through ``tests/reliability/kill_launcher.py``, writes
  files in 8 chunks and pauses after a chosen chunk; the kill lands in that pause;
* ``step``: at a random global step among those left (the child announces each step);
* ``time``: 0.2..``--max-time-kill`` seconds after the start (import, data loading, training,
  evaluation or saving, wherever it falls).

After every kill each checkpoint in D must load and verify, ``load_latest`` must take the newest,
at most one temporary file may exist, and OUT must be absent or whole. A last uninterrupted run
must then end with weights and optimiser state equal, bit for bit, to those of an uninterrupted
reference run (started in the background at the beginning). When a killed run completes while
kills remain, it is compared the same way and a new round starts from an empty folder. See
``tests/reliability/killing.py``; CI runs one 6-kill campaign (``test_kill_safety.py``).

    python benchmarks/kill_harness.py                 # 4 campaigns x 15 kills, 10 epochs (~6 min)
    python benchmarks/kill_harness.py --campaigns 10 --kills 30 --epochs 20 --max-steps 590

Needs MNIST in ``$TAPEGRAD_DATA`` (default ``../shared/data``). Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import killing  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaigns", type=int, default=4)
    p.add_argument("--kills", type=int, default=15, help="kills per campaign")
    p.add_argument("--seed", type=int, default=1, help="first campaign's kill seed")
    p.add_argument("--preset", default="mlp")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-steps", type=int, default=290)
    p.add_argument("--batch-size", type=int, default=2000)
    p.add_argument("--max-time-kill", type=float, default=4.0)
    p.add_argument("--data-dir", help="the datasets (else $TAPEGRAD_DATA, ../shared/data)")
    p.add_argument("--workdir", help="keep the runs' folders here (default: a temp folder)")
    p.add_argument("--json", help="write every kill and the totals here")
    args = p.parse_args(argv)

    t0 = time.monotonic()
    results, failures = [], 0
    with tempfile.TemporaryDirectory(prefix="tapegrad-kills-") as tmp:
        root = Path(args.workdir or tmp)
        for c in range(args.campaigns):
            cfg = killing.Config(
                preset=args.preset,
                max_steps=args.max_steps,
                epochs=args.epochs,
                batch_size=args.batch_size,
                seed=c,
                kills=args.kills,
                kill_seed=args.seed + c,
                max_time_kill=args.max_time_kill,
                data_dir=args.data_dir,
            )
            print(
                f"campaign {c + 1}/{args.campaigns}: training seed {c}, kill seed {cfg.kill_seed}"
            )
            try:
                report = killing.campaign(cfg, root / f"campaign-{c}", log=print)
            except (AssertionError, TimeoutError) as err:
                failures += 1
                print(f"  FAILED: {err}")
                results.append({"campaign": c, "failed": str(err)})
                continue
            print(
                f"  ok: {report.survived} kills survived in {report.rounds} round(s), final "
                f"weights identical to the uninterrupted run ({report.seconds:.1f} s)"
            )
            results.append({"campaign": c, **asdict(report), "survived": report.survived})
    survived = sum(r.get("survived", 0) for r in results)
    write_kills = sum(
        1 for r in results for k in r.get("kills", []) if k["kind"] == "write" and k["killed"]
    )
    total = time.monotonic() - t0
    print(
        f"{survived} kills survived ({write_kills} mid-write) in {args.campaigns} campaigns, "
        f"{failures} failed, {total:.0f} s"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"survived": survived, "failures": failures, "campaigns": results}, indent=2)
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
