"""Gradient averaging across ranks: one flat buffer, one in-place allreduce a step."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .comm import SingleWorld
from .errors import DistributedError


class GradientAverager:
    """Averages parameter gradients across ranks with one in-place allreduce per step.

    It owns one flat, preallocated buffer: every parameter's gradient is a view of it (the first
    :attr:`n_grad` elements), then one slot for stop requests and a last one for the step's
    loss. A compiled plan that finds it (see
    ``tapegrad.autodiff.plan.reduce_gradients``) accumulates gradients straight into those
    views, so a step copies nothing; in eager mode gradients are copied in first. Every slot
    is scaled by :attr:`weight`, this rank's share of the global batch (``n_local /
    n_global``), so the sum over ranks is the gradient of the mean loss over the whole global
    batch, and the loss slot becomes that mean loss (:attr:`loss`), the same on every rank: a
    non-finite loss on any rank is seen by all. A caller that seeds the backward pass with
    :attr:`seed` (``loss.backward(averager.seed)``, a 0-d array holding the weight) gets the
    gradients scaled for free and sets :attr:`seeded` so they are not scaled twice.

    A rank that sets :attr:`asks_stop` before a step (a signal asked it to stop) has it summed
    into the stop slot; afterwards :attr:`stop_requested` is true on every rank if any asked,
    so all ranks can stop after the same step without a collective of their own.
    """

    def __init__(self, comm: SingleWorld, params: Sequence):
        self.comm = comm
        self.params = list(params)
        dtypes = {p.data.dtype for p in self.params}
        if len(dtypes) != 1:
            raise DistributedError(
                f"gradient averaging needs parameters of one dtype, got {sorted(map(str, dtypes))}"
            )
        dtype = dtypes.pop()
        total = sum(p.data.size for p in self.params)
        self.n_grad = total
        self.flat = np.zeros(total + 2, dtype=dtype)
        self.views: list[np.ndarray] = []
        offset = 0
        for p in self.params:
            self.views.append(self.flat[offset : offset + p.data.size].reshape(p.data.shape))
            offset += p.data.size
        self.seed = np.ones((), dtype=dtype)
        self.seeded = False
        self.weight = 1.0 / comm.size
        self.loss = float("nan")
        self.asks_stop = False
        self.stop_requested = False

    @property
    def weight(self) -> float:
        """This rank's share of the global batch (the seed of a seeded backward pass)."""
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        self._weight = float(value)
        self.seed[()] = value

    def buffers(self, tensors: Iterable) -> dict[int, np.ndarray]:
        """``id(tensor) -> view`` for those of ``tensors`` that are our parameters: where a
        compiled plan accumulates their gradients."""
        mine = {id(p): v for p, v in zip(self.params, self.views)}
        return {id(t): mine[id(t)] for t in tensors if id(t) in mine}

    def __call__(self, loss: np.ndarray) -> None:
        """Average gradients and ``loss`` (this rank's mean loss) across ranks, in place."""
        for p, view in zip(self.params, self.views):
            g = p._grad
            if g is view:
                continue
            if g is None:
                view.fill(0)
            else:
                np.copyto(view, g)
            p._grad = view
        flat = self.flat
        if self.seeded:
            flat[-1] = loss * self._weight  # the gradients came scaled from the backward pass
        else:
            flat[-1] = loss
            if self._weight != 1.0:
                np.multiply(flat, self._weight, out=flat)
        flat[-2] = 1.0 if self.asks_stop else 0.0
        self.comm.allreduce(flat)
        self.loss = float(flat[-1])
        self.stop_requested = bool(flat[-2] > 0)
