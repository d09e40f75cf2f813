"""ARCHITECTURE.md's checklist for adding a primitive, exercised: an elementwise primitive (one
definition: forward, VJP written with primitives, reference, samples) and a kernel-backed one
(the same plus a compiled kernel its forward calls) are registered here and pass every check the
registry test runs on the built-in ones: forward against the reference, compiled == eager bit
for bit, VJP against finite differences, and a differentiable VJP (second derivatives)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numba
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.kernels import cpu as cpu_kernels
from tapegrad.autodiff.kernels.dispatch import kernels_for
from tapegrad.autodiff.primitives import REGISTRY, Sample, primitive
from tapegrad.autodiff.primitives import samples as S
from tapegrad.autodiff.primitives.registry import run

_spec = importlib.util.spec_from_file_location(
    "registry_checks", Path(__file__).with_name("test_registry.py")
)
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)


# -- 1. an elementwise primitive: one file -------------------------------------------------------
def _softsign(x, out=None):
    return np.divide(x, 1 + np.abs(x), out=out)


def _softsign_vjp(g, out, x):
    # written with primitives (run / operators), so it is differentiable and traceable
    return g / (1 + run(REGISTRY["abs"], x)) ** 2


def _make_softsign():
    return primitive(
        "softsign_example",
        _softsign,
        (_softsign_vjp,),
        reference=lambda x: x / (1 + np.abs(x)),
        samples=S.unary(gap=0.1),  # away from |x|'s kink at 0
        broadcasting=True,
        doc="x / (1 + |x|) (an example of the checklist).",
    )


# -- 2. a kernel-backed primitive: the primitive and its kernel ----------------------------------
@numba.njit(cache=False, nogil=True)
def _half_square_loop(x, out):  # pragma: no cover - compiled (kernels/cpu/<name>.py in the library)
    for i in range(x.size):
        out[i] = 0.5 * x[i] * x[i]


def _half_square_kernel(x, out) -> None:
    """The CPU namespace's function (in the library: exported by ``kernels/cpu/__init__.py``,
    and under the same name by ``kernels/cuda/__init__.py``)."""
    _half_square_loop(x.reshape(-1), out.reshape(-1))


def _half_square(x, out=None):
    out = np.empty_like(x) if out is None else out
    if x.flags.c_contiguous and out.flags.c_contiguous and x.dtype.kind == "f":
        kernels_for(x).half_square_example(x, out)  # the kernel of x's device
    else:  # what the kernel cannot take: the same arithmetic in NumPy
        np.multiply(np.multiply(x, 0.5), x, out=out)
    return out


def _make_half_square():
    return primitive(
        "half_square_example",
        _half_square,
        (lambda g, out, x: g * x,),
        reference=lambda x: 0.5 * x * x,
        samples=lambda rng: [Sample((S.values(rng, s),)) for s in [(3, 4), (5,), (2, 1, 3)]],
        broadcasting=True,
        doc="x * x / 2 through a compiled kernel (an example of the checklist).",
    )


@pytest.fixture(scope="module")
def added():
    made = [_make_softsign(), _make_half_square()]
    cpu_kernels.half_square_example = _half_square_kernel
    yield {p.name: p for p in made}
    del cpu_kernels.half_square_example  # the namespace and the registry as they were
    for p in made:
        del REGISTRY[p.name]


@pytest.mark.parametrize("name", ["softsign_example", "half_square_example"])
def test_a_new_primitive_passes_the_registry_checks(added, name):
    prim = added[name]
    assert REGISTRY[name] is prim
    for i in range(len(prim.samples(np.random.default_rng(0)))):
        checks.test_forward_matches_reference(name, i)
        for dtype in (np.float64, np.float32):
            checks.test_compiled_equals_eager(name, i, dtype)
        checks.test_vjp_matches_finite_differences(name, i)
        checks.test_vjp_is_differentiable(name, i)


def test_a_new_primitive_is_an_operation_like_any_other(added):
    x = tg.tensor(np.array([[-2.0, 0.5], [1.5, -0.25]]), requires_grad=True)
    y = added["half_square_example"](added["softsign_example"](x)).sum()
    y.backward()
    s = x.data / (1 + np.abs(x.data))
    np.testing.assert_allclose(y.item(), (0.5 * s * s).sum())
    np.testing.assert_allclose(x.grad, s / (1 + np.abs(x.data)) ** 2)
