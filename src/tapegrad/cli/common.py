"""What every subcommand shares: exit statuses, the one-line argument errors, number types."""

from __future__ import annotations

import argparse
import json
import math
import os

from ..train.config import UserError
from ..train.run import EXIT_OUTPUT

__all__ = ["EXIT_USAGE", "EXIT_DIVERGED", "EXIT_MISMATCH", "EXIT_OUTPUT", "UserError"]

EXIT_USAGE, EXIT_DIVERGED, EXIT_MISMATCH = 2, 3, 4  # EXIT_OUTPUT (5): see train/run.py

DEVICE_HELP = (
    "cpu or cuda (a GPU through CuPy: pip install cupy-cuda12x or cupy-cuda13x, and numba-cuda; "
    "default: cpu)"
)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) naming the command and the problem."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind: str):
    def parse(text: str):
        try:
            v = int(text) if kind.endswith("int") else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if kind.startswith("positive") and v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        if kind.startswith("nonnegative") and v < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return v

    parse.__name__ = kind
    return parse


POS_INT, POS_FLOAT, NONNEG_FLOAT, NONNEG_INT = (
    _number("positive int"),
    _number("positive float"),
    _number("nonnegative float"),
    _number("nonnegative int"),
)


def split(value: str | None, default: str) -> list[str]:
    """A comma-separated list (``default`` when none was given)."""
    return [v.strip() for v in (value or default).split(",") if v.strip()]


def write_json(path: str, result: dict) -> None:
    """Write ``result`` to ``path`` (folders made, atomically) and say so."""
    from ..serialization import atomic_file

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with atomic_file(path) as f:
        f.write((json.dumps(result, indent=1) + "\n").encode())
    print(f"wrote {path}")
