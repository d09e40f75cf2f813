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


def instrumented_mpiexec(tmp_path) -> dict[str, str]:
    """Environment making ``--ranks`` start its ranks through ``rank_launcher.py``."""
    wrapper = tmp_path / "mpiexec"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "fake_mpiexec.py"} "$@"\n')
    wrapper.chmod(0o755)
    return {"TAPEGRAD_MPIEXEC": str(wrapper), "TAPEGRAD_REAL_MPIEXEC": MPIEXEC}
