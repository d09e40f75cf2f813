"""Kernel compilation is safe across processes: concurrent cold starts on one empty numba cache.

The campaign is ``benchmarks/cold_cache.py --rounds 20`` (README's reliability table); here two
rounds of 8 processes, and the lock's own behaviour: every cached kernel holds it, it excludes
another process, and a holder that never lets go costs a warning and an uncached compilation,
not a hang.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numba
import numpy as np

from tapegrad.autodiff.kernels import jit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import cold_cache  # noqa: E402


def _dispatchers(module):
    return [v for v in vars(module).values() if isinstance(v, numba.core.dispatcher.Dispatcher)]


def test_every_cached_kernel_holds_the_compile_lock():
    import tapegrad.autodiff.kernels.cpu as kernels
    from tapegrad.autodiff.kernels.cpu.pool import window_kernels

    modules = [
        importlib.import_module(f"{kernels.__name__}.{m.name}")
        for m in pkgutil.iter_modules(kernels.__path__)
    ]
    found = [d for m in modules for d in _dispatchers(m)] + list(window_kernels(2, 2, 2, 2, 1, 1))
    cached = [d for d in found if d._cache.__class__.__name__ != "NullCache"]
    assert len(cached) >= 20, len(cached)
    unlocked = [d.py_func.__qualname__ for d in cached if not getattr(d, "_tapegrad_locked", 0)]
    assert unlocked == [], f"made with numba.njit(cache=True), not cached_jit: {unlocked}"


_HOLD = "import sys, time; from tapegrad.autodiff.kernels.jit import CompileLock; "
_HOLD += "l = CompileLock(sys.argv[1]); assert l.acquire(5); print('held', flush=True); "
_HOLD += "time.sleep(float(sys.argv[2]))"


def _hold(path: str, seconds: float) -> subprocess.Popen:
    """Another process holding the lock at ``path`` for ``seconds``."""
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD, path, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


def test_the_lock_excludes_another_process_and_is_reentrant(tmp_path):
    path = str(tmp_path / "sub" / "f.nbi.lock")
    other = _hold(path, 30)
    try:
        lock = jit.CompileLock(path)
        t0 = time.monotonic()
        assert not lock.acquire(0.3)  # the other process holds it
        assert 0.3 <= time.monotonic() - t0 < 2
    finally:
        other.kill()
        other.wait()
    assert lock.acquire(2)  # its holder is gone: the system released it
    assert lock.acquire(0) and lock.held  # re-entrant (a kernel compiling its callee)
    lock.release()
    assert lock.held
    lock.release()
    assert not lock.held


def test_a_holder_that_never_lets_go_costs_a_warning_not_a_hang(tmp_path, monkeypatch):
    (tmp_path / "tg_lock_probe.py").write_text(
        textwrap.dedent(
            """
            from tapegrad.autodiff.kernels.jit import cached_jit

            @cached_jit(nogil=True)
            def twice(x):
                return x * 2
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("tg_lock_probe")
    path = jit._lock_path(probe.twice)
    other = _hold(path, 60)
    monkeypatch.setenv("TAPEGRAD_KERNEL_LOCK_TIMEOUT", "0.3")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            t0 = time.monotonic()
            assert probe.twice(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
            assert time.monotonic() - t0 < 20
    finally:
        other.kill()
        other.wait()
    messages = [str(w.message) for w in seen if w.category is RuntimeWarning]
    assert len(messages) == 1 and "held the kernel cache lock" in messages[0], messages
    assert "compiling twice without the disk cache" in messages[0]
    index = Path(path[: -len(".lock")])
    assert not index.exists()  # nothing was saved beside a lock it did not hold
    assert probe.twice._cache.__class__.__name__ != "NullCache"  # the cache is back for later


_PROBE = """
from tapegrad.autodiff.kernels.jit import cached_jit

def make(c):
    @cached_jit
    def add(x):
        return x + c

    return add
"""

# One process of the race: it compiles ``add`` with ``c`` = argv[2]; numba's save is held
# between choosing the data file's number and writing the index until the other process gets
# there too (or has finished, or 3 s pass), then the index and data writes are spaced so that
# the last index comes from process 2 and the last data file from process 1.
_RACER = """
import sys, time
from pathlib import Path
from numba.core import caching

folder, c = Path(sys.argv[1]), int(sys.argv[2])
cache_file = caching.IndexDataCacheFile
save_index, save_data = cache_file._save_index, cache_file._save_data

def held_index(self, overloads):
    (folder / f"at-{c}").touch()
    other, until = 3 - c, time.monotonic() + 3
    while not any((folder / f"{s}-{other}").exists() for s in ("at", "done")):
        if time.monotonic() > until:
            break
        time.sleep(0.005)
    time.sleep(0.2 * (c - 1))
    save_index(self, overloads)

def late_data(self, name, data):
    time.sleep(0.5 * (2 - c))
    save_data(self, name, data)

cache_file._save_index = held_index
cache_file._save_data = late_data
sys.path.insert(0, str(folder))
import probe
print(probe.make(c)(1.0))
(folder / f"done-{c}").touch()
"""


def _race(tmp_path, locked: bool) -> list[float]:
    """Two processes compile two variants of one kernel at once, racing as above; then a third
    loads both from the cache they wrote. The three processes' results for x = 1."""
    tmp_path.mkdir()
    (tmp_path / "probe.py").write_text(_PROBE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    env["TAPEGRAD_KERNEL_LOCK"] = "1" if locked else "0"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path), str(c)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for c in (1, 2)
    ]
    got = [float(p.communicate(timeout=120)[0]) for p in racers]
    load = "import sys; sys.path.insert(0, sys.argv[1]); import probe; "
    load += "print(probe.make(1)(1.0), probe.make(2)(1.0))"
    later = subprocess.run(
        [sys.executable, "-c", load, str(tmp_path)], env=env, capture_output=True, text=True
    )
    return got + [float(v) for v in later.stdout.split()]


def test_two_processes_racing_on_one_kernel_save_each_variant_apart(tmp_path):
    """numba's race made deterministic: without the lock both processes number their variant
    1, and the later process loads process 1's code for process 2's variant (x + 1 for
    x + 2: in a real kernel, code compiled for other types or constants). With it, the second
    process waits, finds the index process 1 wrote, and saves its variant as number 2."""
    assert _race(tmp_path / "locked", locked=True) == [2.0, 3.0, 2.0, 3.0]
    unlocked = _race(tmp_path / "unlocked", locked=False)
    assert unlocked[:2] == [2.0, 3.0]
    assert unlocked[2:] == [2.0, 2.0], (
        f"numba's cache no longer mixes up racing variants ({unlocked}): "
        "tapegrad.autodiff.kernels.jit's lock may no longer be needed"
    )


def test_eight_processes_starting_together_on_an_empty_cache():
    """2 rounds of 8 processes, each compiling every main kernel at the same moment on a fresh
    cache, then one process loading what they wrote: all exit 0 with the same losses."""
    t0 = time.perf_counter()
    res = cold_cache.campaign(rounds=2, procs=8, log=None)
    took = time.perf_counter() - t0
    failures = [e for r in res["details"] for e in r["errors"]]
    assert res["rounds_ok"] == 2, failures
    assert res["exit_codes"] == {"0": 18} and res["distinct_results"] == 1, res
    cpu = sum(r["cpu_seconds"] for r in res["details"])
    print(f"\n2 rounds of 8 cold starts: {took:.1f} s, {cpu:.1f} CPU s; all exit 0, one result")


_LOOPS = """
import numpy as np
from tapegrad.autodiff.kernels.cpu import optim, products
n = 1 << 16
p, g, m, v = (np.ones(n, np.float32) for _ in range(4))
scratch = (np.empty(n, np.float32), np.empty(n, np.float32))
kw = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0, decoupled=False, step=1)
optim.adam_update(p, g, m, v, None, scratch, **kw)
a = np.ones((256, 256))
products.matmul(a, a, np.empty_like(a))  # float64: OpenBLAS's pieces (no register blocks)
for loop in (optim._adam_parallel, products._parallel):
    print(loop.stats.cache_hits and "hit" or "compiled")
"""


def test_the_parallel_loops_load_from_the_cache_in_a_second_process(tmp_path):
    """``split_loops``' loops close over their body; numba's key for a closure pickles it, and
    a dispatcher pickles differently in every process: the loops were compiled again by every
    process (1-3 s each) and the cache grew by an entry each time. Keyed by the body's name and
    source, the second process loads them."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_NUM_THREADS="2")
    runs = [
        subprocess.run(
            [sys.executable, "-c", _LOOPS], env=env, capture_output=True, text=True, timeout=300
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.split() == ["compiled", "compiled"]
    assert runs[1].stdout.split() == ["hit", "hit"]
    indexes = sorted(tmp_path.rglob("loops.split_loops.locals.parallel-*.nbi"))
    data = sorted(tmp_path.rglob("loops.split_loops.locals.parallel-*.nbc"))
    assert len(indexes) == 1 and len(data) == 2, data  # one entry per body, not per process


_ELEMENTWISE = """
import numpy as np
from tapegrad.autodiff.kernels.cpu import special
n = special._PARALLEL_MIN
rng = np.random.default_rng(0)
x, y, g = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
got = {}
for name in ("relu", "relu_grad", "add", "gelu32"):
    out = np.empty(n, np.float32)
    args = {"relu": (x,), "relu_grad": (g, x), "add": (x, y), "gelu32": (x,)}[name]
    special._launch(name, *args, out)
    got[name] = out
want = {"relu": np.maximum(x, 0), "relu_grad": np.where(x > 0, g, 0), "add": x + y}
assert all(np.array_equal(got[k], v) for k, v in want.items()), "wrong results"
ref = np.empty(n, np.float32)
special.gelu_forward_reference(x, ref)
assert np.allclose(got["gelu32"], ref, rtol=1e-6, atol=1e-7), "wrong gelu"
print(" ".join(special._PARALLEL[k].stats.cache_hits and "hit" or "compiled" for k in got))
"""


def test_the_elementwise_parallel_loops_load_from_the_cache_in_a_second_process(tmp_path):
    """The elementwise kernels' parallel loops (``special._chunked``) close over their body as
    ``split_loops``' do: every process compiled the ones it used again (1.4 s for ReLU's two on
    seed-cnn's first step) and the cache grew by an entry each time. Keyed by their body, a second
    process loads all four, and each computes its own function (no loop runs another's body)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_NUM_THREADS="2")
    runs = [
        subprocess.run(
            [sys.executable, "-c", _ELEMENTWISE],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.split() == ["compiled"] * 4
    assert runs[1].stdout.split() == ["hit"] * 4
    data = sorted(tmp_path.rglob("special._chunked.locals.run-*.nbc"))
    assert len(data) == 4, data  # one entry per body, not per process


_STALE = """
import sys
import numpy as np
import tapegrad.autodiff.kernels.jit as jit
if sys.argv[1] == "edited":  # as if a kernel source file (a module a kernel inlines) had changed
    jit.sources_digest = lambda: "another version of the kernels' sources"
from tapegrad.autodiff.kernels.cpu import columns, optim
n = 1 << 16
p, g, m, v = (np.ones(n, np.float32) for _ in range(4))
scratch = (np.empty(n, np.float32), np.empty(n, np.float32))
kw = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0, decoupled=False, step=1)
optim.adam_update(p, g, m, v, None, scratch, **kw)
assert columns.all_finite(p)
for kernel in (optim._adam_parallel, columns.all_finite):
    print(kernel.stats.cache_hits and "hit" or "compiled")
"""


def test_a_kernel_cached_from_other_sources_is_compiled_again(tmp_path):
    """numba checks a cached function against its own file only: a kernel whose inner loops
    come from another module (``microkernels.py``'s intrinsics) loaded code built from that
    module's old version after an edit or an upgrade. Cache entries are keyed by a digest of all
    the kernels' sources too: a process whose digest differs compiles again, and one whose
    digest matches the first loads the first's code."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_NUM_THREADS="2")

    def run(version):
        r = subprocess.run(
            [sys.executable, "-c", _STALE, version],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert run("first") == ["compiled", "compiled"]
    assert run("edited") == ["compiled", "compiled"]
    assert run("first") == ["hit", "hit"]
