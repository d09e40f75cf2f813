"""``tapegrad evaluate``: weights from ``train --save`` or a checkpoint on a test set.

The file's metadata names the preset, dataset, task and model settings; each is checked (types,
sizes, the data's shapes against the model's) before any data loads, and a file that fits
another preset says which.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..models import find_preset
from ..train.run import device_for, note
from .common import DEVICE_HELP, UserError


def add_parser(sub) -> None:
    e = sub.add_parser(
        "evaluate",
        help="evaluate weights from 'train --save' or a checkpoint on the test set",
        description="Evaluate MODEL_FILE (from 'train --save', or a checkpoint) on the test set.",
    )
    e.add_argument("model_file", help="a .safetensors file from 'train --save' or a checkpoint")
    e.add_argument(
        "--dataset",
        metavar="{mnist,fashion-mnist,imdb,PATH.npz}",
        help="test set to use (default: the one the file was trained on)",
    )
    e.add_argument(
        "--preset",
        help="the preset the weights are for (default: the one the file names); needed for "
        "weights saved without tapegrad's metadata",
    )
    e.add_argument("--data-dir", help="the only folder searched for the dataset")
    e.add_argument("--device", help=DEVICE_HELP)
    e.set_defaults(func=cmd_evaluate)


def _find_preset(name: str):
    try:
        return find_preset(name)
    except ValueError as e:
        raise UserError(str(e)) from None


def _json_field(path, meta: dict, key: str, kind=dict):
    """``meta[key]`` decoded from JSON; a one-line error naming the file if malformed."""
    raw = meta.get(key)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise UserError(f"{path}: metadata {key!r} is not valid JSON") from None
    if not isinstance(value, kind):
        raise UserError(f"{path}: metadata {key!r} is a JSON {type(value).__name__}, not an object")
    return value


def _read_model_file(path: str, plain: bool = False) -> tuple[dict, dict]:
    """(weights, description: preset, dataset, task, config, kind) of a file written by
    ``train --save`` or a checkpoint; with ``plain``, also of a safetensors file written by
    another program (no tapegrad checksum or metadata: the caller names the preset)."""
    from ..serialization import ModelFileError, read_file
    from ..train.checkpoint import meta_problem

    if not os.path.lexists(path):
        raise UserError(f"{path}: no such file")
    try:
        arrays, meta, kind = read_file(path, checksum=not plain)
    except ModelFileError as e:
        if "has no tapegrad checksum" not in str(e):
            raise
        raise UserError(f"{e}; pass --preset NAME to evaluate such a file unverified") from None
    if kind == "plain":
        note(f"note: {path} has no tapegrad checksum (written by another program): read unverified")
        desc = {"preset": None, "dataset": None, "task": None, "config": {}, "kind": "weights"}
        return arrays, desc
    if kind == "arrays":
        ckpt = _json_field(path, meta, "meta") or {}
        run = ckpt.get("config")
        if "global_step" not in ckpt or not isinstance(run, dict):
            raise UserError(
                f"{path} is not a tapegrad checkpoint with a run configuration (nor a model "
                f"file from 'tapegrad train --save')"
            )
        problem = meta_problem(ckpt)
        if problem is not None:
            raise UserError(f"{path}: a checkpoint whose metadata {problem}")
        weights = {k[6:]: v for k, v in arrays.items() if k.startswith("model/")}
        model = run.get("model", {})
        if not isinstance(model, dict):
            raise UserError(f"{path}: the checkpoint's model settings are not an object")
        desc = {
            "preset": run.get("preset"),
            "dataset": run.get("dataset"),
            "task": run.get("task"),
            "config": model,
            "kind": f"checkpoint (global step {ckpt['global_step']})",
        }
        return _checked_settings(path, weights, desc)
    desc = {
        "preset": meta.get("preset"),
        "dataset": meta.get("dataset"),
        "task": meta.get("task"),
        "config": _json_field(path, meta, "config") or {},
        "kind": "weights",
    }
    return _checked_settings(path, arrays, desc)


def _checked_settings(path: str, weights: dict, desc: dict) -> tuple[dict, dict]:
    """(weights, desc) once the settings a file records are of the types and sizes a model
    can be built from."""
    from ..train.experiment import config_problem
    from ..train.trainer import TASKS

    for key in ("preset", "dataset", "task"):
        if desc[key] is not None and not isinstance(desc[key], str):
            raise UserError(f"{path}: its metadata's {key} is not a name")
    if desc["task"] is not None and desc["task"] not in TASKS:
        raise UserError(
            f"{path}: its metadata's task {desc['task']!r} is none of {', '.join(TASKS)}"
        )
    problem = config_problem(desc["config"])
    if problem is not None:
        raise UserError(f"{path}: {problem}")
    return weights, desc


def _fitting_presets(weights: dict, config: dict) -> list[str]:
    """The presets whose model (with ``config``'s shapes, else the defaults) these weights fit."""
    from ..models import PRESETS, build_model
    from ..train.trainer import _state_problems

    fits = []
    for name, p in PRESETS.items():
        kw = {"vocab_size": 5000, "maxlen": 130, **p.extra, **config}
        try:
            model = build_model(p, seed=0, **kw)
        except Exception:  # a config meant for another architecture
            continue
        if not _state_problems(model, weights):
            fits.append(name)
    return fits


def _check_data_fits(path: str, dataset: str, saved: dict, data: dict) -> None:
    """Refuse data the saved model cannot read (another width, sequence length, more classes
    or words than it has), before any evaluation."""
    words = {"inputs": "values per sample", "maxlen": "tokens per sample"}
    for key, have in data.items():
        want = saved.get(key)
        if want is None or want == have:
            continue
        if key in words:
            raise UserError(
                f"{path} takes {want} {words[key]}; {dataset}'s samples have {have}: "
                f"evaluate it on data shaped like its training data"
            )
        if have > want:  # classes, outputs, vocab_size: the data needs more than the model has
            raise UserError(
                f"{path} has {want} {key.replace('_', ' ')}; {dataset} needs {have}: these "
                f"weights were trained on other data"
            )


def _fit_without_data(preset, config: dict, weights: dict) -> bool:
    """Whether ``weights`` fit ``preset``'s model with the settings the file recorded alone
    (the model it was trained as), the data's shapes left out."""
    from ..models import build_model
    from ..train.trainer import _state_problems

    try:
        model = build_model(preset, seed=0, **{**preset.extra, **config})
    except Exception:  # settings meant for another architecture
        return False
    return not _state_problems(model, weights)


def cmd_evaluate(args) -> int:
    from ..models import build_model
    from ..train import Trainer
    from ..train.experiment import fit_features, is_npz, load_dataset, load_npz, shape_for_data
    from ..train.trainer import _state_problems

    path = args.model_file
    device = device_for(args.device)
    weights, desc = _read_model_file(path, plain=args.preset is not None)
    name = desc["preset"]
    if name is None and args.preset is None:
        fits = _fitting_presets(weights, desc["config"])
        hint = f"; its weights fit preset {' or '.join(fits)}" if fits else ""
        raise UserError(
            f"{path} names no preset in its metadata (not written by 'tapegrad train --save')"
            f"{hint}: pass --preset NAME"
        )
    if name is not None and args.preset is not None and args.preset != name:
        raise UserError(f"{path} holds {desc['kind']} of preset {name}, not {args.preset}")
    preset = _find_preset(name or args.preset)
    dataset = args.dataset or desc["dataset"] or preset.dataset
    config, task = dict(desc["config"]), desc["task"] or preset.task
    if is_npz(dataset):
        if not os.path.lexists(dataset):
            base = os.path.basename(dataset)
            raise UserError(f"{path} was trained on {dataset}: pass --dataset path/to/{base}")
        ds = load_npz(dataset)
        task, shaped = shape_for_data(preset, ds)
        _check_data_fits(path, dataset, config, shaped)
        config = {**shaped, **config}
        fit_features(preset, ds)
    elif dataset not in preset.datasets:
        raise UserError(
            f"{path} holds a {preset.name} model, which takes "
            f"{' or '.join(preset.datasets)}, not {dataset!r}"
        )
    try:
        model = build_model(preset, seed=0, **{**preset.extra, **config})
    except TypeError as e:
        raise UserError(
            f"{path}: its model settings do not fit preset {preset.name} ({e})"
        ) from None
    problems = _state_problems(model, weights)
    if problems and is_npz(dataset) and _fit_without_data(preset, desc["config"], weights):
        raise UserError(
            f"{path} holds {preset.name} weights for data of another shape than {dataset}'s "
            f"(samples {list(ds.test.x.shape[1:])}, {task}): evaluate it on data shaped like "
            f"its training data"
        )
    if problems:  # checked before any data loads
        fits = [f for f in _fitting_presets(weights, desc["config"]) if f != preset.name]
        owner = f"they are weights of preset {' or '.join(fits)}" if fits else "they fit no preset"
        raise UserError(f"{path}: not {preset.name} weights ({problems}); {owner}")
    if not is_npz(dataset):
        ds, _ = load_dataset(dataset, args.data_dir, **{**preset.extra, **config})
        features = int(np.prod(ds.test.x.shape[1:]))
        _check_data_fits(path, dataset, config, {"inputs": features})
    model.load_state_dict(weights)
    trainer = Trainer(model, optimizer=None, task=task, log=None, device=device)
    loss, acc = trainer.evaluate(ds.test.x, ds.test.y)
    shown = os.path.basename(dataset) if is_npz(dataset) else dataset
    if task == "language-model":
        print(
            f"{preset.name} on {shown} validation set ({len(ds.test.y)} windows): "
            f"loss {loss:.4f} nats per character"
        )
        return 0
    score = f"MSE {loss:.4f}" if acc is None else f"loss {loss:.4f}, accuracy {100 * acc:.2f}%"
    print(f"{preset.name} on {shown} test set ({len(ds.test.y)} samples): {score}")
    return 0
