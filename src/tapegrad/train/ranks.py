"""A run over MPI ranks: ``--ranks N`` relaunches the command under ``mpiexec``; each rank
finds its world and shares the machine's cores; rank 0's checks are met by every rank."""

from __future__ import annotations

import os
import sys

from .. import distributed
from ..distributed.launch import DEFAULT_RANK_TIMEOUT, THREAD_VARIABLES, run_ranks, threads_per_rank
from .checkpoint import CheckpointError
from .config import RunConfig, UserError
from .outputs import OutputError


def launch_ranks(config: RunConfig) -> int | None:
    """With ``--ranks N`` (N > 1) outside MPI: run this very command as N MPI ranks and return
    the job's exit status; None when this process should do the work itself."""
    ranks, under_mpi = config.ranks, distributed.launched_size()
    if ranks is None:
        return None
    if ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {ranks}")
    if under_mpi > 1:
        if ranks != under_mpi:
            raise UserError(f"--ranks {ranks}, but mpiexec started {under_mpi} ranks")
        return None
    if ranks == 1:
        return None
    if config.device not in (None, "cpu"):
        raise UserError(
            f"--device {config.device}: data-parallel training (--ranks) runs on the CPU"
        )
    if config.rank_timeout is not None and not config.rank_timeout > 0:
        raise UserError(
            f"--rank-timeout must be a positive number of seconds, got {config.rank_timeout}"
        )
    n = cpus()
    if ranks > n and not config.oversubscribe:
        print(
            f"tapegrad train: warning: --ranks {ranks} on {n} CPUs: ranks share "
            f"cores and run slower than {n} would (--oversubscribe to mean it)",
            file=sys.stderr,
            flush=True,
        )
    timeout = config.rank_timeout or DEFAULT_RANK_TIMEOUT
    return run_ranks(ranks, ["train", *without_ranks(config.argv)], "train", timeout)


def cpus() -> int:
    """CPUs this process may run on (its affinity, where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def without_ranks(argv) -> list[str]:
    """``argv`` without its ``--ranks N`` (what each rank is started with)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--ranks":
            skip = True
        elif not a.startswith("--ranks="):
            out.append(a)
    return out


def world():
    """The MPI world when this process is one of several ranks (else a single process)."""
    comm = distributed.world()
    if comm.distributed and not any(v in os.environ for v in THREAD_VARIABLES):
        import numba  # started by a bare mpiexec: share the machine's cores between its ranks

        numba.set_num_threads(min(threads_per_rank(comm.local_size()), numba.get_num_threads()))
    return comm


def threads() -> int:
    import numba

    return numba.get_num_threads()


def on_rank_0(comm, check) -> None:
    """Run ``check()`` on rank 0 alone (it reads or writes files rank 0 alone uses); under MPI
    a mistake it finds is raised on every rank alike, in rank 0's words."""
    if not comm.distributed:
        check()
        return
    error = None
    if comm.rank == 0:
        try:
            check()
        except (UserError, CheckpointError, OutputError) as e:
            error = str(e)
    error = comm.bcast(error)
    if error is not None:
        raise UserError(error, every_rank=True)
