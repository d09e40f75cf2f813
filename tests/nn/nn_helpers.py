"""Shared checks for tests/nn: run one of our modules and the equivalent torch module on the
same weights and inputs, and compare outputs and every gradient."""

from __future__ import annotations

import re
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
    # torch's RNN/LSTM/GRU call their single layer's weights weight_ih_l0, ...
    theirs_params = {re.sub(r"_l0$", "", n): p for n, p in theirs.named_parameters()}
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
