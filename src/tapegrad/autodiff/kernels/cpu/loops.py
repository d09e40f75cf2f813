"""Loops over independent slices, made twice: serial, and split over numba's threads.

``split_loops(body)`` gives ``(serial, parallel)``, each ``run(n, *args)`` calling
``body(*args, i)`` for every ``i`` in ``range(n)`` (``body`` is jitted but not
``inline="always"``: the loops call it as a closure). Each ``i`` runs whole on one thread, so
the two give the same bits whatever the thread count; a kernel picks one by size
(:func:`threaded`). Any other loop that closes over a jitted body is cached by
:func:`keyed_by_body` (else every process compiles it again).
"""

from __future__ import annotations

import hashlib

import numba

from .. import jit
from ..jit import cached_jit


def keyed_by_body(loops: tuple, body, opts: dict) -> tuple:
    """``loops`` with their disk cache keyed by ``body``'s name and the kernels' sources.

    numba keys a cached closure by its closed-over values, pickled; a dispatcher pickles with a
    random per-process UUID (and the OpenBLAS externals a kernel calls pickle differently in
    each process), so these loops never found their cached code: every process compiled each
    loop again on its first call (1-3 s apiece) and added one more entry to the cache. The key
    is the loop's bytecode, the body's module, name and options, and the hash of every kernel
    source file (``jit.sources_digest``: the body's own and the modules it inlines, such as
    ``microkernels.py``), so an edited body or helper gets new loops."""
    py = body.py_func
    identity = f"{py.__module__}.{py.__qualname__}:{sorted(opts.items())!r}"
    body_key = hashlib.sha256(identity.encode()).hexdigest()
    for loop in loops:
        cache = getattr(loop, "_cache", None)
        if cache is None or not hasattr(cache, "_index_key"):  # pragma: no cover - no disk cache
            continue
        keys = (hashlib.sha256(loop.py_func.__code__.co_code).hexdigest(), body_key)
        cache._index_key = lambda sig, codegen, keys=keys: (
            sig,
            codegen.magic_tuple(),
            keys,
            jit.sources_digest(),
        )
    return loops


def split_loops(body, **opts):
    """(serial, parallel) loops of ``body`` over its last argument (see the module)."""

    @cached_jit(**opts)
    def serial(n, *args):  # pragma: no cover - compiled
        for i in range(n):
            body(*args, i)

    @cached_jit(parallel=True, **opts)
    def parallel(n, *args):  # pragma: no cover - compiled
        for i in numba.prange(n):
            body(*args, i)

    return keyed_by_body((serial, parallel), body, opts)


def thread_loops(body, **opts):
    """(serial, parallel) loops like :func:`split_loops`'s, ``body(t, *args, i)`` also given
    the number ``t`` of the thread that runs it (0 in the serial loop, below
    ``numba.get_num_threads()`` in the parallel one): the index of its own scratch buffers."""

    @cached_jit(**opts)
    def serial(n, *args):  # pragma: no cover - compiled
        for i in range(n):
            body(0, *args, i)

    @cached_jit(parallel=True, **opts)
    def parallel(n, *args):  # pragma: no cover - compiled
        for i in numba.prange(n):
            body(numba.get_thread_id(), *args, i)

    return keyed_by_body((serial, parallel), body, opts)


def threaded(slices: int, size: int, min_size: int) -> bool:
    """Whether ``slices`` slices of ``size`` entries in all are worth numba's threads (the thread
    count asked first: the same calls at any size, which tests count)."""
    return numba.get_num_threads() > 1 and slices > 1 and size >= min_size
