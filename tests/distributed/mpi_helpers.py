"""Shared by the distributed tests: running commands under ``mpiexec``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tapegrad.distributed.launch import find_mpiexec

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"
MPIEXEC = find_mpiexec()
ONE_THREAD = {v: "1" for v in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, **ONE_THREAD, "CI": "1", **extra}


def mpirun(n: int, args: list[str], timeout: float = 120, **extra: str):
    """``mpiexec -n N python ARGS``; the completed process (stdout, stderr as text)."""
    assert MPIEXEC, "mpiexec not found: pip install 'tapegrad[mpi]'"
    cmd = [MPIEXEC, "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, env=env(**extra), capture_output=True, text=True, timeout=timeout)


def run(args: list[str], timeout: float = 120, **extra: str):
    """``python ARGS`` in a single process."""
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, env=env(**extra), capture_output=True, text=True, timeout=timeout)
