"""One registry, one test: every primitive's forward against its NumPy reference, and its VJP
against float64 central finite differences, on the samples the primitive declares."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.primitives import REGISTRY

CASES = [
    (name, i)
    for name, prim in sorted(REGISTRY.items())
    for i in range(len(prim.samples(np.random.default_rng(0))) if prim.samples else 1)
]
DIFF_CASES = [(name, i) for name, i in CASES if REGISTRY[name].differentiable]


def _samples(prim):
    assert prim.samples is not None, f"primitive {prim.name} declares no samples"
    samples = prim.samples(np.random.default_rng(0))
    assert samples, f"primitive {prim.name} declares an empty sample list"
    return samples


def test_every_primitive_has_samples_and_reference():
    for name, prim in REGISTRY.items():
        _samples(prim)
        assert prim.reference is not None, f"primitive {name} declares no NumPy reference"


@pytest.mark.parametrize("name,i", CASES)
def test_forward_matches_reference(name, i):
    prim = REGISTRY[name]
    sample = _samples(prim)[i]
    out = tg.autodiff.graph.apply(prim, *sample.args, **sample.attrs)
    out = out[0] if isinstance(out, tuple) else out
    ref = np.asarray(prim.reference(*sample.args, **sample.attrs))
    assert out.shape == ref.shape, f"{name}: shape {out.shape} vs reference {ref.shape}"
    np.testing.assert_allclose(out.data, ref, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name,i", DIFF_CASES)
def test_vjp_matches_finite_differences(name, i):
    prim = REGISTRY[name]
    sample = _samples(prim)[i]
    diff = [
        k
        for k, a in enumerate(sample.args)
        if prim.differentiable_input(k) and np.asarray(a).dtype.kind == "f"
    ]
    assert diff, f"{name}: sample {i} has no differentiable input"

    def f(*xs):
        args = list(sample.args)
        for k, x in zip(diff, xs):
            args[k] = x
        return tg.autodiff.graph.apply(prim, *args, **sample.attrs)

    report = tg.gradcheck(
        f, *[sample.args[k] for k in diff], tol=sample.atol, raise_exception=False
    )
    assert report.ok, f"{name} sample {i}: {report}"


def test_float32_forward_keeps_dtype():
    for name, prim in REGISTRY.items():
        sample = _samples(prim)[0]
        args = [
            a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a
            for a in sample.args
        ]
        out = tg.autodiff.graph.apply(prim, *args, **sample.attrs)
        if out.dtype.kind == "f" and name != "astype":
            assert out.dtype == np.float32, f"{name} turned float32 into {out.dtype}"


HIGHER_CASES = [(name, i) for name, i in DIFF_CASES if REGISTRY[name].higher_order]


def test_only_the_fused_primitives_are_first_order_only():
    assert sorted(n for n, p in REGISTRY.items() if p.differentiable and not p.higher_order) == [
        "checkpoint",
        "conv1d",
        "conv2d",
        "gru_scan",
        "lstm_scan",
        "max_pool1d",
        "max_pool2d",
        "rnn_scan",
    ]


@pytest.mark.parametrize("name,i", HIGHER_CASES)
def test_vjp_is_differentiable(name, i):
    """The VJP rule, run on Tensors, is itself differentiable: the gradient of
    <VJP(c), d> (c, d random) against float64 finite differences of the first derivative."""
    prim = REGISTRY[name]
    sample = _samples(prim)[i]
    diff = [
        k
        for k, a in enumerate(sample.args)
        if prim.differentiable_input(k) and np.asarray(a).dtype.kind == "f"
    ]
    rng = np.random.default_rng(1)
    out = tg.autodiff.graph.apply(prim, *sample.args, **sample.attrs)
    c = rng.standard_normal(out.shape).astype(out.dtype)
    ds = [rng.standard_normal(np.shape(sample.args[k])) for k in diff]

    def second(*xs):
        # the finite-difference evaluations pass plain values under no_grad: the inner
        # gradient needs leaves and recording
        xs = [x if x.requires_grad else tg.tensor(x.data, requires_grad=True) for x in xs]
        args = list(sample.args)
        for k, x in zip(diff, xs):
            args[k] = x
        with tg.enable_grad():
            y = tg.autodiff.graph.apply(prim, *args, **sample.attrs)
            gs = tg.gradients((y * c).sum(), list(xs), create_graph=True, allow_unused=True)
        total = tg.tensor(np.float64(0.0))
        for g, d in zip(gs, ds):
            total = total + (g * d.astype(g.dtype)).sum().astype(np.float64)
        return total

    report = tg.gradcheck(
        second, *[sample.args[k] for k in diff], tol=sample.atol, raise_exception=False
    )
    assert report.ok, f"{name} sample {i}: {report}"
