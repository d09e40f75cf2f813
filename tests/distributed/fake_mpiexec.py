"""Stands in for ``mpiexec`` (``TAPEGRAD_MPIEXEC``): runs the real one, with every rank started
through ``rank_launcher.py`` instead of ``-m tapegrad``, so ``--ranks N`` can be instrumented."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    args = sys.argv[1:]
    i = args.index("-m")
    assert args[i + 1] == "tapegrad", args
    args[i : i + 2] = [str(Path(__file__).with_name("rank_launcher.py"))]
    real = os.environ["TAPEGRAD_REAL_MPIEXEC"]
    os.execv(real, [real, *args])
