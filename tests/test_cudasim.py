"""Runs ``tests/cudasim`` (tapegrad's CUDA backend on a stand-in device, its kernels in numba's
CUDA simulator) in a subprocess: the simulator must be switched on before numba's CUDA module
is first imported, which this process may already have done."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_cuda_backend_in_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "cudasim")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
