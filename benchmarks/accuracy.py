"""Rerun every preset over seeds 0-2 and print README's accuracy table (mean and range vs target).

    python benchmarks/accuracy.py [--presets seed-rnn,text-cnn] [--seeds 0,1,2]
                                  [--json benchmarks/results/accuracy.json] [--readme README.md]

Each run is what ``tapegrad train PRESET --seed S`` does (the preset's dataset, model, optimiser,
batch size and epochs; compiled steps), on the official test sets: MNIST's 10,000 images and
IMDB's 25,000 test reviews. The figure is the test accuracy after the preset's last epoch, never
the best epoch. The script prints one markdown row per preset and writes every epoch's figure
to ``--json`` (replacing the entries of the presets it ran, keeping the others); ``--readme`` also
replaces the table between README's ``accuracy-table`` markers with every preset the JSON holds.
Set ``TAPEGRAD_DATA`` (or ``--data-dir``). On this 2-core machine it takes about 2 minutes with
``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tapegrad.models import PRESETS, get_preset  # noqa: E402
from tapegrad.train import Trainer  # noqa: E402
from tapegrad.train.experiment import setup  # noqa: E402

# preset: (target in %, where the target comes from). The target is the best test accuracy a
# seed paper reports for that network within its epoch budget.
TARGETS: dict[str, tuple[float, str]] = {
    "seed-cnn": (97.84, "97.84% (001's own, 3 epochs)"),
    "seed-rnn": (94.4, "94.4% (Flux in 002, 5 epochs)"),
    "seed-rnn-lr0.2": (94.4, "94.4% (Flux in 002, 5 epochs)"),
    "text-cnn": (87.71, "87.71% (PyTorch in 004, 5 epochs)"),
    "text-cnn-learned": (86.9, "86.9% (003's own, 5 epochs)"),
    "mlp": (97.0, "97% (tapegrad's own; no seed figure)"),
    "resnet": (99.0, "99% (tapegrad's own; no seed figure)"),
    # a language model has no accuracy: its row gives the validation loss, with no target
    "char-lm": (None, "- (validation loss, nats per character)"),
}
DATA = {
    "mnist": "MNIST",
    "fashion-mnist": "Fashion-MNIST",
    "imdb": "IMDB 25k/25k",
    "imdb-chars": "IMDB characters",
}
BEGIN, END = "<!-- accuracy-table -->", "<!-- /accuracy-table -->"
HEADER = (
    "| preset | data, epochs | test accuracy, mean over seeds 0-2 [range] | target "
    "| met |\n|---|---|---|---|---|"
)


def run(name: str, seed: int, data_dir=None) -> dict:
    """Train preset ``name`` with ``seed`` as ``tapegrad train`` does; per-epoch test accuracy."""
    exp = setup(name, data_dir=data_dir, seed=seed, log=None)
    trainer = Trainer(
        exp.model, exp.optimizer, exp.preset.task, seed=seed, progress=False, log=None
    )
    t0 = time.perf_counter()
    records = trainer.fit(
        exp.data.train, exp.data.test, epochs=exp.preset.epochs, batch_size=exp.preset.batch_size
    )
    return {
        "seed": seed,
        "test_accuracy": [r.test_accuracy for r in records],
        "test_loss": [r.test_loss for r in records],
        "seconds": time.perf_counter() - t0,
    }


def row(name: str, runs: list[dict]) -> str:
    """README's markdown row for preset ``name`` from its runs (final-epoch accuracies)."""
    preset = get_preset(name)
    data = f"{DATA.get(preset.dataset, preset.dataset)}, {preset.epochs}"
    target, source = TARGETS.get(name, (None, "-"))
    if preset.task == "language-model":
        losses = [r["test_loss"][-1] for r in runs]
        mean = sum(losses) / len(losses)
        return (
            f"| `{name}` | {data} | validation loss **{mean:.3f}** "
            f"[{min(losses):.3f}-{max(losses):.3f}] | {source} | - |"
        )
    final = [100 * r["test_accuracy"][-1] for r in runs]
    mean = sum(final) / len(final)
    met = "-" if target is None else ("yes" if round(mean, 2) >= target else "**no**")
    return (
        f"| `{name}` | {data} | **{mean:.2f}%** [{min(final):.2f}-{max(final):.2f}] "
        f"| {source} | {met} |"
    )


def replace_table(readme: str, table: str) -> str:
    """``readme`` with the text between the accuracy-table markers replaced by ``table``."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"README has no {BEGIN} ... {END} markers")
    return pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", readme)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated preset names")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "accuracy.json"))
    ap.add_argument("--readme", default=None, help="rewrite the table in this README")
    args = ap.parse_args(argv)
    names = [n for n in args.presets.split(",") if n]
    for n in names:
        get_preset(n)  # an unknown name fails before any training
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, list[dict]] = {}
    for name in names:
        results[name] = []
        for seed in seeds:
            r = run(name, seed, args.data_dir)
            results[name].append(r)
            curve = " ".join(
                f"{100 * a:.2f}" if a is not None else f"loss {v:.3f}"
                for a, v in zip(r["test_accuracy"], r["test_loss"], strict=True)
            )
            print(f"{name} seed {seed}: {curve} ({r['seconds']:.0f} s)", flush=True)
    print("\n".join([HEADER, *(row(n, results[n]) for n in names)]))
    merged = results
    if args.json:  # the presets run here replace theirs; the file keeps the others
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = json.loads(path.read_text()) if path.exists() else {}
        merged = {**kept, **results}
        path.write_text(json.dumps(merged, indent=1) + "\n")
    if args.readme:  # every preset the JSON holds, in PRESETS' order: not only those run here
        order = [n for n in PRESETS if n in merged] + [n for n in merged if n not in PRESETS]
        table = "\n".join([HEADER, *(row(n, merged[n]) for n in order)])
        path = Path(args.readme)
        path.write_text(replace_table(path.read_text(), table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
