"""``cached_jit``: numba's ``njit(cache=True)`` made safe for processes that compile at once.

numba keeps one index file per function in its cache folder, mapping each compiled variant
(signature, closure values, CPU) to a numbered data file. Saving a variant reads the index,
picks the first free number and writes the index and the data file, each atomically but not
together: two processes that compile two variants of one function at the same moment (two
pooling sizes, float32 and float64) can both pick number 1, and the index then names one
variant's machine code for the other's key. A later process loads it and runs code compiled for
other types or constants: a crash (SIGSEGV, SIGILL) or a wrong result. Processes starting
together on an empty cache do exactly this: MPI ranks, parallel test runs, a user's jobs.

Every tapegrad kernel is made with :func:`cached_jit`, which holds an exclusive file lock,
``<index>.lock`` beside the function's index, while numba looks the variant up in the cache,
compiles it if missing and saves it. A second process wanting the same function waits, then
loads what the first saved instead of compiling it again, so concurrent cold starts also cost
one compilation instead of one each. Variants already in memory take no lock.

The wait is bounded (``TAPEGRAD_KERNEL_LOCK_TIMEOUT`` seconds, default 120): past it (the
holder is stopped or hung) the variant is compiled without the disk cache, correct but not
saved, and one warning says so. ``TAPEGRAD_KERNEL_LOCK=0`` turns the lock off (for measuring).

numba checks a cached function against its own source file only, so a kernel whose inner loops
come from another module (``cpu/microkernels.py``'s intrinsics, a body inlined from a helper)
would load machine code built from that module's old version. Every cache entry is therefore
also keyed by :func:`sources_digest`, a hash of every source file of this kernels package: an
upgrade or an edit of any of them compiles the kernels again instead of running stale code.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
import warnings

import numba
from numba.core import sigutils
from numba.core.caching import NullCache
from numba.core.compiler_lock import global_compiler_lock

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["cached_jit", "lock_timeout", "sources_digest"]

DEFAULT_TIMEOUT = 120.0


def lock_timeout() -> float:
    """Seconds to wait for another process's compilation (``TAPEGRAD_KERNEL_LOCK_TIMEOUT``)."""
    raw = os.environ.get("TAPEGRAD_KERNEL_LOCK_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value >= 0 else DEFAULT_TIMEOUT


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """A hash of the names and contents of every ``.py`` file of this kernels package (read
    once a process: a few milliseconds)."""
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def _keyed_by_sources(dispatcher) -> None:
    """Key ``dispatcher``'s cache entries by :func:`sources_digest` too (see the module)."""
    cache = dispatcher._cache
    index_key = getattr(cache, "_index_key", None)
    if index_key is None:  # pragma: no cover - another numba's layout
        return
    cache._index_key = lambda sig, codegen: (*index_key(sig, codegen), sources_digest())


def _enabled() -> bool:
    return fcntl is not None and os.environ.get("TAPEGRAD_KERNEL_LOCK", "1") != "0"


class CompileLock:
    """An exclusive lock on ``path`` between processes (``flock``), re-entrant in its process.

    The lock file stays (removing it would race with a process about to lock it); the operating
    system releases the lock when its holder exits, however it exits.
    """

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._depth = 0

    def acquire(self, timeout: float) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds; whether it was taken."""
        if self._depth:
            self._depth += 1
            return True
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        deadline, pause = time.monotonic() + timeout, 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        self._fd, self._depth = fd, 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._depth > 0


def _lock_path(dispatcher) -> str:
    cache = dispatcher._cache
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    if index is None:  # another numba's layout: one lock for the whole cache folder
        index = os.path.join(cache.cache_path, "tapegrad-kernels")
    return index + ".lock"


_warned: set[str] = set()


def _guard(dispatcher) -> None:
    """Make ``dispatcher.compile`` hold the function's cache lock (see the module's doc)."""
    compile_unlocked = dispatcher.compile
    lock: list[CompileLock] = []  # made at the first compilation, when the cache path is known

    def compile(sig):
        # numba's own in-process lock first: one thread of this process compiles at a time,
        # so the file lock is never waited for by two threads of one process
        with global_compiler_lock:
            args, _ = sigutils.normalize_signature(sig)
            if tuple(args) in dispatcher.overloads or not _enabled():
                return compile_unlocked(sig)
            try:
                if not lock:
                    lock.append(CompileLock(_lock_path(dispatcher)))
                taken = lock[0].acquire(lock_timeout())
            except OSError:  # no lock file can be made there: numba cannot save there either
                return compile_unlocked(sig)
            if taken:
                try:
                    return compile_unlocked(sig)
                finally:
                    lock[0].release()
            return _compile_without_cache(dispatcher, compile_unlocked, sig, lock[0].path)

    dispatcher.compile = compile
    dispatcher._tapegrad_locked = True


def _compile_without_cache(dispatcher, compile_unlocked, sig, path: str):
    if path not in _warned:
        _warned.add(path)
        warnings.warn(
            f"tapegrad: another process has held the kernel cache lock {path} for over "
            f"{lock_timeout():g} s; compiling {dispatcher.py_func.__name__} without the disk "
            f"cache",
            RuntimeWarning,
            stacklevel=3,
        )
        sys.stderr.flush()
    saved = dispatcher._cache
    dispatcher._cache = NullCache()
    try:
        return compile_unlocked(sig)
    finally:
        dispatcher._cache = saved


def cached_jit(fn=None, **options):
    """``numba.njit(cache=True, **options)`` whose disk cache is safe across processes.

    Used as ``@cached_jit`` or ``@cached_jit(nogil=True, ...)`` like ``numba.njit``.
    """
    options.setdefault("cache", True)

    def make(f):
        dispatcher = numba.njit(**options)(f)
        if options["cache"]:
            _keyed_by_sources(dispatcher)
            _guard(dispatcher)
        return dispatcher

    return make(fn) if fn is not None else make
