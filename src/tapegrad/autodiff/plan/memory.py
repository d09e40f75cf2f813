"""Memory: each value's lifetime, and buffers shared over time by a pool.

A value lives from the equation that makes it to its last reader (a view counting as a reader of
its base); its buffer then goes back to the pool, where a later value of the same or smaller
size takes it. Views of an input cost nothing: they are taken once, when the plan is built.
"""

from __future__ import annotations

import bisect

import numpy as np

from ..backend import device_of, is_array
from .trace import EXT, VAR, Eq, Reduce, Sink, Trace, _spec_vars


class _Pool:
    """Memory blocks that values of a plan share over time: a value takes the smallest free
    block that holds it (or a new one) and gives it back after its last reader. Free blocks are
    kept sorted by size per device, so taking and giving back cost a binary search (tracing
    stays linear in the number of operations)."""

    def __init__(self):
        self.free: dict = {}  # device -> ([sizes], [uint8 blocks]), sorted by size
        self.allocated = 0

    def take(self, like: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(an array shaped and laid out like ``like``, the block it lives in)."""
        if like.nbytes == 0:
            return np.empty_like(like), None
        dev = device_of(like)
        sizes, blocks = self.free.setdefault(dev, ([], []))
        i = bisect.bisect_left(sizes, like.nbytes)
        if i < len(sizes):
            del sizes[i]
            block = blocks.pop(i)
        else:
            block = dev.xp.empty(like.nbytes, np.uint8)
            self.allocated += like.nbytes
        return _laid_out_like(like, block), block

    def give(self, block: np.ndarray | None) -> None:
        if block is not None:
            sizes, blocks = self.free.setdefault(device_of(block), ([], []))
            i = bisect.bisect_right(sizes, block.nbytes)  # after equal sizes: oldest first
            sizes.insert(i, block.nbytes)
            blocks.insert(i, block)


def _laid_out_like(like: np.ndarray, block: np.ndarray) -> np.ndarray:
    """An array over ``block`` with ``like``'s shape, dtype and memory order (the axis order
    of its strides: an elementwise result of a transposed view is laid out transposed, and
    kernels downstream choose their path by layout, so a plan keeps eager's)."""
    order = sorted(range(like.ndim), key=lambda i: -abs(like.strides[i]))
    strides = [0] * like.ndim
    step = like.itemsize
    for i in reversed(order):
        strides[i] = step
        step *= like.shape[i]
    return device_of(like).from_block(block, like.shape, like.dtype, tuple(strides))


def _start(a: np.ndarray) -> int:
    return device_of(a).data_ptr(a)


def _dense(a: np.ndarray) -> bool:
    """Whether ``a`` fills its memory without gaps, in some order of its axes."""
    step = a.itemsize
    for i in sorted(range(a.ndim), key=lambda i: abs(a.strides[i])):
        if a.shape[i] != 1 and a.strides[i] != step:
            return False
        step *= a.shape[i]
    return True


def _view_source(out, arrays) -> int | None:
    """The position of the input array whose memory ``out`` is a view of, if any."""
    if not is_array(out) or out.size == 0:
        return None
    dev = device_of(out)
    for k, a in enumerate(arrays):
        if is_array(a) and device_of(a) is dev and np.may_share_memory(out, a):
            return k
    return None


def _lifetimes(trace: Trace, events: list, out_spec) -> tuple[dict, dict, dict]:
    """``root[v]``: the value whose buffer ``v`` lives in (itself, the base it is a view of,
    or None for a view of a parameter or constant); ``views[v]``: for a value that is a view
    of its equation's input, that input's position; ``dies[i]``: the roots whose last reader is
    event ``i`` (their buffers go back to the pool after it). Plan inputs and outputs never die."""
    root: dict[int, int | None] = {v: v for v in trace.inputs}
    views: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, e in enumerate(events):
        reads = []
        if isinstance(e, Eq):
            reads = [p for k, p in e.ins if k == VAR]
            for v in e.outs:
                root[v] = v
                last[v] = i  # a value nothing reads goes back right after it is made
            if len(e.outs) == 1:
                srcs = [
                    trace.values[p] if k == VAR else (p.data if k == EXT else p) for k, p in e.ins
                ]
                k = _view_source(trace.values[e.outs[0]], srcs)
                if k is not None:  # a view of an input: it lives in that input's buffer
                    del last[e.outs[0]]
                    kind, p = e.ins[k]
                    root[e.outs[0]] = root[p] if kind == VAR else None
                    views[e.outs[0]] = k
        elif isinstance(e, Sink) and e.grad[0] == VAR:
            reads = [e.grad[1]]
        elif isinstance(e, Reduce):
            reads = [e.loss]
        for v in reads:
            if root[v] is not None:
                last[root[v]] = i
    keep = {root[v] for v in _spec_vars(out_spec)} | set(trace.inputs)
    dies: dict[int, list] = {}
    for r, i in last.items():
        if r not in keep:
            dies.setdefault(i, []).append(r)
    return root, views, dies
