"""The LSTM scan's kernels (``kernels/cpu/lstm.py``) against their step-by-step NumPy references
(within the step kernels' exp: a few ulp), serial and parallel runs the same bits, a workspace
holding other bytes changing nothing, and the primitive taking them."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels import generic
from tapegrad.autodiff.kernels.cpu import lstm

SHAPES = [(5, 100, 16), (3, 130, 8), (3, 7, 5), (1, 70, 4)]  # (T, N, H)
TOL = {np.float32: 4e-6, np.float64: 1e-14}


def _case(shape, dtype, seed=0):
    t, n, h = shape
    rng = np.random.default_rng(seed)
    xp = rng.standard_normal((n, t, 4 * h)).astype(dtype).transpose(1, 0, 2)  # batch-major view
    whh = (rng.standard_normal((4 * h, h)) * 0.3).astype(dtype)
    h0, c0 = (rng.standard_normal((n, h)).astype(dtype) for _ in range(2))
    g = rng.standard_normal((2, t, n, h)).astype(dtype)
    return xp, whh, h0, c0, g


def _forward(fn, xp, whh, h0, c0, scratch=None):
    t, n, g4 = xp.shape
    out = np.full((2, t, n, g4 // 4), np.nan, xp.dtype)
    act, tc = np.full((t, n, g4), np.nan, xp.dtype), np.full((t, n, g4 // 4), np.nan, xp.dtype)
    fn(xp, whh, h0, c0, out, act, tc, scratch)
    return out, act, tc


def _backward(fn, g, saved, whh, c0, need_h0):
    out, act, tc = saved
    dxp = np.full(act.shape, np.nan, g.dtype)
    dh, dc = np.full(c0.shape, np.nan, g.dtype), np.full(c0.shape, np.nan, g.dtype)
    fn(g, out, act, tc, whh, c0, dxp, dh, dc, need_h0)
    return dxp, dh, dc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_kernels_match_the_references(shape, dtype):
    xp, whh, h0, c0, g = _case(shape, dtype)
    got = _forward(lstm.lstm_scan_forward, xp, whh, h0, c0)
    want = _forward(lstm.lstm_scan_forward_reference, xp, whh, h0, c0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL[dtype])
    got = _backward(lstm.lstm_scan_backward, g, want, whh, c0, True)
    want = _backward(lstm.lstm_scan_backward_reference, g, want, whh, c0, True)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL[dtype] * np.abs(b).max())


@pytest.mark.parametrize("shape", SHAPES)
def test_serial_and_parallel_runs_give_the_same_bits(shape, threads, monkeypatch):
    monkeypatch.setattr(lstm, "PARALLEL_MIN_SIZE", 0)  # small cases in parallel too
    xp, whh, h0, c0, g = _case(shape, np.float32, seed=2)
    runs = []
    for count in (1, 2):
        threads(count)
        saved = _forward(lstm.lstm_scan_forward, xp, whh, h0, c0)
        grads = _backward(lstm.lstm_scan_backward, g, saved, whh, c0, True)
        runs.append(b"".join(a.tobytes() for a in (*saved, *grads)))
    assert runs[0] == runs[1]


def test_a_workspace_holding_other_bytes_changes_nothing():
    kept = {}

    def scratch(key, shape):
        if key not in kept:
            kept[key] = np.full(shape, np.nan)
        return kept[key]

    xp, whh, h0, c0, _ = _case(SHAPES[1], np.float64, seed=3)
    first = _forward(lstm.lstm_scan_forward, xp, whh, h0, c0, scratch)
    for a in kept.values():
        a.fill(1e300)
    second = _forward(lstm.lstm_scan_forward, xp, whh, h0, c0, scratch)
    assert set(kept) == {"lstm_hw", "lstm_whh_t"}
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))


def test_the_rule_and_the_primitive(monkeypatch):
    import tapegrad as tg
    from tapegrad import ops

    assert lstm.lstm_scan_rows(np.float32) and not generic.lstm_scan_rows(np.float32)
    calls = []
    for name in ("lstm_scan_forward", "lstm_scan_backward"):
        fn = getattr(lstm, name)
        monkeypatch.setattr(
            "tapegrad.autodiff.kernels.cpu." + name,
            lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a),
        )
    xp, whh, h0, c0, g = _case(SHAPES[2], np.float64, seed=5)
    args = [tg.tensor(np.ascontiguousarray(a), requires_grad=True) for a in (xp, whh, h0, c0)]
    out = ops.lstm_scan(*args)
    (out * tg.tensor(g)).sum().backward()
    assert calls == ["lstm_scan_forward", "lstm_scan_backward"]
    want = _forward(lstm.lstm_scan_forward_reference, xp, whh, h0, c0)
    np.testing.assert_allclose(out.data, want[0], rtol=0, atol=1e-14)
    dxp, dh, dc = _backward(lstm.lstm_scan_backward_reference, g, want, whh, c0, True)
    np.testing.assert_allclose(args[0].grad, dxp, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(args[2].grad, dh, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(args[3].grad, dc, rtol=1e-12, atol=1e-13)
    dwhh = sum(dxp[t].T @ (want[0][0, t - 1] if t else h0) for t in range(xp.shape[0]))
    np.testing.assert_allclose(args[1].grad, dwhh, rtol=1e-12, atol=1e-12)
