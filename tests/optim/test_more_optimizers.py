"""Adagrad, Adadelta, Adamax and NAdam (and SGD's Nesterov momentum with weight decay) against
torch.optim's trajectories; their errors, state dicts, allocation-free steps and compiled steps.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from optim_problem import (
    assert_lockstep,
    make_problem,
    run_lockstep,
    run_tapegrad,
    run_torch,
    tg_loss,
)

import tapegrad as tg
from tapegrad import optim

# (class name in tapegrad.optim and torch.optim, kwargs): every option of every new optimiser
CONFIGS = [
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-6)),
    ("Adagrad", dict(lr=0.1, maximize=True, weight_decay=0.05)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.5, eps=1e-4)),
    ("Adadelta", dict(weight_decay=0.1)),
    ("Adadelta", dict(maximize=True, weight_decay=0.1)),
    ("Adamax", dict(lr=0.05)),
    ("Adamax", dict(lr=0.05, betas=(0.5, 0.9), eps=1e-3)),
    ("Adamax", dict(lr=0.05, weight_decay=0.1)),
    ("Adamax", dict(lr=0.05, maximize=True, weight_decay=0.05)),
    ("NAdam", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05, betas=(0.8, 0.95), momentum_decay=0.1)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    ("NAdam", dict(lr=0.05, maximize=True, eps=1e-4, weight_decay=0.05)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.2)),
    ("SGD", dict(lr=0.05, momentum=0.5, nesterov=True, weight_decay=1e-3)),
]
IDS = [f"{n}-" + "-".join(f"{k}={v}" for k, v in kw.items()) for n, kw in CONFIGS]
# Given the same gradients every update agrees with torch's to float32 (float64) rounding:
# 20 steps stay within 1.5 eps (relative, and absolute below 1) of torch's, with torch's
# vectorised kernels (which fuse multiply-adds) and with its plain ones. Trajectories that each
# follow their own gradients are compared in float64 only: in float32 they measure the BLAS
# library's rounding as much as the optimiser (see optim_problem.py).
STEP_ULPS = 8
F64_TOL = dict(rtol=1e-11, atol=1e-13)
NEW = ["Adagrad", "Adadelta", "Adamax", "NAdam"]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_steps_match_torch_on_the_same_gradients(torch, name, kwargs, dtype, seed):
    X, Y, init = make_problem(dtype, seed=seed)
    records, _ = run_lockstep(name, kwargs, init, X, Y, 20)
    assert_lockstep(records, dtype, STEP_ULPS)
    assert not np.allclose(records[-1]["params"][0], init[0], atol=1e-3)  # it moved


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_float64_trajectory_matches_torch(torch, name, kwargs, seed):
    X, Y, init = make_problem(np.float64, seed=seed)
    mine, params, _ = run_tapegrad(name, kwargs, init, X, Y, 20)
    ref = run_torch(name, kwargs, init, X, Y, 20)
    for step, (a, b) in enumerate(zip(mine, ref)):
        for i, (pa, pb) in enumerate(zip(a, b)):
            assert pa.dtype == np.float64
            np.testing.assert_allclose(pa, pb, **F64_TOL, err_msg=f"step {step} param {i}")
    assert not np.allclose(params[0].data, init[0], atol=1e-3)  # it moved


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_adamax_steps_are_torchs_bit_for_bit_where_its_kernels_agree(torch, dtype):
    """With beta1 = 0.5 and no weight decay, torch's Adamax rounds the same on every CPU (its
    lerp by 1/2 and its addcdiv have nothing to fuse into a multiply-add): tapegrad's steps,
    given the same gradients, are the same bits."""
    X, Y, init = make_problem(dtype, seed=0)
    records, _ = run_lockstep("Adamax", dict(lr=0.05, betas=(0.5, 0.9), eps=1e-3), init, X, Y, 20)
    for rec in records:
        for p, q in zip(rec["params"], rec["ref"]):
            np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("name", NEW + ["SGD"])
def test_param_groups_match_torch(torch, name):
    X, Y, init = make_problem(np.float64, seed=3)
    base = {
        "Adagrad": dict(lr=0.1, lr_decay=0.01),
        "Adadelta": dict(rho=0.8),
        "Adamax": dict(lr=0.02),
        "NAdam": dict(lr=0.02, momentum_decay=0.01),
        "SGD": dict(lr=0.1, momentum=0.9, nesterov=True),
    }[name]
    groups = [
        {"params": [0], "lr": 0.05, "weight_decay": 0.1},
        {"params": [1, 2]},
    ]
    mine, _, opt = run_tapegrad(name, base, init, X, Y, 20, groups)
    ref = run_torch(name, base, init, X, Y, 20, groups)
    assert opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[0]["weight_decay"] == 0.1
    for a, b in zip(mine, ref):
        for pa, pb in zip(a, b):
            np.testing.assert_allclose(pa, pb, **F64_TOL)


def test_sgd_nesterov_with_weight_decay_by_hand():
    """The rule PyTorch documents, written out: d = g + wd p; b = m b + d (b = d at first);
    p -= lr (d + m b)."""
    p = tg.tensor(np.array([1.0, -2.0]), requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.5)
    x, buf = p.data.copy(), None
    for g in ([0.3, -0.1], [0.2, 0.4], [-1.0, 0.5]):
        p.grad = np.array(g)
        opt.step()
        d = np.array(g) + 0.5 * x
        buf = d if buf is None else 0.9 * buf + d
        x = x - 0.1 * (d + 0.9 * buf)
        np.testing.assert_allclose(p.data, x, rtol=1e-15)


@pytest.mark.parametrize("name", NEW)
def test_grad_none_is_skipped(name):
    a = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    b = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = getattr(optim, name)([a, b], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (a * a).sum().backward()
        opt.step()
    assert b.grad is None and 1 not in opt.state and opt.state[0]["step"] == 3
    np.testing.assert_array_equal(b.data, np.ones(3, np.float32))
    assert not np.array_equal(a.data, np.ones(3, np.float32))


@pytest.mark.parametrize("name", NEW)
def test_updates_in_place_and_keep_dtype(name):
    for dtype in (np.float32, np.float64):
        p = tg.tensor(np.ones((4, 2), dtype), requires_grad=True)
        buf = p.data
        opt = getattr(optim, name)([p], lr=0.1, weight_decay=0.1)
        p.grad = np.full((4, 2), 0.5, dtype)
        opt.step()
        assert p.data is buf and p.data.dtype == dtype
        assert all(v.dtype == dtype for v in opt.state[0].values() if isinstance(v, np.ndarray))
        assert np.all(buf < 1)


def test_adagrad_first_step_and_accumulator():
    p = tg.tensor(np.array([1.0, 1.0]), requires_grad=True)
    opt = optim.Adagrad([p], lr=0.5, initial_accumulator_value=3.0, eps=0.0)
    p.grad = np.array([1.0, -2.0])
    opt.step()
    np.testing.assert_allclose(opt.state[0]["sum"], [4.0, 7.0])
    np.testing.assert_allclose(p.data, [1 - 0.5 / 2, 1 + 0.5 * 2 / np.sqrt(7)])


def test_nadam_mu_product_is_the_product_of_the_momentum_schedule():
    p = tg.tensor(np.zeros(2), requires_grad=True)
    opt = optim.NAdam([p], betas=(0.9, 0.999), momentum_decay=0.004)
    for _ in range(5):
        p.grad = np.ones(2)
        opt.step()
    mus = [0.9 * (1 - 0.5 * 0.96 ** (t * 0.004)) for t in range(1, 6)]
    assert opt.state[0]["mu_product"] == pytest.approx(np.prod(mus), rel=1e-15)


def _p():
    return tg.tensor(np.zeros(2, np.float32), requires_grad=True)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: optim.Adagrad([_p()], lr=-0.1), r"Adagrad: invalid lr -0.1; expected lr >= 0"),
        (lambda: optim.Adagrad([_p()], lr_decay=-1), r"Adagrad: invalid lr_decay -1.0"),
        (
            lambda: optim.Adagrad([_p()], initial_accumulator_value=-0.5),
            "initial_accumulator_value >= 0",
        ),
        (lambda: optim.Adagrad([_p()], eps=float("inf")), "Adagrad: eps must be finite"),
        (lambda: optim.Adagrad([_p()], maximize="yes"), "maximize must be True or False"),
        (lambda: optim.Adadelta([_p()], rho=1.5), r"Adadelta: invalid rho 1.5; expected rho <= 1"),
        (lambda: optim.Adadelta([_p()], rho=-0.1), "rho >= 0"),
        (lambda: optim.Adadelta([_p()], weight_decay=-0.1), "weight_decay >= 0"),
        (lambda: optim.Adadelta([_p()], lr="1"), "Adadelta: lr must be a real number"),
        (lambda: optim.Adamax([_p()], betas=(1.0, 0.9)), r"Adamax: invalid betas\[0\] 1.0"),
        (lambda: optim.Adamax([_p()], betas=0.9), "Adamax: betas must be a pair"),
        (lambda: optim.Adamax([_p()], eps=-1.0), "eps >= 0"),
        (lambda: optim.NAdam([_p()], betas=(0.9, 1.0)), r"NAdam: invalid betas\[1\] 1.0"),
        (lambda: optim.NAdam([_p()], momentum_decay=-4e-3), "NAdam: invalid momentum_decay"),
        (
            lambda: optim.NAdam([_p()], decoupled_weight_decay=1),
            "decoupled_weight_decay must be True or False",
        ),
        (
            lambda: optim.NAdam([{"params": [_p()], "weight_decay": -1}]),
            "NAdam group 0: invalid weight_decay",
        ),
    ],
)
def test_bad_hyperparameters(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


# -- state dicts, allocation, compiled steps ---------------------------------------------------
ALL = [
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1)),
    ("Adadelta", dict(rho=0.8, weight_decay=0.01, maximize=True)),
    ("Adamax", dict(lr=0.01, weight_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.01, decoupled_weight_decay=True, maximize=True)),
]
ALL_IDS = [f"{n}-{i}" for i, (n, _) in enumerate(ALL)]


def _grad_step(opt, params, X, Y):
    opt.zero_grad()
    tg_loss(params, X, Y).backward()
    opt.step()


@pytest.mark.parametrize("name,kwargs", ALL, ids=ALL_IDS)
def test_resume_from_state_dict_is_bit_identical(name, kwargs, tmp_path):
    from tapegrad.serialization import load_arrays, save_arrays

    X, Y, init = make_problem(np.float32, seed=1)
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = getattr(optim, name)(params, **kwargs)
    for _ in range(5):
        _grad_step(opt, params, X, Y)
    sd = opt.state_dict()
    arrays = {k: v for k, v in sd.items() if isinstance(v, np.ndarray)}
    meta = json.loads(json.dumps({k: v for k, v in sd.items() if k not in arrays}))
    assert any(k.startswith("state.") for k in arrays)
    save_arrays(tmp_path / "ckpt.safetensors", arrays, meta)
    arrays2, meta2 = load_arrays(tmp_path / "ckpt.safetensors")
    resumed = [tg.tensor(p.data.copy(), requires_grad=True) for p in params]
    opt2 = getattr(optim, name)(resumed, lr=0.5)  # hyperparameters come from the state dict
    opt2.load_state_dict({**arrays2, **meta2})
    assert opt2.param_groups[0] == {**opt.param_groups[0], "params": resumed}
    for _ in range(7):
        _grad_step(opt, params, X, Y)
        _grad_step(opt2, resumed, X, Y)
    for a, b in zip(params, resumed):
        assert np.array_equal(a.data, b.data)


def test_nadam_state_dict_has_mu_product_and_checks_it():
    p = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.NAdam([p])
    p.grad = np.ones(3, np.float32)
    opt.step()
    sd = opt.state_dict()
    assert isinstance(sd["state.0.mu_product"], float) and sd["state.0.step"] == 1
    target = optim.NAdam([tg.tensor(np.ones(3, np.float32), requires_grad=True)])
    for bad, match in [
        (float("nan"), "mu_product must be a finite real number"),
        ("1.0", "mu_product must be a finite real number"),
    ]:
        with pytest.raises(ValueError, match=match):
            target.load_state_dict({**sd, "state.0.mu_product": bad})
        assert target.state == {}
    no_mu = {k: v for k, v in sd.items() if k != "state.0.mu_product"}
    with pytest.raises(ValueError, match="expected"):
        target.load_state_dict(no_mu)
    target.load_state_dict(sd)
    assert target.state[0]["mu_product"] == opt.state[0]["mu_product"]


@pytest.mark.parametrize("name,kwargs", ALL, ids=ALL_IDS)
def test_steady_state_step_allocates_almost_nothing(name, kwargs):
    rng = np.random.default_rng(0)
    params = [
        tg.tensor(rng.normal(size=1000).astype(np.float32), requires_grad=True) for _ in range(10)
    ]
    for p in params:
        p.grad = rng.normal(size=1000).astype(np.float32)
    buffers = [p.data for p in params]
    opt = getattr(optim, name)(params, **kwargs)
    opt.step()  # warm-up: state and scratch buffers are allocated here
    opt.step()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        rises = []
        for _ in range(10):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            opt.step()
            rises.append(tracemalloc.get_traced_memory()[1] - before)
        net = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    # one temporary the size of a parameter would be 4000 bytes: none may ever be alive
    assert max(rises) < 2048, rises
    assert sum(rises) < 16 * 1024, rises
    assert net < 1024, net
    assert all(p.data is b for p, b in zip(params, buffers))


def _compiled_vs_eager(name, kwargs, dtype):
    X, Y, init = make_problem(dtype, seed=2)
    runs = {}
    for mode in ("eager", "compiled"):
        params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
        opt = getattr(optim, name)(params, **kwargs)

        def step(x, y, params=params, opt=opt):
            loss = tg_loss(params, x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        f = tg.compile(step) if mode == "compiled" else step
        losses = [f(X, Y).item() for _ in range(12)]
        runs[mode] = (losses, [p.data.copy() for p in params], opt.state_dict(), f)
    return runs


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kwargs", ALL, ids=ALL_IDS)
def test_compiled_step_equals_eager_bit_for_bit(name, kwargs, dtype):
    runs = _compiled_vs_eager(name, kwargs, dtype)
    (le, pe, se, _), (lc, pc, sc, compiled) = runs["eager"], runs["compiled"]
    assert len(compiled.plans) == 1  # traced once, replayed eleven times
    assert le == lc and len(set(le)) == len(le)  # the same, ever-changing losses
    for a, b in zip(pe, pc):
        np.testing.assert_array_equal(a, b)
    assert se.keys() == sc.keys()
    for k, v in se.items():
        assert np.array_equal(v, sc[k]) if isinstance(v, np.ndarray) else v == sc[k], k
    assert se["state.0.step"] == 12
