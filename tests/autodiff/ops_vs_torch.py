"""Shared checks for the operations of issue 14: tapegrad against PyTorch (values, gradients and
second derivatives in float64, values and gradients in float32) and compiled against eager."""

from __future__ import annotations

import numpy as np
import torch

import tapegrad as tg


def _outputs(y) -> list:
    return list(y) if isinstance(y, tuple) else [y]


def _float_inputs(args, diff):
    if diff is None:
        return [k for k, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]
    return list(diff)


def _run_tg(fn, args, diff, cast=None):
    xs = [
        tg.tensor(a.astype(cast) if cast and a.dtype.kind == "f" else a, requires_grad=k in diff)
        for k, a in enumerate(args)
    ]
    return xs, _outputs(fn(*xs))


def _run_torch(fn, args, diff):
    xs = [torch.tensor(a, requires_grad=k in diff) for k, a in enumerate(args)]
    return xs, _outputs(fn(*xs))


def _cotangents(outs, seed):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(o.shape) if o.dtype.kind == "f" else None
        for o in (np.asarray(o.data) for o in outs)
    ]


def compare_with_torch(
    fn,
    torch_fn,
    args,
    diff=None,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    second: bool = True,
    f32: bool = True,
    f32_rtol: float = 2e-5,
    f32_atol: float = 2e-6,
    seed: int = 0,
):
    """Run ``fn`` (tapegrad) and ``torch_fn`` on the same float64 ``args`` (ints and bools as
    they are); compare every output, the gradients of a random weighting of the float outputs
    with respect to the float inputs (``diff``), their second derivatives along a random
    direction, and float32 values and gradients against PyTorch's float64 ones."""
    args = [np.asarray(a) for a in args]
    diff = _float_inputs(args, diff)
    xs, ys = _run_tg(fn, args, diff)
    txs, tys = _run_torch(torch_fn, args, diff)
    assert len(ys) == len(tys), f"{len(ys)} outputs against PyTorch's {len(tys)}"
    for y, ty in zip(ys, tys):
        want = ty.detach().numpy()
        assert y.shape == want.shape, f"shape {y.shape} against PyTorch's {want.shape}"
        if want.dtype.kind == "f":
            np.testing.assert_allclose(y.data, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(y.data, want)
    ws = _cotangents(ys, seed)
    floats = [(y, ty, w) for y, ty, w in zip(ys, tys, ws) if w is not None]
    if not diff or not floats or not any(y.requires_grad for y, _, _ in floats):
        return
    loss = sum((y * tg.tensor(w)).sum() for y, _, w in floats if y.requires_grad)
    tloss = sum((ty * torch.tensor(w)).sum() for _, ty, w in floats)
    targets = [xs[k] for k in diff]
    grads = tg.gradients(loss, targets, create_graph=second, allow_unused=True)
    tgrads = torch.autograd.grad(tloss, [txs[k] for k in diff], create_graph=second,
                                 allow_unused=True)  # fmt: skip
    tgrads = [torch.zeros_like(txs[k]) if g is None else g for k, g in zip(diff, tgrads)]
    for g, tgr in zip(grads, tgrads):
        np.testing.assert_allclose(g.data, tgr.detach().numpy(), rtol=rtol, atol=atol)
    if second:
        rng = np.random.default_rng(seed + 1)
        ds = [rng.standard_normal(np.shape(args[k])) for k in diff]
        s = sum((g * tg.tensor(d)).sum() for g, d in zip(grads, ds))
        ts = sum((g * torch.tensor(d)).sum() for g, d in zip(tgrads, ds))
        if isinstance(s, tg.Tensor) and s.requires_grad:
            hs = tg.gradients(s, targets, allow_unused=True)
        else:
            hs = [np.zeros(np.shape(args[k])) for k in diff]
        if isinstance(ts, torch.Tensor) and ts.requires_grad:
            ths = torch.autograd.grad(ts, [txs[k] for k in diff], allow_unused=True)
        else:
            ths = [None] * len(diff)
        for k, h, th in zip(diff, hs, ths):
            want = np.zeros(np.shape(args[k])) if th is None else th.numpy()
            np.testing.assert_allclose(getattr(h, "data", h), want, rtol=1e-8, atol=1e-10)
    if f32:
        xs32, ys32 = _run_tg(fn, args, diff, cast=np.float32)
        for y, ty in zip(ys32, tys):
            want = ty.detach().numpy()
            if want.dtype.kind == "f":
                assert y.dtype == np.float32, f"float32 input gave {y.dtype}"
                np.testing.assert_allclose(y.data, want, rtol=f32_rtol, atol=f32_atol)
            else:
                np.testing.assert_array_equal(y.data, want)
        loss32 = sum(
            (y * tg.tensor(w.astype(np.float32))).sum()
            for y, w in zip(ys32, ws)
            if w is not None and y.requires_grad
        )
        if isinstance(loss32, tg.Tensor):
            g32 = tg.gradients(loss32, [xs32[k] for k in diff], allow_unused=True)
            for g, tgr in zip(g32, tgrads):
                assert g.dtype == np.float32
                np.testing.assert_allclose(
                    g.data, tgr.detach().numpy(), rtol=f32_rtol * 10, atol=f32_atol * 10
                )


def assert_compiled_equals_eager(step, params, calls):
    """``step(*inputs)`` sets each parameter's ``.grad`` (zero_grad + backward) and returns
    tensors; compiled and eager agree bit for bit on every call of ``calls`` (a list of input
    tuples, which should differ so that frozen values would show)."""
    compiled = tg.compile(step)
    for inputs in calls:
        eager = [np.array(t.data) for t in _outputs(step(*[tg.tensor(a) for a in inputs]))]
        eager_grads = [None if p.grad is None else p.grad.copy() for p in params]
        got = [np.array(t.data) for t in _outputs(compiled(*inputs))]
        for e, c in zip(eager, got):
            np.testing.assert_array_equal(c, e)
        for p, g in zip(params, eager_grads):
            if g is None:
                assert p.grad is None
            else:
                np.testing.assert_array_equal(p.grad, g)
    return compiled
