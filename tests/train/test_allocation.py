"""A steady-state compiled training step allocates at most 64 KiB (tracemalloc), for every
preset. Allocation counts are deterministic, unlike times, so this is a test, not a benchmark."""

import numpy as np
import pytest

from tapegrad.models import PRESETS, build_model
from tapegrad.train import Trainer, traced_step
from tapegrad.train.experiment import make_optimizer

LIMIT = 64 * 1024


def _batch(name, rng):
    if PRESETS[name].task == "binary":
        return rng.integers(0, 500, (64, 130)).astype(np.int32), rng.integers(0, 2, 64)
    return rng.random((100, 28, 28), dtype=np.float32), rng.integers(0, 10, 100)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_compiled_step_allocates_at_most_64_kib(name):
    preset = PRESETS[name]
    kw = {"vocab_size": 500} if preset.task == "binary" else {}
    results = {}
    for mode in ("eager", "compiled"):
        model = build_model(preset, seed=0, **kw)
        opt = make_optimizer(preset.optimizer, model.parameters(), preset.lr)
        trainer = Trainer(model, opt, preset.task, mode=mode, progress=False, log=None)
        x, y = _batch(name, np.random.default_rng(0))
        for _ in range(3):  # trace, then warm the optimiser state and buffers
            trainer.train_step(x, y)
        step = trainer.train_step
        results[mode] = max(traced_step(lambda: step(x, y))[1] for _ in range(3))  # noqa: B023
    assert results["compiled"] <= LIMIT, f"{name}: {results['compiled']} bytes per step"
    assert results["eager"] > 4 * LIMIT  # the measurement does see a graph's arrays
