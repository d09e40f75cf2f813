"""PyTorch users' Tensor habits: ``x[idx] = v`` (recorded, or in place), the in-place methods
(add_ sub_ mul_ div_ zero_ fill_ copy_ clamp_) with PyTorch's refusals, ``size()`` beside
NumPy's ``size``, ``to``/``cpu``/``device``, ``clone``; compiled steps replay them."""

import copy
import importlib.util
import pickle

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn

RNG = np.random.default_rng(11)


# -- size ----------------------------------------------------------------------------------------
def test_size_is_numpys_count_and_pytorchs_method():
    t = tg.tensor(np.zeros((2, 3, 4)))
    assert t.size == 24 and isinstance(t.size, int) and t.size + 1 == 25 and 48 // t.size == 2
    assert np.zeros(t.size).shape == (24,) and f"{t.size}" == "24" and repr(t.size) == "24"
    assert t.size() == (2, 3, 4) == tuple(torch.zeros(2, 3, 4).size())
    assert t.size(1) == 3 and t.size(-1) == 4 and t.size(dim=0) == 2
    with pytest.raises(IndexError, match="size: axis 3 is out of range for a tensor of 3 axes"):
        t.size(3)
    with pytest.raises(IndexError):
        tg.tensor(np.float32(1)).size(0)
    assert tg.tensor(np.float32(1)).size() == () and tg.tensor(np.float32(1)).size == 1
    assert pickle.loads(pickle.dumps(t.size)) == 24 and copy.deepcopy(t.size) == 24
    assert sum(p.size for p in nn.Linear(3, 2).parameters()) == 8  # code that sums counts


# -- to, cpu, device, dtype shorthands -----------------------------------------------------------
def test_to_reads_devices_as_devices_and_dtypes_as_dtypes():
    t = tg.tensor(np.arange(3, dtype=np.float32), requires_grad=True)
    assert t.to("cpu") is t and t.cpu() is t and t.to(device="cpu") is t and t.device == "cpu"
    assert t.to(torch.device("cpu")) is t and t.to("cpu:0") is t
    y = t.to(np.float64)
    assert y.dtype == np.float64 and t.to("float64").dtype == np.float64
    assert (
        t.to("cpu", np.float64).dtype == np.float64 and t.to(dtype=np.float16).dtype == np.float16
    )
    assert t.to(tg.tensor(np.zeros(1, np.int64))).dtype == np.int64
    (y * y).sum().backward()  # the conversion is differentiable
    np.testing.assert_array_equal(t.grad, [0.0, 2.0, 4.0])
    assert t.double().dtype == np.float64 and t.float() is t and t.long().dtype == np.int64
    assert t.int().dtype == np.int32 and t.bool().dtype == np.bool_ and t.half().dtype == np.float16
    if importlib.util.find_spec("cupy") is None:  # CUDA asked for, CuPy missing: one line
        for call in (lambda: t.to("cuda"), lambda: t.to("cuda:1", np.float64), t.cuda):
            with pytest.raises(tg.DeviceError, match="pip install cupy-cuda12x .* cupy-cuda13x"):
                call()
    with pytest.raises(tg.DeviceError, match=r"to\('mps'\): .*'cuda'"):
        t.to("mps")
    with pytest.raises(ValueError, match="'float' is neither a device"):
        t.to("float")  # NumPy reads it as float64, PyTorch as float32: refused
    with pytest.raises(TypeError, match="not a numeric dtype"):
        t.to(str)


# -- x[index] = value ----------------------------------------------------------------------------
def test_setitem_on_plain_tensors_writes_in_place_like_torch():
    t = tg.tensor(np.zeros((3, 4), np.float32))
    row = t[1]  # a view, as in PyTorch
    array = t.data
    t[1, 2] = 5
    t[t > 4] += 1  # read, add, write back
    t[[0, 0], [1, 1]] = tg.tensor(np.array([7.0, 8.0], np.float32))  # the last write wins
    t[2] = np.arange(4, dtype=np.float32)
    t[:, -1] = tg.tensor(np.float32(-1))
    assert t.data is array and row.data[2] == 6.0
    want = torch.zeros(3, 4)
    want[1, 2] = 5
    want[want > 4] += 1
    want[0, 1] = 8.0
    want[2] = torch.arange(4.0)
    want[:, -1] = -1
    np.testing.assert_array_equal(t.data, want.numpy())
    t[0], want[0] = np.full(4, 1 / 3), torch.tensor(np.full(4, 1 / 3))  # converted, as torch does
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.data, want.numpy())


def test_setitem_is_recorded_and_differentiable_in_x_and_value_like_torch():
    x0, v0 = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    mask = np.array([True, False, True, False])
    x, v = tg.tensor(x0, requires_grad=True), tg.tensor(v0, requires_grad=True)
    tx, tv = torch.tensor(x0, requires_grad=True), torch.tensor(v0, requires_grad=True)
    h, th = x * 2.0, tx * 2.0
    h[1] = v * v
    th[1] = tv * tv
    h[mask, 0] = v[2]
    th[torch.tensor(mask), 0] = tv[2]
    h[:, 1:] = h[:, 1:] * 3.0
    th[:, 1:] = th[:, 1:] * 3.0
    w = RNG.standard_normal((4, 3))
    (h * tg.tensor(w)).sum().backward()
    (th * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(h.data, th.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-15)
    np.testing.assert_allclose(v.grad, tv.grad.numpy(), rtol=1e-15)
    # a plain tensor takes a value that requires grad: it joins the graph
    out = tg.zeros(2, 3, dtype=np.float64)
    out[0] = v
    out.sum().backward()
    assert out.requires_grad and v.grad.tolist() == (tv.grad.numpy() + 1).tolist()


def test_setitem_with_repeated_indices_gives_the_gradient_to_the_last_write():
    h = tg.tensor(np.zeros(3), requires_grad=True) * 1.0
    v = tg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    h[np.array([2, 0, 2])] = v
    np.testing.assert_array_equal(h.data, [2.0, 0.0, 3.0])
    (h * tg.tensor(np.array([10.0, 20.0, 30.0]))).sum().backward()
    np.testing.assert_array_equal(v.grad, [0.0, 10.0, 30.0])  # v[0] was overwritten by v[2]


def test_setitem_refusals_follow_torch_and_protect_recorded_graphs():
    p = tg.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(tg.GraphError, match="a leaf tensor that requires grad"):
        p[0] = 2.0
    with tg.no_grad():
        p[0] = 2.0  # initialisation: allowed, in place
    assert p.data.tolist() == [2.0, 1.0, 1.0]
    h = p * 1.0
    with tg.no_grad(), pytest.raises(tg.GraphError, match="gradients are off"):
        h[0] = 1.0
    c = tg.tensor(np.ones(3))
    z = c * p  # saves c's array for p's gradient
    with pytest.raises(tg.GraphError, match="saved by recorded operations"):
        c[0] = 4.0
    z.sum().backward()
    c[0] = 4.0  # the graph is freed: fine
    assert c.data[0] == 4.0


def test_operations_recorded_before_an_update_keep_the_old_value_like_torch():
    x0 = RNG.standard_normal((3, 4))
    x, tx = tg.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    h, th = x * 1.5, tx * 1.5
    y, ty = h * h, th * th  # uses h before the updates
    h[:, 1:] = h[:, 1:] * 3.0  # the value reads the entries it replaces
    h.mul_(h).add_(y)
    # PyTorch refuses the same in-place steps (y saved h), so its side is written out of place
    th2 = th.clone()
    th2[:, 1:] = th[:, 1:] * 3.0
    th2 = th2 * th2 + ty
    w = RNG.standard_normal((3, 4))
    ((h + y) * tg.tensor(w)).sum().backward()
    ((th2 + ty) * torch.tensor(w)).sum().backward()
    th = th2
    np.testing.assert_allclose(h.data, th.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-13)


def test_setitem_in_a_loop_stays_cheap_and_correct():
    """The RNN pattern: fill a buffer step by step; matches torch's gradients."""
    w0 = RNG.standard_normal((3, 3)) * 0.5
    w, tw = tg.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    h, th = tg.tensor(np.ones(3)), torch.ones(3, dtype=torch.float64)
    out, tout = tg.zeros(6, 3, dtype=np.float64), torch.zeros(6, 3, dtype=torch.float64)
    for t in range(6):
        h, th = tg.tanh(w @ h), torch.tanh(tw @ th)
        out[t] = h
        tout[t] = th
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(w.grad, tw.grad.numpy(), rtol=1e-13)


# -- in-place methods ----------------------------------------------------------------------------
def test_inplace_methods_on_plain_tensors_match_torch():
    a0 = RNG.standard_normal((2, 3)).astype(np.float32)
    t, tt = tg.tensor(a0.copy()), torch.tensor(a0.copy())
    array = t.data
    b = RNG.standard_normal(3).astype(np.float32)
    t.add_(tg.tensor(b), alpha=2).mul_(3).sub_(1.5).div_(tg.tensor(b))
    tt.add_(torch.tensor(b), alpha=2).mul_(3).sub_(1.5).div_(torch.tensor(b))
    np.testing.assert_allclose(t.data, tt.numpy(), rtol=1e-6)
    t.clamp_(-1.0, 2.0)
    tt.clamp_(-1.0, 2.0)
    np.testing.assert_array_equal(t.data, tt.numpy())
    t.copy_(np.arange(3.0))  # float64 source converted, broadcast, as copy_ does
    tt.copy_(torch.arange(3.0, dtype=torch.float64))
    np.testing.assert_array_equal(t.data, tt.numpy())
    t.fill_(0.25)
    assert (t.data == 0.25).all()
    assert t.zero_() is t and not t.data.any() and t.data is array
    i = tg.tensor(np.arange(4, dtype=np.int32))
    i.add_(3).mul_(2).sub_(tg.tensor(np.arange(4)), alpha=2)  # exact integer arithmetic
    assert i.dtype == np.int32 and i.data.tolist() == [6, 6, 6, 6]
    big = tg.tensor(np.array([2**60]))
    big.add_(1)
    assert big.data[0] == 2**60 + 1


def test_inplace_methods_follow_torchs_rules():
    p = tg.tensor(np.ones(3), requires_grad=True)
    for call in (lambda: p.add_(1.0), lambda: p.zero_(), lambda: p.copy_(np.zeros(3))):
        with pytest.raises(tg.GraphError, match="a leaf tensor that requires grad"):
            call()
    with tg.no_grad():
        p.mul_(0.5).add_(tg.tensor(np.arange(3.0)))  # a parameter update
    assert p.data.tolist() == [0.5, 1.5, 2.5] and p.is_leaf
    i = tg.tensor(np.arange(3))
    with pytest.raises(tg.DTypeError, match="div_: the result has dtype float32"):
        i.div_(2)
    with pytest.raises(tg.ShapeError, match=r"add_: the new values have shape \(2, 3\)"):
        tg.tensor(np.ones(3)).add_(tg.tensor(np.ones((2, 3))))
    with pytest.raises(ValueError, match="clamp_: give at least one"):
        tg.tensor(np.ones(3)).clamp_()


def test_inplace_on_recorded_tensors_is_differentiable_like_torch():
    x0 = RNG.standard_normal(4)
    x, tx = tg.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    h, th = x * 2.0, tx * 2.0
    h.mul_(h).add_(x, alpha=3).clamp_(max=2.0).sub_(1.0)
    th.mul_(th.clone()).add_(tx, alpha=3).clamp_(max=2.0).sub_(1.0)
    buf, tbuf = tg.zeros(4, dtype=np.float64), torch.zeros(4, dtype=torch.float64)
    buf.copy_(h)  # a plain buffer takes a value that requires grad: it joins the graph
    tbuf.copy_(th)
    buf.add_(x)
    tbuf.add_(tx)
    (buf * buf).sum().backward()
    (tbuf * tbuf).sum().backward()
    np.testing.assert_allclose(buf.data, tbuf.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-14)


def test_clone_copies_and_passes_the_gradient():
    x = tg.tensor(np.arange(3.0), requires_grad=True)
    c = x.clone()
    assert c.data is not x.data and c.data.base is None
    (c * c).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 2.0, 4.0])


# -- compiled steps ------------------------------------------------------------------------------
def test_compiled_steps_replay_setitem_and_inplace_updates():
    w = tg.tensor(RNG.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    calls = tg.tensor(np.zeros(1, np.float32))  # a buffer the step counts in
    running = tg.tensor(np.zeros(4, np.float32))

    def step(x):
        x = tg.tensor(x)
        h = x @ w  # (2, 4)
        h[0, 1:3] = h[1, :2] * 2.0  # recorded
        h.mul_(h > 0)  # recorded, in place on a non-leaf
        buf = tg.zeros(2, 4)  # a constant of the plan: written fresh on every call
        buf[x[:, 0] > 0] = 1.0
        buf.add_(1.0)
        loss = (h * buf).sum()
        w.grad = None
        loss.backward()
        with tg.no_grad():
            calls.add_(1.0)
            running.mul_(0.5).add_(h.mean(0))
        return loss, buf

    compiled = tg.compile(step)
    xs = [RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    eager = []
    for x in xs:
        loss, buf = step(x)
        eager.append((loss.item(), buf.data.copy(), w.grad.copy(), running.data.copy()))
    assert calls.data[0] == 4.0
    calls.zero_()
    running.zero_()
    for x, (loss, buf, grad, run) in zip(xs, eager):
        got_loss, got_buf = compiled(x)
        assert got_loss.item() == loss
        np.testing.assert_array_equal(got_buf.data, buf)
        np.testing.assert_array_equal(w.grad, grad)
        np.testing.assert_array_equal(running.data, run)
    assert calls.data[0] == 4.0  # replayed on every call, not once


def test_compiled_step_refuses_a_recorded_update_of_an_outside_tensor():
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    state = tg.tensor(np.zeros(3, np.float32))

    def step(x):
        state[0] = (tg.tensor(x) * w).sum()  # would give `state` a new array per call
        return state

    with pytest.raises(tg.TraceError, match="comes from outside the compiled function"):
        tg.compile(step)(np.ones(3, np.float32))


def test_updates_without_earlier_users_skip_the_garbage_collector_scan(monkeypatch):
    """Finding earlier users scans every object; a quick reference count spares it when only
    the caller holds the tensor (a loop filling a buffer, a parameter update)."""
    import tapegrad.autodiff.inplace as inplace

    scans = []
    real = inplace.gc.get_referrers

    class CountingGC:
        def get_referrers(self, *objs):
            scans.append(objs)
            return real(*objs)

    monkeypatch.setattr(inplace, "gc", CountingGC())
    w = tg.tensor(RNG.standard_normal((3, 3)), requires_grad=True)
    h, out = tg.tensor(np.ones(3)), tg.zeros(20, 3, dtype=np.float64)
    for t in range(20):
        h = tg.tanh(w @ h)
        out[t] = h
    s = out * 1.0
    s.add_(1.0).mul_(2.0)
    s += 1.0
    s *= 0.5
    p = tg.tensor(np.ones(3), requires_grad=True)
    with tg.no_grad():
        p.sub_(0.5)
    assert scans == []
    user = s * s  # now s has a user: the update must find it (and point it at the old s)
    s.mul_(3.0)
    assert scans
    (user.sum() + s.sum()).backward()
    assert np.isfinite(w.grad).all()


def test_augmented_assignment_updates_in_place_like_torch():
    """``w -= lr * w.grad`` under no_grad: the classic hand-written SGD step."""
    x0, y0 = RNG.standard_normal((8, 3)), RNG.standard_normal(8)
    w, tw = tg.tensor(np.zeros(3), requires_grad=True), torch.zeros(3, dtype=torch.float64,
                                                                   requires_grad=True)  # fmt: skip
    params = w
    for _ in range(5):
        loss = ((tg.tensor(x0) @ w - tg.tensor(y0)) ** 2).mean()
        loss.backward()
        with tg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
        tloss = ((torch.tensor(x0) @ tw - torch.tensor(y0)) ** 2).mean()
        tloss.backward()
        with torch.no_grad():
            tw -= 0.1 * tw.grad
        tw.grad = None
    assert w is params and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(w.data, tw.detach().numpy(), rtol=1e-12)
    with pytest.raises(tg.GraphError, match="a leaf tensor that requires grad"):
        w += 1.0
    h = w * 2.0
    alias = h
    h *= h  # recorded: h is the new node, and every name for it sees the change
    h /= 2.0
    h.sum().backward()
    assert alias is h
    np.testing.assert_allclose(w.grad, 4.0 * w.data, rtol=1e-14)  # d/dw of (2w)^2 / 2


def test_compiled_fill_of_a_recorded_tensor_equals_eager():
    from ops_vs_torch import assert_compiled_equals_eager

    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)

    def step(x):
        h = tg.tensor(x) * w
        g = h * 1.0
        g.zero_()  # a constant now: no gradient flows through g
        g.add_(h)
        g.fill_(2.0)
        loss = (g * h).sum() + (h * h).sum()
        w.grad = None
        loss.backward()
        return loss, g

    calls = [(RNG.standard_normal(3).astype(np.float32),) for _ in range(3)]
    assert_compiled_equals_eager(step, [w], calls)
