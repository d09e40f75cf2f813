"""The GRU scan's kernels (``kernels/cpu/gru.py``) against their step-by-step NumPy references
(within the step kernels' exp: a few ulp), serial and parallel runs the same bits, a workspace
holding other bytes changing nothing, and the primitive taking them."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels import generic
from tapegrad.autodiff.kernels.cpu import gru

SHAPES = [(5, 100, 16), (3, 130, 8), (3, 7, 5), (1, 70, 4)]  # (T, N, H)
TOL = {np.float32: 4e-6, np.float64: 1e-14}


def _case(shape, dtype, seed=0):
    t, n, h = shape
    rng = np.random.default_rng(seed)
    xp = rng.standard_normal((n, t, 3 * h)).astype(dtype).transpose(1, 0, 2)  # batch-major view
    whh = (rng.standard_normal((3 * h, h)) * 0.3).astype(dtype)
    bhh = rng.standard_normal(3 * h).astype(dtype)
    h0 = rng.standard_normal((n, h)).astype(dtype)
    g = rng.standard_normal((t, n, h)).astype(dtype)
    return xp, whh, bhh, h0, g


def _forward(fn, xp, whh, bhh, h0, scratch=None):
    t, n, g3 = xp.shape
    hs = np.full((t, n, g3 // 3), np.nan, xp.dtype)
    act = np.full((t, n, 4 * (g3 // 3)), np.nan, xp.dtype)
    fn(xp, whh, bhh, h0, hs, act, scratch)
    return hs, act


def _backward(fn, g, saved, whh, h0, need_h0):
    hs, act = saved
    t, n, h = hs.shape
    dxp = np.full((n, t, 3 * h), np.nan, g.dtype).transpose(1, 0, 2)
    dhw = np.full((t, n, 3 * h), np.nan, g.dtype)
    dh, dhd = np.full(h0.shape, np.nan, g.dtype), np.full(h0.shape, np.nan, g.dtype)
    fn(g, hs, act, whh, h0, dxp, dhw, dh, dhd, need_h0)
    return (dxp, dhw, dh, dhd) if need_h0 else (dxp, dhw, dhd)


@pytest.mark.parametrize("need_h0", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_kernels_match_the_references(shape, dtype, need_h0):
    xp, whh, bhh, h0, g = _case(shape, dtype)
    got = _forward(gru.gru_scan_forward, xp, whh, bhh, h0)
    want = _forward(gru.gru_scan_forward_reference, xp, whh, bhh, h0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL[dtype] * np.abs(b).max())
    got = _backward(gru.gru_scan_backward, g, want, whh, h0, need_h0)
    want = _backward(gru.gru_scan_backward_reference, g, want, whh, h0, need_h0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL[dtype] * np.abs(b).max())


@pytest.mark.parametrize("shape", SHAPES)
def test_serial_and_parallel_runs_give_the_same_bits(shape, threads, monkeypatch):
    monkeypatch.setattr(gru, "PARALLEL_MIN_SIZE", 0)  # small cases in parallel too
    xp, whh, bhh, h0, g = _case(shape, np.float32, seed=2)
    runs = []
    for count in (1, 2):
        threads(count)
        saved = _forward(gru.gru_scan_forward, xp, whh, bhh, h0)
        grads = _backward(gru.gru_scan_backward, g, saved, whh, h0, True)
        runs.append(b"".join(a.tobytes() for a in (*saved, *grads)))
    assert runs[0] == runs[1]


def test_a_workspace_holding_other_bytes_changes_nothing():
    kept = {}

    def scratch(key, shape):
        if key not in kept:
            kept[key] = np.full(shape, np.nan)
        return kept[key]

    xp, whh, bhh, h0, _ = _case(SHAPES[1], np.float64, seed=3)
    first = _forward(gru.gru_scan_forward, xp, whh, bhh, h0, scratch)
    for a in kept.values():
        a.fill(1e300)
    second = _forward(gru.gru_scan_forward, xp, whh, bhh, h0, scratch)
    assert set(kept) == {"gru_hw", "gru_whh_t"}
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))


def test_the_rule_and_the_primitive(monkeypatch):
    import tapegrad as tg
    from tapegrad import ops

    assert gru.gru_scan_rows(np.float64) and not generic.gru_scan_rows(np.float64)
    calls = []
    for name in ("gru_scan_forward", "gru_scan_backward"):
        fn = getattr(gru, name)
        monkeypatch.setattr(
            "tapegrad.autodiff.kernels.cpu." + name,
            lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a),
        )
    xp, whh, bhh, h0, g = _case(SHAPES[2], np.float64, seed=5)
    args = [tg.tensor(np.ascontiguousarray(a), requires_grad=True) for a in (xp, whh, bhh, h0)]
    hs = ops.gru_scan(*args)
    (hs * tg.tensor(g)).sum().backward()
    assert calls == ["gru_scan_forward", "gru_scan_backward"]
    want = _forward(gru.gru_scan_forward_reference, xp, whh, bhh, h0)
    np.testing.assert_allclose(hs.data, want[0], rtol=0, atol=1e-14)
    dxp, dhw, dh, dhd = _backward(gru.gru_scan_backward_reference, g, want, whh, h0, True)
    np.testing.assert_allclose(args[0].grad, dxp, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(args[2].grad, dhw.sum(axis=(0, 1)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(args[3].grad, dh + dhd, rtol=1e-12, atol=1e-13)
    dwhh = sum(dhw[t].T @ (want[0][t - 1] if t else h0) for t in range(xp.shape[0]))
    np.testing.assert_allclose(args[1].grad, dwhh, rtol=1e-12, atol=1e-12)
