"""Shared test settings: where the real datasets are."""

import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The tests exercise this checkout's own source, whichever tapegrad is installed (an editable
# install of another checkout, a wheel); subprocesses (the CLI tests, MPI ranks) inherit the path.
_SRC = str(ROOT / "src")
sys.path.insert(0, _SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH", "")) if p)

# Nothing may download during tests, whatever the machine can reach.
os.environ["TAPEGRAD_OFFLINE"] = "1"

# numba's idle workers sleep at once in tests (a user's setting, which tapegrad keeps): the test
# runner starts one process per core, and a worker spinning after its parallel region (what
# ``import tapegrad`` sets up for training) would hold a core another test process needs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def data_root() -> pathlib.Path:
    """``TAPEGRAD_DATA`` (CI sets it to ../shared/data), else ../shared/data beside the repo."""
    return pathlib.Path(os.environ.get("TAPEGRAD_DATA", ROOT.parent / "shared" / "data"))


# Subprocesses (the CLI, MPI ranks) find the datasets where the fixtures do.
os.environ["TAPEGRAD_DATA"] = str(data_root())


@pytest.fixture(scope="session")
def real_data() -> pathlib.Path:
    root = data_root()
    assert (root / "mnist").is_dir(), (
        f"the real datasets are not at {root}; set TAPEGRAD_DATA to the shared data folder"
    )
    return root


@pytest.fixture
def threads():
    """``threads(n)`` sets numba's thread count (at most its pool's); restored after the test."""
    import numba  # here: the settings above come before numba is imported

    before = numba.get_num_threads()
    yield lambda n: numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(before)
