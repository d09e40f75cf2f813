"""The optimiser step split across ranks (ZeRO stage 1): each rank updates 1/N of the weights.

Data-parallel ranks all hold the averaged gradient, so all of them could apply the same
optimiser step to all the weights; but that step does not shrink with the ranks while the rest
of a step does (on one quiet thread, Adam over the MLP preset's 102k weights takes 0.09 ms of
a 0.70 ms step; over text-cnn's 251k weights 0.25 ms, more than a rank's share of a 1.74 ms
step among 8 ranks).
Measured with 2 ranks here the split gains 1-2% (mlp, text-cnn; nothing for seed-rnn's SGD):
the saved half of the optimiser step minus one allgather; it grows with the ranks.
tapegrad's optimisers (SGD, Adam, AdamW, RMSprop) update every
element independently, so the step can be cut anywhere: the parameters become views of one flat
buffer, rank r runs a copy of the optimiser (same class and hyperparameters) on its contiguous
slice of it, with its slice of the averaged gradient buffer as the gradient, and an in-place
allgather gives every rank the whole updated buffer. Each element sees exactly the operations
the whole-tensor step would apply, so results do not depend on the number of ranks' cuts.

The optimiser the user made keeps its role for checkpoints: :meth:`ShardedStep.push_state`
(collective) gathers the slices' state into its per-parameter state before a checkpoint is
written, and :meth:`ShardedStep.pull_state` cuts it into slices after one is loaded.
"""

from __future__ import annotations

import numpy as np

from ..autodiff import Tensor
from .averager import GradientAverager
from .comm import SingleWorld, shard

ELEMENTWISE = ("SGD", "Adam", "AdamW", "RMSprop")


class ShardedStep:
    """Runs ``optimizer``'s step on this rank's slice of the weights, then shares the slices."""

    @staticmethod
    def supports(comm: SingleWorld, optimizer, reducer: GradientAverager) -> bool:
        """Whether the step can be split: an elementwise optimiser of tapegrad's, one parameter
        group covering exactly the averaged parameters, at least one element per rank."""
        groups = getattr(optimizer, "param_groups", [])
        return (
            comm.distributed
            and type(optimizer).__name__ in ELEMENTWISE
            and type(optimizer).__module__.startswith("tapegrad.optim")
            and len(groups) == 1
            and [id(p) for p in groups[0]["params"]] == [id(p) for p in reducer.params]
            and reducer.n_grad >= comm.size
        )

    def __init__(self, comm: SingleWorld, optimizer, reducer: GradientAverager):
        self.comm, self.optimizer, self.reducer = comm, optimizer, reducer
        params = reducer.params
        total = reducer.n_grad
        self.flat = np.empty(total, dtype=reducer.flat.dtype)
        self.sizes = [p.data.size for p in params]
        offset = 0
        for p, n in zip(params, self.sizes):
            view = self.flat[offset : offset + n].reshape(p.data.shape)
            np.copyto(view, p.data)
            p.data = view  # the weights now live in the flat buffer
            offset += n
        bounds = [shard(total, r, comm.size) for r in range(comm.size)]
        self.counts = [s.stop - s.start for s in bounds]
        self.mine = bounds[comm.rank]
        self.slice = Tensor._make(self.flat[self.mine], None, True)
        self.slice._grad = reducer.flat[self.mine]  # this rank's part of the averaged gradient
        group = optimizer.param_groups[0]
        self.group = group
        self.copy = type(optimizer)(
            [self.slice], **{k: v for k, v in group.items() if k != "params"}
        )
        self.pull_state()

    def step(self) -> None:
        """Update this rank's slice (with the user's optimiser's current hyperparameters, so a
        learning-rate schedule applies), then give every rank every slice."""
        mine = self.copy.param_groups[0]
        for k, v in self.group.items():
            if k != "params":
                mine[k] = v
        self.copy.step()
        self.comm.allgather_slices(self.flat, self.counts)

    def pull_state(self) -> None:
        """Cut the user's optimiser's per-parameter state (after a load) into this rank's slice."""
        state = self.optimizer.state
        if not state:
            self.copy.state.clear()
            return
        first = state[0]
        mine: dict = {}
        for k, v in first.items():
            if isinstance(v, np.ndarray):
                whole = np.concatenate([state[i][k].reshape(-1) for i in range(len(self.sizes))])
                mine[k] = whole[self.mine].copy()
            else:
                mine[k] = v
        self.copy.state.clear()
        self.copy.state[0] = mine

    def push_state(self) -> None:
        """Gather every rank's slice of the state into the user's optimiser (collective)."""
        mine = self.copy.state.get(0)
        if mine is None:
            return
        state = self.optimizer.state
        for k, v in mine.items():
            if isinstance(v, np.ndarray):
                whole = np.empty(self.flat.size, dtype=v.dtype)
                whole[self.mine] = v
                self.comm.allgather_slices(whole, self.counts)
            offset = 0
            for i, (p, n) in enumerate(zip(self.reducer.params, self.sizes)):
                entry = state.setdefault(i, {})
                if isinstance(v, np.ndarray):
                    entry[k] = whole[offset : offset + n].reshape(p.data.shape).copy()
                else:
                    entry[k] = v
                offset += n
