"""The seam, proven on every primitive: run each registry sample on a device whose arrays are
not NumPy arrays (``fake_cuda``: CuPy's behaviour towards NumPy, numba's simulator for the CUDA
kernels) and check that every output, gradient and compiled-plan buffer lives on that device
and equals the CPU's result. A forward that makes a CPU array from device inputs (``np.empty``,
``np.asarray`` of a number, a numba CPU kernel) fails here."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff import backend
from tapegrad.autodiff.plan import Plan
from tapegrad.autodiff.primitives import REGISTRY

CASES = [
    (name, i)
    for name, prim in sorted(REGISTRY.items())
    if name != "to_device"  # moves across devices: tests/cudasim/test_devices.py
    for i in range(len(prim.samples(np.random.default_rng(0))))
]


def _outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _dev(a, dev):
    if isinstance(a, np.generic):
        a = np.asarray(a)
    if isinstance(a, np.ndarray):
        return backend.copy_to_device(a, dev)
    if isinstance(a, (tuple, list)) and any(isinstance(v, np.ndarray) for v in a):
        return type(a)(_dev(v, dev) for v in a)
    return a


def _on(dev, arrays, what):
    for k, a in enumerate(arrays):
        where = backend.device_of(a).name
        assert where == dev.name, f"{what} {k} is a {type(a).__name__} on {where}, not {dev.name}"


def _close(got, want, name, what):
    host = backend.to_host(got)
    assert host.shape == np.shape(want), f"{name}: {what} shape {host.shape} vs {np.shape(want)}"
    assert host.dtype == np.asarray(want).dtype, f"{name}: {what} dtype {host.dtype}"
    tol = 1e-5 if host.dtype == np.float32 else 1e-9
    np.testing.assert_allclose(host, want, rtol=tol, atol=tol, err_msg=f"{name}: {what}")


def _run(prim, args, attrs, diff, cot):
    """Outputs and the gradients of <output 0, cot> for the inputs ``diff``, eagerly."""
    full = list(args)
    params = {k: tg.tensor(args[k], requires_grad=True) for k in diff}
    for k, p in params.items():
        full[k] = p
    outs = _outputs(tg.autodiff.graph.apply(prim, *full, **attrs))
    grads = []
    if params and outs[0].requires_grad:
        (outs[0] * cot).sum().backward()
        grads = [params[k].grad for k in diff]
    return [o.data for o in outs], grads


@pytest.mark.parametrize("name,i", CASES)
def test_primitive_runs_on_the_device(name, i, cuda_device):
    dev = cuda_device
    prim = REGISTRY[name]
    sample = prim.samples(np.random.default_rng(0))[i]
    diff = [
        k
        for k, a in enumerate(sample.args)
        if prim.differentiable
        and prim.differentiable_input(k)
        and isinstance(a, np.ndarray)
        and a.dtype.kind == "f"
    ]
    cpu_out = _outputs(tg.autodiff.graph.apply(prim, *sample.args, **sample.attrs))
    cot = np.random.default_rng(i).standard_normal(cpu_out[0].shape).astype(cpu_out[0].dtype)
    want, want_g = _run(prim, sample.args, sample.attrs, diff, cot)
    args = [_dev(a, dev) for a in sample.args]
    attrs = {k: _dev(v, dev) for k, v in sample.attrs.items()}
    if name == "random_draw":  # no array input: the device is an attribute
        attrs["device"] = dev.name
    dcot = backend.copy_to_device(cot, dev)
    got, got_g = _run(prim, args, attrs, diff, dcot)
    _on(dev, got, f"{name}: output")
    _on(dev, got_g, f"{name}: gradient")
    for a, b in zip(got, want):
        _close(a, b, name, "output")
    for a, b in zip(got_g, want_g):
        _close(a, b, name, "gradient")

    # compiled: every buffer of the plan on the device, results as eager's
    params = {k: tg.tensor(args[k], requires_grad=True) for k in diff}
    inputs = [k for k, a in enumerate(args) if backend.is_array(a) and k not in params]

    def step(*given):
        full = list(args)
        for k, a in zip(inputs, given):
            full[k] = a
        for k, p in params.items():
            full[k] = p
            p.grad = None
        outs = _outputs(tg.autodiff.graph.apply(prim, *full, **attrs))
        if params and outs[0].requires_grad:
            (outs[0] * dcot).sum().backward()
        return outs

    compiled = tg.compile(step)
    for _ in range(2):
        outs = compiled(*[args[k].copy() for k in inputs])
        _on(dev, [o.data for o in outs], f"{name}: compiled output")
        for a, b in zip(outs, want):
            _close(a.data, b, name, "compiled output")
        for k, b in zip(diff, want_g):
            _close(params[k].grad, b, name, "compiled gradient")
    (plan,) = compiled.all_plans
    _on(dev, list(plan.vals.values()), f"{name}: plan buffer")
    _on(dev, list(plan.leaf_grads.values()), f"{name}: gradient buffer")
    for step_fn in plan.program:
        ws = getattr(step_fn, "keywords", {}).get("ws")
        if ws is not None:
            kept = [a for k, a in ws.arrays.items() if not str(k).startswith("host:")]
            _on(dev, kept, f"{name}: workspace array")
    assert isinstance(plan, Plan)
