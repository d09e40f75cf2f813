"""LBFGS against torch.optim.LBFGS (fixed steps and strong Wolfe line search), its state dict,
its errors, its refusal under tg.compile, and its allocation-free steady state."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from optim_problem import torch_scalars_in

import tapegrad as tg
from tapegrad import optim


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def make_problem(dtype, seed):
    """L2-regularised logistic regression with three outputs: smooth, with one minimum, so
    differences between two implementations do not grow (a saturating model's would)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 8)).astype(dtype)
    Y = np.where(rng.random((60, 3)) < 0.5, -1.0, 1.0).astype(dtype)
    init = [
        rng.normal(scale=0.5, size=(8, 3)).astype(dtype),
        rng.normal(scale=0.1, size=(3,)).astype(dtype),
    ]
    return X, Y, init


def tg_loss(params, X, Y):
    W, b = params
    margin = (tg.tensor(X) @ W + b) * tg.tensor(Y)
    return ((-margin).exp() + 1).log().mean() + 0.01 * (W * W).sum()


def torch_loss(torch, params, X, Y):
    W, b = params
    margin = (torch.from_numpy(X) @ W + b) * torch.from_numpy(Y)
    return torch.log(torch.exp(-margin) + 1).mean() + 0.01 * (W * W).sum()


CONFIGS = [
    dict(),
    dict(max_iter=2),
    dict(lr=0.5, max_iter=4, history_size=2),  # the history wraps around
    dict(max_iter=10, tolerance_grad=1e-3, tolerance_change=1e-4),  # stops early
    dict(line_search_fn="strong_wolfe", max_iter=2),
    dict(line_search_fn="strong_wolfe", max_iter=5, history_size=3, max_eval=6),
    dict(line_search_fn="strong_wolfe", lr=3.0, max_iter=2, history_size=4),
]
IDS = ["-".join(f"{k}={v}" for k, v in kw.items()) or "defaults" for kw in CONFIGS]


def run_tapegrad(kwargs, init, X, Y, steps):
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = optim.LBFGS(params, **kwargs)

    def closure():
        opt.zero_grad()
        loss = tg_loss(params, X, Y)
        loss.backward()
        return loss

    losses, traj = [], []
    for _ in range(steps):
        losses.append(opt.step(closure).item())
        traj.append([p.data.copy() for p in params])
    return losses, traj, opt


def run_torch(torch, kwargs, init, X, Y, steps):
    with torch_scalars_in(init[0].dtype):
        params = [torch.tensor(a.copy(), requires_grad=True) for a in init]
        opt = torch.optim.LBFGS(params, **kwargs)

        def closure():
            opt.zero_grad()
            loss = torch_loss(torch, params, X, Y)
            loss.backward()
            return loss

        losses, traj = [], []
        for _ in range(steps):
            losses.append(opt.step(closure).item())
            traj.append([p.detach().numpy().copy() for p in params])
        state = opt.state[params[0]]
    return losses, traj, state


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kwargs", CONFIGS, ids=IDS)
def test_float64_trajectory_matches_torch(torch, kwargs, seed):
    X, Y, init = make_problem(np.float64, seed)
    mine, traj, opt = run_tapegrad(kwargs, init, X, Y, 20)
    ref, ref_traj, ref_state = run_torch(torch, kwargs, init, X, Y, 20)
    np.testing.assert_allclose(mine, ref, rtol=1e-12)
    for step, (a, b) in enumerate(zip(traj, ref_traj)):
        for pa, pb in zip(a, b):
            np.testing.assert_allclose(pa, pb, rtol=1e-9, atol=1e-12, err_msg=f"step {step}")
    # the same decisions: as many iterations and closure calls, the same history
    st = opt.state[0]
    assert st["n_iter"] == ref_state["n_iter"] and st["func_evals"] == ref_state["func_evals"]
    assert len(st["old_dirs"]) == len(ref_state["old_dirs"])
    assert mine[-1] < mine[0] - 0.05  # it did minimise


@pytest.mark.parametrize("kwargs", CONFIGS, ids=IDS)
def test_float32_trajectory_matches_torch(torch, kwargs):
    """float32: the same first two iterations (each with its line search); further on, near
    the minimum, rounding noise in the gradient (which changes with the BLAS library's kernels
    for the CPU) decides line-search branches and where a step stops (the defaults' first step
    ends after 8 to 12 iterations); both end at the same minimum."""
    X, Y, init = make_problem(np.float32, 0)
    first = dict(kwargs, max_iter=min(kwargs.get("max_iter", 20), 2))
    _, start, _ = run_tapegrad(first, init, X, Y, 1)
    _, ref_start, _ = run_torch(torch, first, init, X, Y, 1)
    for pa, pb in zip(start[0], ref_start[0]):
        np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)
    mine, traj, _ = run_tapegrad(kwargs, init, X, Y, 20)
    ref, ref_traj, _ = run_torch(torch, kwargs, init, X, Y, 20)
    np.testing.assert_allclose(mine, ref, rtol=2e-6)
    for a, b in zip(traj, ref_traj):
        for pa, pb in zip(a, b):
            assert pa.dtype == np.float32
            np.testing.assert_allclose(pa, pb, atol=2e-3)


def _rosenbrock_tg(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_rosenbrock_matches_torch(torch, line_search_fn):
    kwargs = dict(lr=1.0 if line_search_fn else 0.1, max_iter=5, line_search_fn=line_search_fn)
    x = tg.tensor(np.array([-1.5, 2.0]), requires_grad=True)
    opt = optim.LBFGS([x], **kwargs)
    tx = torch.tensor([-1.5, 2.0], dtype=torch.float64, requires_grad=True)
    topt = torch.optim.LBFGS([tx], **kwargs)

    def closure():
        opt.zero_grad()
        loss = _rosenbrock_tg(x)
        loss.backward()
        return loss

    def tclosure():
        topt.zero_grad()
        loss = (1 - tx[0]) ** 2 + 100 * (tx[1] - tx[0] ** 2) ** 2
        loss.backward()
        return loss

    for _ in range(15):
        a, b = opt.step(closure).item(), topt.step(tclosure).item()
        assert a == pytest.approx(b, rel=1e-9, abs=1e-15)
        np.testing.assert_allclose(x.data, tx.detach().numpy(), rtol=1e-9, atol=1e-12)
    if line_search_fn:  # stops once the loss changes by less than tolerance_change
        np.testing.assert_allclose(x.data, [1.0, 1.0], atol=1e-5)


def test_step_returns_the_first_loss_and_counts_evaluations():
    X, Y, init = make_problem(np.float64, 0)
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = optim.LBFGS(params, max_iter=4)
    calls = []

    def closure():
        opt.zero_grad()
        loss = tg_loss(params, X, Y)
        loss.backward()
        calls.append(loss.item())
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, tg.Tensor) and loss.item() == calls[0]
    # max_iter fixed steps: one evaluation to start, one after each step but the last
    assert len(calls) == 4 and opt.state[0]["func_evals"] == 4 and opt.state[0]["n_iter"] == 4
    assert calls == sorted(calls, reverse=True)


def test_parameter_without_grad_counts_as_zero_gradient():
    a = tg.tensor(np.array([3.0, -1.0]), requires_grad=True)
    frozen = tg.tensor(np.array([5.0]), requires_grad=True)
    opt = optim.LBFGS([a, frozen], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((a - 1.0) ** 2).sum()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    assert frozen.grad is None and frozen.data[0] == 5.0
    np.testing.assert_allclose(a.data, [1.0, 1.0], atol=1e-8)


def test_converged_start_returns_at_once():
    p = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    opt = optim.LBFGS([p])

    def closure():
        opt.zero_grad()
        loss = (p * 0.0).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 0.0
    assert opt.state[0] == {"func_evals": 1, "n_iter": 0}
    sd = opt.state_dict()
    assert sd["state.0.func_evals"] == 1 and "state.0.d" not in sd
    other = optim.LBFGS([tg.tensor(np.zeros(2), requires_grad=True)])
    other.load_state_dict(sd)
    assert other.state[0] == {"func_evals": 1, "n_iter": 0}


def test_lowering_history_size_trims_the_history():
    X, Y, init = make_problem(np.float64, 2)
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = optim.LBFGS(params, max_iter=4, history_size=6)

    def closure():
        opt.zero_grad()
        loss = tg_loss(params, X, Y)
        loss.backward()
        return loss

    opt.step(closure)
    opt.step(closure)
    assert len(opt.state[0]["old_dirs"]) > 2
    opt.param_groups[0]["history_size"] = 2
    opt.step(closure)
    assert len(opt.state[0]["old_dirs"]) == len(opt.state[0]["ro"]) == 2


# -- state dict -----------------------------------------------------------------------------
def _split(sd):
    arrays = {k: v for k, v in sd.items() if isinstance(v, np.ndarray)}
    return arrays, json.loads(json.dumps({k: v for k, v in sd.items() if k not in arrays}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kwargs", [CONFIGS[2], CONFIGS[5]], ids=[IDS[2], IDS[5]])
def test_resume_from_state_dict_is_bit_identical(kwargs, dtype, tmp_path):
    from tapegrad.serialization import load_arrays, save_arrays

    X, Y, init = make_problem(dtype, 3)
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = optim.LBFGS(params, **kwargs)

    def closure_for(o, ps):
        def closure():
            o.zero_grad()
            loss = tg_loss(ps, X, Y)
            loss.backward()
            return loss

        return closure

    for _ in range(2):
        opt.step(closure_for(opt, params))
    sd = opt.state_dict()
    assert sd["type"] == "LBFGS" and sd["param_groups.0.params"] == [0, 1]
    assert sd["state.0.old_dirs"].shape == (len(opt.state[0]["old_dirs"]), 27)
    assert sd["state.0.d"].dtype == dtype and isinstance(sd["state.0.t"], float)
    arrays, meta = _split(sd)
    save_arrays(tmp_path / "lbfgs.safetensors", arrays, meta)
    arrays2, meta2 = load_arrays(tmp_path / "lbfgs.safetensors")
    resumed = [tg.tensor(p.data.copy(), requires_grad=True) for p in params]
    opt2 = optim.LBFGS(resumed, lr=123.0, history_size=50)  # settings come from the state dict
    opt2.load_state_dict({**arrays2, **meta2})
    assert opt2.param_groups[0]["history_size"] == kwargs["history_size"]
    for _ in range(4):
        la = opt.step(closure_for(opt, params)).item()
        lb = opt2.step(closure_for(opt2, resumed)).item()
        assert la == lb
    for a, b in zip(params, resumed):
        assert np.array_equal(a.data, b.data)
    assert opt.state[0]["func_evals"] == opt2.state[0]["func_evals"]


def test_load_state_dict_rejects_mismatches_and_leaves_optimizer_untouched():
    X, Y, init = make_problem(np.float64, 0)
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = optim.LBFGS(params, max_iter=3, history_size=2)

    def closure():
        opt.zero_grad()
        loss = tg_loss(params, X, Y)
        loss.backward()
        return loss

    opt.step(closure)
    opt.step(closure)
    good = opt.state_dict()
    before = opt.state_dict()
    k = good["state.0.ro"].shape[0]
    bad_cases = [
        ({**good, "state.0.d": np.zeros(26)}, r"state.0.d must be a float array of shape \(27,\)"),
        ({**good, "state.0.ro": np.zeros(k + 1)}, r"old_dirs must be a float array"),
        ({**good, "state.0.old_stps": np.zeros((k, 5))}, "old_stps"),
        ({**good, "state.0.t": "x"}, "state.0.t must be a finite real number"),
        ({**good, "state.0.n_iter": -1}, "count >= 0"),
        ({k2: v for k2, v in good.items() if k2 != "state.0.H_diag"}, "expected"),
        ({**good, "state.1.n_iter": 0}, "under parameter 0"),
        ({**good, "param_groups.0.line_search_fn": "armijo"}, "line_search_fn must be None"),
        ({**good, "type": "Adam"}, "for 'Adam', not 'LBFGS'"),
    ]
    for sd, match in bad_cases:
        with pytest.raises(ValueError, match=match):
            opt.load_state_dict(sd)
        after = opt.state_dict()
        assert after.keys() == before.keys()
        for key, v in before.items():
            assert np.array_equal(after[key], v) if isinstance(v, np.ndarray) else after[key] == v


# -- errors, compile ------------------------------------------------------------------------
def _p(dtype=np.float32):
    return tg.tensor(np.zeros(2, dtype), requires_grad=True)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: optim.LBFGS([_p()], lr=-1.0), "LBFGS: invalid lr -1.0; expected lr >= 0"),
        (lambda: optim.LBFGS([_p()], max_iter=0), "LBFGS: max_iter must be an int >= 1, got 0"),
        (lambda: optim.LBFGS([_p()], max_iter=2.5), "max_iter must be an int"),
        (lambda: optim.LBFGS([_p()], max_eval=0), "max_eval must be an int >= 1"),
        (lambda: optim.LBFGS([_p()], history_size=0), "history_size must be an int >= 1"),
        (lambda: optim.LBFGS([_p()], tolerance_grad=-1e-7), "invalid tolerance_grad"),
        (lambda: optim.LBFGS([_p()], tolerance_change=float("nan")), "must be finite"),
        (
            lambda: optim.LBFGS([_p()], line_search_fn="backtracking"),
            "line_search_fn must be None or 'strong_wolfe', got 'backtracking'",
        ),
        (
            lambda: optim.LBFGS([{"params": [_p()]}, {"params": [_p()]}]),
            "LBFGS: takes one parameter group",
        ),
        (lambda: optim.LBFGS([_p(), _p(np.float64)]), "one dtype"),
    ],
)
def test_bad_hyperparameters(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_max_eval_defaults_to_five_quarters_of_max_iter():
    assert optim.LBFGS([_p()], max_iter=8).param_groups[0]["max_eval"] == 10
    assert optim.LBFGS([_p()]).param_groups[0]["max_eval"] == 25


def test_step_needs_a_closure():
    opt = optim.LBFGS([_p()])
    with pytest.raises(TypeError, match="LBFGS.step needs a closure"):
        opt.step()


def test_compiled_step_is_refused():
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.LBFGS([w])

    def step(x):
        def closure():
            opt.zero_grad()
            loss = (w * x).sum() ** 2
            loss.backward()
            return loss

        return opt.step(closure)

    with pytest.raises(tg.TraceError, match="LBFGS.step cannot be compiled"):
        tg.compile(step)(np.ones(3, np.float32))


# -- allocation -----------------------------------------------------------------------------
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_steady_state_step_allocates_almost_nothing(line_search_fn):
    """With a closure that itself allocates nothing (a quadratic whose gradient is written in
    place), an LBFGS step with a full history allocates no vector."""
    rng = np.random.default_rng(0)
    n = 2000  # one float32 vector: 8000 bytes
    A = np.diag(rng.uniform(1.0, 100.0, n)).astype(np.float32)
    target = rng.normal(size=n).astype(np.float32)
    p = tg.tensor(np.zeros(n, np.float32), requires_grad=True)
    grad = np.empty(n, np.float32)
    diff = np.empty(n, np.float32)
    opt = optim.LBFGS(
        [p],
        lr=0.05 if line_search_fn is None else 1.0,
        max_iter=4,
        history_size=3,
        tolerance_grad=0.0,
        tolerance_change=0.0,
        line_search_fn=line_search_fn,
    )

    def closure():
        np.subtract(p.data, target, out=diff)
        np.matmul(A, diff, out=grad)
        p.grad = grad
        return 0.5 * float(diff.dot(grad))

    for _ in range(3):  # warm-up: the history fills, work vectors are allocated
        opt.step(closure)
    assert len(opt.state[0]["old_dirs"]) == 3
    data = p.data
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        rises = []
        for _ in range(5):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            opt.step(closure)
            rises.append(tracemalloc.get_traced_memory()[1] - before)
        net = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert max(rises) < 4096, rises
    assert net < 1024, net
    assert p.data is data
