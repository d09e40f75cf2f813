"""Many ``python -m tapegrad`` processes for the price of one start-up.

Starting Python and importing tapegrad (NumPy, numba) costs about a CPU second per process, which
dominates a table of CLI mistakes that each fail in milliseconds. A :class:`ForkServer` is one
process that imports ``tapegrad.cli`` (what ``python -m tapegrad`` imports before its ``main``
runs) and then forks a child per command: each child is a process of its own, with its own
working folder, stdin on /dev/null, stdout and stderr in files, and runs ``tapegrad``'s
``__main__`` as ``python -m tapegrad`` would, ending through the interpreter's normal exit (exit
status, atexit handlers, flushed streams). The server reports each child's exit status and CPU
seconds (``wait4``), which count the command's own work, not the start-up.

Run as a script, this file is the server: one JSON request per line on stdin, one JSON answer
per line on stdout.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading


class ForkServer:
    """A running server (see the module docstring); :meth:`run` is one command, in turn."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.lock = threading.Lock()

    def run(self, argv: list[str], cwd, out, err) -> tuple[int, float]:
        """(exit status, CPU seconds) of ``python -m tapegrad *argv`` run in ``cwd`` with its
        stdout and stderr written to the files ``out`` and ``err``."""
        request = {"argv": argv, "cwd": str(cwd), "out": str(out), "err": str(err)}
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork server ended (status {self.proc.wait()})")
        result = json.loads(answer)
        return result["status"], result["cpu"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()


def _stream(fd: int, like: io.TextIOWrapper, line_buffering: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered, encoding=like.encoding, errors=like.errors, line_buffering=line_buffering
    )


def _child(request: dict) -> None:
    """In the forked child: become ``python -m tapegrad ARGV`` in the request's folder."""
    import runpy

    os.chdir(request["cwd"])
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = sys.__stdin__ = _stream(0, sys.stdin, False)
    sys.stdout = sys.__stdout__ = _stream(1, sys.stdout, False)
    sys.stderr = sys.__stderr__ = _stream(2, sys.stderr, True)
    sys.path[0] = os.getcwd()  # as with ``python -m``
    sys.argv = ["-m", *request["argv"]]
    # raises SystemExit (or the command's exception), which ends this process as it would end
    # a fresh ``python -m tapegrad``: the server's loop below never resumes in the child
    runpy.run_module("tapegrad", run_name="__main__", alter_sys=True)
    sys.exit(0)


def serve() -> None:
    import gc

    import tapegrad.cli  # noqa: F401  (what ``python -m tapegrad`` imports before main runs)

    # the imported modules' objects live as long as the process anyway: leaving them out of the
    # children's collections (at exit, above all) saves each child ~0.1 CPU s of copied pages
    # (frozen objects are hidden from gc.get_referrers, which tapegrad's in-place checks use; the
    # commands' models and graphs are all made in the child, after the freeze)
    gc.freeze()

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        print(json.dumps({"status": os.waitstatus_to_exitcode(status), "cpu": cpu}), flush=True)


if __name__ == "__main__":
    serve()
