"""Opening a file tapegrad is about to read, checked before a byte of it is trusted.

Every reader of a user's file (model files and checkpoints, ``.npz`` datasets, IDX, the IMDB
archive, GloVe vectors, the data cache) opens it through :func:`open_regular`: the path is opened
without blocking (so a FIFO named like a checkpoint cannot hang the reader waiting for a writer)
and refused at once unless it is a regular file (a FIFO, a device such as ``/dev/zero``, a
socket or a folder is named as what it is); a file larger than the caller's limit is refused
before any of it is read. Failures (no such file, permission, a name over the file system's
limit, a symbolic-link loop) become one line through the caller's error class.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def memory_limit() -> int:
    """The most bytes a reader may hold a file's contents in: the memory available now (so a
    4 GiB file on a small machine is refused in one line instead of ending in MemoryError)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # pragma: no cover - psutil is a dependency; be safe anyway
        return 1 << 34


def describe_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def open_regular(
    path: str | os.PathLike, error: type[Exception] = ValueError, limit: int | None = None
) -> BinaryIO:
    """``path`` opened for binary reading, if it is a regular file of at most ``limit`` bytes;
    else ``error("<path>: <why>")`` at once, nothing read."""
    shown = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise error(f"{shown}: cannot read the file ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(
                f"{shown}: cannot read the file: it is {kind_of(st.st_mode)}, not a regular file"
            )
        if limit is not None and st.st_size > limit:
            raise error(
                f"{shown}: is {describe_bytes(st.st_size)}, more than the "
                f"{describe_bytes(limit)} it may take to read it"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
