"""The fused SGD loop equals SGD written with NumPy ufuncs (its update before the loop, Python
numbers as the scalars) bit for bit, in every combination of momentum, dampening, Nesterov and
weight decay, on one thread or over numba's (the ``blocks`` fixture, ``conftest.py``)."""

import itertools

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autodiff.kernels.cpu import optim
from tapegrad.autodiff.kernels.cpu.optim import sgd_update

CASES = [  # (momentum, dampening, nesterov, weight_decay)
    (m, d, n, wd)
    for m, d, n, wd in itertools.product((0.0, 0.9), (0.0, 0.25), (False, True), (0.0, 5e-4))
    if not (n and (m == 0 or d != 0))
]


def _numpy_sgd(p, g, state, lr, momentum, dampening, nesterov, wd):
    """SGD as ufuncs on whole arrays, scalars as Python numbers (NumPy casts them to the
    arrays' dtype)."""
    d = g + p * wd if wd != 0 else g
    if momentum != 0:
        buf = state.get("buf")
        if buf is None:
            buf = state["buf"] = d.copy()
        else:
            buf *= momentum
            buf += d * (1.0 - dampening) if dampening != 0 else d
        d = d + buf * momentum if nesterov else buf
    p -= d * lr


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum,dampening,nesterov,wd", CASES)
def test_fused_sgd_equals_the_numpy_form(
    dtype, momentum, dampening, nesterov, wd, blocks, monkeypatch
):
    monkeypatch.setattr(optim, "_SGD_LOOP_FROM", 0)  # the loop at every size (plain SGD too)
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=(517, 9)).astype(dtype)  # more than one 2048-element block, odd sizes
    grads = [rng.normal(size=p0.shape).astype(dtype) for _ in range(3)]
    grads[1].flat[3] = np.nan  # NaN flows through both forms alike
    kw = dict(lr=0.015, momentum=momentum, dampening=dampening, wd=wd, nesterov=nesterov)
    scratch = (np.empty_like(p0), np.empty_like(p0))
    fused, plain, strided = p0.copy(), p0.copy(), p0.copy()
    buf = np.empty_like(p0) if momentum else None
    buf_s = np.empty_like(p0) if momentum else None
    state: dict = {}
    for step, g in enumerate(grads):
        sgd_update(fused, g, buf, scratch, first=step == 0, **kw)
        # a gradient that is not C-contiguous: the NumPy form in the kernel module runs
        sgd_update(strided, np.asfortranarray(g), buf_s, scratch, first=step == 0, **kw)
        _numpy_sgd(plain, g, state, **kw)
    np.testing.assert_array_equal(fused, plain)
    np.testing.assert_array_equal(strided, plain)
    if momentum:
        np.testing.assert_array_equal(buf, state["buf"])
        np.testing.assert_array_equal(buf_s, state["buf"])
    assert not np.array_equal(fused, p0)  # it did update


@pytest.mark.parametrize("momentum,dampening,nesterov,wd", CASES)
def test_the_optimiser_steps_with_the_kernel(momentum, dampening, nesterov, wd):
    """``optim.SGD`` over several parameters and steps, against the NumPy form per parameter;
    its momentum buffers are the state it saves."""
    rng = np.random.default_rng(1)
    shapes = [(3000,), (7,), (40, 3), (1,)]
    params = [tg.tensor(rng.normal(size=s).astype(np.float32), requires_grad=True) for s in shapes]
    plain = [p.data.copy() for p in params]
    states: list[dict] = [{} for _ in shapes]
    opt = tg.optim.SGD(
        params, lr=0.1, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=wd
    )
    for _ in range(3):
        grads = [rng.normal(size=s).astype(np.float32) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
        for q, g, st in zip(plain, grads, states):
            _numpy_sgd(q, g, st, 0.1, momentum, dampening, nesterov, wd)
    for p, q in zip(params, plain):
        np.testing.assert_array_equal(p.data, q)
    saved = opt.state_dict()  # flat keys: "state.<index>.<name>"
    for i, st in enumerate(states):
        if momentum:
            np.testing.assert_array_equal(saved[f"state.{i}.momentum_buffer"], st["buf"])
        else:
            assert f"state.{i}.momentum_buffer" not in saved
