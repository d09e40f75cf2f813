"""The Elman scan's kernels (``kernels/cpu/elman.py``) against their step-by-step NumPy
references: the forward within the kernels' tanh (a few ulp of 1 a step; ReLU exact), the
backward's input and initial-state gradients the same bits from the same states and the
recurrent weight's within its chunks' summation; serial and parallel runs give the same bits;
a workspace holding other bytes changes nothing; NaN passes through; the primitive takes them
where the rule says."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.autodiff.kernels import generic
from tapegrad.autodiff.kernels.cpu import elman, scan_chunks

# (T, N, H): seed-rnn's, a batch of three chunks, a ragged small one, one step
SHAPES = [(4, 100, 64), (3, 130, 16), (3, 7, 5), (1, 70, 8)]
STEP_TOL = {np.float32: 8 * np.finfo(np.float32).eps, np.float64: 8 * np.finfo(np.float64).eps}


def _case(shape, dtype, seed=0):
    t, n, h = shape
    rng = np.random.default_rng(seed)
    xp = (
        rng.standard_normal((n, t, h)).astype(dtype).transpose(1, 0, 2)
    )  # batch-major, seen (T, N, H)
    whh = (rng.standard_normal((h, h)) * 0.4).astype(dtype)
    h0 = rng.standard_normal((n, h)).astype(dtype)
    g = rng.standard_normal((t, n, h)).astype(dtype)
    return xp, whh, h0, g


def _forward(fn, xp, whh, h0, tanh, zero_h0, scratch=None):
    hs = np.full(xp.shape, np.nan, xp.dtype)
    fn(xp, whh, h0, tanh, zero_h0, hs, scratch)
    return hs


def _backward(fn, g, hs, whh, h0, tanh, zero_h0, needs, scratch=None):
    t, n, h = hs.shape
    dxp = np.full((n, t, h), np.nan, hs.dtype).transpose(1, 0, 2)
    dwhh, dh = np.full((h, h), np.nan, hs.dtype), np.full((n, h), np.nan, hs.dtype)
    fn(g, hs, whh, h0, tanh, zero_h0, needs, dxp, dwhh, dh, scratch)
    return dxp, dwhh, dh


@pytest.mark.parametrize("zero_h0", [False, True])
@pytest.mark.parametrize("tanh", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_forward_matches_the_reference(shape, dtype, tanh, zero_h0):
    xp, whh, h0, _ = _case(shape, dtype)
    got = _forward(elman.rnn_scan_forward, xp, whh, h0, tanh, zero_h0)
    want = _forward(elman.rnn_scan_forward_reference, xp, whh, h0, tanh, zero_h0)
    if tanh:  # each step's tanh a few ulp of 1 from NumPy's, carried through the steps
        np.testing.assert_allclose(got, want, rtol=0, atol=STEP_TOL[dtype] * shape[0] * 4)
    else:
        np.testing.assert_allclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("needs", [(True, True, True), (True, False, False), (True, True, False)])
@pytest.mark.parametrize("zero_h0", [False, True])
@pytest.mark.parametrize("tanh", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_backward_matches_the_reference(shape, dtype, tanh, zero_h0, needs):
    xp, whh, h0, g = _case(shape, dtype)
    hs = _forward(elman.rnn_scan_forward_reference, xp, whh, h0, tanh, zero_h0)
    got = _backward(elman.rnn_scan_backward, g, hs, whh, h0, tanh, zero_h0, needs)
    want = _backward(elman.rnn_scan_backward_reference, g, hs, whh, h0, tanh, zero_h0, needs)
    assert got[0].tobytes() == want[0].tobytes()  # the same products of one chunk's rows
    assert got[2].tobytes() == want[2].tobytes()  # zeros unless h0's gradient is asked for
    if not needs[2] or zero_h0:
        assert not got[2].any()
    if needs[1]:  # each chunk's share summed over the steps, then the shares added
        scale = np.einsum("tnh,tnk->", np.abs(g), np.abs(hs)) + np.abs(h0).sum()
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=16 * np.finfo(dtype).eps * scale)


@pytest.mark.parametrize("shape", SHAPES)
def test_serial_and_parallel_runs_give_the_same_bits(shape, threads, monkeypatch):
    monkeypatch.setattr(scan_chunks, "PARALLEL_MIN_SIZE", 0)  # small cases in parallel too
    xp, whh, h0, g = _case(shape, np.float32, seed=2)
    runs = []
    for count in (1, 2):
        threads(count)
        hs = _forward(elman.rnn_scan_forward, xp, whh, h0, True, False)
        grads = _backward(elman.rnn_scan_backward, g, hs, whh, h0, True, False, (True,) * 3)
        runs.append(b"".join(a.tobytes() for a in (hs, *grads)))
    assert runs[0] == runs[1]


def test_a_workspace_holding_other_bytes_changes_nothing():
    kept = {}

    def scratch(key, shape):
        if key not in kept:
            kept[key] = np.full(shape, np.nan)  # garbage a plan's workspace may hold
        return kept[key]

    def run():
        hs = _forward(elman.rnn_scan_forward, xp, whh, h0, True, False, scratch)
        grads = _backward(
            elman.rnn_scan_backward, g, hs, whh, h0, True, False, (True,) * 3, scratch
        )
        return b"".join(a.tobytes() for a in (hs, *grads))

    xp, whh, h0, g = _case(SHAPES[1], np.float64, seed=3)
    first = run()
    for a in kept.values():
        a.fill(1e300)
    assert run() == first
    assert set(kept) == {"rnn_hw", "rnn_whh_t", "rnn_dpre", "rnn_parts"}


def test_nan_passes_through_both_activations():
    xp, whh, h0, _ = _case(SHAPES[2], np.float32, seed=4)
    xp[1, 3, 2] = np.nan
    for tanh in (True, False):
        got = _forward(elman.rnn_scan_forward, xp, whh, h0, tanh, False)
        want = _forward(elman.rnn_scan_forward_reference, xp, whh, h0, tanh, False)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.isnan(got[1:, 3]).any() and not np.isnan(got[0]).any()


def test_the_rule_says_which_scans_run_here():
    assert scan_chunks.scan_rows(np.float32) and scan_chunks.scan_rows(np.float64)
    assert not scan_chunks.scan_rows(np.float16)
    assert not generic.scan_rows(np.float32)  # a device without the kernels: the steps


def test_the_primitive_runs_the_kernels_and_keeps_its_gradients(monkeypatch):
    import tapegrad as tg
    from tapegrad import ops

    calls = []
    for name in ("rnn_scan_forward", "rnn_scan_backward"):
        fn = getattr(elman, name)
        monkeypatch.setattr(
            "tapegrad.autodiff.kernels.cpu." + name,
            lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a),
        )
    xp, whh, h0, g = _case(SHAPES[2], np.float64, seed=5)
    args = [tg.tensor(np.ascontiguousarray(a), requires_grad=True) for a in (xp, whh, h0)]
    hs = ops.rnn_scan(*args, nonlinearity="tanh")
    (hs * tg.tensor(g)).sum().backward()
    assert calls == ["rnn_scan_forward", "rnn_scan_backward"]
    want = _forward(elman.rnn_scan_forward_reference, xp, whh, h0, True, False)
    np.testing.assert_allclose(hs.data, want, rtol=0, atol=1e-14)
    grads = _backward(elman.rnn_scan_backward_reference, g, want, whh, h0, True, False, (True,) * 3)
    for p, w in zip(args, grads):
        np.testing.assert_allclose(p.grad, w, rtol=1e-12, atol=1e-13)
