"""The files a training run writes, checked before it starts and written so nothing is lost.

One rule for every output (``--save``, ``--json``, ``--csv``, ``--plot``, ``--checkpoint-dir``):
missing parent folders are created when the output is written, so the nearest folder that
does exist must be one this process can create files in; a file output must not name an
existing folder, nor the checkpoint folder an existing file, and no two outputs may share a
path. :func:`check_outputs` checks all of that (by creating and removing a probe file, which
also catches read-only file systems and root-owned folders) before any data is loaded.

:func:`write_outputs` then writes each output on its own: one that fails is reported and the
others are still written; trained weights that cannot go where asked are saved next to the
checkpoints, in the working folder or the temporary folder instead, and the message says where.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..serialization import atomic_file


class OutputError(ValueError):
    """An output target that cannot be written; one line naming the flag and the path."""


def _nearest_existing(path: Path, flag: str, shown) -> Path:
    """The nearest of ``path`` and its parents that exists; a symbolic link on the way that
    leads nowhere (a loop, a missing target) is refused, as mkdir would fail there later."""
    p = path
    while p != p.parent:
        try:
            os.lstat(p)
        except FileNotFoundError:
            p = p.parent
            continue
        if not p.exists():
            raise OutputError(
                f"{flag} {shown}: {p} is a symbolic link that leads nowhere (a loop or a "
                f"missing target)"
            )
        break
    return p


def _long_name(path: Path) -> str | None:
    """A component of ``path`` longer than file names may be here, or None."""
    for part in path.parts:
        if len(os.fsencode(part)) > 255:
            return part
    return None


def _probe(folder: Path) -> str | None:
    """None if a file can be created in ``folder`` (an empty one is, then removed), else why."""
    name = folder / f".tapegrad-probe-{os.getpid()}"
    try:
        with atomic_file(name):
            pass
        os.unlink(name)
    except OSError as e:
        return e.strerror or str(e)
    return None


def check_target(flag: str, path: str | os.PathLike, folder: bool = False) -> None:
    """Raise :class:`OutputError` unless ``path`` can be written as ``flag``'s output."""
    p = Path(path).expanduser()
    long = _long_name(p)
    if long is not None:
        raise OutputError(
            f"{flag} {str(path)[:60]}...: a name in it is {len(os.fsencode(long))} bytes, over "
            f"the 255 a file name may have"
        )
    try:
        _check_target(flag, path, p, folder)
    except OSError as e:  # whatever the checks meet (a name too long, a loop, no permission)
        raise OutputError(f"{flag} {path}: {e.strerror or e}") from None


def _check_target(flag: str, path, p: Path, folder: bool) -> None:
    if folder:
        if p.exists() and not p.is_dir():
            raise OutputError(f"{flag} {path}: is a file, not a folder")
    elif p.is_dir():
        raise OutputError(f"{flag} {path}: is a folder; name a file in it")
    where = (
        p if folder and p.is_dir() else _nearest_existing(p.parent if not folder else p, flag, path)
    )
    if not where.is_dir():
        raise OutputError(f"{flag} {path}: {where} is a file, so no folder can be made there")
    why = _probe(where)
    if why is not None:
        raise OutputError(f"{flag} {path}: cannot create files in {where} ({why})")


def check_outputs(files: dict[str, str | None], checkpoint_dir: str | None = None) -> None:
    """Check every output target (``files``: flag -> path or None) and the checkpoint folder;
    raise :class:`OutputError` for the first that cannot be written."""
    seen: dict[str, str] = {}
    for flag, path in [*files.items(), ("--checkpoint-dir", checkpoint_dir)]:
        if path is not None and not str(path).strip():
            raise OutputError(f"{flag} was given an empty path")
    targets = [(f, p, False) for f, p in files.items() if p]
    if checkpoint_dir:
        targets.append(("--checkpoint-dir", checkpoint_dir, True))
    for flag, path, folder in targets:
        key = os.path.realpath(os.path.expanduser(path))
        if key in seen:
            raise OutputError(f"{seen[key]} and {flag} both name {path}; give each its own path")
        seen[key] = flag
        check_target(flag, path, folder)
    if files.get("--plot"):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise OutputError(
                "--plot needs matplotlib, which is not installed: pip install 'tapegrad[plot]'"
            ) from None


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror + (f": {e.filename}" if e.filename else "")
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def write_outputs(
    writers: list[tuple[str, str, Callable[[str], None]]],
    report: Callable[[str], None],
    error: Callable[[str], None],
    fallback_dirs: list[str | os.PathLike] = (),
    fallback_name: str = "weights",
) -> list[str]:
    """Run each ``(flag, path, write)``; return the flags that failed.

    Each output's missing parent folders are created first. A failure is reported through
    ``error`` and the rest still run; when ``--save`` fails, the weights are written to the
    first of ``fallback_dirs``, the working folder or the temporary folder that works, as
    ``<fallback_name>-<time>.safetensors``, and ``report`` says where.
    """
    failed = []
    for flag, path, write in writers:
        try:
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            write(path)
            report(f"{flag.lstrip('-')}: wrote {path}")
            continue
        except Exception as e:  # any failure of one output must not stop the others
            failed.append(flag)
            error(f"could not write {flag} {path} ({_why(e)})")
        if flag != "--save":
            continue
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for folder in [*fallback_dirs, os.getcwd(), tempfile.gettempdir()]:
            other = os.path.join(folder, f"{fallback_name}-{stamp}-{os.getpid()}.safetensors")
            try:
                write(other)
            except Exception:  # try the next place
                continue
            report(f"save: the trained weights are in {other} instead")
            break
        else:
            error("the trained weights could not be saved anywhere")
    return failed
