"""What the micro-benchmarks measure: each benchmark's definition and inputs
(:data:`BENCHMARKS`), and each framework's implementation of them (:data:`FRAMEWORKS`). The
runner, the gradient check and the report are in :mod:`tapegrad.bench.micro`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

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
