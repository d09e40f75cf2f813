"""tapegrad's side of a benchmark: the preset's model and optimiser, trained through
``Trainer.train_step`` (the path ``tapegrad train`` takes), measured with the Trainer's
tracemalloc code."""

from __future__ import annotations

import numpy as np

from ..models import build_model, get_preset
from ..train import Trainer
from ..train.experiment import make_optimizer
from ..train.measure import traced_step

MODES = ("compiled", "eager")


class TapegradRunner:
    def __init__(self, spec: dict, weights: dict[str, np.ndarray]):
        mode = spec.get("mode", "compiled")
        if mode not in MODES:
            raise ValueError(f"tapegrad bench: mode {mode!r} is not available; have {MODES}")
        self.mode = mode
        preset = get_preset(spec["preset"])
        self.model = build_model(preset, seed=spec["seed"], **spec.get("config", {}))
        self.model.load_state_dict(weights)
        opt = make_optimizer(spec["optimizer"], self.model.parameters(), spec["lr"])
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
