"""Data-parallel training over MPI: rank, size and the few collectives tapegrad needs.

MPI (through mpi4py, ``pip install 'tapegrad[mpi]'``) is the transport; tapegrad only decides
what to reduce and when. :func:`world` is the process's communicator:

* launched by ``mpiexec -n N`` (N > 1), an :class:`MPIWorld` over ``MPI.COMM_WORLD`` whose
  errors are fatal to the whole job (no rank waits forever on a dead peer's collective);
* otherwise a :class:`SingleWorld` whose collectives do nothing, so a plain run never imports
  mpi4py and behaves exactly as without this module.

Launched under MPI without mpi4py installed, :func:`world` raises :class:`DistributedError`
with the command that installs it. :func:`guard` makes an exception in one rank print the rank
and abort every rank; :func:`agree` makes ranks that were started differently (preset, data,
tapegrad version) refuse to run, in one line. The gradient averaging the trainer uses is
:class:`GradientAverager`, the optimiser step split across ranks is in ``sharded.py``, and the
launcher behind ``tapegrad train --ranks N`` is in ``launch.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .errors import DistributedError

__all__ = [
    "DistributedError",
    "GradientAverager",
    "MPIWorld",
    "SingleWorld",
    "agree",
    "guard",
    "active",
    "fingerprint",
    "launched_rank",
    "launched_size",
    "shard",
    "world",
]

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
        from .launch import record_pid

        record_pid(_WORLD.rank)
    else:
        _WORLD = SingleWorld()
    return _WORLD


def shard(n: int, rank: int, size: int) -> slice:
    """Rank ``rank``'s contiguous part of ``n`` items split over ``size`` ranks (sizes differ by
    at most one; with ``n < size`` some ranks get none)."""
    return slice(n * rank // size, n * (rank + 1) // size)


def guard(comm: SingleWorld) -> None:
    """Make an uncaught exception in this rank print which rank failed and abort every rank.

    Without it the other ranks would wait forever in their next collective. A no-op for a
    single process.
    """
    if not comm.distributed or getattr(sys.excepthook, "_tapegrad_guard", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        message = f"tapegrad: {kind.__name__}: {value}"
        note(comm, message)  # the line that matters first, then the traceback
        previous(kind, value, tb)
        fail(comm, message, noted=True)

    hook._tapegrad_guard = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def note(comm: SingleWorld, message: str) -> None:
    """Print ``message`` naming this rank as the one that failed."""
    print(
        f"{message} (rank {comm.rank} of {comm.size} failed; stopping every rank)",
        file=sys.stderr,
        flush=True,
    )


def fail(comm: SingleWorld, message: str, code: int = 1, noted: bool = False) -> None:
    """Print ``message`` naming this rank, then end every rank with status ``code``.

    It waits a moment before aborting: ``mpiexec`` forwards a rank's output asynchronously and
    drops what it has not read when the job is aborted, which lost the message now and then.
    """
    import time

    if not noted:
        note(comm, message)
    time.sleep(0.5)
    comm.abort(code)


def agree(comm: SingleWorld, facts: dict[str, Any], what: str = "start") -> None:
    """Raise :class:`DistributedError` on every rank unless all ranks hold the same ``facts``.

    Collective: every rank must call it at the same point. The message names the first fact
    that differs and the values of rank 0 and of the first rank that differs from it.
    """
    if not comm.distributed:
        return
    every = comm.allgather(facts)
    first = every[0]
    keys = list(first) + sorted({k for f in every for k in f} - first.keys())
    for key in keys:
        for r, other in enumerate(every[1:], 1):
            if other.get(key) != first.get(key):
                raise DistributedError(
                    f"ranks disagree on {key}: rank 0 has {first.get(key)!r}, rank {r} has "
                    f"{other.get(key)!r}; every rank must {what} with the same settings"
                )


def fingerprint(*arrays: np.ndarray) -> str:
    """A short digest of arrays' shapes, dtypes and bytes (which data a rank loaded)."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype.str}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


class GradientAverager:
    """Averages parameter gradients across ranks with one in-place allreduce per step.

    It owns one flat, preallocated buffer: every parameter's gradient is a view of it (the first
    :attr:`n_grad` elements), then one slot for stop requests and a last one for the step's
    loss. A compiled plan that finds it (see
    ``tapegrad.autodiff.plan.reduce_gradients``) accumulates gradients straight into those
    views, so a step copies nothing; in eager mode gradients are copied in first. Every slot
    is scaled by :attr:`weight`, this rank's share of the global batch (``n_local /
    n_global``), so the sum over ranks is the gradient of the mean loss over the whole global
    batch, and the loss slot becomes that mean loss (:attr:`loss`), the same on every rank: a
    non-finite loss on any rank is seen by all. A caller that seeds the backward pass with
    :attr:`seed` (``loss.backward(averager.seed)``, a 0-d array holding the weight) gets the
    gradients scaled for free and sets :attr:`seeded` so they are not scaled twice.

    A rank that sets :attr:`asks_stop` before a step (a signal asked it to stop) has it summed
    into the stop slot; afterwards :attr:`stop_requested` is true on every rank if any asked,
    so all ranks can stop after the same step without a collective of their own.
    """

    def __init__(self, comm: SingleWorld, params: Sequence):
        self.comm = comm
        self.params = list(params)
        dtypes = {p.data.dtype for p in self.params}
        if len(dtypes) != 1:
            raise DistributedError(
                f"gradient averaging needs parameters of one dtype, got {sorted(map(str, dtypes))}"
            )
        dtype = dtypes.pop()
        total = sum(p.data.size for p in self.params)
        self.n_grad = total
        self.flat = np.zeros(total + 2, dtype=dtype)
        self.views: list[np.ndarray] = []
        offset = 0
        for p in self.params:
            self.views.append(self.flat[offset : offset + p.data.size].reshape(p.data.shape))
            offset += p.data.size
        self.seed = np.ones((), dtype=dtype)
        self.seeded = False
        self.weight = 1.0 / comm.size
        self.loss = float("nan")
        self.asks_stop = False
        self.stop_requested = False

    @property
    def weight(self) -> float:
        """This rank's share of the global batch (the seed of a seeded backward pass)."""
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        self._weight = float(value)
        self.seed[()] = value

    def buffers(self, tensors: Iterable) -> dict[int, np.ndarray]:
        """``id(tensor) -> view`` for those of ``tensors`` that are our parameters: where a
        compiled plan accumulates their gradients."""
        mine = {id(p): v for p, v in zip(self.params, self.views)}
        return {id(t): mine[id(t)] for t in tensors if id(t) in mine}

    def __call__(self, loss: np.ndarray) -> None:
        """Average gradients and ``loss`` (this rank's mean loss) across ranks, in place."""
        for p, view in zip(self.params, self.views):
            g = p._grad
            if g is view:
                continue
            if g is None:
                view.fill(0)
            else:
                np.copyto(view, g)
            p._grad = view
        flat = self.flat
        if self.seeded:
            flat[-1] = loss * self._weight  # the gradients came scaled from the backward pass
        else:
            flat[-1] = loss
            if self._weight != 1.0:
                np.multiply(flat, self._weight, out=flat)
        flat[-2] = 1.0 if self.asks_stop else 0.0
        self.comm.allreduce(flat)
        self.loss = float(flat[-1])
        self.stop_requested = bool(flat[-2] > 0)
