"""Gradient checkpointing: keep a segment's inputs, not its intermediates, and recompute the
segment during the backward pass.

``tg.checkpoint(fn, *args)`` runs ``fn(*args)`` without recording, so none of the segment's
intermediate arrays stay alive until the backward pass; the graph gets one node (the primitive
``checkpoint``) whose VJP runs ``fn`` again with recording on and back-propagates through that
fresh graph. Parameters ``fn`` uses get their gradients from that inner pass, as in a plain
backward. Peak memory then holds one segment's intermediates at a time instead of all of them,
for one more forward of each segment (``benchmarks/checkpoint_memory.py`` measures it).

The recomputation draws the same random numbers as the first forward (the generators tapegrad's
random operations drew from are rewound), so dropout inside a segment gives the same gradients
as without checkpointing. The recomputation and its inner backward pass are a primitive of their
own (``checkpoint_backward``), so in a compiled step the segment is two equations: its forward
and its backward, each running the segment eagerly on every replay. A checkpointed segment is
first-order only (its VJP runs a backward pass of its own). ``fn`` returns one Tensor.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .core.state import untraced
from .graph import enable_grad, gradients, is_grad_enabled, no_grad, toposort
from .primitives import elementwise
from .primitives.registry import Sample, primitive, run
from .tensor import Tensor


def _output(out, fn) -> Tensor:
    if not isinstance(out, Tensor):
        raise TypeError(
            f"checkpoint: {getattr(fn, '__qualname__', 'fn')} must return one Tensor, got "
            f"{type(out).__name__}"
        )
    return out


def _run(fn, tensors, kwargs, log: list) -> Tensor:
    """``fn`` on ``tensors`` outside any trace, logging the generators it draws from."""
    elementwise.RNG_LOG, outer = log, elementwise.RNG_LOG
    try:
        with untraced():
            return _output(fn(*tensors, **kwargs), fn)
    finally:
        elementwise.RNG_LOG = outer


def _forward(*arrays, fn, kwargs, n_args, params, rng_log, cache):
    if "out" in cache:  # the call that discovered the parameters already ran it
        return cache.pop("out")
    log: list = []
    with no_grad():
        out = _run(fn, [Tensor._make(a, None, False) for a in arrays[:n_args]], kwargs, log)
    rng_log[:] = log
    return out.data


def _vjp(g, out, needs, *inputs, fn, kwargs, n_args, params, rng_log, cache):
    got = iter(
        run(
            _checkpoint_backward,
            g,
            *inputs,
            fn=fn,
            kwargs=kwargs,
            n_args=n_args,
            params=params,
            rng_log=rng_log,
            needs=needs,
        )
    )
    return [next(got) if need else None for need in needs]


def _backward(g, *arrays, fn, kwargs, n_args, params, rng_log, needs):
    """The gradients of the inputs ``needs`` names: ``fn`` run again with recording on (the
    generators rewound to its first forward's draws) and differentiated."""
    leaves = [Tensor._make(a, None, False) for a in arrays[:n_args]]
    for leaf, need in zip(leaves, needs):
        leaf.requires_grad = need
    after = [(gen, gen.bit_generator.state) for gen, _ in rng_log]
    for gen, state in reversed(rng_log):  # rewind to the first draw of each generator
        gen.bit_generator.state = state
    try:
        with enable_grad(), untraced():  # the inner pass is part of this one equation
            out_t = _run(fn, leaves, kwargs, [])
            wanted = [t for t, need in zip(leaves + list(params), needs) if need]
            found = (
                gradients(out_t, wanted, g.astype(out_t.dtype, copy=False), allow_unused=True)
                if wanted and out_t.requires_grad
                else [None] * len(wanted)
            )
    finally:
        for gen, state in after:
            gen.bit_generator.state = state
    return tuple(np.zeros_like(t.data) if gt is None else gt.data for t, gt in zip(wanted, found))


def _samples(rng):
    def block(x, w):
        return (x @ w).tanh() * x.sum()

    x, w = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 4))
    attrs = {"fn": block, "kwargs": {}, "n_args": 2, "params": (), "rng_log": [], "cache": {}}
    return [Sample((x, w), attrs)]


def _reference(x, w, **attrs):
    return np.tanh(x @ w) * x.sum()


def _backward_sample(rng) -> Sample:
    (s,) = _samples(rng)
    attrs = {k: v for k, v in s.attrs.items() if k != "cache"}
    return Sample((rng.uniform(-1, 1, (3, 4)), *s.args), {**attrs, "needs": (True, True)})


def _backward_reference(g, x, w, fn, kwargs, n_args, params, rng_log, needs):
    # the sample block tanh(x @ w) * sum(x), differentiated by hand
    t = np.tanh(x @ w)
    gz = g * x.sum() * (1 - t * t)
    return gz @ w.T + np.sum(g * t), x.T @ gz


_checkpoint_backward = primitive(
    "checkpoint_backward",
    _backward,
    None,
    reference=_backward_reference,
    samples=lambda rng: [_backward_sample(rng)],
    effect=True,
    doc="checkpoint's VJP: the segment recomputed with recording on and differentiated, "
    "giving the gradients of the inputs ``needs`` names. Not differentiable.",
)
_checkpoint = primitive(
    "checkpoint",
    _forward,
    _vjp,
    reference=_reference,
    samples=_samples,
    higher_order=False,
    doc="fn(*args) run without recording; its VJP recomputes fn and back-propagates through it.",
)


def checkpoint(fn: Callable[..., Tensor], *args, **kwargs) -> Tensor:
    """``fn(*args, **kwargs)``, computed without keeping its intermediates for the backward
    pass, which recomputes them (see the module docstring). Tensor arguments that require
    grad get their gradients, and so do the parameters ``fn`` uses (found on the first call by
    the graph it records, which is then dropped). ``fn`` must not close over tensors computed
    outside it with gradients: pass those as arguments."""
    if not callable(fn):
        raise TypeError(f"checkpoint: fn must be callable, got {type(fn).__name__}")
    for k, a in enumerate(args):
        if not isinstance(a, (Tensor, np.ndarray)):
            raise TypeError(
                f"checkpoint: argument {k} is a {type(a).__name__}; pass arrays or Tensors as "
                f"arguments and everything else as keyword arguments"
            )
    inner = []
    for a in args:
        t = Tensor._make(a.data if isinstance(a, Tensor) else a, None, False)
        t.requires_grad = isinstance(a, Tensor) and a.requires_grad and is_grad_enabled()
        inner.append(t)
    log: list = []
    with enable_grad() if is_grad_enabled() else no_grad():
        out = _run(fn, inner, kwargs, log)
    own = {id(t) for t in inner}
    params = tuple(
        t
        for t in (toposort(out) if out.requires_grad else ())
        if t._node is None and t.requires_grad and id(t) not in own
    )
    cache = {"out": out.data}
    del out  # the segment's graph goes: the backward pass recomputes it
    return _checkpoint(
        *args,
        *params,
        fn=fn,
        kwargs=kwargs,
        n_args=len(args),
        params=params,
        rng_log=log,
        cache=cache,
    )
