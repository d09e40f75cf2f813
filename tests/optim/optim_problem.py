"""A tiny regression problem computed by tapegrad and by torch from the same initial values,
and the loops that compare tapegrad's optimisers with torch.optim's on it."""

from __future__ import annotations

import contextlib

import numpy as np


def make_problem(dtype=np.float32, seed=0):
    """Inputs, targets and initial parameters (W, b, and a scale vector) as ndarrays."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(16, 5)).astype(dtype)
    Y = rng.normal(size=(16, 3)).astype(dtype)
    init = [
        rng.normal(scale=0.5, size=(5, 3)).astype(dtype),
        rng.normal(scale=0.1, size=(3,)).astype(dtype),
        rng.uniform(0.5, 1.5, size=(3,)).astype(dtype),
    ]
    return X, Y, init


def tg_loss(params, X, Y):
    import tapegrad as tg

    W, b, s = params
    pred = (tg.tensor(X) @ W + b).tanh() * s
    return ((pred - tg.tensor(Y)) ** 2).mean()


def torch_loss(params, X, Y):
    import torch

    W, b, s = params
    pred = torch.tanh(torch.from_numpy(X) @ W + b) * s
    return ((pred - torch.from_numpy(Y)) ** 2).mean()


# -- one training loop, two optimisers ----------------------------------------------------------
# A float32 trajectory of this problem is not a property of the optimiser alone: the
# gradients carry float32 rounding that depends on the matmul kernel the BLAS library picks
# for the CPU, and an optimiser that divides by a running scale (Adamax where |grad| ~ eps)
# multiplies an earlier difference by up to lr (1 - beta1) / eps per step. tapegrad run twice
# on one machine, with OpenBLAS's Haswell and then its Prescott kernels (OPENBLAS_CORETYPE),
# ends 20 Adamax steps (betas=(0.5, 0.9), eps=1e-3) 2e-5 apart. So tapegrad's loop and
# PyTorch's are compared where both start from the same point: at every step tapegrad's
# gradient must be the float64 gradient at its parameters to float32 rounding, and PyTorch's
# optimiser, fed that same gradient, must take the same step.


@contextlib.contextmanager
def torch_scalars_in(dtype):
    """torch keeps optimiser scalars (NAdam's mu_product) in its default dtype: float64 runs
    are compared with float64 scalars, as tapegrad computes them."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if dtype == np.float64 else torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def param_groups(params, groups):
    """``params`` itself, or ``groups`` (dicts whose "params" are indices) made real."""
    if groups is None:
        return params
    return [dict(g, params=[params[i] for i in g["params"]]) for g in groups]


def run_tapegrad(name, kwargs, init, X, Y, steps, groups=None):
    """tapegrad's training loop with ``optim.<name>``: the parameters after each step, the
    parameters and the optimiser."""
    import tapegrad as tg
    from tapegrad import optim

    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = getattr(optim, name)(param_groups(params, groups), **kwargs)
    traj = []
    for _ in range(steps):
        opt.zero_grad()
        tg_loss(params, X, Y).backward()
        opt.step()
        traj.append([p.data.copy() for p in params])
    return traj, params, opt


def run_torch(name, kwargs, init, X, Y, steps, groups=None):
    """The same loop in torch with ``torch.optim.<name>``: the parameters after each step."""
    import torch

    with torch_scalars_in(init[0].dtype):
        params = [torch.tensor(a.copy(), requires_grad=True) for a in init]
        opt = getattr(torch.optim, name)(param_groups(params, groups), **kwargs)
        traj = []
        for _ in range(steps):
            opt.zero_grad()
            torch_loss(params, X, Y).backward()
            opt.step()
            traj.append([p.detach().numpy().copy() for p in params])
    return traj


def float64_grad(params, X, Y):
    """The gradient at ``params`` (ndarrays) computed in float64 by torch."""
    import torch

    at = [torch.tensor(np.asarray(p, np.float64), requires_grad=True) for p in params]
    torch_loss(at, X.astype(np.float64), Y.astype(np.float64)).backward()
    return [a.grad.numpy() for a in at]


def grad_rounding_scale(params, X, Y):
    """Per gradient element, what its rounding error is measured against (times the dtype's
    eps): a first-order error analysis of the loss and its backward pass, each quantity's
    error scale written in terms of absolute values of the values before it (z = X W + b by
    |X| |W| + |b|; tanh moves it by its slope and rounds; pred - Y cancels digits of |pred| and
    |Y|; the batch sums add the absolute values of their terms)."""
    W, b, s = (np.asarray(p, np.float64) for p in params)
    X, Y = X.astype(np.float64), Y.astype(np.float64)
    t = np.tanh(X @ W + b)
    pred = t * s
    r, c, slope = pred - Y, 2 / Y.size, 1 - t * t
    dz = np.abs(X) @ np.abs(W) + np.abs(b)
    dt = slope * dz + np.abs(t)
    dr = np.abs(s) * dt + np.abs(pred) + np.abs(Y)
    dd = c * np.abs(s) * (dr * slope + 2 * np.abs(r * t) * dt)  # of dloss/dz
    return [np.abs(X).T @ dd, dd.sum(0), (c * (dr * np.abs(t) + np.abs(r) * dt)).sum(0)]


def run_lockstep(name, kwargs, init, X, Y, steps, groups=None):
    """tapegrad's training loop (zero_grad, loss, backward, step) with torch.optim's optimiser
    of the same name stepping beside it on the gradient tapegrad computed.

    Returns one record per step: tapegrad's gradients, the float64 gradient at the same
    parameters, their rounding scale (:func:`grad_rounding_scale`), tapegrad's parameters after
    the step and torch's; and tapegrad's optimiser.
    """
    import torch

    import tapegrad as tg
    from tapegrad import optim

    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = getattr(optim, name)(param_groups(params, groups), **kwargs)
    records = []
    with torch_scalars_in(init[0].dtype):
        ref = [torch.tensor(a.copy()) for a in init]
        ref_opt = getattr(torch.optim, name)(param_groups(ref, groups), **kwargs)
        for _ in range(steps):
            opt.zero_grad()
            tg_loss(params, X, Y).backward()
            at = [p.data.copy() for p in params]
            grads = [p.grad.copy() for p in params]
            for r, g in zip(ref, grads):
                r.grad = torch.from_numpy(g.copy())
            opt.step()
            ref_opt.step()
            records.append(
                dict(
                    grads=grads,
                    grads64=float64_grad(at, X, Y),
                    scale=grad_rounding_scale(at, X, Y),
                    params=[p.data.copy() for p in params],
                    ref=[r.numpy().copy() for r in ref],
                )
            )
    return records, opt


def assert_lockstep(records, dtype, step_ulps):
    """Every gradient within 4 eps times its rounding scale of the float64 one (tapegrad's and
    torch's float32 gradients measure below 0.8 with OpenBLAS's Haswell, Sandybridge and
    Prescott kernels), and every step the same as torch's to ``step_ulps`` eps (relative, and
    absolute for values below 1)."""
    eps = np.finfo(dtype).eps
    for k, rec in enumerate(records):
        for i, (g, g64, scale) in enumerate(zip(rec["grads"], rec["grads64"], rec["scale"])):
            assert g.dtype == dtype
            excess = np.abs(g - g64) - 4 * eps * scale
            assert excess.max() <= 0, f"step {k} grad {i}: {np.abs(g - g64).max()} off"
        for i, (p, q) in enumerate(zip(rec["params"], rec["ref"])):
            assert p.dtype == dtype
            tol = step_ulps * eps
            np.testing.assert_allclose(p, q, rtol=tol, atol=tol, err_msg=f"step {k} param {i}")
