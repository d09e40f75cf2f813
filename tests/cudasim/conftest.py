"""Tests of tapegrad's CUDA backend without a GPU: numba's CUDA simulator runs the CUDA kernels
and a stand-in device (``fake_cuda.py``) plays CuPy. They need ``NUMBA_ENABLE_CUDASIM=1`` set
before numba's CUDA module is imported, so ``tests/test_cudasim.py`` runs this folder in a
subprocess; a plain ``pytest`` run skips it here.

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cudasim      # by hand
"""

import os
import sys
from pathlib import Path

import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

if not SIMULATED:
    collect_ignore_glob = ["test_*.py"]
else:
    sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def fake_cuda():
    """The stand-in device, registered as "cuda" for the whole session."""
    import fake_cuda as fc

    return fc.install("cuda")
