"""The physical floor: FLOPs a training epoch must do, over the rate this machine multiplies at.

FLOPs are counted from the architecture, per sample, for the GEMM-like layers only (they do
almost all the arithmetic; activations, pooling, losses and optimiser updates are O(activations)
or O(parameters), memory-bound, and left out). A multiply-add counts as 2 FLOPs. For a layer
doing ``M`` multiply-adds forward:

- forward: ``M``;
- backward, weight gradient: ``M`` (always; every counted layer has trainable weights);
- backward, input gradient: ``M`` more only when the layer's input needs a gradient (it comes
  from a trainable layer): the first layer of a network, reading the data, skips it.

``M`` per sample for each layer type (``L`` positions sharing the weights, e.g. leading dims
of a Linear input):

- Linear ``in -> out``: ``L * in * out``;
- Conv1d / Conv2d: ``output positions * C_out * C_in * kernel elements``;
- RNN / GRU / LSTM with ``G`` gate blocks (1, 3, 4) over ``T`` steps: ``T * G * H * (I + H)``
  forward and for the weight gradients; the input gradient costs ``T * G * H * I`` when the
  input needs a gradient, and the hidden-state gradient ``(T - 1) * G * H * H`` (the zero
  initial state needs none).

Training FLOPs per epoch = ``2 * (forward + backward multiply-adds) * samples``. The floor is
that over the float32 GEMM rate measured with a large ``np.matmul`` (:func:`gemm_rate`): no
implementation on this machine's BLAS can train an epoch faster.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from .. import nn
from ..autodiff import Tensor


@dataclass
class LayerFlops:
    """Multiply-adds of one layer call, per sample."""

    name: str
    forward: int
    weight_grad: int
    input_grad: int


@dataclass
class FlopCount:
    """Per-sample multiply-adds of a model's training step, layer by layer."""

    layers: list[LayerFlops] = field(default_factory=list)

    @property
    def forward_macs(self) -> int:
        return sum(layer.forward for layer in self.layers)

    @property
    def backward_macs(self) -> int:
        return sum(layer.weight_grad + layer.input_grad for layer in self.layers)

    @property
    def train_flops_per_sample(self) -> int:
        """2 FLOPs per multiply-add, forward plus backward."""
        return 2 * (self.forward_macs + self.backward_macs)

    def per_epoch(self, samples: int) -> int:
        return self.train_flops_per_sample * int(samples)


def _needs_grad(x) -> bool:
    return isinstance(x, Tensor) and bool(x.requires_grad)


def _layer_macs(module: nn.Module, x: Tensor, out) -> LayerFlops | None:
    """Multiply-adds per sample of one call of ``module`` on a one-sample batch ``x``."""
    name = type(module).__name__
    grad_in = _needs_grad(x)
    if isinstance(module, nn.Linear):
        w = module.weight.data  # (out, in)
        positions = int(np.prod(x.shape[1:-1], dtype=np.int64))
        m = positions * w.shape[0] * w.shape[1]
        return LayerFlops(name, m, m, m if grad_in else 0)
    if isinstance(module, (nn.Conv1d, nn.Conv2d)):
        w = module.weight.data  # (C_out, C_in, *kernel)
        positions = int(np.prod(out.shape[2:], dtype=np.int64))
        m = positions * int(w.size)
        return LayerFlops(name, m, m, m if grad_in else 0)
    if isinstance(module, (nn.RNN, nn.GRU, nn.LSTM)):
        gates = {nn.RNN: 1, nn.GRU: 3, nn.LSTM: 4}[type(module)]
        hidden, inp = module.hidden_size, module.input_size
        steps = x.shape[1] if module.batch_first else x.shape[0]
        m = steps * gates * hidden * (inp + hidden)
        dx = steps * gates * hidden * inp if grad_in else 0
        dh = (steps - 1) * gates * hidden * hidden
        return LayerFlops(name, m, m, dx + dh)
    return None


def count_flops(model: nn.Module, sample: np.ndarray) -> FlopCount:
    """Count the per-sample training multiply-adds of ``model`` on one input ``sample``.

    Runs one forward pass on a one-sample batch with each Linear, Conv and recurrent layer
    instrumented to record its input and output shapes (the model is left as it was).
    """
    count = FlopCount()
    patched = []

    def wrap(module):
        original = module.forward

        def forward(x, *args, **kwargs):
            out = original(x, *args, **kwargs)
            first = out[0] if isinstance(out, tuple) else out
            layer = _layer_macs(module, x, first)
            if layer is not None:
                count.layers.append(layer)
            return out

        return forward

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.RNN, nn.GRU, nn.LSTM)):
            m.forward = wrap(m)
            patched.append(m)
    try:
        model(Tensor(np.asarray(sample)[None]))
    finally:
        for m in patched:
            del m.forward  # the instance attribute goes; the class's forward shows again
    return count


def gemm_samples(n: int = 2048, runs: int = 9) -> list[float]:
    """Rates in FLOP/s of ``runs`` timed ``np.matmul`` calls on float32 ``n x n`` matrices
    (``2 n^3`` FLOPs each), after one warm-up call."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    np.matmul(a, b, out=out)
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        rates.append(2.0 * n**3 / (time.perf_counter() - t0))
    return rates


def gemm_rate(n: int = 2048, runs: int = 9) -> float:
    """This machine's float32 matrix-multiply rate in FLOP/s: the median of :func:`gemm_samples`."""
    return statistics.median(gemm_samples(n, runs))
