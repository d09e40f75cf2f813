"""Fusion: a table-driven rewrite of a plan's equation list.

Run on every plan (forward-only, training, ``create_graph``) before dead code is dropped. Each
entry of :data:`FUSIONS` names the equation that anchors a pattern and a rule that looks around
it (who made its inputs, who reads its outputs) and, where the pattern and the arrays' shapes
and layouts fit, rewrites the equations in place into fused primitives
(``primitives/fused.py``): a forward pattern and the backward pattern of the same pair together,
or the forward alone where the plan has no backward pass, or two equations that compute the same
statistics. Equations left unread (the pair's intermediate value) are then dead code.

A fused primitive computes the same arithmetic as the equations it replaces, so a plan's results
are eager's bits: that is proven, for every entry, by ``tests/autodiff/test_fusion_pass.py``
(each pattern fused and unfused on inputs with zeros, negative values and ties), not checked
while running.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..primitives.batch_norm import (
    batch_norm_relu_backward,
    batch_norm_relu_train,
    batch_norm_relu_train_moments,
    batch_norm_train_moments,
)
from ..primitives.fused import (
    bias_relu,
    bias_relu_backward_kernel,
    conv_grads,
    relu_max_pool,
    relu_max_pool_backward_kernel,
)
from .trace import CONST, EXT, VAR, Eq, Reduce, Sink


class _Uses:
    """Who makes and who reads each value of an equation list."""

    def __init__(self, events: list):
        self.maker: dict[int, Eq] = {}
        self.readers: dict[int, list] = {}
        for e in events:
            refs = []
            if isinstance(e, Eq):
                for v in e.outs:
                    self.maker[v] = e
                refs = e.ins
            elif isinstance(e, Sink):
                refs = [e.grad]
            elif isinstance(e, Reduce):
                refs = [(VAR, e.loss)]
            for kind, p in refs:
                if kind == VAR:
                    self.readers.setdefault(p, []).append(e)

    def read_by(self, v: int) -> list:
        return self.readers.get(v, [])

    def only_reader(self, v: int):
        r = self.read_by(v)
        return r[0] if len(r) == 1 else None


def _is_zero(ref) -> bool:
    """An equation input that is the constant 0 (a Python or NumPy zero lifted to an array)."""
    kind, c = ref
    return kind == CONST and np.ndim(c) == 0 and c == 0


def _value(values: list, ref):
    """The array an equation input referred to while tracing."""
    kind, p = ref
    return values[p] if kind == VAR else p.data if kind == EXT else p


def _var(ref) -> int | None:
    return ref[1] if ref[0] == VAR else None


def _relu_grad(x: int, e) -> bool:
    """Whether ``e`` is ReLU's VJP with ``x`` as its mask: ``relu_backward(g, x)``."""
    return (
        isinstance(e, Eq)
        and e.prim.name == "relu_backward"
        and _var(e.ins[1]) == x
        and _var(e.ins[0]) is not None
    )


def _dense2d(a) -> bool:
    return isinstance(a, np.ndarray) and a.ndim == 2 and a.flags.c_contiguous


# -- bias + ReLU ---------------------------------------------------------------------------------
def _fuse_bias_relu(relu: Eq, uses: _Uses, values: list, drop: set) -> None:
    """``h = add(x, b); y = relu(h)`` (a Linear layer's bias then ReLU) -> ``y = bias_relu(x,
    b)``; its backward ``gh = relu_backward(g, h); gb = sum_to(gh)`` -> ``gh, gb =
    bias_relu_backward(g, y)``."""
    h = _var(relu.ins[0])
    add = uses.maker.get(h)
    if add is None or add.prim.name != "add" or id(add) in drop:
        return
    x, b = (_value(values, r) for r in add.ins)
    if not (
        _dense2d(x)
        and isinstance(b, np.ndarray)
        and b.shape == (x.shape[1],)
        and x.dtype == b.dtype
        and x.dtype.kind == "f"
    ):
        return
    backward = []
    for e in uses.read_by(h):
        if e is relu:
            continue
        if not _relu_grad(h, e):
            return  # h is read elsewhere: keep the pair as it is
        gh = e.outs[0]
        g = values[_var(e.ins[0])]
        sums = [s for s in uses.read_by(gh) if isinstance(s, Eq) and s.prim.name == "sum_to"]
        sums = [s for s in sums if s.attrs.get("shape") == b.shape and _var(s.ins[0]) == gh]
        if len(sums) != 1 or not _dense2d(g) or g.shape != x.shape or g.dtype != x.dtype:
            return
        backward.append((e, sums[0]))
    relu.prim, relu.ins, relu.attrs = bias_relu, list(add.ins), {}
    for grad, total in backward:
        grad.prim, grad.attrs, grad.packed = bias_relu_backward_kernel, {}, True
        grad.ins = [grad.ins[0], (VAR, relu.outs[0])]
        grad.outs = [grad.outs[0], total.outs[0]]
        drop.add(id(total))


# -- ReLU + max pooling --------------------------------------------------------------------------
def _fuse_relu_max_pool(pool: Eq, uses: _Uses, values: list, drop: set) -> None:
    """``r = relu(x); p, arg = max_pool(r)`` -> ``p, arg = relu_max_pool(x)``; its backward
    ``gr = max_pool_backward(g, arg); gx = relu_backward(gr, x)`` -> ``gx =
    relu_max_pool_backward(g, p, arg)``."""
    r = _var(pool.ins[0])
    relu = uses.maker.get(r)
    attrs = pool.attrs
    if (
        relu is None
        or relu.prim.name != "relu"
        or uses.read_by(r) != [pool]
        or any(lo or hi for lo, hi in attrs["padding"])
        or any(d != 1 for d in attrs["dilation"])
    ):
        return
    x = _var(relu.ins[0])
    xa = values[x] if x is not None else None
    if xa is None or xa.ndim not in (3, 4) or not xa.flags.c_contiguous:
        return
    backward = []
    for e in uses.read_by(pool.outs[1]):  # the window offsets: read by the pool's VJP only
        if not isinstance(e, Eq) or e.prim.name != "max_pool_backward":
            return
        gr = e.outs[0]
        grad = uses.only_reader(gr)
        if not _relu_grad(x, grad) or _var(grad.ins[0]) != gr:
            return
        backward.append((e, grad))
    kernel = {"kernel": attrs["kernel"], "stride": attrs["stride"]}
    pool.prim, pool.ins, pool.attrs = relu_max_pool, list(relu.ins), kernel
    for route, grad in backward:
        grad.prim, grad.packed = relu_max_pool_backward_kernel, False
        grad.ins = [route.ins[0], (VAR, pool.outs[0]), (VAR, pool.outs[1])]
        grad.attrs = {"x_shape": route.attrs["x_shape"], **kernel}
        drop.add(id(route))


# -- a channels-last convolution's two gradients -------------------------------------------------
def _fuse_conv_grads(weight: Eq, uses: _Uses, values: list, drop: set) -> None:
    """``gx = conv_transpose(g, w, channels_last); gw = conv_weight(x, g, *saved)`` (one
    convolution's input and weight gradients, the text CNN's) -> ``gx, gw = conv_grads(g, x,
    w, *saved)``, whose forward runs the direct kernel once for both where each would run it."""
    g = _var(weight.ins[1])
    if g is None or id(weight) in drop:
        return
    geometry = ("stride", "padding", "dilation", "groups")
    for e in uses.read_by(g):
        if (
            isinstance(e, Eq)
            and id(e) not in drop
            and e.prim.name == "conv_transpose"
            and e.attrs.get("channels_last")
            and len(e.ins) == 2
            and _var(e.ins[0]) == g
            and all(e.attrs[k] == weight.attrs[k] for k in geometry)
        ):
            break
    else:
        return
    attrs = {k: weight.attrs[k] for k in ("ksize", *geometry)}
    e.prim, e.attrs, e.packed = conv_grads, {**attrs, "size": e.attrs["size"]}, True
    e.ins = [e.ins[0], weight.ins[0], e.ins[1], *weight.ins[2:]]
    e.outs = [e.outs[0], weight.outs[0]]
    drop.add(id(weight))


# -- BatchNorm's statistics, once ---------------------------------------------------------------
def _fuse_batch_moments(moments: Eq, uses: _Uses, values: list, drop: set) -> None:
    """``y, mean, rstd = batch_norm_train(x, w, b)`` then ``m, v = batch_moments(x)`` (the
    running statistics' input: the same statistics again) -> ``y, mean, rstd, m, v =
    batch_norm_train_moments(x, w, b)``, one pass of statistics."""
    x = _var(moments.ins[0])
    if x is None:
        return
    for e in uses.read_by(x):
        if e is moments:
            return  # no normalisation of x before it
        if isinstance(e, Eq) and id(e) not in drop and e.prim.name == "batch_norm_train":
            break
    else:
        return
    e.prim, e.outs, e.packed = batch_norm_train_moments, [*e.outs, *moments.outs], True
    drop.add(id(moments))


# -- BatchNorm + ReLU ----------------------------------------------------------------------------
_WITH_RELU = {
    "batch_norm_train": batch_norm_relu_train,
    "batch_norm_train_moments": batch_norm_relu_train_moments,
}


def _fuse_batch_norm_relu(relu: Eq, uses: _Uses, values: list, drop: set) -> None:
    """``h, mean, rstd = batch_norm_train(x, w, b); y = relu(h)`` -> ``y, mean, rstd =
    batch_norm_relu_train(x, w, b)`` (or its ``_moments`` form); its backward ``gh =
    relu_backward(g, h); gx, gw, gb = batch_norm_backward(gh, x, w, mean, rstd)`` -> ``gx, gw,
    gb = batch_norm_relu_backward(g, y, x, w, mean, rstd)``: ReLU's two passes saved."""
    h = _var(relu.ins[0])
    norm = uses.maker.get(h)
    if norm is None or id(norm) in drop or norm.prim.name not in _WITH_RELU or norm.outs[0] != h:
        return
    backward = []
    for e in uses.read_by(h):
        if e is relu:
            continue
        if not _relu_grad(h, e) or id(e) in drop:
            return  # h is read elsewhere: keep the pair as it is
        after = uses.only_reader(e.outs[0])
        this_norm = [norm.ins[0], norm.ins[1], (VAR, norm.outs[1]), (VAR, norm.outs[2])]
        if not (
            isinstance(after, Eq)
            and id(after) not in drop
            and after.prim.name == "batch_norm_backward"
            and after.ins == [(VAR, e.outs[0]), *this_norm]  # this BatchNorm's VJP
        ):
            return
        backward.append((e, after))
    norm.prim = _WITH_RELU[norm.prim.name]
    norm.outs = [relu.outs[0], *norm.outs[1:]]
    drop.add(id(relu))
    for grad, after in backward:
        after.prim = batch_norm_relu_backward
        after.ins = [grad.ins[0], (VAR, relu.outs[0]), *after.ins[1:]]
        drop.add(id(grad))


def _fuse_relu(relu: Eq, uses: _Uses, values: list, drop: set) -> None:
    """A ReLU fuses with what made its input: a bias add, or a BatchNorm."""
    maker = uses.maker.get(_var(relu.ins[0]))
    if maker is not None and maker.prim.name in _WITH_RELU:
        _fuse_batch_norm_relu(relu, uses, values, drop)
    else:
        _fuse_bias_relu(relu, uses, values, drop)


FUSIONS: list[tuple[str, Callable]] = [
    ("batch_moments", _fuse_batch_moments),
    ("conv_weight", _fuse_conv_grads),
    ("max_pool1d", _fuse_relu_max_pool),
    ("max_pool2d", _fuse_relu_max_pool),
    ("relu", _fuse_relu),
]
"""(anchor primitive, rule): each equation of the anchor's primitive is handed to the rule,
which rewrites it and its neighbours in place where the pattern fits. In priority order: a ReLU
that feeds a max-pool fuses with the pool, not with a bias before it."""


def fuse(values: list, events: list) -> list:
    """``events`` with the patterns of :data:`FUSIONS` rewritten into fused primitives
    (``values``: each value's array as traced, for the rules' shape and layout checks)."""
    drop: set[int] = set()
    for anchor, rule in FUSIONS:
        uses = _Uses([e for e in events if id(e) not in drop])
        for e in events:
            if isinstance(e, Eq) and id(e) not in drop and e.prim.name == anchor:
                rule(e, uses, values, drop)
    return [e for e in events if id(e) not in drop]
