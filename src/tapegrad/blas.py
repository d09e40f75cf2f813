"""The BLAS NumPy computes tapegrad's matrix products with (OpenBLAS in NumPy's wheels): which
kernels it runs on this CPU, and its thread count.

OpenBLAS picks its kernels by the CPU model it recognises; on a CPU it does not know (a newer
model, or a virtual machine that hides the model, as on the machines tapegrad is benchmarked
on) it falls back to its AVX2 ("Haswell") kernels even where the CPU has AVX-512. Measured on
an AVX-512 AMD EPYC (one thread, float32): (100, 784) x (784, 128) 156 us with the fallback
against 91 us with the AVX-512 ("SkylakeX") kernels, 2048^3 128 against 240 GFLOP/s.

OpenBLAS reads ``OPENBLAS_CORETYPE`` once, when NumPy is first imported, so
:func:`prefer_avx512` runs at the top of ``import tapegrad``: if NumPy is not loaded yet, the
variable is not set, and the CPU has the AVX-512 subsets the SkylakeX kernels use, it sets
``OPENBLAS_CORETYPE=SkylakeX`` (inherited by processes tapegrad starts: MPI ranks, bench
workers). Setting ``OPENBLAS_CORETYPE`` yourself (``Haswell`` to reproduce AVX2 rounding) wins;
a program that imports NumPy before tapegrad keeps what OpenBLAS chose (``tapegrad info``
shows it).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable

# the instruction subsets OpenBLAS's SkylakeX kernels use
AVX512 = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})


def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def prefer_avx512() -> str | None:
    """Set ``OPENBLAS_CORETYPE=SkylakeX`` where it can take effect and the CPU can run it;
    return the value set, or None when nothing was changed."""
    if (
        "numpy" in sys.modules
        or "OPENBLAS_CORETYPE" in os.environ
        or platform.system() != "Linux"
        or platform.machine() not in ("x86_64", "AMD64")
        or not AVX512 <= _cpu_flags()
    ):
        return None
    os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    return "SkylakeX"


# What tapegrad sets for the idle workers of numba's OpenMP pool, unless the user has set either
# variable (read when numba first runs a parallel kernel, so NumPy imported first is no
# matter): after a parallel region a worker spins ~100,000 times (about a millisecond) before
# it sleeps. tapegrad's matrix products run on numba's pool too (``kernels/cpu/products.py``),
# so within a training step the next parallel region finds its workers awake: sleeping
# workers (``OMP_WAIT_POLICY=PASSIVE``, tapegrad's setting before) had to be woken for every
# region, ~100 us each in a virtual machine. OpenMP throttles the spin to 1,000 where the
# process runs more threads than there are cores. OpenBLAS's own workers, which also spin
# (``OPENBLAS_THREAD_TIMEOUT``), are left to the user: tapegrad's large products do not wake
# them. Measured in BENCHMARKS.md ("One thread pool").
IDLE_THREADS = {"GOMP_SPINCOUNT": "100000"}
# a user's choice of these wins over tapegrad's setting
USER_CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# the variables this process set (not the user): benchmark peers start without them
SET_HERE: dict[str, str] = {}


def set_idle_threads() -> dict[str, str]:
    """Set :data:`IDLE_THREADS`' variables unless the user has set one of
    :data:`USER_CHOICES`; return those set."""
    if not any(var in os.environ for var in USER_CHOICES):
        for var, value in IDLE_THREADS.items():
            os.environ[var] = SET_HERE[var] = value
    return dict(SET_HERE)


def describe_idle() -> str:
    """How the thread pools' idle workers behave here: each variable and who set it
    (OpenBLAS's spin time only when someone set it)."""
    parts = []
    for var in (*USER_CHOICES, "OPENBLAS_THREAD_TIMEOUT"):
        value = os.environ.get(var)
        if value is None:
            if var in IDLE_THREADS:
                parts.append(f"{var} unset")
            continue
        parts.append(f"{var}={value} ({'tapegrad' if SET_HERE.get(var) == value else 'yours'})")
    return ", ".join(parts)


def _openblas() -> tuple[ctypes.CDLL, str] | None:
    """The OpenBLAS that NumPy has loaded (found among the process's mapped libraries) and its
    symbols' name pattern."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern in ("scipy_openblas_{}64_", "openblas_{}64_", "openblas_{}"):
            if hasattr(lib, pattern.format("get_num_threads")):
                return lib, pattern
    return None


def threads_setter() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """Setter and getter of OpenBLAS's thread count (NumPy reads ``OPENBLAS_NUM_THREADS`` only
    when it is first imported); None where NumPy does not use OpenBLAS."""
    found = _openblas()
    if found is None:
        return None
    lib, pattern = found
    setter = getattr(lib, pattern.format("set_num_threads"))
    getter = getattr(lib, pattern.format("get_num_threads"))
    setter.argtypes, setter.restype = [ctypes.c_int], None
    getter.argtypes, getter.restype = [], ctypes.c_int
    return setter, getter


def gemm_symbols() -> dict[str, int] | None:
    """Addresses of NumPy's OpenBLAS ``cblas_sgemm`` and ``cblas_dgemm`` in their 64-bit-integer
    (ILP64) builds, keyed by dtype name (compiled kernels call them: ``kernels/cpu/gemm.py``);
    None where NumPy's BLAS is not such an OpenBLAS (a 32-bit-integer build, MKL)."""
    import numpy  # noqa: F401  (loads OpenBLAS)

    found = _openblas()
    if found is None or not found[1].endswith("64_"):
        return None
    lib, pattern = found
    prefix = pattern[: -len("openblas_{}64_")]  # "scipy_" in NumPy's wheels, else ""
    out = {}
    for dtype, name in (("float32", "sgemm"), ("float64", "dgemm")):
        fn = getattr(lib, f"{prefix}cblas_{name}64_", None)
        if fn is None:
            return None
        out[dtype] = ctypes.cast(fn, ctypes.c_void_p).value
    return out


def core() -> str | None:
    """The kernels OpenBLAS runs here (``Haswell``, ``SkylakeX``, ...), None if unknown."""
    import numpy  # noqa: F401  (loads OpenBLAS)

    found = _openblas()
    if found is None:
        return None
    lib, pattern = found
    get = getattr(lib, pattern.format("get_corename"), None)
    if get is None:
        return None
    get.restype = ctypes.c_char_p
    return get().decode()


def describe() -> str:
    """NumPy's BLAS as tapegrad uses it: OpenBLAS's kernels here and who chose them."""
    name = core()
    if name is None:
        return "not OpenBLAS (its kernels unknown)"
    chosen = os.environ.get("OPENBLAS_CORETYPE")
    return f"OpenBLAS, {name} kernels" + (f" (OPENBLAS_CORETYPE={chosen})" if chosen else "")
