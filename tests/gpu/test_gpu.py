"""The CUDA backend on a real GPU: skipped, with the reason, where CuPy, numba-cuda or a GPU is
missing (CI, this project's development machines). Where they are present:

* every test of ``tests/cudasim`` (the registry on the device, the kernels, devices, training
  against the CPU) runs again with CuPy's arrays and the compiled kernels, in a subprocess;
* a compiled training step keeps its buffers on the GPU and allocates no new device memory
  once it is steady;
* the seed models train to the same losses on the GPU as on the CPU for a few hundred steps.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


def _why_no_gpu() -> str | None:
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x)"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy finds no GPU"
    except Exception as e:  # no driver
        return f"CuPy finds no usable GPU ({type(e).__name__})"
    try:
        from numba import cuda

        if not cuda.is_available():
            return "numba-cuda finds no GPU (pip install numba-cuda)"
    except ImportError:
        return "numba's CUDA target is missing (pip install numba-cuda)"
    return None


REASON = _why_no_gpu()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no GPU here: {REASON}")
HERE = Path(__file__).resolve().parent


def test_the_cuda_suite_on_the_gpu():
    env = dict(os.environ, TAPEGRAD_TEST_GPU="1")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(HERE.parent / "cudasim"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]


def test_steady_compiled_step_allocates_no_device_memory():
    import cupy

    import tapegrad as tg
    from tapegrad import nn, optim

    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(784, 128, rng=rng), nn.ReLU(), nn.Linear(128, 10, rng=rng))
    model.to("cuda")
    opt = optim.Adam(model.parameters(), lr=1e-3)

    @tg.compile
    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    x = tg.tensor(rng.normal(size=(100, 784)).astype(np.float32), device="cuda")
    y = tg.tensor(rng.integers(0, 10, 100), device="cuda")
    for _ in range(3):
        step(x, y)
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    used = pool.used_bytes()
    for _ in range(20):
        loss = step(x, y)
    cupy.cuda.Device().synchronize()
    assert isinstance(loss.data, cupy.ndarray)
    (plan,) = step.all_plans
    assert all(isinstance(v, cupy.ndarray) for v in plan.vals.values())
    # the loss kernels' 0-d totals are the only arrays a step makes (a few bytes each)
    assert pool.used_bytes() - used <= 4096


@pytest.mark.parametrize("preset", ["seed-cnn", "seed-rnn", "mlp", "text-cnn-learned"])
def test_seed_models_train_alike_on_gpu_and_cpu(preset, real_data):
    """200 compiled steps of the preset on each device: the losses agree to float32 rounding
    accumulated over the run (the kernels' exp and the reductions' order differ in the last
    bits), and so do the test accuracies."""
    from tapegrad.train import Trainer
    from tapegrad.train.experiment import setup

    results = []
    for device in ("cpu", "cuda"):
        exp = setup(preset, log=None)
        trainer = Trainer(exp.model, exp.optimizer, exp.task, progress=False, log=None,
                          device=device)  # fmt: skip
        n = 200 * exp.preset.batch_size
        train = (exp.data.train.x[:n], exp.data.train.y[:n])
        test = (exp.data.test.x[:2000], exp.data.test.y[:2000])
        (rec,) = trainer.fit(train, test, epochs=1, batch_size=exp.preset.batch_size)
        results.append(rec)
    cpu, gpu = results
    assert gpu.loss == pytest.approx(cpu.loss, rel=2e-3)
    assert abs(gpu.test_accuracy - cpu.test_accuracy) <= 0.01
