"""Shared test settings: where the real datasets are."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Nothing may download during tests, whatever the machine can reach.
os.environ["TAPEGRAD_OFFLINE"] = "1"


def data_root() -> pathlib.Path:
    """``TAPEGRAD_DATA`` (CI sets it to ../shared/data), else ../shared/data beside the repo."""
    return pathlib.Path(os.environ.get("TAPEGRAD_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def real_data() -> pathlib.Path:
    root = data_root()
    assert (root / "mnist").is_dir(), (
        f"the real datasets are not at {root}; set TAPEGRAD_DATA to the shared data folder"
    )
    return root
