"""No primitive's forward or VJP loops in Python over the elements.

Each covered primitive runs on one of its registered samples made 32 and 256 times larger (its
arrays tiled along one axis), forward and backward, under a profile hook that counts the Python
and builtin calls made and follows the interpreter's small-object blocks (``sys.
getallocatedblocks``) at every call. Array code makes the same calls at any size and keeps no
Python object per element; a Python loop over the elements makes more calls as the arrays grow,
and a ufunc made by ``np.frompyfunc`` (which calls a builtin per element without a profile
event) holds one Python float per element. Either fails here.

Covered: every broadcasting (elementwise) primitive, which must all be enlargeable, and the
primitives listed in ``MORE`` (reductions, softmax, matmul, convolution, pooling, ...). Kernels
whose inputs carry indices into other inputs (backward kernels, gathers, scans' saved states)
are left out: tiling their arrays would make the indices inconsistent.

Matrix products take one of three routes by their size (``kernels/cpu/products.py``: NumPy's,
NumPy's on one OpenBLAS thread, pieces over numba's threads), a choice made once per call. Each
primitive runs here with one route forced at both sizes: the pieces, and for the primitives
built on products the other two as well.
"""

import gc
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.graph import apply, gradients
from tapegrad.autodiff.kernels.cpu import pool, products
from tapegrad.autodiff.primitives import REGISTRY

SMALL, LARGE = 32, 256
MORE = [
    "arg_extreme",
    "argsort",
    "astype",
    "bce_with_logits",
    "bias_relu",
    "clip",
    "concatenate",
    "conv1d",
    "conv2d",
    "cumprod",
    "cumsum",
    "layer_norm",
    "log_softmax",
    "logcumsumexp",
    "logsumexp",
    "matmul",
    "max",
    "max_pool1d",
    "max_pool2d",
    "mean",
    "min",
    "prod",
    "relu_max_pool",
    "softmax",
    "softmax_backward",
    "stack",
    "sum",
]
COVERED = sorted({n for n, p in REGISTRY.items() if p.broadcasting} | set(MORE))
# (_MIN_FLOPS, _PARALLEL_FLOPS) forcing each route of the products
ROUTES = {"pieces": (0, 0), "numpy": (float("inf"),) * 2, "one-blas-thread": (0, float("inf"))}
CASES = [(n, "pieces") for n in COVERED] + [
    (n, r) for n in ("conv1d", "conv2d", "matmul") for r in ("numpy", "one-blas-thread")
]


def _tile(args, k: int, how: str):
    """The sample's arrays tiled ``k`` times along axis 0 ("all": every array; "widest": only
    those of the most dimensions, so that broadcast partners keep fitting) or the last axis."""
    nd = max((a.ndim for a in args if isinstance(a, np.ndarray)), default=0)
    out = []
    for a in args:
        if isinstance(a, np.ndarray) and a.ndim and a.size and (how != "widest" or a.ndim == nd):
            reps = [1] * a.ndim
            reps[-1 if how == "last" else 0] = k
            a = np.tile(a, reps)
        out.append(a)
    return out


def _size(args) -> int:
    return sum(a.size for a in args if isinstance(a, np.ndarray))


@pytest.fixture(scope="module", autouse=True)
def _older_objects_frozen():
    """Each measurement starts with a full collection; the objects alive before this module
    (the other tests' imports: PyTorch, JAX, ...) are left out of those (``gc.freeze``), which
    then collect this module's own garbage as before without walking the whole heap each time
    (in the full suite about four times this module's run time)."""
    # frozen objects are hidden from gc.get_referrers too, which tapegrad's in-place checks use
    # to find graph nodes: every model, tensor and graph here is made after the freeze
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


class _Profile:
    """Calls made and the most small-object blocks held above the start, while ``fn`` runs."""

    def __call__(self, frame, event, arg):
        self.calls += 1
        self.blocks = max(self.blocks, sys.getallocatedblocks() - self.base)

    def run(self, fn) -> tuple[int, int]:
        fn()  # warm: numba compiles, caches fill
        # no cyclic collection inside: its callbacks (other tests register some) would add calls
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        self.calls, self.blocks, self.base = 0, 0, sys.getallocatedblocks()
        sys.setprofile(self)
        try:
            fn()
        finally:
            sys.setprofile(None)
            if was_enabled:
                gc.enable()
        return self.calls, self.blocks


def _steps(prim, args, attrs):
    """The forward alone, and the VJPs of the differentiable float inputs (None if none)."""
    diff = [
        k
        for k, a in enumerate(args)
        if prim.differentiable
        and prim.differentiable_input(k)
        and isinstance(a, np.ndarray)
        and a.dtype.kind == "f"
    ]

    def forward():
        apply(prim, *args, **attrs)

    if not diff:
        return forward, None
    xs = [tg.tensor(args[k], requires_grad=True) for k in diff]
    full = list(args)
    for k, x in zip(diff, xs):
        full[k] = x
    y = apply(prim, *full, **attrs)
    y = y[0] if isinstance(y, tuple) else y
    cot = tg.tensor(np.ones(y.shape, y.dtype))

    def backward():
        gradients(y, xs, grad_outputs=cot, retain_graph=True, allow_unused=True)

    return forward, backward


def _enlargeable(prim):
    """(args at SMALL, args at LARGE, attrs) from the largest sample that runs when tiled."""
    best = None
    for sample in prim.samples(np.random.default_rng(0)):
        for how in ("all", "widest", "last"):
            small, large = _tile(sample.args, SMALL, how), _tile(sample.args, LARGE, how)
            if _size(large) < 4 * _size(small) or (best and _size(small) <= _size(best[0])):
                continue
            try:
                for args in (small, large):
                    for step in _steps(prim, args, sample.attrs):
                        if step is not None:
                            step()
            except Exception:  # noqa: BLE001 - tiling broke this sample's shapes: try another
                continue
            best = (small, large, sample.attrs)
            break
    return best


@pytest.mark.parametrize(("name", "route"), CASES)
def test_work_per_call_does_not_grow_with_the_arrays(name, route, monkeypatch):
    monkeypatch.setattr(products, "_MIN_FLOPS", ROUTES[route][0])
    monkeypatch.setattr(products, "_PARALLEL_FLOPS", ROUTES[route][1])
    # pooling's generic window loops throughout: a geometry's switch to its own loops after
    # enough windows is a compilation, which would fall in a measured call (and run traced)
    monkeypatch.setattr(pool, "SPECIALISE_AFTER", 1 << 62)
    prim = REGISTRY[name]
    found = _enlargeable(prim)
    assert found is not None, f"{name}: no sample can be enlarged by tiling; give it one"
    small, large, attrs = found
    grown = _size(large) - _size(small)
    profile = _Profile()
    for part, (a, b) in zip(
        ("forward", "VJP"), zip(_steps(prim, small, attrs), _steps(prim, large, attrs))
    ):
        if a is None:
            continue
        (calls_a, blocks_a), (calls_b, blocks_b) = profile.run(a), profile.run(b)
        assert calls_b == calls_a, (
            f"{name} {part}: {calls_a} calls at {_size(small)} elements, {calls_b} at "
            f"{_size(large)}: a Python loop over elements"
        )
        assert blocks_b - blocks_a < grown // 4, (
            f"{name} {part}: holds {blocks_b - blocks_a} more Python objects for {grown} more "
            "elements: per-element Python (np.frompyfunc, np.vectorize, lists)"
        )
