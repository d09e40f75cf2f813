"""``tapegrad train|bench --ranks N``: start N ranks with ``mpiexec`` and watch them.

The ranks get ``cores // N`` threads each (numba, OpenMP and BLAS thread counts are set in
their environment, before anything imports), so ranks x threads = cores. Each rank writes its
process id to a folder the launcher made; when a rank dies, ``mpiexec`` stops the others and
prints the dead process's id, and the launcher turns that id back into the rank's number.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from . import DistributedError

THREAD_VARIABLES = (
    "NUMBA_NUM_THREADS",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
)
PID_DIR_VARIABLE = "TAPEGRAD_RANK_PIDS"
_BANNER = re.compile(r"PID (\d+) RUNNING AT (\S+)")
_EXIT = re.compile(r"EXIT CODE: (\d+)")
_EXIT_STRING = re.compile(r"EXIT STRING: (.+?)\s*$")


def find_mpiexec() -> str | None:
    """``$TAPEGRAD_MPIEXEC``, the ``mpiexec`` beside this Python (the mpich wheel's), or PATH's."""
    explicit = os.environ.get("TAPEGRAD_MPIEXEC")
    if explicit is not None:
        return explicit or None  # set but empty: none, on purpose
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec")


def threads_per_rank(ranks: int, cores: int | None = None) -> int:
    """Threads for each of ``ranks`` ranks on a machine of ``cores`` cores (at least one)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(ranks, 1))


def thread_env(threads: int) -> dict[str, str]:
    """Environment that limits numba, OpenMP and BLAS to ``threads`` threads."""
    return dict.fromkeys(THREAD_VARIABLES, str(threads))


def record_pid(rank: int) -> None:
    """Under the launcher, note this rank's process id where the launcher looks for it."""
    folder = os.environ.get(PID_DIR_VARIABLE)
    if folder:
        from ..serialization import atomic_file

        try:
            with atomic_file(Path(folder, f"rank-{rank}.pid")) as f:  # never half a number
                f.write(str(os.getpid()).encode())
        except OSError:  # the launcher's folder is gone: nothing to report to
            pass


def run_ranks(ranks: int, argv: list[str], command: str = "train") -> int:
    """Run ``python -m tapegrad ARGV`` as ``ranks`` MPI ranks; return the job's exit status.

    Standard output passes through line by line; if a rank dies, one line naming it follows
    ``mpiexec``'s own report.
    """
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise DistributedError(
            f"--ranks {ranks} needs MPI's mpiexec, which was not found: "
            f"pip install 'tapegrad[mpi]' (mpi4py and mpich)"
        )
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise DistributedError(
            f"--ranks {ranks} needs mpi4py, which is not installed: pip install 'tapegrad[mpi]'"
        ) from None
    threads = threads_per_rank(ranks)
    with tempfile.TemporaryDirectory(prefix="tapegrad-ranks-") as pids:
        env = {**os.environ, **thread_env(threads), PID_DIR_VARIABLE: pids}
        cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "tapegrad", *argv]
        # mpiexec runs in a session of its own: a terminal's Ctrl-C (sent to the whole
        # foreground process group) reaches this process alone, which hands mpiexec exactly
        # one signal per signal received; mpiexec forwards it to every rank, and the ranks stop
        # together after the same step (see Trainer). Signals not relayed would reach the
        # ranks twice (directly and through mpiexec), the second of which stops at once.
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True
        )
        relay = {s: _relay_to(proc, s) for s in _RELAYED}
        dead_pid = exit_code = exit_string = None
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                if m := _BANNER.search(line):
                    dead_pid = int(m.group(1))
                elif (m := _EXIT.search(line)) and dead_pid is not None and exit_code is None:
                    exit_code = int(m.group(1))
                elif m := _EXIT_STRING.search(line):
                    exit_string = m.group(1)
            rc = proc.wait()
        finally:
            for s, previous in relay.items():
                if previous is not None:
                    signal.signal(s, previous)
            if proc.poll() is None:  # leaving on an error of our own: take the ranks along
                proc.kill()
                proc.wait()
        if rc != 0 and dead_pid is not None:
            rank = _rank_of(Path(pids), dead_pid)
            who = f"rank {rank} (pid {dead_pid})" if rank is not None else f"pid {dead_pid}"
            how = (
                f"died ({exit_string})"
                if exit_string
                else f"exited with status {exit_code}"
                if exit_code is not None
                else "ended abnormally"
            )
            print(
                f"tapegrad {command}: {who} {how}; mpiexec stopped every rank",
                file=sys.stderr,
                flush=True,
            )
    return rc if rc >= 0 else 128 - rc


_RELAYED = (signal.SIGINT, signal.SIGTERM)


def _relay_to(proc: subprocess.Popen, signum: int):
    """Make ``signum`` sent to this process go to ``proc`` instead; the previous handler (None
    outside the main thread, where handlers cannot be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, lambda s, frame: proc.send_signal(s))


def _rank_of(folder: Path, pid: int) -> int | None:
    for f in folder.glob("rank-*.pid"):
        try:
            if int(f.read_text()) == pid:
                return int(f.stem.split("-")[1])
        except (OSError, ValueError):
            continue
    return None
