"""The Trainer's step as one plan: the optimiser's updates recorded in it behind a guard on the
loss, giving the bits of the update run after the step, and skipping it on a non-finite loss
at a replay as at the trace."""

import numpy as np
import pytest

from tapegrad import nn, optim
from tapegrad.optim.lr_scheduler import StepLR
from tapegrad.train import Trainer


def _problem(seed=0, n=96):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int64)
    return x, y


def _model(seed=0):
    rng = np.random.default_rng(seed)
    return nn.Sequential(nn.Linear(6, 8, rng=rng), nn.ReLU(), nn.Linear(8, 3, rng=rng))


def _optimizer(name, params):
    if name == "adam":
        return optim.Adam(params, lr=0.01, weight_decay=0.01)
    if name == "adamw-amsgrad":
        return optim.AdamW(params, lr=0.01, amsgrad=True)
    return optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)


def _weights(model):
    return [p.data.copy() for p in model.parameters()]


def _reference(name, batches):
    """The same training written by hand: forward, backward, then ``opt.step()`` eagerly."""
    model = _model()
    opt = _optimizer(name, model.parameters())
    for xb, yb in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    return _weights(model), opt


@pytest.mark.parametrize("name", ["adam", "adamw-amsgrad", "sgd"])
@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_the_update_inside_the_step_gives_the_bits_of_one_after_it(name, mode):
    x, y = _problem()
    batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 96, 32)] * 3
    model = _model()
    opt = _optimizer(name, model.parameters())
    trainer = Trainer(model, opt, progress=False, log=None, mode=mode)
    for xb, yb in batches:
        trainer.train_step(xb, yb)
    expected, ref_opt = _reference(name, batches)
    for got, want in zip(_weights(model), expected):
        np.testing.assert_array_equal(got, want)
    for i, state in ref_opt.state.items():
        for key, value in state.items():
            np.testing.assert_array_equal(opt.state[i][key], value, err_msg=f"{i}.{key}")
    if mode == "compiled":
        (plan,) = trainer._compiled.all_plans
        updates = [e.prim.name for e in plan.eqs if e.prim.name.endswith("_update")]
        assert updates == [f"{type(opt).__name__.lower()}_update"] * len(expected)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_a_non_finite_loss_at_a_replay_updates_nothing(mode):
    x, y = _problem()
    model = _model()
    opt = _optimizer("adam", model.parameters())
    scheduler = StepLR(opt, step_size=1, gamma=0.5)
    trainer = Trainer(model, opt, progress=False, log=None, mode=mode, scheduler=scheduler)
    for _ in range(3):  # traced, then replayed
        value, _ = trainer.train_step(x[:32], y[:32])
        assert np.isfinite(value)
    weights = _weights(model)
    moments = {i: {k: np.copy(v) for k, v in s.items()} for i, s in opt.state.items()}
    lr = opt.param_groups[0]["lr"]
    bad = x[:32].copy()
    bad[5, 2] = np.inf  # one sample: the mean loss is not finite
    value, correct = trainer.train_step(bad, y[:32])
    assert not np.isfinite(value) and correct == 0
    for got, want in zip(_weights(model), weights):
        np.testing.assert_array_equal(got, want)
    for i, state in moments.items():
        for key, v in state.items():
            np.testing.assert_array_equal(opt.state[i][key], v, err_msg=f"{i}.{key}")
    assert opt.param_groups[0]["lr"] == lr  # the scheduler did not step either
    if mode == "compiled":
        assert len(trainer._compiled.all_plans) == 1  # the replay stopped; no new trace
    value, _ = trainer.train_step(x[:32], y[:32])  # and the next good batch trains on
    assert np.isfinite(value)
    assert opt.state[0]["step"] == moments[0]["step"] + 1
    assert opt.param_groups[0]["lr"] == lr * 0.5


def test_a_non_finite_loss_at_the_first_step_updates_nothing():
    x, y = _problem()
    model = _model()
    opt = _optimizer("sgd", model.parameters())
    trainer = Trainer(model, opt, progress=False, log=None)
    weights = _weights(model)
    bad = x[:32].copy()
    bad[0, 0] = np.nan
    value, _ = trainer.train_step(bad, y[:32])  # the trace itself stops before the update
    assert np.isnan(value)
    for got, want in zip(_weights(model), weights):
        np.testing.assert_array_equal(got, want)
    assert opt.state == {}


class _OwnOptimizer:
    """An optimiser that is not tapegrad's (its step is plain NumPy a plan could not record):
    the Trainer runs it after the step, as before."""

    def __init__(self, params, lr):
        self.params, self.lr, self.steps = list(params), lr, 0

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        self.steps += 1
        for p in self.params:
            p.data -= self.lr * p.grad

    def state_dict(self):
        return {}


@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_an_optimiser_a_plan_cannot_record_runs_after_the_step(mode):
    x, y = _problem()
    model = _model()
    opt = _OwnOptimizer(model.parameters(), 0.1)
    trainer = Trainer(model, opt, progress=False, log=None, mode=mode)
    for _ in range(4):
        trainer.train_step(x[:32], y[:32])
    assert opt.steps == 4
    reference = _model()
    for _ in range(4):
        for p in reference.parameters():
            p.grad = None
        nn.functional.cross_entropy(reference(x[:32]), y[:32]).backward()
        for p in reference.parameters():
            p.data -= 0.1 * p.grad
    for got, want in zip(_weights(model), _weights(reference)):
        np.testing.assert_array_equal(got, want)
    bad = x[:32].copy()
    bad[1, 1] = np.nan
    trainer.train_step(bad, y[:32])
    assert opt.steps == 4  # skipped on the non-finite loss, as the update inside the step is


@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_a_scheduler_s_learning_rate_reaches_the_update_inside_the_step(mode):
    x, y = _problem()
    batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 96, 32)] * 2
    model = _model()
    opt = _optimizer("sgd", model.parameters())
    sched = StepLR(opt, step_size=2, gamma=0.1)
    trainer = Trainer(model, opt, progress=False, log=None, mode=mode, scheduler=sched)
    for xb, yb in batches:
        trainer.train_step(xb, yb)
    reference = _model()
    ref_opt = _optimizer("sgd", reference.parameters())
    ref_sched = StepLR(ref_opt, step_size=2, gamma=0.1)
    for xb, yb in batches:
        ref_opt.zero_grad()
        nn.functional.cross_entropy(reference(xb), yb).backward()
        ref_opt.step()
        ref_sched.step()
    assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"] < 0.1
    for got, want in zip(_weights(model), _weights(reference)):
        np.testing.assert_array_equal(got, want)
