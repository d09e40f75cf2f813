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

Modules: ``errors`` (DistributedError), ``comm`` (the worlds and :func:`world`), ``failure``
(:func:`guard`, :func:`fail`), ``agreement`` (:func:`agree`, :func:`fingerprint`), ``averager``
(:class:`GradientAverager`), ``sharded`` and ``launch``. This file only re-exports.
"""

from __future__ import annotations

from .agreement import agree, fingerprint
from .averager import GradientAverager
from .comm import MPIWorld, SingleWorld, active, launched_rank, launched_size, shard, world
from .errors import DistributedError
from .failure import fail, guard, note

__all__ = [
    "DistributedError",
    "GradientAverager",
    "MPIWorld",
    "SingleWorld",
    "agree",
    "fail",
    "guard",
    "active",
    "fingerprint",
    "launched_rank",
    "launched_size",
    "note",
    "shard",
    "world",
]
