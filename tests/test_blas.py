"""``import tapegrad`` picks OpenBLAS's AVX-512 kernels where the CPU has them and nobody chose
(tapegrad/blas.py); a user's OPENBLAS_CORETYPE, or NumPy loaded first, is left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tapegrad import blas

AVX512_HERE = blas.AVX512 <= blas._cpu_flags()
_BEFORE = os.environ.get("OPENBLAS_CORETYPE")  # as this module found it


def _run(code: str, **env_changes) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(env_changes)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


REPORT = (
    "import os; from tapegrad.blas import core; print(os.environ.get('OPENBLAS_CORETYPE'), core())"
)


def test_unset_coretype_gets_avx512_kernels_where_the_cpu_has_them():
    chosen, core = _run("import tapegrad; " + REPORT).split()
    if AVX512_HERE:
        assert (chosen, core) == ("SkylakeX", "SkylakeX")
    else:
        assert chosen == "None"


def test_a_users_coretype_wins():
    assert _run("import tapegrad; " + REPORT, OPENBLAS_CORETYPE="Haswell").split() == [
        "Haswell",
        "Haswell",
    ]


def test_numpy_loaded_first_is_left_alone():
    chosen, _ = _run("import numpy, tapegrad; " + REPORT).split()
    assert chosen == "None"


@pytest.mark.parametrize(
    "flags,expected",
    [(blas.AVX512 | {"sse2"}, "SkylakeX"), ({"avx2", "avx512f"}, None), (set(), None)],
)
def test_the_choice_needs_every_subset_the_kernels_use(monkeypatch, flags, expected):
    # set, then deleted: either way the teardown restores the variable as it was (a bare
    # delenv of an unset variable records nothing, and prefer_avx512's SkylakeX then leaked
    # into every later child process of this worker: SIGILL on a CPU without AVX-512)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "")
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    monkeypatch.setattr(blas, "_cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(blas.platform, "system", lambda: "Linux")
    monkeypatch.setattr(blas.platform, "machine", lambda: "x86_64")
    monkeypatch.delitem(sys.modules, "numpy")  # restored after the test
    assert blas.prefer_avx512() == expected
    assert os.environ.get("OPENBLAS_CORETYPE") == expected


def test_the_choice_test_leaves_the_environment_as_it_found_it():
    """Runs after the cases above in one process (pytest keeps a module's order)."""
    assert os.environ.get("OPENBLAS_CORETYPE") == _BEFORE


IDLE = (
    "import os; print(*(os.environ.get(v) for v in "
    "('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', 'OPENBLAS_THREAD_TIMEOUT')))"
)


def _run_clean(code: str, **env_changes) -> str:
    """``code`` in a child whose environment lacks the idle-thread variables (this process's
    ``import tapegrad`` set them)."""
    env = {k: v for k, v in os.environ.items() if k not in blas.USER_CHOICES}
    env.update(env_changes)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_import_tapegrad_lets_idle_workers_spin_briefly():
    assert _run_clean("import tapegrad; " + IDLE).split() == ["None", "100000", "None"]
    info = _run_clean("import tapegrad.blas as b, tapegrad; print(b.describe_idle())")
    assert info == "GOMP_SPINCOUNT=100000 (tapegrad)"
    mine = "OPENBLAS_THREAD_TIMEOUT"
    assert _run_clean("import tapegrad; " + IDLE, **{mine: "4"}).split() == ["None", "100000", "4"]


def test_a_users_idle_setting_wins():
    for var, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("GOMP_SPINCOUNT", "5")):
        got = _run_clean("import tapegrad; " + IDLE, **{var: value}).split()
        expected = (
            ["PASSIVE", "None", "None"] if var == "OMP_WAIT_POLICY" else ["None", "5", "None"]
        )
        assert got == expected
    info = _run_clean(
        "import tapegrad.blas as b, tapegrad; print(b.describe_idle())", OMP_WAIT_POLICY="ACTIVE"
    )
    assert info == "OMP_WAIT_POLICY=ACTIVE (yours), GOMP_SPINCOUNT unset"
    # numba loads its OpenMP library lazily: NumPy imported first does not stop the setting
    assert _run_clean("import numpy, tapegrad; " + IDLE).split() == ["None", "100000", "None"]


def test_benchmark_peers_start_without_tapegrads_idle_setting():
    code = (
        "import tapegrad; from tapegrad.bench.harness import process_env; e = process_env(); "
        "print(e.get('OMP_WAIT_POLICY'), e.get('GOMP_SPINCOUNT'))"
    )
    assert _run_clean(code).split() == ["None", "None"]
    assert _run_clean(code, GOMP_SPINCOUNT="100000").split() == ["None", "100000"]
