"""MultiStepLR, ExponentialLR, LambdaLR and ReduceLROnPlateau: the same learning rates as
torch's, step for step; state dicts that resume exactly; clear errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import optim


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _mine(lrs):
    groups = [
        {"params": [tg.tensor(np.zeros(2, np.float32), requires_grad=True)], "lr": lr} for lr in lrs
    ]
    return optim.SGD(groups, lr=1.0, momentum=0.9)


def _theirs(torch, lrs):
    groups = [{"params": [torch.zeros(2, requires_grad=True)], "lr": lr} for lr in lrs]
    return torch.optim.SGD(groups, lr=1.0, momentum=0.9)


def _warmup(epoch):
    return min(1.0, (epoch + 1) / 5)


class Halving:  # a callable object, not a function
    def __call__(self, epoch):
        return 0.5 ** (epoch // 4)


CASES = [
    ("MultiStepLR", dict(milestones=[3, 7, 7, 12], gamma=0.5)),
    ("MultiStepLR", dict(milestones=[0, 5], gamma=0.3)),  # a milestone at 0 applies at once
    ("MultiStepLR", dict(milestones=(8, 2, 4), gamma=0.9)),  # any order
    ("ExponentialLR", dict(gamma=0.9)),
    ("ExponentialLR", dict(gamma=1.05)),
    ("LambdaLR", dict(lr_lambda=lambda e: 0.95**e)),
    ("LambdaLR", dict(lr_lambda=[_warmup, Halving()])),
    ("LambdaLR", dict(lr_lambda=lambda e: 1.0 / (1 + e))),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]


@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_sequence_equals_torch(torch, name, kwargs):
    opt, topt = _mine([0.1, 0.03]), _theirs(torch, [0.1, 0.03])
    sched = getattr(optim, name)(opt, **kwargs)
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    seq, tseq = [sched.get_last_lr()], [tsched.get_last_lr()]
    for _ in range(30):
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        seq.append(sched.get_last_lr())
        tseq.append(tsched.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == seq[-1]
    assert seq == tseq  # exactly, float for float
    assert len({round(lr[0], 12) for lr in seq}) > 1  # the schedule did change the lr
    assert sched.base_lrs == [0.1, 0.03]


def test_closed_forms():
    opt = _mine([0.2])
    s = optim.MultiStepLR(opt, milestones=[2, 5, 5], gamma=0.1)
    for epoch in range(1, 9):
        s.step()
        k = sum(m <= epoch for m in [2, 5, 5])
        assert s.get_last_lr()[0] == pytest.approx(0.2 * 0.1**k, rel=1e-12)
    opt = _mine([0.2])
    e = optim.ExponentialLR(opt, gamma=0.7)
    for epoch in range(1, 9):
        e.step()
        assert e.get_last_lr()[0] == pytest.approx(0.2 * 0.7**epoch, rel=1e-12)
    opt = _mine([0.2])
    lam = optim.LambdaLR(opt, lambda ep: 0.0 if ep == 0 else 1.0 / ep)
    assert opt.param_groups[0]["lr"] == 0.0 and opt.param_groups[0]["initial_lr"] == 0.2
    lam.step()
    lam.step()
    assert lam.get_last_lr() == [0.1]
    assert optim.lr_scheduler.LambdaLR is optim.LambdaLR


# -- ReduceLROnPlateau --------------------------------------------------------------------
def _metrics(seed, n=80):
    """A noisy, slowly improving loss with plateaus (rounding makes exact ties) and a NaN."""
    rng = np.random.default_rng(seed)
    m, out = 1.0, []
    for _ in range(n):
        m *= 1 + rng.normal(-0.01, 0.02)
        out.append(round(m, 2))
    out[n // 2] = math.nan
    return out


PLATEAU = [
    dict(patience=2),
    dict(mode="max", patience=3, factor=0.5),
    dict(threshold_mode="abs", threshold=0.01, patience=1, cooldown=2),
    dict(mode="max", threshold_mode="abs", threshold=0.0, patience=0, min_lr=[0.02, 0.001]),
    dict(patience=1, factor=0.5, min_lr=0.004, eps=1e-3),  # small reductions are skipped
    dict(threshold=0.05, patience=4, cooldown=1, factor=0.2),
]
PLATEAU_IDS = ["-".join(f"{k}={v}" for k, v in kw.items()) for kw in PLATEAU]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kwargs", PLATEAU, ids=PLATEAU_IDS)
def test_plateau_equals_torch(torch, kwargs, seed):
    opt, topt = _mine([0.1, 0.03]), _theirs(torch, [0.1, 0.03])
    sched = optim.ReduceLROnPlateau(opt, **kwargs)
    tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kwargs)
    sign = -1.0 if kwargs.get("mode") == "max" else 1.0
    seq, tseq = [], []
    for m in _metrics(seed):
        sched.step(sign * m)
        tsched.step(sign * m)
        seq.append(sched.get_last_lr())
        tseq.append(tsched.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == seq[-1]
        mine = (sched.best, sched.num_bad_epochs, sched.cooldown_counter, sched.last_epoch)
        theirs = (tsched.best, tsched.num_bad_epochs, tsched.cooldown_counter, tsched.last_epoch)
        assert mine == theirs
    assert seq == tseq
    assert len({lr[0] for lr in seq}) > 1  # it did reduce


def test_plateau_takes_a_tensor_and_reduces_after_patience():
    opt = _mine([1.0])
    s = optim.ReduceLROnPlateau(opt, patience=2, factor=0.5)
    assert s.get_last_lr() == [1.0] and "initial_lr" not in opt.param_groups[0]
    for m in [3.0, 2.0, 2.0, 2.0]:
        s.step(tg.tensor(m))
    assert s.get_last_lr() == [1.0] and s.num_bad_epochs == 2
    s.step(np.float32(2.5))  # the third step without improvement
    assert s.get_last_lr() == [0.5] and s.num_bad_epochs == 0 and s.best == 2.0


def test_plateau_min_lr_follows_added_groups():
    opt = _mine([0.1])
    s = optim.ReduceLROnPlateau(opt, patience=0, min_lr=0.05)
    opt.add_param_group({"params": [tg.tensor(np.zeros(2, np.float32), requires_grad=True)]})
    s.step(1.0)
    s.step(1.0)
    assert s.get_last_lr() == [0.05, 0.1] and s.min_lrs == [0.05, 0.05]
    opt = _mine([0.1])
    s = optim.ReduceLROnPlateau(opt, patience=0, min_lr=[0.05])
    opt.add_param_group({"params": [tg.tensor(np.zeros(2, np.float32), requires_grad=True)]})
    s.step(1.0)
    with pytest.raises(ValueError, match="2 parameter groups but min_lr gave 1"):
        s.step(1.0)


# -- state dicts ----------------------------------------------------------------------------
RESUME = [
    ("MultiStepLR", dict(milestones=[3, 14, 14, 17], gamma=0.5)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("LambdaLR", dict(lr_lambda=lambda e: 0.9 ** (e // 3))),
]


@pytest.mark.parametrize("name,kwargs", RESUME, ids=[n for n, _ in RESUME])
def test_state_dict_resume(name, kwargs):
    opt = _mine([0.1, 0.02])
    sched = getattr(optim, name)(opt, **kwargs)
    for _ in range(12):
        sched.step()
    sd = json.loads(json.dumps(sched.state_dict()))
    if name == "LambdaLR":
        assert not any("lambda" in k for k in sd)  # the functions are not saved
    osd = opt.state_dict()
    rest = [sched.step() or sched.get_last_lr() for _ in range(10)]

    opt2 = _mine([0.5, 0.5])
    opt2.load_state_dict(osd)
    sched2 = getattr(optim, name)(opt2, **kwargs)
    sched2.load_state_dict(sd)
    assert sched2.last_epoch == 12 and opt2.param_groups[0]["lr"] == sd["last_lr"][0]
    rest2 = [sched2.step() or sched2.get_last_lr() for _ in range(10)]
    assert rest == rest2
    assert len({r[0] for r in rest}) > 1


def test_plateau_state_dict_resume():
    metrics = _metrics(3)
    opt = _mine([0.1, 0.02])
    kw = dict(patience=2, cooldown=1, factor=0.5, min_lr=[0.01, 0.0])
    sched = optim.ReduceLROnPlateau(opt, **kw)
    for m in metrics[:30]:
        sched.step(m)
    sd = json.loads(json.dumps(sched.state_dict()))
    osd = opt.state_dict()
    rest = [sched.step(m) or sched.get_last_lr() for m in metrics[30:]]

    opt2 = _mine([0.5, 0.5])
    opt2.load_state_dict(osd)
    sched2 = optim.ReduceLROnPlateau(opt2, mode="max", factor=0.9)  # settings come from sd
    sched2.load_state_dict(sd)
    assert sched2.mode == "min" and sched2.min_lrs == [0.01, 0.0]
    assert [g["lr"] for g in opt2.param_groups] == sd["last_lr"]
    rest2 = [sched2.step(m) or sched2.get_last_lr() for m in metrics[30:]]
    assert rest == rest2
    # before any step, best is infinite: Python's json writes and reads it
    fresh = optim.ReduceLROnPlateau(_mine([0.1]))
    assert json.loads(json.dumps(fresh.state_dict()))["best"] == math.inf


def test_plateau_load_state_dict_rejects_bad_input_and_changes_nothing():
    opt = _mine([0.1])
    s = optim.ReduceLROnPlateau(opt, patience=1)
    for m in [1.0, 0.5, 0.5]:
        s.step(m)
    good = s.state_dict()
    target = optim.ReduceLROnPlateau(_mine([0.3]), mode="max", patience=7)
    before = target.state_dict()
    cases = [
        ({**good, "mode": "avg"}, "mode must be 'min' or 'max'"),
        ({**good, "factor": 1.0}, "factor must be < 1"),
        ({**good, "patience": -1}, "patience must be an int >= 0"),
        ({**good, "last_lr": [0.1, 0.2]}, "last_lr must be a list of 1"),
        ({**good, "last_lr": [-0.1]}, "last_lr must be a finite number >= 0"),
        ({**good, "best": "low"}, "best must be a number"),
        ({**good, "type": "StepLR"}, "not 'ReduceLROnPlateau'"),
        ({k: v for k, v in good.items() if k != "cooldown_counter"}, "expected keys"),
    ]
    for sd, match in cases:
        with pytest.raises(ValueError, match=match):
            target.load_state_dict(sd)
        assert target.state_dict() == before


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda o: optim.MultiStepLR(o, milestones=[2, -1]), ValueError, "ints >= 0"),
        (lambda o: optim.MultiStepLR(o, milestones=[2.5]), ValueError, "ints >= 0"),
        (lambda o: optim.MultiStepLR(o, milestones=5), TypeError, "list of step counts"),
        (lambda o: optim.MultiStepLR(o, [2], gamma=-0.5), ValueError, "gamma must be a finite"),
        (lambda o: optim.ExponentialLR(o, gamma=float("nan")), ValueError, "ExponentialLR: gamma"),
        (lambda o: optim.LambdaLR(o, [_warmup, _warmup]), ValueError, "2 lr_lambda functions"),
        (lambda o: optim.LambdaLR(o, 0.5), TypeError, "lr_lambda 0 is a float"),
        (lambda o: optim.LambdaLR(o, lambda e: "x"), TypeError, r"lr_lambda\(0\) for group 0"),
        (lambda o: optim.LambdaLR(o, lambda e: -1.0), ValueError, "must be finite and >= 0"),
        (lambda o: optim.ReduceLROnPlateau(o, mode="avg"), ValueError, "'min' or 'max'"),
        (lambda o: optim.ReduceLROnPlateau(o, threshold_mode="pct"), ValueError, "'rel' or 'abs'"),
        (lambda o: optim.ReduceLROnPlateau(o, factor=1.0), ValueError, "factor must be < 1"),
        (lambda o: optim.ReduceLROnPlateau(o, factor=-0.1), ValueError, "factor must be a finite"),
        (lambda o: optim.ReduceLROnPlateau(o, patience=1.5), ValueError, "patience must be an int"),
        (lambda o: optim.ReduceLROnPlateau(o, cooldown=-1), ValueError, "cooldown must be an int"),
        (lambda o: optim.ReduceLROnPlateau(o, min_lr=[0.1, 0.2]), ValueError, "2 min_lr values"),
        (lambda o: optim.ReduceLROnPlateau(o, min_lr=-1), ValueError, "min_lr must be a finite"),
        (lambda o: optim.ReduceLROnPlateau(o, eps=-1e-8), ValueError, "eps must be a finite"),
        (lambda o: optim.ReduceLROnPlateau(object()), TypeError, "expected a tapegrad Optimizer"),
    ],
)
def test_bad_settings(make, exc, match):
    with pytest.raises(exc, match=match):
        make(_mine([0.1]))


def test_plateau_step_needs_a_number():
    s = optim.ReduceLROnPlateau(_mine([0.1]))
    with pytest.raises(TypeError, match="the metric must be a number"):
        s.step("low")
    with pytest.raises(TypeError):
        s.step()  # a metric is required
    assert s.last_epoch == 0


def test_lambda_lr_checks_every_step():
    opt = _mine([0.1])
    s = optim.LambdaLR(opt, lambda e: 1.0 if e < 3 else float("inf"))
    s.step()
    s.step()
    with pytest.raises(ValueError, match=r"lr_lambda\(3\) for group 0 returned inf"):
        s.step()


# -- compiled steps read the scheduled lr ------------------------------------------------------
def test_compiled_step_follows_the_schedule():
    from optim_problem import make_problem, tg_loss

    X, Y, init = make_problem(np.float32, seed=4)
    out = {}
    for mode in ("eager", "compiled"):
        params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
        opt = optim.NAdam(params, lr=0.05)
        sched = optim.MultiStepLR(opt, milestones=[2, 4], gamma=0.1)

        def step(x, y, params=params, opt=opt):
            loss = tg_loss(params, x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        f = tg.compile(step) if mode == "compiled" else step
        losses = []
        for _ in range(6):
            losses.append(f(X, Y).item())
            sched.step()
        out[mode] = losses, [p.data.copy() for p in params]
    assert out["eager"][0] == out["compiled"][0]
    for a, b in zip(out["eager"][1], out["compiled"][1]):
        np.testing.assert_array_equal(a, b)
