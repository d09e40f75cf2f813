"""One registry, one test: every primitive's forward against its NumPy reference, its VJP
against float64 central finite differences, its second derivative likewise, and the same
primitive inside a compiled function (forward into the plan's buffers, VJP traced as equations)
against eager mode, bit for bit, on the samples the primitive declares."""

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


def _outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name,i", CASES)
def test_forward_matches_reference(name, i):
    prim = REGISTRY[name]
    sample = _samples(prim)[i]
    outs = _outputs(tg.autodiff.graph.apply(prim, *sample.args, **sample.attrs))
    refs = _outputs(prim.reference(*sample.args, **sample.attrs))
    assert len(outs) == len(refs), f"{name}: {len(outs)} outputs, reference {len(refs)}"
    for out, ref in zip(outs, refs):
        ref = np.asarray(ref)
        assert out.shape == ref.shape, f"{name}: shape {out.shape} vs reference {ref.shape}"
        np.testing.assert_allclose(out.data, ref, rtol=1e-10, atol=1e-12, err_msg=name)


def _diff_inputs(prim, sample) -> list[int]:
    return [
        k
        for k, a in enumerate(sample.args)
        if prim.differentiable_input(k) and np.asarray(a).dtype.kind == "f"
    ]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,i", CASES)
def test_compiled_equals_eager(name, i, dtype):
    """The primitive and its VJP in a compiled step (differentiable inputs as parameters, the
    other arrays as the step's arguments) give eager's values and gradients bit for bit, on the
    replays as on the trace."""
    prim = REGISTRY[name]
    sample = _samples(prim)[i]
    args = [
        np.asarray(a).astype(dtype)
        if isinstance(a, (np.ndarray, np.floating)) and np.asarray(a).dtype.kind == "f"
        else a
        for a in sample.args
    ]
    diff = _diff_inputs(prim, sample) if prim.differentiable else []
    arrays = [k for k, a in enumerate(args) if isinstance(a, np.ndarray) and k not in diff]
    params = {k: tg.tensor(args[k], requires_grad=True) for k in diff}
    out0 = _outputs(tg.autodiff.graph.apply(prim, *args, **sample.attrs))
    rng = np.random.default_rng(i)
    cot = rng.standard_normal(out0[0].shape).astype(out0[0].dtype) if diff else None

    def step(*given):
        full = list(args)
        for k, a in zip(arrays, given):
            full[k] = a
        for k, p in params.items():
            full[k] = p
            p.grad = None
        outs = _outputs(tg.autodiff.graph.apply(prim, *full, **sample.attrs))
        if diff and outs[0].requires_grad:
            (outs[0] * cot).sum().backward()
        return outs

    def run(fn, wrap):
        outs = fn(*[wrap(args[k]) for k in arrays])
        values = [np.array(o.data, copy=True) for o in outs]
        return values, [None if p.grad is None else p.grad.copy() for p in params.values()]

    eager = run(step, lambda a: tg.tensor(np.array(a, copy=True)))  # effects write the copy
    compiled = tg.compile(step)
    for _ in range(3):  # the trace, then replays of the plan
        got = run(compiled, lambda a: np.array(a, copy=True))
        for a, b in zip(eager[0], got[0]):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}: output")
        for a, b in zip(eager[1], got[1]):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}: gradient")


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
        for out in _outputs(tg.autodiff.graph.apply(prim, *args, **sample.attrs)):
            if out.dtype.kind == "f" and name != "astype":
                assert out.dtype == np.float32, f"{name} turned float32 into {out.dtype}"


HIGHER_CASES = [(name, i) for name, i in DIFF_CASES if REGISTRY[name].higher_order]


def test_only_the_fused_primitives_are_first_order_only():
    assert sorted(n for n, p in REGISTRY.items() if p.differentiable and not p.higher_order) == [
        "bias_relu",
        "checkpoint",
        "gru_scan",
        "lstm_scan",
        "relu_max_pool",
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
