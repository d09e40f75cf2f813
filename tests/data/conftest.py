"""Fixtures for the dataset tests.

Every test runs offline (``TAPEGRAD_OFFLINE=1``) with its own empty cache folder, no
``TAPEGRAD_DATA`` and a Debian dataset folder that does not exist, so results never depend on the
machine or on earlier runs. Tests of the real files ask for ``real_data`` explicitly.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from data_helpers import REAL

import tapegrad.data as data
import tapegrad.data.paths as paths


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_OFFLINE", "1")
    monkeypatch.delenv("TAPEGRAD_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setattr(paths, "DEBIAN_DATASETS", tmp_path / "no-debian")
    paths._verified.clear()


@pytest.fixture
def real_data(monkeypatch) -> Path:
    """The shared real datasets, exported as ``TAPEGRAD_DATA``."""
    assert REAL.is_dir(), f"real datasets not found at {REAL}; set TAPEGRAD_DATA"
    monkeypatch.setenv("TAPEGRAD_DATA", str(REAL))
    return REAL


@pytest.fixture(scope="session")
def real_imdb(tmp_path_factory):
    """IMDB from the real tarball, parsed once per session into a fresh cache, then reloaded.

    Returns (first load, second load, seconds for the first, seconds for the second, cache dir).
    """
    cache = tmp_path_factory.mktemp("imdb-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAPEGRAD_OFFLINE", "1")
        mp.setenv("TAPEGRAD_DATA", str(REAL))
        mp.setenv("XDG_CACHE_HOME", str(cache))
        t0 = time.perf_counter()
        first = data.imdb()
        t1 = time.perf_counter()
        second = data.imdb()
        t2 = time.perf_counter()
    print(f"\nIMDB first load {t1 - t0:.2f} s, second (cached) load {t2 - t1:.3f} s")
    return first, second, t1 - t0, t2 - t1, cache
