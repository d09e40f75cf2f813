"""No leaks: a short soak stays flat, graphs are freed after backward, training makes no cycles.

The long form is ``benchmarks/soak.py`` (its docstring gives the commands); this runs the same
function for 1,500 steps of seed-rnn, and checks that it would notice a real leak.
"""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import soak  # noqa: E402

FLAT = 16 << 10  # bytes the traced memory may move between the end of warm-up and the end


@pytest.fixture
def older_objects_frozen():
    """The soak collects before each of its samples; the objects alive before the test (the
    other tests' imports: PyTorch, JAX, ...) are left out of those collections (``gc.freeze``),
    which then free the soak's own garbage and empty the free lists as before without walking
    the whole heap each time."""
    # frozen objects are hidden from gc.get_referrers too, which tapegrad's in-place checks use
    # to find graph nodes: every model, tensor and graph here is made after the freeze
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_short_soak_is_flat(mode, older_objects_frozen):
    r = soak.soak("seed-rnn", steps=1500, batch_size=8, warmup=200, sample_every=50, mode=mode)
    print("\n" + soak.summary(r))
    assert r.final_loss < 1.0  # it really trained
    assert abs(r.traced_end - r.traced_start) < FLAT, soak.summary(r)
    assert abs(r.traced_slope_per_1000) < FLAT / 2, soak.summary(r)
    assert r.rss_end - r.rss_start < 16 << 20, soak.summary(r)


def test_soak_would_see_a_leak(monkeypatch, older_objects_frozen):
    real = soak.make_step
    kept = []

    def leaky(*args, **kwargs):
        step = real(*args, **kwargs)

        def leaking_step(i):
            kept.append(np.zeros(16))  # ~240 bytes a step: small, like a forgotten graph node
            return step(i)

        return leaking_step

    monkeypatch.setattr(soak, "make_step", leaky)
    r = soak.soak("mlp", steps=400, batch_size=4, warmup=100, sample_every=50)
    assert r.traced_end - r.traced_start > FLAT / 2
    assert r.traced_slope_per_1000 > FLAT


def test_soak_names_the_modes():
    with pytest.raises(ValueError, match="'jit' is not available yet.*compiled.*eager"):
        soak.soak("mlp", steps=10, mode="jit")


def test_plans_are_freed_with_their_compiled_function(no_gc):

    w = tg.tensor(np.ones((4, 3), np.float32), requires_grad=True)

    def step(x):
        w.grad = None
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss

    compiled = tg.compile(step)
    for n in (2, 2, 5):  # two plans
        compiled(np.ones((n, 4), np.float32))
    plans = [weakref.ref(p) for p in compiled.all_plans]
    buffers = [weakref.ref(p.vals[max(p.vals)]) for p in compiled.all_plans]
    assert len(plans) == 2 and all(r() is not None for r in plans)
    del compiled
    assert all(r() is None for r in plans), "a plan outlived its compiled function"
    assert all(r() is None for r in buffers), "a plan's buffers outlived it"


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("retain", [False, True])
def test_graph_is_freed_after_backward(no_gc, retain):
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.normal(size=(5, 4)), requires_grad=True)
    x = tg.tensor(rng.normal(size=(3, 5)))
    h = (x @ w).tanh()  # an intermediate: the loss's graph holds it
    loss = (h * h).sum()
    h_ref, data_ref = weakref.ref(h), weakref.ref(h.data)
    del h
    assert h_ref() is not None  # held by the graph while it is needed
    loss.backward(retain_graph=retain)
    if retain:
        assert h_ref() is not None  # kept for a second backward ...
        del loss
    # ... and otherwise freed by reference counting alone (gc is off: no cycles involved)
    assert h_ref() is None and data_ref() is None
    assert w.grad is not None and w.grad.shape == (5, 4)


def test_training_steps_create_no_reference_cycles(no_gc):
    step = soak.make_step("seed-rnn", "compiled", 8)
    for i in range(20):  # warm-up: first-call caches
        step(i)
    gc.collect()
    for i in range(200):
        step(i)
    found = gc.collect()
    assert found < 20, f"{found} objects in reference cycles after 200 steps"


def test_modules_and_optimizer_state_do_not_grow():
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = tg.optim.Adam(model.parameters(), lr=1e-2)
    x = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    y = np.arange(16) % 3
    sizes = []
    for _ in range(3):
        for _ in range(50):
            opt.zero_grad()
            nn.functional.cross_entropy(model(tg.tensor(x)), y).backward()
            opt.step()
        state = opt.state_dict()
        sizes.append((len(state), sum(getattr(v, "nbytes", 0) for v in state.values())))
    assert sizes[0] == sizes[1] == sizes[2]
