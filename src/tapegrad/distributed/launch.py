"""``tapegrad train|bench --ranks N``: start N ranks with ``mpiexec`` and watch them.

The ranks get ``cores // N`` threads each (numba, OpenMP and BLAS thread counts are set in
their environment, before anything imports), so ranks x threads = cores. Each rank writes its
process id to a folder the launcher made; when a rank dies, ``mpiexec`` stops the others and
prints the dead process's id, and the launcher turns that id back into the rank's number.

A rank that stops answering without dying (stopped by SIGSTOP, frozen, starved) would leave the
others spinning in their next collective forever, and ``mpiexec`` sees nothing wrong. So each
rank also beats: a thread of its own touches its pid file every ``timeout / 6`` seconds (at
most every second), whatever its main thread is doing (a collective, a kernel, compilation).
The launcher's watchdog reads the files' ages; a rank still alive whose file is older than the
timeout (``--rank-timeout``, :data:`DEFAULT_RANK_TIMEOUT` seconds) is named in one line and the
job ends: the silent rank is killed, ``mpiexec`` stops the others, and the launcher exits
:data:`EXIT_STALLED`. Checkpoints are written atomically by rank 0 between steps, so the last one
is intact and ``--resume`` continues from it.
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

from .errors import DistributedError

THREAD_VARIABLES = (
    "NUMBA_NUM_THREADS",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
)
PID_DIR_VARIABLE = "TAPEGRAD_RANK_PIDS"
TIMEOUT_VARIABLE = "TAPEGRAD_RANK_TIMEOUT"
DEFAULT_RANK_TIMEOUT = 60.0
EXIT_STALLED = 124  # as timeout(1)
START_GRACE = 30.0  # seconds a rank may start after the first one, on top of the timeout
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
    """Under the launcher, note this rank's process id where the launcher looks for it, and
    start beating (see the module's doc)."""
    folder = os.environ.get(PID_DIR_VARIABLE)
    if folder:
        from ..serialization import atomic_file

        path = Path(folder, f"rank-{rank}.pid")
        try:
            with atomic_file(path) as f:  # never half a number
                f.write(str(os.getpid()).encode())
        except OSError:  # the launcher's folder is gone: nothing to report to
            return
        _start_heartbeat(path, rank_timeout_from_env())


def rank_timeout_from_env() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_VARIABLE, ""))
    except ValueError:
        return DEFAULT_RANK_TIMEOUT
    return value if value > 0 else DEFAULT_RANK_TIMEOUT


def heartbeat_interval(timeout: float) -> float:
    return min(1.0, max(timeout / 6, 0.02))


def _start_heartbeat(path: Path, timeout: float) -> None:
    """Touch ``path`` every :func:`heartbeat_interval` seconds from a daemon thread; at exit,
    leave ``rank-R.done`` beside it (a rank waiting in ``MPI_Finalize`` for slower ranks beats
    no more, and is not stalled)."""
    import atexit
    import threading

    interval = heartbeat_interval(timeout)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(interval):
            try:
                os.utime(path)
            except OSError:  # the launcher is gone
                return

    def finish() -> None:
        done.set()
        try:
            path.with_suffix(".done").touch()
        except OSError:
            pass

    threading.Thread(target=beat, name="tapegrad-heartbeat", daemon=True).start()
    atexit.register(finish)


def run_ranks(
    ranks: int, argv: list[str], command: str = "train", timeout: float = DEFAULT_RANK_TIMEOUT
) -> int:
    """Run ``python -m tapegrad ARGV`` as ``ranks`` MPI ranks; return the job's exit status.

    Standard output passes through line by line; if a rank dies, one line naming it follows
    ``mpiexec``'s own report. A rank silent for ``timeout`` seconds ends the job (exit
    :data:`EXIT_STALLED`), named in one line.
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
        env[TIMEOUT_VARIABLE] = repr(float(timeout))
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
        watchdog = Watchdog(proc, Path(pids), ranks, timeout)
        watchdog.start()
        dead_pid = exit_code = exit_string = None
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if watchdog.verdict is not None:
                    continue  # mpiexec's report of the rank the watchdog killed: said below
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
            watchdog.stop()
            for s, previous in relay.items():
                if previous is not None:
                    signal.signal(s, previous)
            if proc.poll() is None:  # leaving on an error of our own: take the ranks along
                proc.kill()
                proc.wait()
        if watchdog.verdict is not None:
            print(f"tapegrad {command}: {watchdog.verdict}", file=sys.stderr, flush=True)
            return EXIT_STALLED
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


class Watchdog:
    """Ends the job when a live rank's heartbeat is older than ``timeout``, or a rank has been
    stopped that long (see the module's doc); :attr:`verdict` then says which, in words.

    Ranks are known by their pid files, and before a rank wrote one, by the ``PMI_RANK`` in the
    environment of ``mpiexec``'s descendants (a rank stopped while it starts is found too).
    """

    def __init__(self, proc: subprocess.Popen, folder: Path, ranks: int, timeout: float):
        import threading

        self.proc, self.folder, self.ranks, self.timeout = proc, folder, ranks, timeout
        self.verdict: str | None = None
        self._pids: dict[int, int] = {}  # rank -> pid, found before its pid file
        self._stopped_since: dict[int, float] = {}  # pid -> when first seen stopped
        self._first_seen: float | None = None  # when the first rank's pid file appeared
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tapegrad-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        import time

        while not self._stop.wait(heartbeat_interval(self.timeout)):
            silent = self.check(time.time())
            if silent:
                self._end(silent)
                return

    def check(self, now: float) -> list[tuple[int, int | None, float]]:
        """(rank, pid, seconds silent) of every rank silent for longer than the timeout."""
        beats = {r: _heartbeat(self.folder, r) for r in range(self.ranks)}
        if any(b is None for b in beats.values()):
            self._discover()
        if self._first_seen is None and any(b is not None for b in beats.values()):
            self._first_seen = now
        silent = []
        for r, beat in beats.items():
            pid = beat[0] if beat is not None else self._pids.get(r)
            age = self._silence(pid, beat, now)
            if age is not None:
                silent.append((r, pid, age))
        return silent

    def _silence(self, pid: int | None, beat, now: float) -> float | None:
        state = _state(pid) if pid is not None else "unknown"
        if state == "stopped":
            # counted from when it was first seen stopped, even once it finished (a rank
            # stopped in MPI_Finalize holds the others there) or before it started beating
            since = self._stopped_since.setdefault(pid, now)
            last = beat[1] if beat is not None and beat[1] is not None else since
            return now - min(since, last) if now - since > self.timeout else None
        self._stopped_since.pop(pid, None)
        if beat is None:  # not started yet: the first rank's start plus the timeout and grace
            waited = now - self._first_seen if self._first_seen is not None else 0.0
            return waited if state != "gone" and waited > self.timeout + START_GRACE else None
        last = beat[1]
        if last is not None and state == "running" and now - last > self.timeout:
            return now - last
        return None

    def _discover(self) -> None:
        """Note the pids of ranks that have not written their pid file yet."""
        import psutil

        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return
        known = set(self._pids.values())
        for p in found:
            try:
                rank = p.environ().get("PMI_RANK") or p.environ().get("OMPI_COMM_WORLD_RANK")
                parent = p.ppid()
            except psutil.Error:
                continue
            if rank and rank.isdigit() and p.pid not in known and parent not in known:
                self._pids.setdefault(int(rank), p.pid)  # a rank's own children inherit it
                known.add(p.pid)

    def _end(self, silent: list) -> None:
        """Name the silent ranks, kill them (a stopped process dies of SIGKILL too), and make
        sure ``mpiexec`` and every rank follow within seconds."""
        import time

        names = ", ".join(
            f"rank {r} (pid {pid})" if pid is not None else f"rank {r} (never started)"
            for r, pid, _ in silent
        )
        quiet = max(age for *_, age in silent)
        self.verdict = (
            f"{names} stopped answering (no heartbeat for {quiet:.0f} s, --rank-timeout "
            f"{self.timeout:g}); stopped every rank"
        )
        for _, pid, _ in silent:
            if pid is not None:
                _kill(pid)
        deadline = time.monotonic() + 10
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:  # mpiexec did not stop the others: end them all
            for r in range(self.ranks):
                beat = _heartbeat(self.folder, r)
                pid = beat[0] if beat is not None else self._pids.get(r)
                if pid is not None:
                    _kill(pid)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass


def _heartbeat(folder: Path, rank: int) -> tuple[int, float | None] | None:
    """(pid, time of the last beat; None once the rank finished) of ``rank``, None before it
    started."""
    path = folder / f"rank-{rank}.pid"
    try:
        pid = int(path.read_text())
        beat = path.stat().st_mtime
    except (OSError, ValueError):
        return None
    return pid, None if path.with_suffix(".done").exists() else beat


def _state(pid: int) -> str:
    """ "running" (or sleeping), "stopped" (SIGSTOP, a debugger) or "gone" (exited, a zombie:
    a dead rank is ``mpiexec``'s to report)."""
    import psutil

    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return "gone"
    if status == psutil.STATUS_ZOMBIE:
        return "gone"
    return "stopped" if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP) else "running"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
