"""The LSTM's and the GRU's scan kernels (``kernels/cpu/gated.py``) against their
step-by-step NumPy references (within the step kernels' exp: a few ulp), serial and parallel
runs the same bits, a workspace holding other bytes changing nothing, and the primitives taking
them, their gradients those of the references."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.autodiff.kernels import generic
from tapegrad.autodiff.kernels.cpu import gated, scan_chunks

SHAPES = [(5, 100, 16), (3, 130, 8), (3, 7, 5), (1, 70, 4)]  # (T, N, H)
TOL = {np.float32: 4e-6, np.float64: 1e-14}


class Lstm:
    name, saved_keys = "lstm", {"lstm_hw", "lstm_whh_t"}

    @staticmethod
    def case(shape, dtype, seed=0):
        t, n, h = shape
        rng = np.random.default_rng(seed)
        xp = rng.standard_normal((n, t, 4 * h)).astype(dtype).transpose(1, 0, 2)  # batch-major
        whh = (rng.standard_normal((4 * h, h)) * 0.3).astype(dtype)
        h0, c0 = (rng.standard_normal((n, h)).astype(dtype) for _ in range(2))
        return (xp, whh, h0, c0), rng.standard_normal((2, t, n, h)).astype(dtype)

    @staticmethod
    def forward(fn, args, scratch=None):
        xp = args[0]
        t, n, g4 = xp.shape
        out = np.full((2, t, n, g4 // 4), np.nan, xp.dtype)
        act, tc = np.full((t, n, g4), np.nan, xp.dtype), np.full((t, n, g4 // 4), np.nan, xp.dtype)
        fn(*args, out, act, tc, scratch)
        return out, act, tc

    @staticmethod
    def backward(fn, g, saved, args):
        _, whh, _, c0 = args
        dxp = np.full(saved[1].shape, np.nan, g.dtype)
        dh, dc = np.full(c0.shape, np.nan, g.dtype), np.full(c0.shape, np.nan, g.dtype)
        fn(g, *saved, whh, c0, dxp, dh, dc, True)
        return dxp, dh, dc

    @staticmethod
    def grads(g, saved, args, back):
        """The primitive's gradients (xp, whh, h0, c0) from the reference's pieces."""
        xp, _, h0, _ = args
        dxp, dh, dc = back
        hs = saved[0][0]
        dwhh = sum(dxp[t].T @ (hs[t - 1] if t else h0) for t in range(xp.shape[0]))
        return dxp, dwhh, dh, dc

    primitive = staticmethod(ops.lstm_scan)
    output = staticmethod(lambda saved: saved[0])


class Gru:
    name, saved_keys = "gru", {"gru_hw", "gru_whh_t"}

    @staticmethod
    def case(shape, dtype, seed=0):
        t, n, h = shape
        rng = np.random.default_rng(seed)
        xp = rng.standard_normal((n, t, 3 * h)).astype(dtype).transpose(1, 0, 2)  # batch-major
        whh = (rng.standard_normal((3 * h, h)) * 0.3).astype(dtype)
        bhh = rng.standard_normal(3 * h).astype(dtype)
        h0 = rng.standard_normal((n, h)).astype(dtype)
        return (xp, whh, bhh, h0), rng.standard_normal((t, n, h)).astype(dtype)

    @staticmethod
    def forward(fn, args, scratch=None):
        xp = args[0]
        t, n, g3 = xp.shape
        hs = np.full((t, n, g3 // 3), np.nan, xp.dtype)
        act = np.full((t, n, 4 * (g3 // 3)), np.nan, xp.dtype)
        fn(*args, hs, act, scratch)
        return hs, act

    @staticmethod
    def backward(fn, g, saved, args):
        _, whh, _, h0 = args
        t, n, h = saved[0].shape
        dxp = np.full((n, t, 3 * h), np.nan, g.dtype).transpose(1, 0, 2)
        dhw = np.full((t, n, 3 * h), np.nan, g.dtype)
        dh, dhd = np.full(h0.shape, np.nan, g.dtype), np.full(h0.shape, np.nan, g.dtype)
        fn(g, *saved, whh, h0, dxp, dhw, dh, dhd, True)
        return dxp, dhw, dh, dhd

    @staticmethod
    def grads(g, saved, args, back):
        """The primitive's gradients (xp, whh, bhh, h0) from the reference's pieces."""
        xp, _, _, h0 = args
        dxp, dhw, dh, dhd = back
        hs = saved[0]
        dwhh = sum(dhw[t].T @ (hs[t - 1] if t else h0) for t in range(xp.shape[0]))
        return dxp, dwhh, dhw.sum(axis=(0, 1)), dh + dhd

    primitive = staticmethod(ops.gru_scan)
    output = staticmethod(lambda saved: saved[0])


KINDS = [Lstm, Gru]


def _name(kind) -> str:
    return kind.name


def _fns(kind):
    return tuple(
        getattr(gated, f"{kind.name}_scan_{which}")
        for which in ("forward", "backward", "forward_reference", "backward_reference")
    )


@pytest.mark.parametrize("kind", KINDS, ids=_name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_kernels_match_the_references(kind, shape, dtype):
    fwd, bwd, fwd_ref, bwd_ref = _fns(kind)
    args, g = kind.case(shape, dtype)
    want = kind.forward(fwd_ref, args)
    for a, b in zip(kind.forward(fwd, args), want):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL[dtype] * np.abs(b).max())
    got, ref = kind.backward(bwd, g, want, args), kind.backward(bwd_ref, g, want, args)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL[dtype] * np.abs(b).max())


@pytest.mark.parametrize("kind", KINDS, ids=_name)
@pytest.mark.parametrize("shape", SHAPES)
def test_serial_and_parallel_runs_give_the_same_bits(kind, shape, threads, monkeypatch):
    monkeypatch.setattr(scan_chunks, "PARALLEL_MIN_SIZE", 0)  # small cases in parallel too
    fwd, bwd, _, _ = _fns(kind)
    args, g = kind.case(shape, np.float32, seed=2)
    runs = []
    for count in (1, 2):
        threads(count)
        saved = kind.forward(fwd, args)
        grads = kind.backward(bwd, g, saved, args)
        runs.append(b"".join(a.tobytes() for a in (*saved, *grads)))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_a_workspace_holding_other_bytes_changes_nothing(kind):
    kept = {}

    def scratch(key, shape):
        if key not in kept:
            kept[key] = np.full(shape, np.nan)
        return kept[key]

    fwd = _fns(kind)[0]
    args, _ = kind.case(SHAPES[1], np.float64, seed=3)
    first = kind.forward(fwd, args, scratch)
    for a in kept.values():
        a.fill(1e300)
    second = kind.forward(fwd, args, scratch)
    assert set(kept) == kind.saved_keys
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_the_rule_and_the_primitive(kind, monkeypatch):
    name = kind.name
    assert scan_chunks.scan_rows(np.float32) and not generic.scan_rows(np.float32)
    fwd, bwd, fwd_ref, bwd_ref = _fns(kind)
    calls = []
    for fn, which in ((fwd, "forward"), (bwd, "backward")):
        monkeypatch.setattr(
            f"tapegrad.autodiff.kernels.cpu.{name}_scan_{which}",
            lambda *a, _fn=fn, _which=which: calls.append(_which) or _fn(*a),
        )
    args, g = kind.case(SHAPES[2], np.float64, seed=5)
    leaves = [tg.tensor(np.ascontiguousarray(a), requires_grad=True) for a in args]
    out = kind.primitive(*leaves)
    (out * tg.tensor(g)).sum().backward()
    assert calls == ["forward", "backward"]
    saved = kind.forward(fwd_ref, args)
    np.testing.assert_allclose(out.data, kind.output(saved), rtol=0, atol=1e-14)
    want = kind.grads(g, saved, args, kind.backward(bwd_ref, g, saved, args))
    for leaf, w in zip(leaves, want):
        np.testing.assert_allclose(leaf.grad, w, rtol=1e-12, atol=1e-12)
