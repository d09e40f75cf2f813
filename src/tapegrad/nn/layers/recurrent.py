"""Recurrent layers: ``RNN`` (Elman), ``LSTM``, ``GRU``; one layer, one direction.

Parameters use PyTorch's names and layouts so weights copy across 1:1: ``weight_ih
(G*H, I)``, ``weight_hh (G*H, H)``, ``bias_ih (G*H,)``, ``bias_hh (G*H,)`` with the gate blocks
stacked as i, f, g, o (LSTM, G = 4) and r, z, n (GRU, G = 3). Inputs are batch-first
``(N, T, I)`` by default; outputs are all hidden states ``(N, T, H)`` and the last state
``(N, H)`` (no leading layer axis). ``load_state_dict`` also accepts PyTorch's single-layer
names (``weight_ih_l0``, ...), so a PyTorch state dict loads unchanged. The input projection
of all T steps is a single matrix product; only the recurrence loops over time, never over
samples.

Initialisation: each ``(H, I)`` and ``(H, H)`` gate block gets its own Xavier/Glorot uniform
draw (each block is a separate linear map, so its fans are its own), biases are zero.
"""

from __future__ import annotations

import numpy as np

from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from ._check import check_input


class _Recurrent(Module):
    gates = 1
    _load_aliases = {f"{n}_l0": n for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        batch_first: bool = True,
        rng: np.random.Generator | None = None,
        dtype=np.float32,
    ) -> None:
        super().__init__()
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.batch_first = bool(batch_first)
        G, H, I = self.gates, self.hidden_size, self.input_size
        self.weight_ih = Parameter(np.empty((G * H, I), dtype=dtype))
        self.weight_hh = Parameter(np.empty((G * H, H), dtype=dtype))
        for w in (self.weight_ih, self.weight_hh):
            for k in range(G):
                init.xavier_uniform_(Tensor(w.data[k * H : (k + 1) * H]), rng=rng)
        self.bias_ih = Parameter(np.zeros(G * H, dtype=dtype)) if bias else None
        self.bias_hh = Parameter(np.zeros(G * H, dtype=dtype)) if bias else None

    def _check(self, x, states) -> None:
        pattern = ("N", "T", self.input_size) if self.batch_first else ("T", "N", self.input_size)
        check_input(self, x, pattern, {2: self.input_size})
        n = x.shape[0] if self.batch_first else x.shape[1]
        for name, s in states:
            if s is not None and tuple(s.shape) != (n, self.hidden_size):
                raise ShapeError(
                    f"{self!r}: expected initial {name} of shape ({n}, {self.hidden_size}), "
                    f"got {tuple(s.shape)}"
                )

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias_ih is None:
            s += ", bias=False"
        return s + f", batch_first={self.batch_first}"


class RNN(_Recurrent):
    """Elman RNN: ``h_t = act(x_t @ W_ih^T + b_ih + h_{t-1} @ W_hh^T + b_hh)``.

    ``forward(x, h0=None)`` returns ``(outputs (N, T, H), h_T (N, H))``; ``h0`` defaults to
    zeros. ``nonlinearity``: "tanh" or "relu".
    """

    gates = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = True,
        rng: np.random.Generator | None = None,
        dtype=np.float32,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, batch_first, rng, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        self._check(x, [("h0", h0)])
        return F.rnn(
            x,
            self.weight_ih,
            self.weight_hh,
            self.bias_ih,
            self.bias_hh,
            h0,
            self.nonlinearity,
            self.batch_first,
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nonlinearity={self.nonlinearity!r}"


class LSTM(_Recurrent):
    """Long short-term memory, gates stacked i, f, g, o:
    ``c_t = f*c_{t-1} + i*g``, ``h_t = o*tanh(c_t)``.

    ``forward(x, state=None)`` with ``state = (h0, c0)`` returns ``(outputs, (h_T, c_T))``.
    """

    gates = 4

    def forward(self, x: Tensor, state=None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if state is not None:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise TypeError(f"{self!r}: state must be a pair (h0, c0)")
            self._check(x, [("h0", state[0]), ("c0", state[1])])
        else:
            self._check(x, [])
        return F.lstm(
            x, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, state, self.batch_first
        )


class GRU(_Recurrent):
    """Gated recurrent unit, gates stacked r, z, n:
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h_t = (1 - z) * n + z * h_{t-1}``.

    ``forward(x, h0=None)`` returns ``(outputs (N, T, H), h_T (N, H))``.
    """

    gates = 3

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        self._check(x, [("h0", h0)])
        return F.gru(
            x, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, h0, self.batch_first
        )
