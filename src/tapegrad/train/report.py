"""The per-epoch table, JSON and CSV results, and PNG plots of a run."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..serialization import atomic_file
from .measure import format_bytes


@dataclass
class EpochRecord:
    """One epoch's measurements. ``seconds`` covers training steps only (not evaluation)."""

    epoch: int
    steps: int
    seconds: float
    samples_per_second: float
    allocated_bytes: int | None  # estimate for the epoch, see measure.py
    allocated_per_step: int | None
    peak_rss_bytes: int
    loss: float
    train_accuracy: float | None  # None for regression and language models
    test_loss: float | None  # a language model's: the validation loss
    test_accuracy: float | None
    eval_seconds: float
    first: bool  # the first epoch of the process: includes warm-up and compilation


COLUMNS = ("epoch", "time", "alloc/epoch", "peak RSS", "loss", "train acc", "test acc")
#: A regression has no accuracy: its last two columns are the train and test MSE.
REGRESSION_COLUMNS = (*COLUMNS[:4], "train MSE", "test MSE")
#: Nor has a language model: its last two columns are the train and validation loss.
LANGUAGE_MODEL_COLUMNS = (*COLUMNS[:4], "train loss", "val loss")
_LOSS_COLUMNS = {"regression": REGRESSION_COLUMNS, "language-model": LANGUAGE_MODEL_COLUMNS}


def format_loss(v: float | None) -> str:
    """A loss in at most 9 characters: 4 decimals while it is small, else 3 significant
    digits with an exponent (a diverging run keeps the table aligned)."""
    if v is None:
        return "-"
    if math.isfinite(v) and abs(v) < 1000:
        return f"{v:.4f}"
    return f"{v:.2e}"


def table_header(task: str = "multiclass") -> str:
    if task in _LOSS_COLUMNS:
        train, test = _LOSS_COLUMNS[task][4:]
        return (
            f"{'epoch':>5}  {'time':>8}  {'alloc/epoch':>11}  {'peak RSS':>10}  "
            f"{train:>9}  {test:>9}"
        )
    return (
        f"{'epoch':>5}  {'time':>8}  {'alloc/epoch':>11}  {'peak RSS':>10}  {'loss':>9}  "
        f"{'train acc':>9}  {'test acc':>8}"
    )


def _percent(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def table_row(r: EpochRecord, task: str = "multiclass") -> str:
    mark = "*" if r.first else " "
    head = (
        f"{r.epoch:>4}{mark}  {r.seconds:7.2f}s  {format_bytes(r.allocated_bytes):>11}  "
        f"{format_bytes(r.peak_rss_bytes):>10}  {format_loss(r.loss):>9}  "
    )
    if task in _LOSS_COLUMNS:
        return head + f"{format_loss(r.test_loss):>9}"
    return head + f"{_percent(r.train_accuracy):>9}  {_percent(r.test_accuracy):>8}"


def table_footer(records: list[EpochRecord]) -> str:
    steady = [r.seconds for r in records if not r.first]
    lines = ["* first epoch of the process: includes warm-up (and compilation), reported apart"]
    if steady:
        lines.append(
            f"steady-state epoch time: median {statistics.median(steady):.2f}s over "
            f"{len(steady)} epoch(s)"
        )
    return "\n".join(lines)


def _atomic_write_text(path: str | os.PathLike, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(text.encode())


def write_json(path, records: list[EpochRecord], info: dict) -> None:
    _atomic_write_text(
        path, json.dumps({**info, "epochs": [asdict(r) for r in records]}, indent=2) + "\n"
    )


def write_csv(path, records: list[EpochRecord]) -> None:
    names = [f.name for f in fields(EpochRecord)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=names)
    w.writeheader()
    for r in records:
        w.writerow(asdict(r))
    _atomic_write_text(path, buf.getvalue())


def plot(path, records: list[EpochRecord], title: str = "") -> None:
    """Loss and accuracy per epoch, time and memory per epoch, as one PNG (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("plotting needs matplotlib: pip install 'tapegrad[plot]'") from e
    ep = [r.epoch for r in records]
    fig, ax = plt.subplots(2, 2, figsize=(10, 7))
    ax[0, 0].plot(ep, [r.loss for r in records], "o-", label="train")
    if any(r.test_loss is not None for r in records):
        ax[0, 0].plot(ep, [r.test_loss for r in records], "s--", label="test")
    ax[0, 0].set(title="loss", xlabel="epoch")
    ax[0, 0].legend()
    if any(r.train_accuracy is not None for r in records):
        ax[0, 1].plot(ep, [100 * (r.train_accuracy or 0) for r in records], "o-", label="train")
        if any(r.test_accuracy is not None for r in records):
            ax[0, 1].plot(ep, [100 * (r.test_accuracy or 0) for r in records], "s--", label="test")
        ax[0, 1].set(title="accuracy (%)", xlabel="epoch")
        ax[0, 1].legend()
    else:  # regression and language models: no accuracy
        ax[0, 1].set(title="accuracy: none (loss only)", xlabel="epoch")
    colors = ["tab:orange" if r.first else "tab:blue" for r in records]
    ax[1, 0].bar(ep, [r.seconds for r in records], color=colors)
    ax[1, 0].set(title="time per epoch (s); orange: first epoch", xlabel="epoch")
    ax[1, 1].bar(ep, [(r.allocated_bytes or 0) / 2**20 for r in records], color=colors)
    ax[1, 1].set(title="allocated per epoch (MiB, tracemalloc)", xlabel="epoch")
    from matplotlib.ticker import MaxNLocator

    for a in ax.flat:  # epochs are whole numbers
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_file(path) as f:  # a crash never leaves half a PNG
            fig.savefig(f, format="png", dpi=100)
    finally:
        plt.close(fig)
