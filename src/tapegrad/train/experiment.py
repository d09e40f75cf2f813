"""One preset made runnable: its dataset loaded, its model built, its optimiser made.

The CLI, the tests and the benchmarks all set experiments up through :func:`setup`, so a preset
means the same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import data, optim
from ..models import Preset, build_model, get_preset
from ..nn import Module

OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
DATASETS = ("mnist", "fashion-mnist", "imdb")


@dataclass
class Experiment:
    preset: Preset
    dataset: str
    data: object  # has .train and .test splits (x, y)
    model: Module
    optimizer: optim.Optimizer
    lr: float
    optimizer_name: str
    config: dict  # what rebuilds the model's shapes (vocab_size, maxlen), JSON-able
    seed: int


def load_dataset(
    name: str, data_dir=None, maxlen: int = 130, vocab_size: int = 20000, **text_options
):
    """The dataset called ``name`` and the model settings it implies (vocabulary size);
    ``text_options`` (stopwords, oov, ...) go to :func:`tapegrad.data.imdb`."""
    if name == "mnist":
        return data.mnist(data_dir=data_dir), {}
    if name == "fashion-mnist":
        return data.fashion_mnist(data_dir=data_dir), {}
    if name == "imdb":
        ds = data.imdb(data_dir=data_dir, maxlen=maxlen, vocab_size=vocab_size, **text_options)
        return ds, {"vocab_size": len(ds.vocab), "maxlen": maxlen}
    raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")


def make_optimizer(name: str, params, lr: float, momentum: float = 0.0) -> optim.Optimizer:
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=momentum)
    if name == "adam":
        return optim.Adam(params, lr=lr)
    if name == "adamw":
        return optim.AdamW(params, lr=lr)
    if name == "rmsprop":
        return optim.RMSprop(params, lr=lr, momentum=momentum)
    raise ValueError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")


def setup(
    preset: str | Preset,
    dataset: str | None = None,
    data_dir=None,
    seed: int = 0,
    lr: float | None = None,
    optimizer: str | None = None,
    momentum: float = 0.0,
    log=print,
) -> Experiment:
    """Load the preset's dataset, build its model from ``seed`` and make its optimiser."""
    preset = get_preset(preset) if isinstance(preset, str) else preset
    dataset = dataset or preset.dataset
    if dataset not in preset.datasets:
        raise ValueError(
            f"preset {preset.name} trains on {' or '.join(preset.datasets)}, not {dataset!r}"
        )
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
    name = optimizer or preset.optimizer
    opt = make_optimizer(name, model.parameters(), lr, momentum)
    return Experiment(preset, dataset, ds, model, opt, lr, name, config, seed)
