"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint holds the model's weights, the optimiser's state, the run's position (epoch and
batch), the partial sums of the epoch in progress, the history so far and the run's
configuration (preset, dataset, optimiser and its settings, schedule, batch size, seed, data
fingerprint, tapegrad version), in one safetensors file written atomically (temporary file, then
rename). A writer killed in the middle of a save leaves its temporary file behind; saving and
resuming remove such leftovers (see :func:`~tapegrad.serialization.remove_stale_temp_files`), so
they never accumulate. Batch order depends only on (seed, epoch), so resuming from a checkpoint
continues with exactly the batches an uninterrupted run would see.

Corruption is loud: :func:`find_latest` names every checkpoint that fails verification and
skips it in favour of the newest valid one, and raises :class:`CheckpointError` when checkpoints
exist but none is valid (a run never silently starts afresh over them). Rotation keeps the
newest ``keep`` *valid* checkpoints, so it never deletes the last good one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from ..serialization import ModelFileError, load_arrays, remove_stale_temp_files, save_arrays
from .report import EpochRecord

_NAME = re.compile(r"^ckpt-(\d{9})\.safetensors$")


class CheckpointError(ValueError):
    """No usable checkpoint, or one that does not belong to this run; one line for the user."""


def checkpoint_path(directory: str | os.PathLike, global_step: int) -> Path:
    return Path(directory) / f"ckpt-{global_step:09d}.safetensors"


def save_checkpoint(
    directory, global_step: int, model_state: dict, optim_state: dict, meta: dict, keep: int = 2
) -> Path:
    """Write a checkpoint for ``global_step`` atomically; keep the newest ``keep`` valid ones."""
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
    _valid_cache[_stamp(path)] = True
    _rotate(directory, path, keep)
    return path


def _rotate(directory: Path, written: Path, keep: int) -> None:
    """Delete checkpoints older than the ``keep``-th newest valid one (``written`` counts as
    valid). Corrupt files newer than that are left for :func:`find_latest` to name."""
    valid = 0
    for path in sorted(_list(directory), reverse=True):
        if valid >= keep:
            path.unlink(missing_ok=True)
        elif path == written or _is_valid(path):
            valid += 1


_valid_cache: dict[tuple, bool] = {}


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)


def _is_valid(path: Path) -> bool:
    try:
        key = _stamp(path)
    except OSError:
        return False
    if key not in _valid_cache:
        _valid_cache[key] = _read(path)[1] is None
    return _valid_cache[key]


def _remove_leftovers(directory: Path) -> None:
    """Delete temporary checkpoint files of writers that were killed mid-save."""
    remove_stale_temp_files(directory, target=lambda name: _NAME.match(name) is not None)


def _list(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if _NAME.match(p.name)]


def list_checkpoints(directory) -> list[Path]:
    """The checkpoint files in ``directory``, oldest first (valid or not)."""
    return sorted(_list(Path(directory)))


def _read(path: Path) -> tuple[tuple[dict, dict, dict] | None, str | None]:
    """((model_state, optim_state, meta), None) for a valid checkpoint, else (None, why)."""
    try:
        arrays, meta = load_arrays(path)
    except ModelFileError as e:
        return None, str(e).removeprefix(f"{path}: ")
    if not isinstance(meta.get("optim_scalars", {}), dict) or not isinstance(
        meta.get("global_step"), int
    ):
        return None, "verified, but its metadata is not a tapegrad checkpoint's"
    problem = meta_problem(meta)
    if problem is not None:
        return None, f"verified, but its metadata {problem}"
    model_state = {k[6:]: v for k, v in arrays.items() if k.startswith("model/")}
    optim_state = {k[6:]: v for k, v in arrays.items() if k.startswith("optim/")}
    optim_state.update(meta.pop("optim_scalars", {}))
    meta["path"] = str(path)
    return (model_state, optim_state, meta), None


def _whole(v) -> bool:
    return type(v) is int


def _number(v) -> bool:
    return type(v) in (int, float)


#: (key, test, what the value must be) for a checkpoint's position and bookkeeping.
_FIELDS = (
    ("global_step", lambda v: _whole(v) and 0 <= v < 1 << 53, "a whole number >= 0"),
    ("epoch", lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    ("start", lambda v: _whole(v) and v >= 0, "a whole number >= 0"),
    ("seed", lambda v: v is None or _whole(v), "a whole number"),
    ("batch_size", lambda v: v is None or (_whole(v) and v >= 1), "a whole number >= 1"),
    ("task", lambda v: v is None or isinstance(v, str), "a string"),
    ("config", lambda v: v is None or isinstance(v, dict), "an object"),
    ("scheduler", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("records", lambda v: isinstance(v, list), "a list"),
)
_PARTIAL = {"loss": _number, "correct": _whole, "seen": _whole, "seconds": _number}


def meta_problem(meta: dict) -> str | None:
    """Why a checkpoint's (verified) metadata cannot be resumed from, or None: every field a
    resume uses has its type and a sane range (a checksum proves only who wrote a file)."""
    for key, test, want in _FIELDS:
        if key in meta or key == "global_step":
            value = meta.get(key)
            if not test(value):
                return f"says {key} is {json.dumps(value)[:40]}, not {want}"
    step = meta["global_step"]
    if meta.get("start", 0) > step or meta.get("epoch", 1) - 1 > step:
        return (
            f"places the run at epoch {meta.get('epoch', 1)}, batch {meta.get('start', 0)}, "
            f"beyond its {step} steps"
        )
    partial = meta.get("partial")
    if partial is not None:
        if not isinstance(partial, dict) or not all(
            test(partial.get(k)) for k, test in _PARTIAL.items()
        ):
            return "holds partial epoch sums that are not numbers"
        if not isinstance(partial.get("alloc", []), list):
            return "holds partial epoch sums that are not numbers"
    fields = set(EpochRecord.__dataclass_fields__)
    for r in meta.get("records", []):
        if (
            not isinstance(r, dict)
            or set(r) != fields
            or not all(v is None or type(v) in (int, float, bool) for v in r.values())
        ):
            return "holds epoch records that are not tapegrad's"
    return None


def find_latest(
    directory, warn: Callable[[str], None] | None = None
) -> tuple[dict, dict, dict] | None:
    """(model_state, optim_state, meta) of the newest valid checkpoint; None if there is none.

    Every newer checkpoint that fails verification is named through ``warn`` and skipped.
    When checkpoints exist but none is valid, raises :class:`CheckpointError` naming them: a
    resume never silently starts afresh over damaged files.
    """
    directory = Path(directory)
    _remove_leftovers(directory)
    bad: list[str] = []
    for path in sorted(_list(directory), reverse=True):
        found, why = _read(path)
        if found is not None:
            return found
        bad.append(f"{path.name} ({why})")
        if warn is not None:
            warn(f"checkpoint {path} is corrupt ({why}): skipped")
    if bad:
        raise CheckpointError(
            f"no valid checkpoint in {directory}: {'; '.join(bad)}. Move the damaged file(s) "
            f"away to start afresh there"
        )
    return None


def load_latest(directory) -> tuple[dict, dict, dict] | None:
    """Like :func:`find_latest` without warnings, but None (not an error) when every
    checkpoint is damaged; for callers that only ask whether a valid one exists."""
    try:
        return find_latest(directory)
    except CheckpointError:
        return None


# -- run configurations --------------------------------------------------------------------------
#: Settings a resume must match exactly; "tapegrad" (the version) is reported but not enforced.
def config_differences(saved: dict, current: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """Each setting whose value differs between a checkpoint's configuration and this run's,
    as ``"lr 0.001 (checkpoint) vs 0.1 (now)"``; keys in ``skip`` and the version are left out."""
    out = []
    for key in sorted(set(saved) | set(current)):
        if key in skip or key == "tapegrad":
            continue
        a, b = saved.get(key, "-"), current.get(key, "-")
        if a != b:
            out.append(f"{key.replace('_', ' ')} {_show(a)} (checkpoint) vs {_show(b)} (now)")
    return out


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ",".join(f"{k}={_show(x)}" for k, x in v.items()) or "-"
    if v is None:
        return "none"
    return str(v)
