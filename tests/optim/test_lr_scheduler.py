"""Learning-rate schedules equal torch's, step for step, and resume from their state dicts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import optim

CASES = [
    ("StepLR", dict(step_size=7, gamma=0.5)),
    ("StepLR", dict(step_size=1, gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=10)),
    ("CosineAnnealingLR", dict(T_max=7, eta_min=0.01)),
]


def _mine(lrs):
    groups = [
        {"params": [tg.tensor(np.zeros(2, np.float32), requires_grad=True)], "lr": lr} for lr in lrs
    ]
    return optim.SGD(groups, lr=1.0, momentum=0.9)


def _theirs(lrs):
    groups = [{"params": [torch.zeros(2, requires_grad=True)], "lr": lr} for lr in lrs]
    return torch.optim.SGD(groups, lr=1.0, momentum=0.9)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_sequence_equals_torch(name, kwargs):
    opt, topt = _mine([0.1, 0.03]), _theirs([0.1, 0.03])
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
    assert len({round(lr[0], 12) for lr in seq}) > 3  # the schedule did change the lr


def test_lr_scheduler_module_and_closed_forms():
    assert optim.lr_scheduler.StepLR is optim.StepLR
    opt = _mine([0.2])
    s = optim.StepLR(opt, step_size=3, gamma=0.1)
    for epoch in range(1, 10):
        s.step()
        assert s.get_last_lr()[0] == pytest.approx(0.2 * 0.1 ** (epoch // 3), rel=1e-12)
    opt = _mine([0.2])
    c = optim.CosineAnnealingLR(opt, T_max=8, eta_min=0.02)
    for epoch in range(1, 9):
        c.step()
        want = 0.02 + (0.2 - 0.02) * (1 + np.cos(np.pi * epoch / 8)) / 2
        assert c.get_last_lr()[0] == pytest.approx(want, rel=1e-12)
    assert opt.param_groups[0]["initial_lr"] == 0.2


@pytest.mark.parametrize("name,kwargs", CASES[::2], ids=["StepLR", "Cosine"])
def test_state_dict_resume(name, kwargs):
    opt = _mine([0.1])
    sched = getattr(optim, name)(opt, **kwargs)
    for _ in range(12):
        sched.step()
    sd = json.loads(json.dumps(sched.state_dict()))
    osd = opt.state_dict()
    rest = [sched.step() or sched.get_last_lr() for _ in range(10)]

    opt2 = _mine([0.5])
    opt2.load_state_dict(osd)
    sched2 = getattr(optim, name)(opt2, **kwargs)
    sched2.load_state_dict(sd)
    assert sched2.last_epoch == 12 and opt2.param_groups[0]["lr"] == sd["last_lr"][0]
    rest2 = [sched2.step() or sched2.get_last_lr() for _ in range(10)]
    assert rest == rest2


def test_scheduler_errors():
    opt = _mine([0.1])
    with pytest.raises(ValueError, match="step_size must be a positive int"):
        optim.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        optim.StepLR(opt, step_size=2, gamma=-1)
    with pytest.raises(ValueError, match="T_max must be a positive int"):
        optim.CosineAnnealingLR(opt, T_max=2.5)
    with pytest.raises(TypeError, match="expected a tapegrad Optimizer"):
        optim.StepLR(_theirs([0.1]), step_size=2)
    with pytest.raises(KeyError, match="initial_lr"):
        optim.StepLR(_mine([0.1]), step_size=2, last_epoch=5)
    s = optim.StepLR(opt, step_size=2)
    c = optim.CosineAnnealingLR(_mine([0.1]), T_max=3)
    with pytest.raises(ValueError, match="expected keys"):
        s.load_state_dict(c.state_dict())
    with pytest.raises(ValueError, match="not 'StepLR'"):
        s.load_state_dict({**s.state_dict(), "type": "Other"})
