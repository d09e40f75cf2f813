"""Optimisers as equations (issue 25, item 4): ``opt.step()`` inside a compiled step is one
update equation per parameter in the plan, reading the live gradient, hyperparameters and state,
and eager ``opt.step()`` runs the same primitive, so compiled and eager agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim

OPTIMISERS = {
    "SGD": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "Adam": lambda ps: optim.Adam(ps, lr=1e-2, amsgrad=True),
    "AdamW": lambda ps: optim.AdamW(ps, lr=1e-2),
    "RMSprop": lambda ps: optim.RMSprop(ps, lr=1e-3, momentum=0.5, centered=True),
    "Adagrad": lambda ps: optim.Adagrad(ps, lr=0.05),
    "Adadelta": lambda ps: optim.Adadelta(ps, lr=1.0),
    "Adamax": lambda ps: optim.Adamax(ps, lr=1e-2),
    "NAdam": lambda ps: optim.NAdam(ps, lr=1e-2),
}


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = rng.standard_normal((32, 2)).astype(np.float32)
    return x, y


def _train(make_opt, compiled: bool, steps: int = 25, between=None):
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = make_opt(model.parameters())
    x, y = _data()

    def step(xb, yb):
        opt.zero_grad()
        loss = ((model(xb) - yb) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    f = tg.compile(step) if compiled else step
    losses = []
    for i in range(steps):
        if between is not None:
            between(i, opt, model)
        losses.append(float(f(x, y).item()))
    return losses, [p.data.copy() for p in model.parameters()], f, opt


@pytest.mark.parametrize("name", sorted(OPTIMISERS))
def test_step_is_one_update_equation_per_parameter(name):
    eager, w_eager, _, _ = _train(OPTIMISERS[name], False)
    comp, w_comp, f, _ = _train(OPTIMISERS[name], True)
    assert comp == eager
    for a, b in zip(w_eager, w_comp):
        np.testing.assert_array_equal(a, b)
    (plan,) = f.all_plans
    updates = [lb for lb in plan.labels if lb.startswith(f"{name.lower()}_update(")]
    assert len(updates) == 4  # two weights, two biases
    assert not any(lb.startswith("call") and "step" in lb for lb in plan.labels)
    assert updates[0] == f"{name.lower()}_update((8, 4), (8, 4))"


def test_scheduler_and_hyperparameter_changes_reach_the_plan():
    """A scheduler's lr and a hand-set hyperparameter are read by each replay, not frozen."""

    def between(i, opt, model):
        opt.param_groups[0]["lr"] = 0.05 / (1 + i)
        if i == 10:
            opt.param_groups[0]["betas"] = (0.8, 0.99)

    make = lambda ps: optim.Adam(ps, lr=0.05)  # noqa: E731
    eager, w_eager, _, _ = _train(make, False, between=between)
    comp, w_comp, f, _ = _train(make, True, between=between)
    assert comp == eager
    for a, b in zip(w_eager, w_comp):
        np.testing.assert_array_equal(a, b)
    assert len(f.all_plans) == 1


def test_loaded_state_is_what_replays_update():
    """load_state_dict between replays (a resume): the plan updates the loaded moments."""
    saved = {}

    def between(i, opt, model):
        if i == 5:
            saved["opt"] = opt.state_dict()
            saved["model"] = {k: v.copy() for k, v in model.state_dict().items()}
        if i == 15:  # go back to step 5 and train again from there
            opt.load_state_dict(saved["opt"])
            model.load_state_dict(saved["model"])

    make = lambda ps: optim.Adam(ps, lr=1e-2)  # noqa: E731
    eager, w_eager, _, _ = _train(make, False, between=between)
    comp, w_comp, _, _ = _train(make, True, between=between)
    assert comp == eager
    assert eager[15] == eager[5]  # the resume really went back
    for a, b in zip(w_eager, w_comp):
        np.testing.assert_array_equal(a, b)


def test_a_new_parameter_group_retraces():
    extra = nn.Parameter(np.ones(3, np.float32))

    def between(i, opt, model):
        if i == 3:
            opt.add_param_group({"params": [extra], "lr": 0.1})

    make = lambda ps: optim.SGD(ps, lr=0.05)  # noqa: E731
    _, _, f, _ = _train(make, True, steps=6, between=between)
    assert len(f.retraces) == 1 and "parameter groups" in f.retraces[0]
