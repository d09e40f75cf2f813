"""PyTorch's training-loop habits in tapegrad (issue 26): ``OneCycleLR`` with momentum
cycling as PyTorch's (its trajectory against torch's), and ``tg.save``/``tg.load`` of nested
checkpoints (model, optimiser and scheduler state and the step in one safetensors file)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn


def _x(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- OneCycleLR as PyTorch's ------------------------------------------------------------------
@pytest.mark.parametrize(
    "opt, kw",
    [
        ("SGD", {"total_steps": 20}),
        ("SGD", {"epochs": 3, "steps_per_epoch": 7, "anneal_strategy": "linear"}),
        ("Adam", {"total_steps": 25, "three_phase": True, "pct_start": 0.25}),
        ("AdamW", {"total_steps": 12, "cycle_momentum": False, "div_factor": 10.0}),
        ("SGD", {"total_steps": 16, "base_momentum": 0.8, "max_momentum": 0.9}),
    ],
)
def test_one_cycle_lr_trajectory_matches_torch(opt, kw):
    w_t = nn.Parameter(np.zeros(2, np.float32))
    w_p = torch.nn.Parameter(torch.zeros(2))
    extra = {"momentum": 0.9} if opt == "SGD" else {}
    o_t = getattr(tg.optim, opt)([w_t], lr=0.1, **extra)
    o_p = getattr(torch.optim, opt)([w_p], lr=0.1, **extra)
    s_t = tg.optim.OneCycleLR(o_t, max_lr=0.5, **kw)
    s_p = torch.optim.lr_scheduler.OneCycleLR(o_p, max_lr=0.5, **kw)
    total = kw.get("total_steps") or kw["epochs"] * kw["steps_per_epoch"]
    key = "betas" if opt != "SGD" else "momentum"
    for _ in range(total):
        g_t, g_p = o_t.param_groups[0], o_p.param_groups[0]
        assert g_t["lr"] == pytest.approx(g_p["lr"], rel=1e-12, abs=1e-15)
        np.testing.assert_allclose(np.ravel(g_t[key]), np.ravel(g_p[key]), rtol=1e-12)
        o_t.step()
        o_p.step()
        s_t.step()
        s_p.step()
    with pytest.raises(ValueError, match="total_steps"):
        s_t.step()
        s_t.step()


def test_one_cycle_lr_needs_momentum_to_cycle():
    w = nn.Parameter(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="cycle_momentum=False"):
        tg.optim.OneCycleLR(tg.optim.Adagrad([w], lr=0.1), max_lr=0.5, total_steps=10)
    tg.optim.OneCycleLR(tg.optim.Adagrad([w], lr=0.1), 0.5, 10, cycle_momentum=False)
    with pytest.raises(ValueError, match="epochs and steps_per_epoch"):
        tg.optim.OneCycleLR(tg.optim.SGD([w], lr=0.1), max_lr=0.5, epochs=3)


# -- tg.save / tg.load of nested checkpoints ----------------------------------------------------
def test_nested_checkpoint_round_trip_resumes_exactly(tmp_path):
    import io

    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    opt = tg.optim.Adam(model.parameters(), lr=0.05)
    sched = tg.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    x = tg.tensor(_x(8, 3, dtype=np.float32))

    def step():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        sched.step()

    for _ in range(3):
        step()
    ckpt = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "step": 3,
        "extras": [tg.tensor(np.arange(3)), (1.5, "name", None, True), {0: np.float32(2.5)}],
    }
    path, buf = tmp_path / "ckpt.pt", io.BytesIO()
    tg.save(ckpt, path)
    tg.save(ckpt, buf)
    raw = path.read_bytes()
    assert raw[8:9] == b"{" and b"pickle" not in raw  # safetensors: a JSON header first
    buf.seek(0)
    for loaded in (tg.load(path), tg.load(buf, map_location="cpu", weights_only=True)):
        assert loaded["step"] == 3 and loaded["extras"][1] == (1.5, "name", None, True)
        assert isinstance(loaded["extras"][0], tg.Tensor) and loaded["extras"][0].tolist() == [
            0,
            1,
            2,
        ]
        assert loaded["extras"][2] == {0: np.float32(2.5)}
        assert list(loaded["model"]) == list(ckpt["model"])
        assert loaded["optimizer"].keys() == ckpt["optimizer"].keys()
    step()  # the original run's fourth step
    expected = [p.numpy().copy() for p in model.parameters()]
    # a fresh model resumed from the checkpoint takes the same fourth step (step() reads
    # model, opt and sched when called)
    tg.manual_seed(1)
    model2 = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    opt2 = tg.optim.Adam(model2.parameters(), lr=0.05)
    sched2 = tg.optim.lr_scheduler.StepLR(opt2, 2, 0.5)
    loaded = tg.load(path)
    model2.load_state_dict(loaded["model"])
    opt2.load_state_dict(loaded["optimizer"])
    sched2.load_state_dict(loaded["scheduler"])
    model, opt, sched = model2, opt2, sched2
    step()
    for a, b in zip(expected, model2.parameters()):
        np.testing.assert_array_equal(a, b.numpy())
    # a flat state dict is still a model file, loadable into a model
    tg.save(model2.state_dict(), tmp_path / "m.safetensors")
    assert set(tg.load(tmp_path / "m.safetensors", model=model2)) == set(model2.state_dict())
    path.write_bytes(raw[:-3])
    with pytest.raises(tg.serialization.ModelFileError, match="ckpt.pt"):
        tg.load(path)
