"""Gradient micro-benchmarks after seed 004's Table I: how long one gradient evaluation takes.

Five small functions, each differentiated by every framework on the same float32 inputs:

========================  ============================================================  =======
benchmark                 function (gradient taken with respect to the first names)       sizes
========================  ============================================================  =======
``sincos``                ``sin(cos(x))``, wrt ``x``                                      scalar
``loop``                  ``r = 1; repeat 100 times: r = r * sin(x)``, wrt ``x``         scalar
``logsumexp``             ``log(sum(exp(x)))``, wrt ``x``                                 100
``logistic_regression``   ``mean(log(1 + exp(-y * (X @ w + b))))``, wrt ``w, b``         100x10
``mlp``                   ``mean softmax-CE(W2 @ relu(W1 @ x + b1) + b2, labels)``,      100x784
                          wrt ``W1, b1, W2, b2``                                          ->128->10
========================  ============================================================  =======

``BENCHMARKS[name].definition`` holds the exact wording, sizes and inputs; every result carries
it. The functions are tiny on purpose: they measure the cost of the differentiation machinery
(recording, dispatch, the backward sweep), which is what the table compared. ``loop`` keeps the
shape of the table's loop benchmark (a running product with one ``sin`` and one multiply per
iteration, so a tape records 200 scalar operations); ``logsumexp`` uses 100 elements so the
body is a vector operation that is still dominated by per-operation overhead; ``mlp`` is the
``mlp`` preset's network (784-128-10, ReLU) on one batch of the preset's size, 100.

Each framework computes the gradients its idiomatic way:

- ``tapegrad``: ``tg.grad(f, argnums=...)`` over tapegrad operations, eager.
- ``torch``: eager PyTorch, ``torch.autograd.grad(f(...), params)``.
- ``jax``: ``jax.jit(jax.grad(f, argnums=...))``, each call ending in ``block_until_ready``.
- ``autograd`` (HIPS): ``autograd.grad(f, argnum=...)`` over ``autograd.numpy``.

All four run in float32 (HIPS autograd keeps float32 arrays as float32, so no framework needs
float64). A compiled tapegrad is one more entry in :data:`FRAMEWORKS` that reuses the tapegrad
functions (see :func:`_tapegrad_build`'s ``transform``).

Timing (:func:`run`): every framework's gradients are first checked against tapegrad's on the
same inputs (:func:`check_gradients`; a mismatch raises :class:`GradientMismatchError`, because
a fast wrong gradient must never be reported). Then per benchmark: a warm-up (which also
triggers JAX's compilation), a calibration that picks a call count per framework so one sample
lasts about ``0.2 s`` (at least 10 calls), then ``repeats`` samples in which the frameworks
alternate, their order rotating from sample to sample. A sample's value is its mean time per
call; the result is the median over samples, with the min and max as the spread. The whole run
is pinned to ``threads`` CPU threads (default 1): CPU affinity for the process, plus each
library's own setting (``torch.set_num_threads``, NumPy's OpenBLAS, ``XLA_FLAGS``).

``python -m tapegrad.bench.micro [--frameworks tapegrad,torch,jax,autograd] [--repeats 7]
[--quick] [--threads 1] [--json PATH]`` prints the Markdown table (about a minute for all
four frameworks; ``--quick`` is a smoke run of a few seconds whose numbers mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..blas import threads_setter

# -- the benchmarks ------------------------------------------------------------------------------

LOOP_ITERATIONS = 100
LOGSUMEXP_SIZE = 100
LOGREG_SAMPLES, LOGREG_FEATURES = 100, 10
MLP_BATCH, MLP_IN, MLP_HIDDEN, MLP_OUT = 100, 784, 128, 10


@dataclass(frozen=True)
class Benchmark:
    """One micro-benchmark: its documented definition and its float32 inputs.

    ``make_inputs(rng)`` returns the arguments in call order, the differentiated ones (``wrt``)
    first; every framework's function takes them in that order.
    """

    name: str
    definition: str
    make_inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    wrt: tuple[str, ...]


def _f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _sincos_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": _f32(0.5)}


def _loop_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": _f32(1.2)}


def _logsumexp_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": _f32(rng.standard_normal(LOGSUMEXP_SIZE))}


def _logreg_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n, d = LOGREG_SAMPLES, LOGREG_FEATURES
    return {
        "w": _f32(0.1 * rng.standard_normal(d)),
        "b": _f32(0.1),
        "X": _f32(rng.standard_normal((n, d))),
        "y": _f32(np.where(rng.random(n) < 0.5, -1.0, 1.0)),
    }


def _mlp_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def uniform(fan_in, shape):
        bound = 1.0 / math.sqrt(fan_in)
        return _f32(rng.uniform(-bound, bound, shape))

    return {
        "W1": uniform(MLP_IN, (MLP_HIDDEN, MLP_IN)),
        "b1": uniform(MLP_IN, (MLP_HIDDEN,)),
        "W2": uniform(MLP_HIDDEN, (MLP_OUT, MLP_HIDDEN)),
        "b2": uniform(MLP_HIDDEN, (MLP_OUT,)),
        "x": _f32(rng.random((MLP_BATCH, MLP_IN))),
        "labels": rng.integers(0, MLP_OUT, MLP_BATCH).astype(np.int64),
    }


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark(
            "sincos",
            "f(x) = sin(cos(x)) for a float32 scalar x = 0.5; gradient wrt x.",
            _sincos_inputs,
            ("x",),
        ),
        Benchmark(
            "loop",
            f"r = 1; repeat {LOOP_ITERATIONS} times: r = r * sin(x); f(x) = r, for a float32 "
            f"scalar x = 1.2; gradient wrt x. A Python loop of {2 * LOOP_ITERATIONS} scalar "
            "operations (sin and multiply); jax.jit traces it into one unrolled program.",
            _loop_inputs,
            ("x",),
        ),
        Benchmark(
            "logsumexp",
            f"f(x) = log(sum(exp(x))) written as those three operations, for x of "
            f"{LOGSUMEXP_SIZE} float32 entries drawn from N(0, 1); gradient wrt x.",
            _logsumexp_inputs,
            ("x",),
        ),
        Benchmark(
            "logistic_regression",
            f"loss = mean(log(1 + exp(-y * (X @ w + b)))) (log(1 + exp(.)) is each framework's "
            f"softplus / logaddexp(0, .)), for X of shape ({LOGREG_SAMPLES}, {LOGREG_FEATURES}) "
            f"from N(0, 1), labels y in {{-1, +1}} (fair coin), w ({LOGREG_FEATURES},) from "
            "N(0, 0.1^2), "
            "scalar b = 0.1; all float32; gradient wrt w and b.",
            _logreg_inputs,
            ("w", "b"),
        ),
        Benchmark(
            "mlp",
            f"The mlp preset's 2-layer MNIST MLP on one batch: logits = relu(x @ W1.T + b1) "
            f"@ W2.T + b2 with W1 ({MLP_HIDDEN}, {MLP_IN}), b1 ({MLP_HIDDEN},), W2 ({MLP_OUT}, "
            f"{MLP_HIDDEN}), b2 ({MLP_OUT},) drawn uniformly from +-1/sqrt(fan_in); loss = mean "
            f"softmax cross-entropy against integer labels; x ({MLP_BATCH}, {MLP_IN}) uniform in "
            "[0, 1) (synthetic pixels); all float32; gradient wrt W1, b1, W2, b2.",
            _mlp_inputs,
            ("W1", "b1", "W2", "b2"),
        ),
    ]
}


# -- the frameworks ------------------------------------------------------------------------------

Step = Callable[[], Sequence]  # computes the gradients (finished) in ``wrt`` order


@dataclass(frozen=True)
class Framework:
    """A framework under test. ``build(benchmark, inputs)`` returns a zero-argument callable
    computing that benchmark's gradients to completion; ``requires`` are the modules it needs
    (a framework whose module is missing is skipped, with the reason in the result)."""

    name: str
    requires: tuple[str, ...]
    build: Callable[[Benchmark, dict[str, np.ndarray]], Step]
    version_of: str = field(default="")


# tapegrad -----------------------------------------------------------------------------------


def _tapegrad_functions() -> dict[str, Callable]:
    import tapegrad as tg
    from tapegrad.nn import functional as F

    def sincos(x):
        return tg.sin(tg.cos(x))

    def loop(x):
        r = 1.0
        for _ in range(LOOP_ITERATIONS):
            r = r * tg.sin(x)
        return r

    def logsumexp(x):
        return tg.log(tg.sum(tg.exp(x)))

    def logistic_regression(w, b, X, y):
        return tg.mean(tg.softplus(-y * (X @ w + b)))

    def mlp(W1, b1, W2, b2, x, labels):
        h = F.relu(F.linear(x, W1, b1))
        return F.cross_entropy(F.linear(h, W2, b2), labels)

    return locals()


def _tapegrad_build(
    bench: Benchmark, inputs: dict[str, np.ndarray], transform: Callable | None = None
) -> Step:
    """tapegrad's gradient function for ``bench``. ``transform`` wraps the gradient function
    (the hook for a compiled tapegrad: ``transform=tapegrad.compile``)."""
    import tapegrad as tg

    f = _tapegrad_functions()[bench.name]
    k = len(bench.wrt)
    g = tg.grad(f, argnums=tuple(range(k)))
    if transform is not None:
        g = transform(g)
    values = list(inputs.values())
    # Differentiated arguments go in as ndarrays (tg.grad makes them leaves); the constants are
    # made tensors once, outside the timed call, as a user would.
    args = tuple(values[:k]) + tuple(tg.tensor(v) if v.dtype.kind == "f" else v for v in values[k:])
    return lambda: g(*args)


def _tapegrad_compiled_build(bench: Benchmark, inputs: dict[str, np.ndarray]) -> Step:
    """tapegrad with ``tapegrad.compile``: the differentiated inputs are leaf tensors made once
    (like a model's parameters), the compiled function runs forward and ``backward()``, and
    the gradients are read from ``.grad`` (buffers of the plan, refilled on every call)."""
    import tapegrad as tg

    f = _tapegrad_functions()[bench.name]
    k = len(bench.wrt)
    values = list(inputs.values())
    leaves = [tg.tensor(v, requires_grad=True) for v in values[:k]]
    consts = tuple(values[k:])

    @tg.compile
    def step(*rest):
        for leaf in leaves:
            leaf.grad = None
        loss = f(*leaves, *rest)
        loss.backward()
        return loss

    def call():
        step(*consts)
        return [leaf.grad for leaf in leaves]

    return call


# PyTorch ------------------------------------------------------------------------------------


def _torch_functions() -> dict[str, Callable]:
    import torch
    import torch.nn.functional as F

    def sincos(x):
        return torch.sin(torch.cos(x))

    def loop(x):
        r = 1.0
        for _ in range(LOOP_ITERATIONS):
            r = r * torch.sin(x)
        return r

    def logsumexp(x):
        return torch.log(torch.sum(torch.exp(x)))

    def logistic_regression(w, b, X, y):
        return torch.mean(F.softplus(-y * (X @ w + b)))

    def mlp(W1, b1, W2, b2, x, labels):
        h = F.relu(F.linear(x, W1, b1))
        return F.cross_entropy(F.linear(h, W2, b2), labels)

    return locals()


def _torch_build(bench: Benchmark, inputs: dict[str, np.ndarray]) -> Step:
    import torch

    f = _torch_functions()[bench.name]
    k = len(bench.wrt)
    args = [torch.from_numpy(np.array(v)) for v in inputs.values()]
    params = [a.requires_grad_() for a in args[:k]]

    def step():
        return torch.autograd.grad(f(*args), params)

    return step


# JAX ----------------------------------------------------------------------------------------


def _jax_functions() -> dict[str, Callable]:
    import jax
    import jax.numpy as jnp

    def sincos(x):
        return jnp.sin(jnp.cos(x))

    def loop(x):
        r = 1.0
        for _ in range(LOOP_ITERATIONS):
            r = r * jnp.sin(x)
        return r

    def logsumexp(x):
        return jnp.log(jnp.sum(jnp.exp(x)))

    def logistic_regression(w, b, X, y):
        return jnp.mean(jax.nn.softplus(-y * (X @ w + b)))

    def mlp(W1, b1, W2, b2, x, labels):
        h = jax.nn.relu(x @ W1.T + b1)
        logp = jax.nn.log_softmax(h @ W2.T + b2, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    return locals()


def _jax_build(bench: Benchmark, inputs: dict[str, np.ndarray]) -> Step:
    import jax
    import jax.numpy as jnp

    f = _jax_functions()[bench.name]
    k = len(bench.wrt)
    g = jax.jit(jax.grad(f, argnums=tuple(range(k))))
    args = [
        jnp.asarray(v, dtype=jnp.int32 if v.dtype.kind in "iu" else v.dtype)
        for v in inputs.values()
    ]

    def step():
        return jax.block_until_ready(g(*args))

    return step


# HIPS autograd ------------------------------------------------------------------------------


def _autograd_functions() -> dict[str, Callable]:
    import autograd.numpy as anp

    def sincos(x):
        return anp.sin(anp.cos(x))

    def loop(x):
        r = 1.0
        for _ in range(LOOP_ITERATIONS):
            r = r * anp.sin(x)
        return r

    def logsumexp(x):
        return anp.log(anp.sum(anp.exp(x)))

    def logistic_regression(w, b, X, y):
        return anp.mean(anp.logaddexp(0.0, -y * (anp.dot(X, w) + b)))

    def mlp(W1, b1, W2, b2, x, labels):
        h = anp.maximum(anp.dot(x, W1.T) + b1, 0.0)
        z = anp.dot(h, W2.T) + b2
        m = anp.max(z, axis=1, keepdims=True)
        logp = z - m - anp.log(anp.sum(anp.exp(z - m), axis=1, keepdims=True))
        return -anp.mean(logp[np.arange(z.shape[0]), labels])

    return locals()


def _autograd_build(bench: Benchmark, inputs: dict[str, np.ndarray]) -> Step:
    import autograd

    f = _autograd_functions()[bench.name]
    k = len(bench.wrt)
    g = autograd.grad(f, argnum=tuple(range(k)))
    args = tuple(np.array(v) for v in inputs.values())
    return lambda: g(*args)


FRAMEWORKS: dict[str, Framework] = {
    fw.name: fw
    for fw in [
        Framework("tapegrad", ("tapegrad",), _tapegrad_build, "tapegrad"),
        Framework("tapegrad-compiled", ("tapegrad",), _tapegrad_compiled_build, "tapegrad"),
        Framework("torch", ("torch",), _torch_build, "torch"),
        Framework("jax", ("jax", "jaxlib"), _jax_build, "jax"),
        Framework("autograd", ("autograd",), _autograd_build, "autograd"),
    ]
}
REFERENCE = "tapegrad"  # every framework's gradients are checked against this one's
PEERS = ("torch", "jax", "autograd")  # the ratio columns: tapegrad's time over each of these


# -- correctness ---------------------------------------------------------------------------------

RTOL = 1e-4  # float32 arithmetic in different orders: agreement to about 1e-4 relative
ATOL_SCALE = 1e-5  # absolute slack, relative to the largest gradient entry (for entries near 0)


class GradientMismatchError(RuntimeError):
    """A framework's gradient disagrees with tapegrad's on a micro-benchmark."""


def compare_gradients(bench: Benchmark, framework: str, got: Sequence, reference: Sequence) -> None:
    """Raise :class:`GradientMismatchError` unless ``got`` matches ``reference`` entry by entry
    (within float32 tolerance), naming the benchmark, the argument, the worst entry and both
    values."""
    if len(got) != len(bench.wrt):
        raise GradientMismatchError(
            f"micro-benchmark {bench.name!r}: {framework} returned {len(got)} gradients, "
            f"expected {len(bench.wrt)} (wrt {', '.join(bench.wrt)})"
        )
    for name, g, r in zip(bench.wrt, got, reference):
        g = np.asarray(g, dtype=np.float64)
        r = np.asarray(r, dtype=np.float64)
        if g.shape != r.shape:
            raise GradientMismatchError(
                f"micro-benchmark {bench.name!r}: {framework}'s gradient wrt {name} has shape "
                f"{g.shape}, {REFERENCE}'s has shape {r.shape}"
            )
        atol = ATOL_SCALE * max(float(np.max(np.abs(r), initial=0.0)), 1e-30)
        excess = np.abs(g - r) - (atol + RTOL * np.abs(r))
        if not np.all(np.isfinite(g)) or np.any(excess > 0):
            bad = np.where(np.isfinite(g), excess, np.inf)
            idx = np.unravel_index(int(np.argmax(bad)), g.shape) if g.ndim else ()
            raise GradientMismatchError(
                f"micro-benchmark {bench.name!r}: {framework}'s gradient wrt {name} differs from "
                f"{REFERENCE}'s at index {tuple(int(i) for i in idx)}: {framework} "
                f"{g[idx]!r}, {REFERENCE} {r[idx]!r} (allowed |diff| <= "
                f"{atol:.3g} + {RTOL:g} * |{REFERENCE}|)"
            )


def _to_numpy(grads: Sequence) -> list[np.ndarray]:
    out = []
    for g in grads:
        if hasattr(g, "detach"):  # torch tensor
            g = g.detach().cpu().numpy()
        out.append(np.array(g))
    return out


def check_gradients(steps: dict[str, Step], bench: Benchmark) -> dict[str, list[np.ndarray]]:
    """Run each framework's step once and compare its gradients with :data:`REFERENCE`'s
    (which must be among ``steps``). Returns the gradients by framework."""
    grads = {name: _to_numpy(step()) for name, step in steps.items()}
    reference = grads[REFERENCE]
    for name, g in grads.items():
        if name != REFERENCE:
            compare_gradients(bench, name, g, reference)
    return grads


# -- threads -------------------------------------------------------------------------------------


@contextlib.contextmanager
def pinned_threads(n: int, frameworks: Sequence[str]) -> Iterator[list[str]]:
    """Pin this process to ``n`` CPU threads for the duration (and restore afterwards).

    Yields notes about anything that could not be pinned. Environment variables cover libraries
    loaded later (``XLA_FLAGS`` must be set before JAX starts its CPU backend)."""
    notes: list[str] = []
    restore: list[Callable[[], None]] = []
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        old = os.environ.get(var)
        os.environ[var] = str(n)
        restore.append(
            lambda var=var, old=old: (
                os.environ.__setitem__(var, old) if old is not None else os.environ.pop(var, None)
            )
        )
    if hasattr(os, "sched_setaffinity"):
        old_cpus = os.sched_getaffinity(0)
        if n < len(old_cpus):
            os.sched_setaffinity(0, sorted(old_cpus)[:n])
            restore.append(lambda: os.sched_setaffinity(0, old_cpus))
    else:
        notes.append("CPU affinity is not available on this platform")
    blas = threads_setter()
    if blas is not None:
        setter, getter = blas
        old_blas = getter()
        setter(n)
        restore.append(lambda: setter(old_blas))
    else:
        notes.append("NumPy's OpenBLAS thread count could not be set (library not found)")
    if "torch" in frameworks and importlib.util.find_spec("torch") is not None:
        import torch

        old_torch = torch.get_num_threads()
        torch.set_num_threads(n)
        restore.append(lambda: torch.set_num_threads(old_torch))
        with contextlib.suppress(RuntimeError):  # only settable before torch's first parallel op
            torch.set_num_interop_threads(n)
    if "jax" in frameworks:
        if "jax" in sys.modules:
            notes.append(
                "jax was imported before the micro-benchmarks pinned threads; its XLA CPU thread "
                "pool may not follow XLA_FLAGS (CPU affinity still applies)"
            )
        flags = os.environ.get("XLA_FLAGS")
        if "intra_op_parallelism_threads" not in (flags or ""):
            extra = f"intra_op_parallelism_threads={n}"
            if n == 1:
                extra = "--xla_cpu_multi_thread_eigen=false " + extra
            os.environ["XLA_FLAGS"] = ((flags or "") + " " + extra).strip()
            # JAX reads the flags once, when its CPU backend starts (during the run); restoring
            # them keeps them from leaking into subprocesses started later.
            restore.append(
                lambda: (
                    os.environ.__setitem__("XLA_FLAGS", flags)
                    if flags is not None
                    else os.environ.pop("XLA_FLAGS", None)
                )
            )
    try:
        yield notes
    finally:
        for undo in reversed(restore):
            undo()


# -- timing --------------------------------------------------------------------------------------


def _seconds_per_call(step: Step, calls: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls


def _calibrate(step: Step, target_s: float, min_calls: int) -> int:
    """Calls per sample so a sample lasts about ``target_s``: measured on a short burst."""
    calls, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            step()
        elapsed = time.perf_counter() - start
        if elapsed >= target_s / 10 or calls >= 1 << 20:
            break
        calls *= 4
    per_call = max(elapsed / calls, 1e-9)
    return max(min_calls, math.ceil(target_s / per_call))


def _versions(names: Sequence[str]) -> dict[str, str]:
    out = {}
    for name in names:
        dist = FRAMEWORKS[name].version_of
        version = getattr(sys.modules.get(dist), "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                version = "unknown"
        out[name] = str(version)
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def _missing(fw: Framework) -> str | None:
    for mod in fw.requires:
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install 'tapegrad[bench]')"
    return None


def run(
    frameworks: list[str],
    repeats: int = 7,
    quick: bool = False,
    *,
    threads: int = 1,
    benchmarks: Sequence[str] | None = None,
    seed: int = 0,
) -> dict:
    """Check, then time, every benchmark's gradient in every framework.

    Returns ``{"benchmarks": {name: {framework: {"median_us", "min_us", "max_us", "calls"}}},
    "definitions": {name: str}, "threads": int, ...}`` with also ``frameworks`` (those timed),
    ``skipped`` ({framework: why}), ``notes``, ``versions``, ``repeats``, ``quick``,
    ``machine``. ``quick`` is a smoke run (at most 3 samples of about 5 ms each). Missing peer
    packages are skipped, not fatal; gradients that disagree with tapegrad's raise
    :class:`GradientMismatchError` before anything is timed.
    """
    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        raise ValueError(
            f"micro-benchmarks: unknown framework(s) {unknown}; choose from {list(FRAMEWORKS)}"
        )
    names = list(BENCHMARKS) if benchmarks is None else list(benchmarks)
    bad = [b for b in names if b not in BENCHMARKS]
    if bad:
        raise ValueError(
            f"micro-benchmarks: unknown benchmark(s) {bad}; choose from {list(BENCHMARKS)}"
        )
    if repeats < 1:
        raise ValueError(f"micro-benchmarks: repeats must be >= 1, got {repeats}")
    if threads < 1:
        raise ValueError(f"micro-benchmarks: threads must be >= 1, got {threads}")

    frameworks = list(dict.fromkeys(frameworks))  # keep order, drop repeats
    skipped = {fw: why for fw in frameworks if (why := _missing(FRAMEWORKS[fw])) is not None}
    timed = [fw for fw in frameworks if fw not in skipped]
    samples = min(repeats, 3) if quick else repeats
    target_s, min_calls, warmup = (0.005, 3, 2) if quick else (0.2, 10, 5)

    result: dict = {
        "benchmarks": {},
        "definitions": {b: BENCHMARKS[b].definition for b in names},
        "threads": threads,
        "frameworks": timed,
        "skipped": skipped,
        "notes": [f"{fw} skipped: {why}" for fw, why in skipped.items()],
        "versions": {},
        "repeats": samples,
        "quick": quick,
        "dtype": "float32",
        "machine": _machine(),
    }
    with pinned_threads(threads, timed) as notes:
        result["notes"].extend(notes)
        rng = np.random.default_rng(seed)
        for bname in names:
            bench = BENCHMARKS[bname]
            inputs = bench.make_inputs(rng)
            builders = [REFERENCE] + [fw for fw in timed if fw != REFERENCE]
            steps = {fw: FRAMEWORKS[fw].build(bench, inputs) for fw in builders}
            check_gradients(steps, bench)
            steps = {fw: steps[fw] for fw in timed}
            for step in steps.values():
                for _ in range(warmup):
                    step()
            calls = {fw: _calibrate(step, target_s, min_calls) for fw, step in steps.items()}
            times: dict[str, list[float]] = {fw: [] for fw in timed}
            for r in range(samples):
                k = r % len(timed) if timed else 0
                for fw in timed[k:] + timed[:k]:
                    times[fw].append(_seconds_per_call(steps[fw], calls[fw]))
            result["benchmarks"][bname] = {
                fw: {
                    "median_us": statistics.median(ts) * 1e6,
                    "min_us": min(ts) * 1e6,
                    "max_us": max(ts) * 1e6,
                    "calls": calls[fw],
                }
                for fw, ts in times.items()
            }
    result["versions"] = _versions(timed)
    return result


# -- report --------------------------------------------------------------------------------------


def _fmt(us: float) -> str:
    if us >= 100:
        return f"{us:,.0f}"
    if us >= 10:
        return f"{us:.1f}"
    return f"{us:.2f}"


def markdown(result: dict) -> str:
    """The result as Markdown: one row per benchmark, one column per framework (median
    microseconds per gradient, min-max over samples in brackets), tapegrad's ratio to each
    peer, then the exact definitions and the run's settings."""
    benches = result["benchmarks"]
    fws: list[str] = result.get("frameworks") or list(
        dict.fromkeys(fw for row in benches.values() for fw in row)
    )
    ours = [fw for fw in (REFERENCE, "tapegrad-compiled") if fw in fws]
    peers = [p for p in fws if p in PEERS] if ours else []
    pairs = [(a, p) for a in ours for p in peers]
    header = ["benchmark"] + [f"{fw} (µs)" for fw in fws] + [f"{a}/{p}" for a, p in pairs]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for bname, row in benches.items():
        cells = [f"`{bname}`"]
        for fw in fws:
            t = row.get(fw)
            cells.append(
                "n/a"
                if t is None
                else f"{_fmt(t['median_us'])} [{_fmt(t['min_us'])}–{_fmt(t['max_us'])}]"
            )
        for ours_fw, p in pairs:
            a, b = row.get(ours_fw), row.get(p)
            cells.append(
                "n/a" if a is None or b is None else f"{a['median_us'] / b['median_us']:.2f}×"
            )
        lines.append("| " + " | ".join(cells) + " |")
    out = [
        "Gradient evaluation time per call: median over "
        f"{result.get('repeats', '?')} samples [min–max], in microseconds; "
        f"{result['threads']} thread(s); {result.get('dtype', 'float32')}"
        + (" (quick smoke run: not a measurement)" if result.get("quick") else "")
        + ". Ratios above 1 mean tapegrad is slower.",
        "",
        *lines,
        "",
        "Definitions:",
        "",
    ]
    out += [f"- `{name}`: {text}" for name, text in result["definitions"].items()]
    versions = result.get("versions") or {}
    if versions:
        out += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."]
    if result.get("machine"):
        out += [f"Machine: {result['machine']}."]
    for note in result.get("notes", []):
        out += [f"Note: {note}."]
    return "\n".join(out) + "\n"


# -- command line --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tapegrad.bench.micro``: run the micro-benchmarks and print the table."""
    parser = argparse.ArgumentParser(
        prog="python -m tapegrad.bench.micro",
        description="Gradient micro-benchmarks (seed 004, Table I): tapegrad vs PyTorch, JAX "
        "and HIPS autograd.",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated, from {','.join(FRAMEWORKS)} (default: all)",
    )
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=7, help="timed samples per framework")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for every framework")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny samples")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(
        [f.strip() for f in args.frameworks.split(",") if f.strip()],
        repeats=args.repeats,
        quick=args.quick,
        threads=args.threads,
        benchmarks=[b.strip() for b in args.benchmarks.split(",") if b.strip()],
    )
    if args.json:
        from ..serialization import atomic_file

        with atomic_file(args.json) as fh:
            fh.write((json.dumps(result, indent=2) + "\n").encode())
    sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
