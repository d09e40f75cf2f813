"""The benchmark scripts and the peers' runners do nothing when imported: no spec read, no data
loaded, no training, nothing printed. Their work runs from ``main`` (or the worker's call)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MODULES = [
    "tapegrad.bench.plain_torch",
    "tapegrad.bench.plain_jax",
    "tapegrad.bench.jax_general",
    "tapegrad.bench.jax_runner",
    "tapegrad.bench.torch_runner",
    "tapegrad.bench.tapegrad_runner",
    "tapegrad.bench.worker",
    "tapegrad.bench.micro",
    "tapegrad.bench.harness",
]
SCRIPTS = ["profile_step"]


def test_importing_a_benchmark_script_does_no_work():
    # argv names no spec: a script that read its spec (or parsed its arguments) on import would
    # fail; one that trained or loaded data would print or take far longer than an import
    code = "\n".join(
        [
            "import importlib, importlib.util, sys",
            "sys.argv = ['imported']",
            f"for name in {MODULES!r}:",
            "    importlib.import_module(name)",
            f"for name in {SCRIPTS!r}:",
            f"    path = {str(ROOT / 'benchmarks')!r} + '/' + name + '.py'",
            "    spec = importlib.util.spec_from_file_location(name, path)",
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))",
            "print('imported')",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "imported\n"
