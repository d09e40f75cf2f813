"""One run per checkpoint folder: a lock the owning run holds for as long as it lives.

Two runs writing checkpoints into one folder destroy each other's work (one's rotation deletes
the other's newest checkpoint). So a run takes the folder's lock before it reads or writes a
checkpoint there: an exclusive ``flock`` on the file ``.tapegrad-lock`` in the folder, which
records the owner's pid, command line, host and start time. A second run finds it held and
refuses in one line naming the owner. The kernel drops a ``flock`` when its process ends however
it ends (SIGKILL, out-of-memory killer, power loss of a network client aside), so a lock file
left by a dead run is never mistaken for a live one: the next run takes it over and says whose
it was. ``flock`` is used rather than a pid in an O_EXCL file (the pid may be reused by an
unrelated process) or the ``filelock`` package (it records no owner to name).

Releasing removes the lock file (while still holding it; a run that opened the old file in the
meantime notices the file is gone and opens the new one), and the folders acquiring made, while
they are empty (a run refused for another reason leaves no empty folder behind).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from ..serialization import _pid_alive
from .checkpoint import CheckpointError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, said once by acquire()
    fcntl = None

LOCK_NAME = ".tapegrad-lock"


class FolderLocked(CheckpointError):
    """The checkpoint folder is held by another live run."""


def _owner(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        record = json.loads(os.read(fd, 65536) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _describe(owner: dict) -> str:
    pid, command = owner.get("pid", "?"), owner.get("command") or "command unknown"
    host = owner.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    since = owner.get("started")
    when = f", started {since}" if isinstance(since, str) else ""
    return f"pid {pid}{where} ({command}){when}"


class FolderLock:
    """The lock on checkpoint folder ``directory``, for the run ``command`` (what a refused
    run names); :meth:`acquire` it, :meth:`release` it (also when used as a context manager)."""

    def __init__(self, directory: str | os.PathLike, command: str, notice: Callable | None = None):
        self.directory = Path(directory).expanduser()
        self.path = self.directory / LOCK_NAME
        self.command = command
        self.notice = notice or (lambda message: None)
        self._fd: int | None = None
        self._made: list[Path] = []  # the folders acquire() created, innermost first

    def acquire(self) -> FolderLock:
        if fcntl is None:  # pragma: no cover
            self.notice(f"cannot lock {self.directory} here: make sure no other run uses it")
            return self
        if not self.directory.is_dir():
            missing = self.directory.absolute()
            while not missing.exists() and missing != missing.parent:
                self._made.append(missing)
                missing = missing.parent
            self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(
                    self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644
                )
            except OSError as e:  # a symbolic link planted there (ELOOP), no permission
                self._tidy()
                raise CheckpointError(
                    f"--checkpoint-dir {self.directory}: cannot open its lock file {self.path} "
                    f"({e.strerror or e})"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _owner(fd)
                for _ in range(20):  # the holder writes its record just after taking the lock
                    if "pid" in owner:
                        break
                    time.sleep(0.05)
                    owner = _owner(fd)
                os.close(fd)
                self._tidy()
                raise FolderLocked(
                    f"--checkpoint-dir {self.directory} is in use by another run: "
                    f"{_describe(owner)}. Wait for it to end, or choose another folder"
                ) from None
            except OSError as e:  # a file system without flock (some network mounts)
                os.close(fd)
                self.notice(
                    f"cannot lock {self.directory} ({e.strerror}): make sure no other run uses it"
                )
                return self
            if self._same_file(fd):
                break
            os.close(fd)  # released and removed by its owner meanwhile: lock the new one
        self._fd = fd
        self._take_over(_owner(fd))
        record = {
            "pid": os.getpid(),
            "command": self.command,
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        except OSError:  # a full disk: the lock holds all the same; a refused run names no pid
            pass
        return self

    def _same_file(self, fd: int) -> bool:
        try:
            here, there = os.fstat(fd), os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)

    def _take_over(self, previous: dict) -> None:
        pid = previous.get("pid")
        if not previous or pid == os.getpid():
            return
        dead = isinstance(pid, int) and not _pid_alive(pid)
        gone = "is no longer running" if dead else "ended without releasing it"
        self.notice(
            f"took over the stale lock on {self.directory} left by {_describe(previous)}, "
            f"which {gone}"
        )

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if self._same_file(self._fd):
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
        self._tidy()

    def _tidy(self) -> None:
        for folder in self._made:  # innermost first; only while empty
            try:
                folder.rmdir()
            except OSError:
                break
        self._made = []

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
