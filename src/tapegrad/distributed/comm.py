"""This process's communicator: rank, size and the collectives tapegrad needs.

Launched by ``mpiexec -n N`` (N > 1), :func:`world` is an :class:`MPIWorld` over
``MPI.COMM_WORLD`` whose errors are fatal to the whole job; otherwise a :class:`SingleWorld`
whose collectives do nothing, so a plain run never imports mpi4py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import DistributedError
from .launch import record_pid

# What MPI launchers put in each rank's environment: MPICH/Hydra and Slurm (PMI), Open MPI.
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_rank() -> int:
    """This process's rank according to the MPI launcher's environment (0 when not under MPI)."""
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"):
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def launched_size() -> int:
    """How many ranks the MPI launcher started, from its environment (1 when not under MPI)."""
    for name in _SIZE_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


class SingleWorld:
    """One process, no MPI: every collective is the identity."""

    rank = 0
    size = 1
    distributed = False

    def allreduce(self, buf: np.ndarray, op: str = "sum") -> np.ndarray:
        """Reduce ``buf`` in place across ranks (``op`` is ``"sum"`` or ``"max"``)."""
        return buf

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Rank ``root``'s ``obj`` on every rank (pickled)."""
        return obj

    def bcast_array(self, buf: np.ndarray, root: int = 0) -> None:
        """Overwrite ``buf`` in place with rank ``root``'s."""

    def allgather(self, obj: Any) -> list:
        """Every rank's ``obj``, in rank order."""
        return [obj]

    def allgather_slices(self, buf: np.ndarray, counts: Sequence[int]) -> None:
        """In place: rank r's contiguous ``counts[r]`` elements of flat ``buf`` to every rank."""

    def barrier(self) -> None:
        """Wait for every rank."""

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now with exit status ``code``."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def local_size(self) -> int:
        """Ranks sharing this machine (this one included)."""
        return 1

    def describe(self) -> str:
        return "1 process"


class MPIWorld(SingleWorld):
    """The ranks of ``MPI.COMM_WORLD``; any MPI error ends the whole job (ERRORS_ARE_FATAL)."""

    distributed = True

    def __init__(self, comm=None):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        # mpi4py turns MPI errors into Python exceptions by default; one rank handling an
        # exception while the others sit in a collective would hang the job. Fatal it is.
        self.comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX}
        self._local: int | None = None
        self._gather_specs: dict = {}

    def allreduce(self, buf: np.ndarray, op: str = "sum") -> np.ndarray:
        self.comm.Allreduce(self._mpi.IN_PLACE, buf, op=self._ops[op])
        return buf

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def bcast_array(self, buf: np.ndarray, root: int = 0) -> None:
        self.comm.Bcast(buf, root=root)

    def allgather(self, obj: Any) -> list:
        return self.comm.allgather(obj)

    def allgather_slices(self, buf: np.ndarray, counts: Sequence[int]) -> None:
        spec = self._gather_specs.get((id(buf), tuple(counts)))
        if spec is None or spec[0] is not buf:  # built once per buffer: no allocation per step
            displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
            spec = (buf, [buf, (list(counts), displs), self._mpi._typedict[buf.dtype.char]])
            self._gather_specs[(id(buf), tuple(counts))] = spec
        self.comm.Allgatherv(self._mpi.IN_PLACE, spec[1])

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)

    def local_size(self) -> int:
        if self._local is None:
            node = self.comm.Split_type(self._mpi.COMM_TYPE_SHARED)
            self._local = node.Get_size()
            node.Free()
        return self._local

    def describe(self) -> str:
        return f"rank {self.rank} of {self.size}"


_WORLD: SingleWorld | None = None


def active() -> SingleWorld | None:
    """The communicator :func:`world` made, or None before it was asked for."""
    return _WORLD


def world(required: bool = False) -> SingleWorld:
    """This process's communicator (made once).

    Under an MPI launcher with more than one rank, or with ``required``, it is an
    :class:`MPIWorld` (mpi4py is imported, which initialises MPI); otherwise a
    :class:`SingleWorld`. Without mpi4py in the first case: :class:`DistributedError`.
    """
    global _WORLD
    if _WORLD is not None and (_WORLD.distributed or not required):
        return _WORLD
    n = launched_size()
    if n > 1 or required:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            where = f"launched as one of {n} MPI ranks" if n > 1 else "MPI was asked for"
            raise DistributedError(
                f"{where}, but mpi4py is not installed: pip install 'tapegrad[mpi]' "
                f"(mpi4py and mpich)"
            ) from None
        _WORLD = MPIWorld()
        record_pid(_WORLD.rank)
    else:
        _WORLD = SingleWorld()
    return _WORLD


def shard(n: int, rank: int, size: int) -> slice:
    """Rank ``rank``'s contiguous part of ``n`` items split over ``size`` ranks (sizes differ by
    at most one; with ``n < size`` some ranks get none)."""
    return slice(n * rank // size, n * (rank + 1) // size)
