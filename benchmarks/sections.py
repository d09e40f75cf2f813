"""BENCHMARKS.md's kept sections: the block between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` that one script (``scaling.py``, ``blas_kernels.py``) or a person writes,
and that ``run_all.py`` keeps when it re-renders the rest."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def kept(path: Path = DOC) -> list[str]:
    """Every marked section of ``path``, markers included, in their order."""
    text = path.read_text() if path.exists() else ""
    pattern = r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->"
    return [m.group(0) for m in re.finditer(pattern, text, re.S)]


def write(name: str, section: str, path: Path = DOC) -> None:
    """Put ``section`` (markers included) where section ``name`` stands, or at the end."""
    begin, end = markers(name)
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)
