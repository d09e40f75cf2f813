"""Steady-state steps allocate (almost) nothing; state dicts resume runs bit for bit."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from optim_problem import make_problem, tg_loss

import tapegrad as tg
from tapegrad import optim
from tapegrad.serialization import load_arrays, save_arrays

ALL = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.5)),
    ("Adam", dict(lr=0.01, weight_decay=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.01)),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(ALL)]


@pytest.mark.parametrize("name,kwargs", ALL, ids=IDS)
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


def test_allocation_check_catches_a_temporary():
    """The measurement above sees a parameter-sized temporary (so it can fail)."""
    x = np.ones(1000, np.float32)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        x[:] = x * 0.5
        rise = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert rise >= 4000


def _grad_step(opt, params, X, Y):
    opt.zero_grad()
    tg_loss(params, X, Y).backward()
    opt.step()


def _split(sd):
    arrays = {k: v for k, v in sd.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in sd.items() if not isinstance(v, np.ndarray)}
    return arrays, json.loads(json.dumps(meta))


@pytest.mark.parametrize("name,kwargs", ALL, ids=IDS)
def test_resume_from_state_dict_is_bit_identical(name, kwargs, tmp_path):
    X, Y, init = make_problem(np.float32, seed=1)
    params = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = getattr(optim, name)(params, **kwargs)
    for _ in range(5):
        _grad_step(opt, params, X, Y)
    sd = opt.state_dict()
    assert all(isinstance(k, str) for k in sd)
    arrays, meta = _split(sd)
    frozen = {k: v.copy() for k, v in arrays.items()}
    assert any(k.startswith("state.") for k in arrays)
    # through a checkpoint file, as the trainer will do it
    save_arrays(tmp_path / "ckpt.safetensors", arrays, meta)
    arrays2, meta2 = load_arrays(tmp_path / "ckpt.safetensors")
    resumed = [tg.tensor(p.data.copy(), requires_grad=True) for p in params]
    opt2 = getattr(optim, name)(resumed, lr=123.0)  # hyperparameters come from the state dict
    opt2.load_state_dict({**arrays2, **meta2})
    assert opt2.param_groups[0]["lr"] == kwargs["lr"]
    for _ in range(7):
        _grad_step(opt, params, X, Y)
        _grad_step(opt2, resumed, X, Y)
    for a, b in zip(params, resumed):
        assert np.array_equal(a.data, b.data)
        assert a.data.dtype == b.data.dtype == np.float32
    # the state dict was a copy: the live state moved on, the dict taken earlier did not
    for k, v in frozen.items():
        assert np.array_equal(sd[k], v)
        _, idx, key = k.split(".")
        assert not np.array_equal(opt.state[int(idx)][key], v)


def test_state_dict_layout():
    a = tg.tensor(np.ones(2, np.float32), requires_grad=True)
    b = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}], betas=(0.8, 0.9))
    b.grad = np.ones(3, np.float32)
    opt.step()
    sd = opt.state_dict()
    assert sd["type"] == "Adam"
    assert sd["param_groups.0.params"] == [0] and sd["param_groups.1.params"] == [1]
    assert sd["param_groups.1.lr"] == 0.5 and sd["param_groups.0.betas"] == [0.8, 0.9]
    assert sd["state.1.step"] == 1 and sd["state.1.exp_avg"].shape == (3,)
    assert not any(k.startswith("state.0.") for k in sd)
    json.dumps({k: v for k, v in sd.items() if not isinstance(v, np.ndarray)})
    opt2 = optim.Adam([{"params": [a]}, {"params": [b]}])
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["betas"] == (0.8, 0.9) and opt2.param_groups[1]["lr"] == 0.5


def test_load_state_dict_rejects_mismatches_and_leaves_optimizer_untouched():
    p = tg.tensor(np.ones(4, np.float32), requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    p.grad = np.ones(4, np.float32)
    opt.step()
    good = opt.state_dict()

    q = tg.tensor(np.ones(4, np.float32), requires_grad=True)
    target = optim.Adam([q], lr=0.2)
    q.grad = np.full(4, 2.0, np.float32)
    target.step()
    snapshot = target.state_dict()

    bad_cases = [
        ({**good, "state.0.exp_avg": np.zeros(5, np.float32)}, r"shape \(4,\)"),
        ({k: v for k, v in good.items() if k != "state.0.exp_avg_sq"}, "expected"),
        ({**good, "state.0.step": -1}, "count >= 0"),
        ({**good, "type": "SGD"}, "for 'SGD', not 'Adam'"),
        ({**good, "param_groups.0.params": [0, 1]}, "group 0 has 1 parameters"),
        ({**good, "param_groups.1.params": [1]}, "2 parameter groups"),
        ({**good, "param_groups.0.lr": -1.0}, "invalid lr"),
        ({**good, "param_groups.0.amsgrad": True}, "max_exp_avg_sq"),
        ({**good, "bogus": 1}, "unexpected key"),
        ({**good, "state.0.exp_avg": np.zeros(4, np.int64)}, "float array"),
    ]
    for sd, match in bad_cases:
        with pytest.raises(ValueError, match=match):
            target.load_state_dict(sd)
        after = target.state_dict()
        assert after.keys() == snapshot.keys()
        for k, v in snapshot.items():
            assert np.array_equal(after[k], v) if isinstance(v, np.ndarray) else after[k] == v
