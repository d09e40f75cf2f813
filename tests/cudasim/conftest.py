"""Tests of tapegrad's CUDA backend. They run in one of two modes, chosen before numba's CUDA
module is first imported, so ``tests/test_cudasim.py`` and ``tests/gpu/`` run this folder in a
subprocess; a plain ``pytest`` run skips it here:

* ``NUMBA_ENABLE_CUDASIM=1``: no GPU needed (CI). numba's CUDA simulator runs the CUDA kernels
  and a stand-in device (``fake_cuda.py``) plays CuPy under the name "cuda".
* ``TAPEGRAD_TEST_GPU=1``: a real GPU, CuPy's arrays and the compiled kernels.

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cudasim      # by hand, anywhere
    TAPEGRAD_TEST_GPU=1 python -m pytest tests/cudasim         # on a machine with a GPU
"""

import os
import sys
from pathlib import Path

import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
REAL_GPU = os.environ.get("TAPEGRAD_TEST_GPU") == "1" and not SIMULATED

if not (SIMULATED or REAL_GPU):
    collect_ignore_glob = ["test_*.py"]
else:
    sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def cuda_device():
    """The "cuda" device of this run: the stand-in, or the real one (CuPy)."""
    if SIMULATED:
        import fake_cuda as fc

        return fc.install("cuda")
    from tapegrad.autodiff import backend

    return backend.get_device("cuda")
