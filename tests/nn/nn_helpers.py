"""Shared checks for tests/nn: run one of our modules and the equivalent torch module on the
same weights and inputs, and compare outputs and every gradient."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

import tapegrad as tg

RTOL, ATOL = 1e-4, 1e-5


def copy_from_torch(ours, theirs) -> None:
    """Load the torch module's weights into ours (names and layouts must agree 1:1)."""
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})


def _as_list(out) -> list:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _as_list(o)]
    return [out]


def compare_with_torch(
    ours,
    theirs,
    inputs: Sequence[np.ndarray],
    run_ours: Callable | None = None,
    run_theirs: Callable | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
    seed: int = 0,
) -> None:
    """Copy weights torch -> ours, run both on ``inputs``, contract all outputs with the same
    random cotangents, backprop, and assert outputs, float-input gradients and every
    parameter gradient (matched by name) agree."""
    copy_from_torch(ours, theirs)
    run_ours = run_ours or (lambda m, *xs: m(*xs))
    run_theirs = run_theirs or (lambda m, *xs: m(*xs))
    tg_in = [tg.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    th_in = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    o1 = _as_list(run_ours(ours, *tg_in))
    o2 = _as_list(run_theirs(theirs, *th_in))
    assert len(o1) == len(o2)
    rng = np.random.default_rng(seed)
    cots = [rng.standard_normal(o.shape).astype(o.dtype) for o in o1]
    for a, b in zip(o1, o2):
        assert a.shape == tuple(b.shape), (a.shape, tuple(b.shape))
        np.testing.assert_allclose(a.data, b.detach().numpy(), rtol=rtol, atol=atol)
    loss1 = sum((o * v).sum() for o, v in zip(o1, cots))
    loss2 = sum((o * torch.from_numpy(v)).sum() for o, v in zip(o2, cots))
    loss1.backward()
    loss2.backward()
    for i, (a, b) in enumerate(zip(tg_in, th_in)):
        if b.requires_grad:
            assert a.grad is not None, f"input {i} got no gradient"
            np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=rtol, atol=atol)
    theirs_params = dict(theirs.named_parameters())  # the same names, recurrent layers' too
    ours_params = dict(ours.named_parameters())
    assert list(ours_params) == list(theirs_params)
    for name, p in ours_params.items():
        tp = theirs_params[name]
        if not tp.requires_grad:
            assert p.grad is None
            continue
        assert p.grad is not None, f"parameter {name} got no gradient"
        np.testing.assert_allclose(
            p.grad, tp.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"gradient of {name}"
        )


def compare_fn_with_torch(
    ours: Callable,
    theirs: Callable,
    inputs: Sequence[np.ndarray],
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> None:
    """Run a function of ours and torch's on the same arrays, contract the outputs with the same
    random cotangents and compare outputs and the gradients of every float input (tolerances
    by dtype: float64 tight, float32 loose, unless given)."""
    dt = next((x.dtype for x in inputs if x.dtype.kind == "f"), np.dtype(np.float32))
    rtol = rtol if rtol is not None else (1e-10 if dt == np.float64 else RTOL)
    atol = atol if atol is not None else (1e-12 if dt == np.float64 else ATOL)
    tg_in = [tg.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    th_in = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    o1, o2 = _as_list(ours(*tg_in)), _as_list(theirs(*th_in))
    assert len(o1) == len(o2)
    rng = np.random.default_rng(seed)
    cots = [rng.standard_normal(o.shape).astype(o.dtype) for o in o1]
    for a, b in zip(o1, o2):
        assert a.shape == tuple(b.shape), (a.shape, tuple(b.shape))
        assert a.dtype == b.detach().numpy().dtype, (a.dtype, b.dtype)
        np.testing.assert_allclose(a.data, b.detach().numpy(), rtol=rtol, atol=atol)
    sum((o * v).sum() for o, v in zip(o1, cots)).backward()
    sum((o * torch.from_numpy(v)).sum() for o, v in zip(o2, cots)).backward()
    for i, (a, b) in enumerate(zip(tg_in, th_in)):
        if b.requires_grad:
            assert a.grad is not None, f"input {i} got no gradient"
            np.testing.assert_allclose(
                a.grad, b.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"gradient of input {i}"
            )


def assert_compiled_equals_eager(fn: Callable, params: Sequence, inputs: Sequence, calls=3):
    """``fn(*inputs)`` returning a scalar loss: run it eagerly and under ``tg.compile`` on fresh
    inputs each call (``inputs`` is a list of per-call argument lists), backward, and require
    the losses and every parameter's gradient to agree bit for bit."""
    compiled = tg.compile(lambda *a: _loss_and_backward(fn, params, a))
    for args in inputs[:calls]:
        eager = _loss_and_backward(fn, params, [tg.tensor(a) for a in args])
        e_loss, e_grads = (
            eager[0].item(),
            [None if p.grad is None else p.grad.copy() for p in params],
        )
        c_loss = compiled(*args)[0].item()
        assert e_loss == c_loss
        for p, g in zip(params, e_grads):
            if g is None:
                assert p.grad is None
            else:
                np.testing.assert_array_equal(p.grad, g)
    return compiled


def _loss_and_backward(fn, params, args):
    for p in params:
        p.grad = None
    loss = fn(*args)
    loss.backward()
    return (loss,)


def train_eager_and_compiled(build: Callable, make_opt: Callable, batches: Sequence) -> None:
    """Build two models with the same seed, train one eagerly and one with a compiled step
    (cross-entropy, ``make_opt(params)``) on ``batches`` of ``(x, labels)``, and require equal
    losses every step and equal ``state_dict`` entries bit for bit at the end."""
    models = []
    for _ in range(2):
        tg.manual_seed(3)
        models.append(build())
    opts = [make_opt(m.parameters()) for m in models]

    def step(model, opt, x, y):
        loss = tg.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tg.compile(lambda x, y: step(models[1], opts[1], x, y))
    for k, (x, y) in enumerate(batches):
        assert step(models[0], opts[0], tg.tensor(x), y).item() == compiled(x, y).item(), k
    for (k, a), (_, b) in zip(models[0].state_dict().items(), models[1].state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)
