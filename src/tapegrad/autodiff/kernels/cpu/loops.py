"""Loops over independent slices, made twice: serial, and split over numba's threads.

``split_loops(body)`` gives ``(serial, parallel)``, each ``run(n, *args)`` calling
``body(*args, i)`` for every ``i`` in ``range(n)`` (``body`` is jitted but not
``inline="always"``: the loops call it as a closure). Each ``i`` runs whole on one thread, so
the two give the same bits whatever the thread count; a kernel picks one by size
(:func:`threaded`).
"""

from __future__ import annotations

import numba

from ..jit import cached_jit


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

    return serial, parallel


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

    return serial, parallel


def threaded(slices: int, size: int, min_size: int) -> bool:
    """Whether ``slices`` slices of ``size`` entries in all are worth numba's threads (the thread
    count asked first: the same calls at any size, which tests count)."""
    return numba.get_num_threads() > 1 and slices > 1 and size >= min_size
