"""lstm_scan / gru_scan: their step kernels against the NumPy references, the scans against the
per-step composition they replace (values and every gradient), nn.LSTM / nn.GRU against torch,
compiled plans against eager bit for bit, and float64 gradchecks through the initial states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn, ops, optim
from tapegrad.autodiff.kernels.cpu import recurrent as K
from tapegrad.nn import functional as F


def _r(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dt)


# -- kernels against references ------------------------------------------------------------------
KERNEL_SHAPES = [(1, 1), (1, 5), (3, 7), (100, 64)]


def _check_kernel(kernel, reference, ins, outs, dt):
    got = [o.copy() for o in outs]
    want = [o.copy() for o in outs]
    kernel(*ins, *got)
    reference(*ins, *want)
    tol = 2e-6 if dt == np.float32 else 1e-14
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n,h", KERNEL_SHAPES)
def test_step_kernels_match_references(n, h, dt):
    rng = np.random.default_rng(n * 100 + h)
    xp, hw, cp = _r(rng, (n, 4 * h), dt, 2), _r(rng, (n, 4 * h), dt), _r(rng, (n, h), dt)
    fwd_out = [np.empty((n, h), dt), np.empty((n, h), dt), np.empty((n, 4 * h), dt)]
    fwd_out.append(np.empty((n, h), dt))
    _check_kernel(K.lstm_forward_step, K.lstm_forward_step_reference, (xp, hw, cp), fwd_out, dt)
    act = rng.uniform(0, 1, (n, 4 * h)).astype(dt)
    tc = np.tanh(_r(rng, (n, h), dt))
    gh, gc, dh = (_r(rng, (n, h), dt) for _ in range(3))
    ins = (gh, gc, act, tc, cp, dh)
    _check_kernel(
        K.lstm_backward_step,
        K.lstm_backward_step_reference,
        ins,
        [_r(rng, (n, h), dt), np.empty((n, 4 * h), dt)],
        dt,
    )
    xp3, hw3, b = xp[:, : 3 * h], _r(rng, (n, 3 * h), dt), _r(rng, (3 * h,), dt)
    _check_kernel(
        K.gru_forward_step,
        K.gru_forward_step_reference,
        (xp3, hw3, b, cp),
        [np.empty((n, h), dt), np.empty((n, 4 * h), dt)],
        dt,
    )
    _check_kernel(
        K.gru_backward_step,
        K.gru_backward_step_reference,
        (gh, gc),
        [dh.copy(), act, cp, np.empty((n, 3 * h), dt), np.empty((n, 3 * h), dt)],
        dt,
    )


def test_kernel_activations_saturate_and_keep_nan():
    x = np.array([[np.nan, np.inf, -np.inf, 0.0, 1e4, -1e4, 30.0, -30.0]], np.float32)
    h = x.shape[1]
    xp = np.tile(x, (1, 4))
    out = [np.empty((1, h), np.float32) for _ in range(2)] + [np.empty((1, 4 * h), np.float32)]
    out.append(np.empty((1, h), np.float32))
    K.lstm_forward_step(xp, np.zeros_like(xp), np.zeros((1, h), np.float32), *out)
    act = out[2]
    i, g = act[0, :h], act[0, 2 * h : 3 * h]
    assert np.isnan(i[0]) and np.isnan(g[0])
    np.testing.assert_allclose(i[1:], [1, 0, 0.5, 1, 0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(g[1:], [1, -1, 0, 1, -1, 1, -1], atol=1e-12)


# -- the scans against the per-step composition they replace -----------------------------------
def _lstm_composed(x, wih, whh, bih, bhh, h, c):
    """The former nn.functional.lstm: one graph node per piece per step (batch-first)."""
    H = whh.shape[1]
    xp = F.linear(tg.permute(x, (1, 0, 2)), wih, bih + bhh)
    whh_t = tg.transpose(whh)
    hs = []
    for t in range(xp.shape[0]):
        z = xp[t] + tg.matmul(h, whh_t)
        s = tg.sigmoid(z)
        i, f, o = s[:, :H], s[:, H : 2 * H], s[:, 3 * H :]
        c = f * c + i * tg.tanh(z[:, 2 * H : 3 * H])
        h = o * tg.tanh(c)
        hs.append(h)
    return tg.stack(hs, axis=1), (h, c)


def _gru_composed(x, wih, whh, bih, bhh, h):
    H = whh.shape[1]
    xp = F.linear(tg.permute(x, (1, 0, 2)), wih, bih)
    whh_t = tg.transpose(whh)
    hs = []
    for t in range(xp.shape[0]):
        gh = tg.matmul(h, whh_t) + bhh
        rz = tg.sigmoid(xp[t][:, : 2 * H] + gh[:, : 2 * H])
        n = tg.tanh(xp[t][:, 2 * H :] + rz[:, :H] * gh[:, 2 * H :])
        h = n + rz[:, H:] * (h - n)
        hs.append(h)
    return tg.stack(hs, axis=1), h


def _args(kind, n, t, i, h, seed):
    rng = np.random.default_rng(seed)
    g = 4 if kind == "lstm" else 3
    shapes = [(n, t, i), (g * h, i), (g * h, h), (g * h,), (g * h,), (n, h)]
    shapes += [(n, h)] if kind == "lstm" else []
    return [tg.tensor(rng.standard_normal(s) * 0.7, requires_grad=True) for s in shapes]


def _flat(kind, res):
    out, last = res
    parts = [tg.flatten(out, 1)] + (list(last) if kind == "lstm" else [last])
    return tg.concatenate(parts, axis=1)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("n,t,i,h", [(3, 5, 4, 6), (1, 1, 2, 3), (2, 7, 3, 5)])
def test_scan_equals_the_per_step_composition(kind, n, t, i, h):
    results = []
    for fn in (getattr(F, kind), _lstm_composed if kind == "lstm" else _gru_composed):
        args = _args(kind, n, t, i, h, seed=n + t + i + h)
        if fn is F.lstm:
            res = fn(*args[:5], state=(args[5], args[6]), batch_first=True)
        elif fn is F.gru:
            res = fn(*args, batch_first=True)
        else:
            res = fn(*args)
        y = _flat(kind, res)
        w = np.random.default_rng(7).standard_normal(y.shape)
        (y * w).sum().backward()
        results.append((y.data, [a.grad for a in args]))
    (y1, g1), (y2, g2) = results
    np.testing.assert_allclose(y1, y2, rtol=1e-9, atol=1e-12)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gradcheck_through_initial_states(kind):
    n, t, i, h = 2, 4, 3, 3
    args = [a.data for a in _args(kind, n, t, i, h, seed=3)]
    if kind == "lstm":

        def f(x, wih, whh, bih, bhh, h0, c0):
            return _flat(kind, F.lstm(x, wih, whh, bih, bhh, (h0, c0), batch_first=True))
    else:

        def f(x, wih, whh, bih, bhh, h0):
            return _flat(kind, F.gru(x, wih, whh, bih, bhh, h0, batch_first=True))

    tg.gradcheck(f, *args)


def test_scan_ops_reject_mismatched_shapes():
    xp = np.zeros((2, 3, 8))
    with pytest.raises(tg.ShapeError, match=r"lstm_scan: c0 must have shape \(3, 2\)"):
        ops.lstm_scan(xp, np.zeros((8, 2)), np.zeros((3, 2)), np.zeros((3, 4)))
    with pytest.raises(tg.ShapeError, match=r"gru_scan: expected xp \(T, N, 3H\)"):
        ops.gru_scan(xp, np.zeros((8, 2)), np.zeros(8), np.zeros((3, 2)))
    with pytest.raises(tg.ShapeError, match=r"gru_scan: bhh must have shape \(6,\)"):
        ops.gru_scan(xp[..., :6], np.zeros((6, 2)), np.zeros(8), np.zeros((3, 2)))


def test_rnn_scan_rejects_an_initial_state_of_the_wrong_shape():
    # a (1, H) state broadcast in the forward of a one-step scan, but the backward kernel
    # (boundscheck off) walked the state's shape: the input gradient's other rows were left
    # uninitialised; a larger state with zero_h0 made it read and write past g and dxp
    xp, whh = np.zeros((1, 3, 4), np.float32), np.zeros((4, 4), np.float32)
    with pytest.raises(tg.ShapeError, match=r"rnn_scan: h0 must have shape \(3, 4\), got \(1, 4\)"):
        ops.rnn_scan(xp, whh, np.zeros((1, 4), np.float32), nonlinearity="tanh")
    with pytest.raises(tg.ShapeError, match=r"rnn_scan: h0 must have shape \(3, 4\)"):
        ops.rnn_scan(xp, whh, np.zeros((5, 6), np.float32), nonlinearity="tanh", zero_h0=True)
    with pytest.raises(tg.ShapeError, match=r"rnn_scan: expected xp \(T, N, 1H\)"):
        ops.rnn_scan(
            xp, np.zeros((4, 5), np.float32), np.zeros((3, 5), np.float32), nonlinearity="tanh"
        )
    x = tg.tensor(np.zeros((3, 1, 2), np.float32))
    wih = tg.tensor(np.zeros((4, 2), np.float32), requires_grad=True)
    with pytest.raises(tg.ShapeError, match=r"h0 must have shape \(3, 4\)"):
        F.rnn(
            x,
            wih,
            tg.tensor(whh, requires_grad=True),
            h0=np.zeros((1, 4), np.float32),
            batch_first=True,
        )


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_empty_sequences_are_rejected_by_name(kind):
    g = {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    w_ih = tg.tensor(np.zeros((g * 4, 2), np.float32), requires_grad=True)
    w_hh = tg.tensor(np.zeros((g * 4, 4), np.float32), requires_grad=True)
    x = np.zeros((3, 0, 2), np.float32)  # batch-first: no time steps
    with pytest.raises(tg.ShapeError, match=rf"{kind}: .*no time steps.*\(3, 0, 2\)"):
        getattr(F, kind)(x, w_ih, w_hh, batch_first=True)
    xp = np.zeros((0, 3, g * 4), np.float32)
    args = {"rnn": (np.zeros((3, 4)),), "lstm": (np.zeros((3, 4)),) * 2}
    args["gru"] = (np.zeros(12), np.zeros((3, 4)))
    kw = {"nonlinearity": "tanh"} if kind == "rnn" else {}
    with pytest.raises(tg.ShapeError, match=rf"{kind}_scan: .*no time steps"):
        getattr(ops, f"{kind}_scan")(
            xp, w_hh.data, *(a.astype(np.float32) for a in args[kind]), **kw
        )


# -- against torch -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_layers_match_torch_with_initial_state(kind, batch_first):
    n, t, i, h = 5, 7, 6, 9
    torch.manual_seed(0)
    th = getattr(torch.nn, kind)(i, h, batch_first=batch_first)
    ours = getattr(nn, kind)(i, h, batch_first=batch_first)
    ours.load_state_dict({k: v.detach().numpy() * 1.5 for k, v in th.state_dict().items()})
    with torch.no_grad():
        for p in th.parameters():
            p.mul_(1.5)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, t, i) if batch_first else (t, n, i)).astype(np.float32)
    states = [
        rng.standard_normal((n, h)).astype(np.float32) for _ in range(2 if kind == "LSTM" else 1)
    ]
    w_out = rng.standard_normal((n, t, h) if batch_first else (t, n, h)).astype(np.float32)
    w_last = rng.standard_normal((n, h)).astype(np.float32)

    xt = torch.tensor(x, requires_grad=True)
    st = [torch.tensor(s[None], requires_grad=True) for s in states]
    xo = tg.tensor(x, requires_grad=True)
    so = [tg.tensor(s[None], requires_grad=True) for s in states]  # (layers, N, H)
    if kind == "LSTM":
        out_t, (h_t, c_t) = th(xt, tuple(st))
        out_o, (h_o, c_o) = ours(xo, tuple(so))
        loss_t = (out_t * torch.tensor(w_out)).sum() + (h_t[0] * torch.tensor(w_last)).sum()
        loss_t = loss_t + (c_t[0] * torch.tensor(w_last) * 2).sum()
        loss_o = (out_o * w_out).sum() + (h_o[0] * w_last).sum() + (c_o[0] * w_last * 2).sum()
        np.testing.assert_allclose(c_o.data, c_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    else:
        out_t, h_t = th(xt, st[0])
        out_o, h_o = ours(xo, so[0])
        loss_t = (out_t * torch.tensor(w_out)).sum() + (h_t[0] * torch.tensor(w_last)).sum()
        loss_o = (out_o * w_out).sum() + (h_o[0] * w_last).sum()
    np.testing.assert_allclose(out_o.data, out_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h_o.data, h_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    loss_t.backward()
    loss_o.backward()
    params_t = dict(th.named_parameters())
    for name, p in ours.named_parameters():
        want = params_t[name].grad.numpy()
        np.testing.assert_allclose(p.grad, want, rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(xo.grad, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    for a, b in zip(so, st):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-4, atol=1e-5)


# -- compiled plans ------------------------------------------------------------------------------
class _Seq(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(7, 10, batch_first=True)
        self.head = nn.Linear(10, 3)
        self.h0 = nn.Parameter(np.zeros((1, 1, 10), np.float32))  # a learned initial state

    def forward(self, x):
        n = x.shape[0]
        h0 = tg.broadcast_to(self.h0, (1, n, 10))
        if isinstance(self.rnn, nn.LSTM):
            out, (h, c) = self.rnn(x, (h0, h0 * 0.5))
            return self.head(out[:, -1] + c[0])
        out, h = self.rnn(x, h0)
        return self.head(out.mean(axis=1) + h[0])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_compiled_training_equals_eager_bit_for_bit(kind):
    models = []
    for _ in range(2):
        tg.manual_seed(0)
        models.append(_Seq(kind))
    for p in models[0].parameters():  # a non-zero learned state
        p.data[...] += 0.01
    for p in models[1].parameters():
        p.data[...] += 0.01
    opts = [optim.Adam(m.parameters(), lr=1e-2) for m in models]

    def step(model, opt, x, y):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, logits

    compiled = tg.compile(lambda x, y: step(models[1], opts[1], x, y))
    rng = np.random.default_rng(0)
    for k in range(4):
        n = 6 if k < 3 else 5  # a new batch size: a second plan
        x = rng.standard_normal((n, 4, 7)).astype(np.float32)
        y = rng.integers(0, 3, n)
        le, ge = step(models[0], opts[0], tg.tensor(x), y)
        lc, gc = compiled(x, y)
        assert le.item() == lc.item(), k
        np.testing.assert_array_equal(ge.data, gc.data)
    assert len(compiled.plans) == 2
    name = kind.lower() + "_scan"
    for plan in compiled.all_plans:
        names = {e.prim.name for e in plan.eqs if e.prim.writes_out}
        assert {name, name[:-5] + "_scan_backward"} <= names
    for (k, a), (_, b) in zip(models[0].state_dict().items(), models[1].state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)
