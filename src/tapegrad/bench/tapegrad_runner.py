"""tapegrad's side of a benchmark: the preset's model and optimiser, trained through
``Trainer.train_step`` (the path ``tapegrad train`` takes), measured with the Trainer's
tracemalloc code."""

from __future__ import annotations

import numpy as np

from .. import nn
from ..models import build_model, get_preset
from ..train import Trainer
from ..train.experiment import make_optimizer
from ..train.measure import traced_step

MODES = ("compiled", "eager")


def workload_model(preset: str, seed: int, config: dict, width: int = 1) -> nn.Module:
    """The preset's model, or (``width`` > 1, seed-cnn and mlp) the same architecture with
    every hidden size ``width`` times larger: the scaling table's wider models."""
    if width == 1:
        return build_model(preset, seed=seed, **config)
    if preset == "mlp":
        return build_model(preset, seed=seed, **{**config, "hidden": 128 * width})
    if preset == "seed-cnn":
        rng = np.random.default_rng(seed)
        channels, hidden = 6 * width, 84 * width
        return nn.Sequential(
            nn.Reshape(1, 28, 28),
            nn.Conv2d(1, channels, 3, bias=False, rng=rng),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(channels * 13 * 13, hidden, bias=False, rng=rng),
            nn.ReLU(),
            nn.Linear(hidden, 10, bias=False, rng=rng),
        )
    raise ValueError(f"tapegrad bench: no wider variant of {preset!r} (have seed-cnn and mlp)")


class TapegradRunner:
    def __init__(self, spec: dict, weights: dict[str, np.ndarray]):
        mode = spec.get("mode", "compiled")
        if mode not in MODES:
            raise ValueError(f"tapegrad bench: mode {mode!r} is not available; have {MODES}")
        self.mode = mode
        preset = get_preset(spec["preset"])
        self.model = workload_model(
            spec["preset"], spec["seed"], spec.get("config", {}), spec.get("width", 1)
        )
        self.model.load_state_dict(weights)
        opt = make_optimizer(
            spec["optimizer"],
            self.model.parameters(),
            spec["lr"],
            spec.get("momentum", 0.0),
            spec.get("weight_decay", 0.0),
        )
        self.trainer = Trainer(
            self.model, opt, preset.task, seed=spec["seed"], log=None, progress=False, mode=mode
        )
        self.notes = (
            "compiled mode: the step traced once, then replayed over preallocated buffers"
            if mode == "compiled"
            else "eager mode: one graph recorded and freed per step"
        )

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        return self.trainer.train_step(x, y)[0]

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        return self.trainer.evaluate(x, y, batch_size=1000)

    def allocated(self, x: np.ndarray, y: np.ndarray) -> tuple[int, str]:
        _, nbytes = traced_step(lambda: self.step(x, y))
        return nbytes, "tracemalloc high-water mark above the step's start (as the Trainer)"

    def versions(self) -> dict:
        import numba

        from .. import __version__

        return {"tapegrad": __version__, "numpy": np.__version__, "numba": numba.__version__}
