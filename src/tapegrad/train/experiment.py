"""One preset made runnable: its dataset loaded, its model built, its optimiser made.

The CLI, the tests and the benchmarks all set experiments up through :func:`setup`, so a preset
means the same thing everywhere. Besides the named datasets, a ``.npz`` file with arrays
``x_train``, ``y_train``, ``x_test``, ``y_test`` is a dataset: integer labels make a
classification task (binary for a binary preset with two classes), float targets a regression
(mean squared error). The preset's architecture is then shaped to the data (inputs, outputs,
vocabulary); :data:`tapegrad.models.GENERIC` adds models that exist only for such data.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from .. import data, nn, optim
from ..data import DatasetError, Split
from ..models import GENERIC, PRESETS, Preset, build_model, find_preset  # noqa: F401
from ..safefile import describe_bytes, memory_limit, open_regular
from ..version import __version__

OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
DATASETS = ("mnist", "fashion-mnist", "imdb", "imdb-chars")
SCHEDULERS = ("step", "cosine", "onecycle")
NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def is_npz(dataset: str | None) -> bool:
    return dataset is not None and str(dataset).lower().endswith(".npz")


@dataclass
class Experiment:
    preset: Preset
    dataset: str
    data: object  # has .train and .test splits (x, y)
    model: nn.Module
    optimizer: optim.Optimizer
    lr: float
    optimizer_name: str
    config: dict  # what rebuilds the model's shapes (vocab_size, maxlen, inputs...), JSON-able
    seed: int
    task: str = "multiclass"
    fingerprint: str = ""
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class ArrayDataset:
    """A user's dataset from a ``.npz`` file."""

    train: Split
    test: Split
    path: str


#: Most classes a label array may imply (labels are class numbers 0..C-1).
MAX_CLASSES = 100_000
#: Most values per sample (a 1024x1024 image) and most distinct token ids a model is shaped to.
MAX_FEATURES = 1 << 20
MAX_VOCAB = 1 << 22
#: A member inflating more than this many times its stored size is refused as a zip bomb ...
MAX_INFLATION = 200
#: ... unless it is this small.
SMALL_MEMBER = 64 << 20


#: The model settings a file may record, and the largest each may be.
CONFIG_LIMITS = {
    "inputs": MAX_FEATURES,
    "classes": MAX_CLASSES,
    "outputs": MAX_CLASSES,
    "vocab_size": MAX_VOCAB,
    "maxlen": 1 << 20,
    "hidden": 1 << 16,
}


def config_problem(config: dict) -> str | None:
    """Why model settings read from a file cannot build a model, or None: each known setting
    a whole number from 1 to its limit (a checksum proves only who wrote the file)."""
    for key, limit in CONFIG_LIMITS.items():
        if key in config:
            v = config[key]
            if type(v) is not int or not 1 <= v <= limit:
                return f"model setting {key} is {json.dumps(v)[:40]}, not a whole number 1..{limit}"
    return None


def _member_problem(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    """Why an ``.npz`` member cannot be read safely, from the zip directory and the ``.npy``
    header alone (nothing inflated beyond the header): a declared size against the stored size
    and the memory available, and the header's shape and dtype against the declared size."""
    name = info.filename.removesuffix(".npy")
    size, stored = info.file_size, info.compress_size
    if size > SMALL_MEMBER and size > MAX_INFLATION * max(stored, 1):
        return (
            f"{name} declares {describe_bytes(size)} inflated from {describe_bytes(stored)} "
            f"(more than {MAX_INFLATION} times): refused as a zip bomb"
        )
    try:
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            header = f.tell()
    except (
        ValueError,
        OSError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
        NotImplementedError,
    ) as e:
        # NotImplementedError: a zip version or compression method zipfile cannot read
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        return f"{name} is not a readable array ({why})"
    if dtype.hasobject:
        return f"{name} holds Python objects (dtype {dtype}); a dataset holds numbers"
    need = header + int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need != size:
        return f"{name}'s header says {shape} {dtype}, which does not fit its {size} bytes"
    return None


def _read_npz(path, shown: str) -> dict[str, np.ndarray]:
    """The four arrays, each checked from the zip directory before it is inflated."""
    with open_regular(path, DatasetError) as raw, zipfile.ZipFile(raw) as zf:
        infos = {i.filename.removesuffix(".npy"): i for i in zf.infolist()}
        missing = [k for k in NPZ_ARRAYS if k not in infos]
        if missing:
            raise DatasetError(
                f"{shown}: lacks array(s) {', '.join(missing)} (a dataset file holds "
                f"{', '.join(NPZ_ARRAYS)}; it has {', '.join(infos) or 'none'})"
            )
        total, limit = sum(infos[k].file_size for k in NPZ_ARRAYS), memory_limit() // 2
        if total > limit:
            raise DatasetError(
                f"{shown}: its arrays inflate to {describe_bytes(total)}, more than half the "
                f"{describe_bytes(2 * limit)} of memory free"
            )
        for k in NPZ_ARRAYS:
            problem = _member_problem(zf, infos[k])
            if problem is not None:
                raise DatasetError(f"{shown}: {problem}")
        raw.seek(0)
        with np.load(raw, allow_pickle=False) as f:
            return {k: f[k] for k in NPZ_ARRAYS}


def load_npz(path: str | os.PathLike) -> ArrayDataset:
    """The four arrays of a ``.npz`` file, checked; :class:`DatasetError` in one line if not."""
    shown = os.fspath(path)
    if not os.path.lexists(path):
        raise DatasetError(f"{shown}: no such dataset file")
    try:
        arrays = _read_npz(path, shown)
    except DatasetError:
        raise
    except (
        OSError,
        ValueError,
        zipfile.BadZipFile,
        EOFError,
        zlib.error,
        NotImplementedError,
    ) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"{shown}: not a readable .npz dataset ({why})") from None
    for k, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise DatasetError(f"{shown}: {k} has dtype {a.dtype}; expected numbers")
        if a.ndim == 0 or len(a) == 0:
            raise DatasetError(f"{shown}: {k} is empty")
    _check_npz_shapes(arrays, shown)
    return ArrayDataset(
        Split(_features(arrays, "x_train", shown), _targets(arrays, "y_train", shown)),
        Split(_features(arrays, "x_test", shown), _targets(arrays, "y_test", shown)),
        shown,
    )


def _check_npz_shapes(arrays: dict, shown: str) -> None:
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if len(x) != len(y):
            raise DatasetError(f"{shown}: x_{split} has {len(x)} samples, y_{split} {len(y)}")
        if x.ndim < 2:
            raise DatasetError(
                f"{shown}: x_{split} is 1-D {x.shape}: give each sample a feature axis, "
                f"(N, features) (for one feature per sample, x[:, None])"
            )
    if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
        raise DatasetError(
            f"{shown}: x_train samples are {arrays['x_train'].shape[1:]}, x_test samples "
            f"{arrays['x_test'].shape[1:]}"
        )
    features = int(np.prod(arrays["x_train"].shape[1:], dtype=object))
    if features > MAX_FEATURES:
        raise DatasetError(
            f"{shown}: {features} values per sample, more than the {MAX_FEATURES} a model is "
            f"shaped to here (a 1024x1024 image); reduce the data first"
        )
    if (arrays["y_train"].dtype.kind == "f") != (arrays["y_test"].dtype.kind == "f"):
        raise DatasetError(f"{shown}: y_train and y_test must both be labels or both floats")
    if arrays["y_train"].ndim > 2 or arrays["y_train"].shape[1:] != arrays["y_test"].shape[1:]:
        raise DatasetError(f"{shown}: y_train and y_test must be (N,) or (N, k) alike")


def _first_bad(a: np.ndarray) -> int:
    """The first sample of ``a`` holding NaN or Inf."""
    bad = ~np.isfinite(a.reshape(len(a), -1)).all(axis=1)
    return int(np.argmax(bad))


def _finite_float32(a: np.ndarray, what: str, advice: str = "") -> np.ndarray:
    """``a`` as contiguous float32, refused naming its first sample with NaN or Inf (or a value
    beyond float32's range)."""
    with np.errstate(over="ignore"):  # a value beyond float32's range: named just below
        a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise DatasetError(
            f"{what} NaN or Inf (first in sample {_first_bad(a)}, or a value beyond float32's "
            f"range){advice}"
        )
    return a


def _features(arrays: dict, key: str, shown: str) -> np.ndarray:
    a = arrays[key]
    if a.dtype.kind in "biu":
        return a  # token ids stay integers; other models convert (see fit_features)
    return _finite_float32(a, f"{shown}: data problem: {key} holds", "; fix or drop those samples")


def _targets(arrays: dict, key: str, shown: str) -> np.ndarray:
    a = arrays[key]
    if a.dtype.kind == "f":
        return _finite_float32(a, f"{shown}: data problem: the float targets {key} hold")
    if a.ndim != 1 or a.min() < 0:
        raise DatasetError(f"{shown}: labels must be integers >= 0 in a (N,) array")
    top = int(a.max())  # a Python int: a uint64 of 2**64-1 stays that, it does not wrap
    if top >= MAX_CLASSES:
        raise DatasetError(
            f"{shown}: data problem: {key} holds label {top}; labels are class numbers "
            f"0..C-1 with C at most {MAX_CLASSES} (float targets make a regression)"
        )
    return a.astype(np.int64)


def fit_features(preset: Preset, ds, log=print) -> None:
    """Integer features of a user's data become float32 (the models' dtype, as PyTorch users
    convert them) for every preset that does not read token ids; said once through ``log``."""
    if preset.datasets == ("imdb",):
        return
    ints = [split for split in ("train", "test") if getattr(ds, split).x.dtype.kind in "biu"]
    if ints and log:
        dtype = getattr(ds, ints[0]).x.dtype
        log(
            f"note: {ds.path}: {dtype} features (x_{' and x_'.join(ints)}) converted to "
            f"float32, the model's dtype"
        )
    for split in ints:
        old = getattr(ds, split)
        setattr(ds, split, Split(np.ascontiguousarray(old.x, dtype=np.float32), old.y))


def shape_for_data(preset: Preset, ds: ArrayDataset) -> tuple[str, dict]:
    """(task, model settings) that fit ``preset``'s architecture to a user's data."""
    x, y, yt = ds.train.x, ds.train.y, ds.test.y
    name, shown = preset.name, ds.path
    if preset.task == "language-model":
        raise DatasetError(
            f"{name} trains on a character corpus ({', '.join(preset.datasets)}), not on "
            f"arrays of samples such as {shown}"
        )
    features = int(np.prod(x.shape[1:]))
    if y.dtype.kind == "f":
        task, outputs = "regression", (1 if y.ndim == 1 else y.shape[1])
    else:
        classes = int(max(y.max(), yt.max())) + 1
        binary = preset.task == "binary" and classes <= 2
        task, outputs = ("binary", 1) if binary else ("multiclass", max(classes, 2))
    if preset.needs_glove:
        raise DatasetError(
            f"{name} starts from GloVe vectors of IMDB's vocabulary; on your own token ids "
            f"use text-cnn-learned"
        )
    if name.startswith(("seed-cnn", "seed-rnn", "resnet")) and features != 784:
        raise DatasetError(
            f"{name} reads 28x28 images (784 values per sample); {shown}'s samples have "
            f"{features}: use mlp or linear"
        )
    if preset.datasets == ("imdb",):  # a text CNN: token ids in
        if x.ndim != 2 or x.dtype.kind not in "iu" or x.min() < 0:
            raise DatasetError(
                f"{name} reads token ids: x_train must be (N, length) non-negative integers"
            )
        length = x.shape[1]
        if length < 10:
            raise DatasetError(f"{name} needs sequences of at least 10 tokens, got {length}")
        vocab = int(max(x.max(), ds.test.x.max())) + 1
        if vocab > MAX_VOCAB:
            raise DatasetError(
                f"{shown}: data problem: token id {vocab - 1} implies a vocabulary of "
                f"{vocab} words, more than {MAX_VOCAB}; number the words 0..V-1"
            )
        return task, {"vocab_size": vocab, "maxlen": length, "outputs": outputs}
    return task, {"inputs": features, "classes": outputs}


def fingerprint(ds) -> str:
    """SHA-256 over the train and test arrays' dtypes, shapes and bytes (first 16 hex digits):
    what a resume checks to be training on the same data."""
    h = hashlib.sha256()
    for split in (ds.train, ds.test):
        arrays = split.arrays() if hasattr(split, "arrays") else (split.x, split.y)
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(json.dumps([a.dtype.str, list(a.shape)]).encode())
            h.update(a.data)
    return h.hexdigest()[:16]


def load_dataset(
    name: str, data_dir=None, maxlen: int = 130, vocab_size: int = 20000, **text_options
):
    """The dataset called ``name`` and the model settings it implies (vocabulary size);
    ``text_options`` (stopwords, oov, ...) go to :func:`tapegrad.data.imdb`, or (context,
    windows, val_windows) to :func:`tapegrad.data.imdb_chars`."""
    if name == "imdb-chars":
        ds = data.imdb_chars(data_dir=data_dir, **text_options)
        return ds, {"vocab_size": len(ds.vocab), "context": ds.train.context}
    if is_npz(name):
        return load_npz(name), {}
    if name == "mnist":
        return data.mnist(data_dir=data_dir), {}
    if name == "fashion-mnist":
        return data.fashion_mnist(data_dir=data_dir), {}
    if name == "imdb":
        ds = data.imdb(data_dir=data_dir, maxlen=maxlen, vocab_size=vocab_size, **text_options)
        return ds, {"vocab_size": len(ds.vocab), "maxlen": maxlen}
    raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")


def make_optimizer(
    name: str, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0
) -> optim.Optimizer:
    """The optimiser called ``name``; ``momentum`` applies to sgd and rmsprop only."""
    if momentum and name not in ("sgd", "rmsprop"):
        raise ValueError(f"momentum applies to sgd and rmsprop, not {name}")
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "rmsprop":
        return optim.RMSprop(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")


def make_scheduler(spec: dict | None, optimizer: optim.Optimizer, steps_per_epoch: int):
    """The learning-rate schedule ``spec`` describes, stepped once per optimiser step:
    ``{"name": "step", "every": E, "gamma": g}`` multiplies the lr by g every E epochs;
    ``{"name": "cosine", "epochs": E}`` anneals it to 0 over E epochs; ``{"name":
    "onecycle", "epochs": E}`` runs one cycle (up to lr, then far below) over E epochs."""
    if not spec:
        return None
    name = spec["name"]
    if name == "step":
        return optim.StepLR(optimizer, spec["every"] * steps_per_epoch, spec["gamma"])
    total = spec["epochs"] * steps_per_epoch
    if name == "cosine":
        return optim.CosineAnnealingLR(optimizer, total)
    if name == "onecycle":
        # the learning rate only: the trainer's one-cycle schedule predates momentum cycling
        lrs = [g["lr"] for g in optimizer.param_groups]
        return optim.OneCycleLR(optimizer, lrs, total, cycle_momentum=False)
    raise ValueError(f"unknown scheduler {name!r}; choose one of: {', '.join(SCHEDULERS)}")


def optimizer_settings(
    preset: Preset, optimizer: str | None, momentum: float | None, weight_decay: float | None
) -> tuple[str, float, float]:
    """(optimiser, momentum, weight decay) of a run: what is given, else the preset's own
    (its momentum and weight decay only with its own optimiser; 0 with another)."""
    name = optimizer or preset.optimizer
    own = name == preset.optimizer
    if momentum is None:
        momentum = preset.momentum if own else 0.0
    if weight_decay is None:
        weight_decay = preset.weight_decay if own else 0.0
    return name, momentum, weight_decay


def setup(
    preset: str | Preset,
    dataset: str | None = None,
    data_dir=None,
    seed: int = 0,
    lr: float | None = None,
    optimizer: str | None = None,
    momentum: float | None = None,
    log=print,
    weight_decay: float | None = None,
) -> Experiment:
    """Load the preset's dataset, build its model from ``seed`` and make its optimiser
    (momentum and weight decay left None: the preset's, see :func:`optimizer_settings`)."""
    preset = find_preset(preset) if isinstance(preset, str) else preset
    dataset = dataset or preset.dataset
    if not is_npz(dataset) and dataset not in preset.datasets:
        raise ValueError(
            f"preset {preset.name} trains on {' or '.join(preset.datasets)}, not {dataset!r}"
        )
    task = preset.task
    if is_npz(dataset):
        ds = load_npz(dataset)
        task, config = shape_for_data(preset, ds)
        fit_features(preset, ds, log)
    else:
        ds, config = load_dataset(dataset, data_dir, **preset.extra)
    kwargs = dict(config)
    if preset.needs_glove:
        vectors = data.glove(ds.vocab, dim=50, data_dir=data_dir)
        if log:
            log(
                f"GloVe 50d covers {100 * vectors.coverage:.1f}% of the "
                f"{len(ds.vocab)}-word vocabulary"
            )
        kwargs["embedding"] = vectors.matrix
    model = build_model(preset, seed=seed, **kwargs)
    lr = lr or preset.lr
    name, momentum, weight_decay = optimizer_settings(preset, optimizer, momentum, weight_decay)
    opt = make_optimizer(name, model.parameters(), lr, momentum, weight_decay)
    return Experiment(
        preset,
        dataset,
        ds,
        model,
        opt,
        lr,
        name,
        config,
        seed,
        task,
        fingerprint(ds),
        momentum=momentum,
        weight_decay=weight_decay,
    )


def run_config(
    preset: str,
    dataset: str,
    *,
    optimizer: str,
    lr: float,
    momentum: float,
    weight_decay: float,
    scheduler: dict | None,
    batch_size: int,
    seed: int,
    task: str | None = None,
    data: str | None = None,
    model: dict | None = None,
) -> dict:
    """What a checkpoint records of a run, and what a resume must match. Entries left None
    (known only once the data is loaded) are omitted."""
    out = {
        "preset": preset,
        "dataset": os.path.basename(dataset) if is_npz(dataset) else dataset,
        "task": task,
        "optimizer": optimizer,
        "lr": lr,
        "momentum": momentum,
        "weight_decay": weight_decay,
        "scheduler": scheduler or "none",
        "batch_size": batch_size,
        "seed": seed,
        "data": data,
        "model": model,
        "tapegrad": __version__,
    }
    return {k: v for k, v in out.items() if v is not None}
