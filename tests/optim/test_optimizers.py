"""Optimisers against torch.optim's trajectories, and their contracts: errors, dtypes, skipping."""

from __future__ import annotations

import numpy as np
import pytest
from optim_problem import (
    assert_lockstep,
    make_problem,
    run_lockstep,
    run_tapegrad,
    run_torch,
)

import tapegrad as tg
from tapegrad import optim

# (class name in tapegrad.optim and torch.optim, kwargs): every option of every optimiser
CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, weight_decay=0.2, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.05, weight_decay=0.1)),
    ("Adam", dict(lr=0.05, amsgrad=True)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.95), eps=1e-3)),
    ("Adam", dict(lr=0.05, betas=(0.5, 0.9), weight_decay=0.05, amsgrad=True)),
    ("AdamW", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, weight_decay=0.3)),
    ("AdamW", dict(lr=0.05, weight_decay=0.3, amsgrad=True, eps=1e-4)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-3, weight_decay=0.2)),
]
IDS = [f"{n}-" + "-".join(f"{k}={v}" for k, v in kw.items()) for n, kw in CONFIGS]
# Given the same gradients, 20 steps agree with torch's to 1.5 eps at most (see
# test_more_optimizers.py); trajectories that follow their own gradients are compared in
# float64, where the BLAS library's rounding stays far below the tolerance (optim_problem.py).
STEP_ULPS = 8
F64_TOL = dict(rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_steps_match_torch_on_the_same_gradients(name, kwargs, dtype):
    X, Y, init = make_problem(dtype)
    records, _ = run_lockstep(name, kwargs, init, X, Y, 20)
    assert_lockstep(records, dtype, STEP_ULPS)
    # the parameters moved (a trajectory that stands still would match trivially)
    assert not np.allclose(records[-1]["params"][0], init[0], atol=1e-3)


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_float64_trajectory_matches_torch(name, kwargs):
    X, Y, init = make_problem(np.float64)
    mine, params, _ = run_tapegrad(name, kwargs, init, X, Y, 20)
    ref = run_torch(name, kwargs, init, X, Y, 20)
    for step, (a, b) in enumerate(zip(mine, ref)):
        for i, (pa, pb) in enumerate(zip(a, b)):
            assert pa.dtype == np.float64
            np.testing.assert_allclose(pa, pb, **F64_TOL, err_msg=f"step {step} param {i}")
    assert not np.allclose(params[0].data, init[0], atol=1e-3)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop"])
def test_param_groups_match_torch(name):
    X, Y, init = make_problem(np.float64)
    base = {"SGD": dict(lr=0.1, momentum=0.9), "Adam": dict(lr=0.02), "RMSprop": dict(lr=0.01)}
    groups = [
        {"params": [0], "lr": 0.05, "weight_decay": 0.1},
        {"params": [1, 2]},
    ]
    mine, _, opt = run_tapegrad(name, base[name], init, X, Y, 20, groups)
    ref = run_torch(name, base[name], init, X, Y, 20, groups)
    assert opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[1]["lr"] == base[name]["lr"]
    for a, b in zip(mine, ref):
        for pa, pb in zip(a, b):
            np.testing.assert_allclose(pa, pb, **F64_TOL)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_grad_none_is_skipped(name):
    a = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    b = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    kw = dict(lr=0.1, momentum=0.9) if name in ("SGD", "RMSprop") else dict(lr=0.1)
    opt = getattr(optim, name)([a, b], **kw)
    for _ in range(3):
        opt.zero_grad()
        (a * a).sum().backward()
        opt.step()
    assert b.grad is None
    np.testing.assert_array_equal(b.data, np.ones(3, np.float32))
    assert 1 not in opt.state and 0 in opt.state
    assert not np.array_equal(a.data, np.ones(3, np.float32))


def test_updates_in_place_and_keep_dtype():
    for dtype in (np.float32, np.float64):
        p = tg.tensor(np.ones((4, 2), dtype), requires_grad=True)
        buf = p.data
        opt = optim.Adam([p], lr=0.1, amsgrad=True)
        p.grad = np.full((4, 2), 0.5, dtype)
        opt.step()
        assert p.data is buf and p.data.dtype == dtype
        assert all(v.dtype == dtype for v in opt.state[0].values() if isinstance(v, np.ndarray))
        np.testing.assert_allclose(buf, 0.9, rtol=1e-6)  # first Adam step moves by lr


def test_zero_grad():
    p = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    (p * p).sum().backward()
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and np.all(g == 0)
    opt.zero_grad()
    assert p.grad is None


def test_closure_returns_loss():
    p = tg.tensor([3.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 9.0 and p.data[0] == 3.0 - 0.25 * 6.0


def _p():
    return tg.tensor(np.zeros(2, np.float32), requires_grad=True)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: optim.SGD([_p()], lr=-0.1), "lr >= 0"),
        (lambda: optim.SGD([_p()], lr=float("nan")), "finite"),
        (lambda: optim.SGD([_p()], lr="0.1"), "real number"),
        (lambda: optim.SGD([_p()], lr=0.1, momentum=-1), "momentum >= 0"),
        (lambda: optim.SGD([_p()], lr=0.1, nesterov=True), "nesterov=True needs momentum > 0"),
        (
            lambda: optim.SGD([_p()], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
            "dampening = 0",
        ),
        (lambda: optim.SGD([_p()], lr=0.1, dampening=2), "dampening <= 1"),
        (
            lambda: optim.Adam([_p()], betas=(1.0, 0.999)),
            r"betas\[0\] 1.0; expected betas\[0\] < 1",
        ),
        (lambda: optim.Adam([_p()], betas=(0.9, -0.1)), r"betas\[1\]"),
        (lambda: optim.Adam([_p()], betas=(0.9,)), "pair"),
        (lambda: optim.Adam([_p()], eps=-1e-8), "eps >= 0"),
        (lambda: optim.AdamW([_p()], weight_decay=-0.1), "weight_decay >= 0"),
        (lambda: optim.Adam([_p()], amsgrad=1), "True or False"),
        (lambda: optim.RMSprop([_p()], alpha=1.5), "alpha <= 1"),
        (lambda: optim.RMSprop([_p()], momentum=-0.5), "momentum >= 0"),
        (lambda: optim.Adam([{"params": [_p()], "lr": -1.0}]), "group 0: invalid lr"),
    ],
)
def test_bad_hyperparameters(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_bad_params():
    with pytest.raises(TypeError, match="float tensors"):
        optim.SGD([tg.tensor(np.arange(3))], lr=0.1)
    with pytest.raises(TypeError, match="expected a tapegrad Tensor"):
        optim.Adam([np.zeros(3, np.float32)])
    with pytest.raises(TypeError, match="wrap it in a list"):
        optim.Adam(_p())
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])
    p = _p()
    with pytest.raises(ValueError, match="more than once"):
        optim.Adam([{"params": [p]}, {"params": [p]}])
    with pytest.raises(ValueError, match="not a leaf"):
        optim.Adam([_p() * 2])
    opt = optim.Adam([p])
    p.grad = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"shape \(2,\).*grad has shape \(3,\)"):
        opt.step()


def test_add_param_group():
    a, b = _p(), _p()
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0.9
    a.grad = np.ones(2, np.float32)
    b.grad = np.ones(2, np.float32)
    opt.step()
    np.testing.assert_allclose(a.data, -0.1)
    np.testing.assert_allclose(b.data, -0.5)


def test_frozen_parameters_are_accepted_and_left_alone():
    frozen = tg.tensor([1.0, 2.0])  # e.g. a pretrained embedding with requires_grad=False
    live = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([frozen, live], lr=0.1)
    (live * frozen).sum().backward()
    opt.step()
    np.testing.assert_array_equal(frozen.data, [1.0, 2.0])
    assert not np.array_equal(live.data, [1.0, 2.0])
