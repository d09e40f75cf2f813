"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint holds the model's weights, the optimiser's state, the run's position (epoch and
batch), the partial sums of the epoch in progress and the history so far, in one safetensors file
written atomically (temporary file, then rename). A writer killed in the middle of a save leaves
its temporary file behind; saving and resuming remove such leftovers (see
:func:`~tapegrad.serialization.remove_stale_temp_files`), so they never accumulate. Batch order
depends only on (seed, epoch), so resuming from a checkpoint continues with exactly the batches an
uninterrupted run would see.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..serialization import ModelFileError, load_arrays, remove_stale_temp_files, save_arrays

_NAME = re.compile(r"^ckpt-(\d{9})\.safetensors$")


def checkpoint_path(directory: str | os.PathLike, global_step: int) -> Path:
    return Path(directory) / f"ckpt-{global_step:09d}.safetensors"


def save_checkpoint(
    directory, global_step: int, model_state: dict, optim_state: dict, meta: dict, keep: int = 2
) -> Path:
    """Write a checkpoint for ``global_step`` atomically; keep the newest ``keep`` of them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays, scalars = {}, {}
    for k, v in model_state.items():
        arrays[f"model/{k}"] = v
    for k, v in optim_state.items():
        if hasattr(v, "dtype") and hasattr(v, "shape"):
            arrays[f"optim/{k}"] = v
        else:
            scalars[k] = v
    path = checkpoint_path(directory, global_step)
    _remove_leftovers(directory)
    save_arrays(path, arrays, {**meta, "optim_scalars": scalars, "global_step": global_step})
    for old in sorted(_list(directory))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def _remove_leftovers(directory: Path) -> None:
    """Delete temporary checkpoint files of writers that were killed mid-save."""
    remove_stale_temp_files(directory, target=lambda name: _NAME.match(name) is not None)


def _list(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if _NAME.match(p.name)]


def load_latest(directory) -> tuple[dict, dict, dict] | None:
    """(model_state, optim_state, meta) of the newest readable checkpoint, or None if none.

    A file that fails verification (which atomic writes make unlikely) is skipped in favour of
    the one before it, so a damaged newest file never stops a resume. Temporary files left by
    a writer that was killed mid-save are removed.
    """
    _remove_leftovers(Path(directory))
    for path in sorted(_list(Path(directory)), reverse=True):
        try:
            arrays, meta = load_arrays(path)
        except ModelFileError:
            continue
        if not isinstance(meta.get("optim_scalars", {}), dict) or not isinstance(
            meta.get("global_step"), int
        ):
            continue  # verified, but not a checkpoint's metadata (a crafted or foreign file)
        model_state = {k[6:]: v for k, v in arrays.items() if k.startswith("model/")}
        optim_state = {k[6:]: v for k, v in arrays.items() if k.startswith("optim/")}
        optim_state.update(meta.pop("optim_scalars", {}))
        meta["path"] = str(path)
        return model_state, optim_state, meta
    return None
