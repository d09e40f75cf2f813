"""Recurrent layers: ``RNN`` (Elman), ``LSTM`` and ``GRU``, stacked and bidirectional, and
their one-step cells ``RNNCell``, ``LSTMCell``, ``GRUCell``.

Arguments, layouts and parameter names are PyTorch's, so code and weights port 1:1:
``nn.LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
bidirectional=False)``. Inputs are time-major ``(T, N, I)`` unless ``batch_first`` (then
``(N, T, I)``), or unbatched ``(T, I)``. ``forward(x, h0)`` returns the last layer's hidden
states ``(T, N, D*H)`` (D = 2 when bidirectional, the two directions side by side) and the final
states ``(num_layers * D, N, H)``, layer by layer, forward direction first (``LSTM``: a pair
``(h_n, c_n)``). Layer ``k``'s parameters are ``weight_ih_l{k}`` ``(G*H, I_k)``,
``weight_hh_l{k}`` ``(G*H, H)``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` ``(G*H,)`` with the gate
blocks stacked i, f, g, o (LSTM, G = 4) or r, z, n (GRU, G = 3), and ``..._reverse`` for the
reverse direction. ``dropout`` applies to every layer's output but the last, in training.

Each layer and direction is one fused scan (``ops.rnn_scan``/``lstm_scan``/``gru_scan``): the
input projection of all T steps is one matrix product and only the recurrence loops over time;
the reverse direction is the same scan over the input with its time axis flipped.

Initialisation: each ``(H, I)`` and ``(H, H)`` gate block gets its own Xavier/Glorot uniform
draw (each block is a separate linear map, so its fans are its own), biases are zero.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...autodiff import ops
from ...autodiff.backend import float_dtype
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from ..utils.rnn import PackedSequence, run_packed

_GATES = {"tanh": 1, "relu": 1, "lstm": 4, "gru": 3}


def _gate_blocks_init(w: Parameter, gates: int, hidden: int, rng) -> None:
    for k in range(gates):
        init.xavier_uniform_(Tensor(w.data[k * hidden : (k + 1) * hidden]), rng=rng)


def _check_flag(layer: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{layer}: {name} must be True or False, got {value!r}")
    return bool(value)


def _check_size(layer: str, name: str, value, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or int(value) != value or value < minimum:
        raise ValueError(f"{layer}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _flip_time(x: Tensor, axis: int) -> Tensor:
    return x[(slice(None),) * axis + (slice(None, None, -1),)]


class _RNNBase(Module):
    """The stacked, optionally bidirectional recurrence shared by RNN, LSTM and GRU."""

    mode = "tanh"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.input_size = _check_size(name, "input_size", input_size)
        self.hidden_size = _check_size(name, "hidden_size", hidden_size)
        self.num_layers = _check_size(name, "num_layers", num_layers)
        self.bias = _check_flag(name, "bias", bias)
        self.batch_first = _check_flag(name, "batch_first", batch_first)
        self.bidirectional = _check_flag(name, "bidirectional", bidirectional)
        if isinstance(dropout, (bool, np.bool_)) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be a probability in [0, 1], got {dropout!r}")
        self.dropout = float(dropout)
        if self.dropout > 0 and self.num_layers == 1:
            warnings.warn(
                f"{name}: dropout={self.dropout} acts between stacked layers, and there is "
                f"only one (num_layers=1): it does nothing",
                UserWarning,
                stacklevel=3,
            )
        if device is not None and str(device) != "cpu":
            raise ValueError(f"{name}: tapegrad runs on the CPU; got device {device!r}")
        G, H = _GATES[self.mode], self.hidden_size
        D = 2 if self.bidirectional else 1
        self._weight_names: list[list[str]] = []
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else H * D
            for direction in range(D):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                w_ih = Parameter(np.empty((G * H, width), dtype=float_dtype(dtype)))
                w_hh = Parameter(np.empty((G * H, H), dtype=float_dtype(dtype)))
                _gate_blocks_init(w_ih, G, H, rng)
                _gate_blocks_init(w_hh, G, H, rng)
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                setattr(self, names[0], w_ih)
                setattr(self, names[1], w_hh)
                if self.bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    setattr(self, names[2], Parameter(np.zeros(G * H, dtype=float_dtype(dtype))))
                    setattr(self, names[3], Parameter(np.zeros(G * H, dtype=float_dtype(dtype))))
                self._weight_names.append(names)
        # inter-layer dropout masks: a generator of the layer's own, drawn only when needed
        self.rng = None
        if self.dropout > 0 and self.num_layers > 1:
            source = rng if rng is not None else init.default_generator()
            self.rng = np.random.default_rng(source.integers(2**63))

    # tapegrad's single-layer names of earlier versions load into layer 0
    _load_aliases = {n: f"{n}_l0" for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters of each layer and direction, ``[w_ih, w_hh, b_ih, b_hh]``."""
        return [[getattr(self, n) for n in names] for names in self._weight_names]

    # -- checks ------------------------------------------------------------------------------
    def _check_input(self, x) -> bool:
        """Whether ``x`` is batched; raises naming the layer and the expected shapes."""
        if x.ndim == 3:
            pattern = "(N, T, {})" if self.batch_first else "(T, N, {})"
        elif x.ndim == 2:
            pattern = "(T, {})"
        else:
            pattern = "(N, T, {})" if self.batch_first else "(T, N, {})"
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ShapeError(
                f"{self!r}: expected input of shape {pattern.format(self.input_size)}, got "
                f"{tuple(x.shape)}"
            )
        if x.dtype.kind != "f":
            raise TypeError(f"{self!r}: input must be floating point, got dtype {x.dtype}")
        return x.ndim == 3

    def _state_shape(self, n: int | None) -> tuple[int, ...]:
        layers = self.num_layers * (2 if self.bidirectional else 1)
        return (layers, self.hidden_size) if n is None else (layers, n, self.hidden_size)

    def _check_state(self, name: str, s, n: int | None):
        if s is None:
            return None
        s = s if isinstance(s, Tensor) else Tensor(np.asarray(s))
        want = self._state_shape(n)
        if tuple(s.shape) != want:
            raise ShapeError(
                f"{self!r}: expected {name} of shape {want} (num_layers * num_directions, "
                f"{'' if n is None else 'N, '}hidden_size), got {tuple(s.shape)}"
            )
        return s

    # -- the recurrence ----------------------------------------------------------------------
    def _run(self, x: Tensor, states: list | None):
        """``states``: per initial-state tensor (h0, and c0 for LSTM) its (L*D, N, H) tensor,
        or None for zeros. Returns (output, [final states, one (L*D, N, H) tensor each])."""
        batched = self._check_input(x)
        if not batched:  # (T, I): one sequence, time-major with a batch of one
            x = ops.expand_dims(x, 1)
            if states is not None:
                states = [None if s is None else ops.expand_dims(s, 1) for s in states]
        bf = self.batch_first and batched
        D = 2 if self.bidirectional else 1
        time_axis = 1 if bf else 0
        if x.shape[time_axis] == 0:
            raise ShapeError(f"{self!r}: the input has no time steps, got {tuple(x.shape)}")
        finals: list[list[Tensor]] = [[] for _ in range(2 if self.mode == "lstm" else 1)]
        layer_in, in_bf = x, bf
        for layer in range(self.num_layers):
            outs = []
            for direction in range(D):
                k = layer * D + direction
                w_ih, w_hh, *b = self.all_weights[k]
                b_ih, b_hh = b if b else (None, None)
                init_state = None
                if states is not None and any(s is not None for s in states):
                    picked = [None if s is None else s[k] for s in states]
                    if self.mode == "lstm":
                        zeros = np.zeros(
                            picked[0].shape if picked[0] is not None else picked[1].shape, x.dtype
                        )
                        init_state = tuple(zeros if p is None else p for p in picked)
                    else:
                        init_state = picked[0]
                seq = layer_in if direction == 0 else _flip_time(layer_in, 1 if in_bf else 0)
                hs, last = F.recurrent_layer(
                    self.mode, seq, w_ih, w_hh, b_ih, b_hh, init_state, in_bf
                )
                outs.append(hs if direction == 0 else _flip_time(hs, 0))
                for store, value in zip(finals, last if self.mode == "lstm" else (last,)):
                    store.append(value)
            out = outs[0] if D == 1 else ops.concatenate(outs, axis=2)
            if layer < self.num_layers - 1 and self.dropout > 0 and self.training:
                out = F.dropout(out, self.dropout, True, self.rng)
            layer_in, in_bf = out, False
        if bf:
            out = ops.permute(out, (1, 0, 2))
        if not batched:
            out = ops.squeeze(out, 1)
        result = []
        for store in finals:
            h = ops.expand_dims(store[0], 0) if len(store) == 1 else ops.stack(store, axis=0)
            result.append(h if batched else ops.squeeze(h, 1))
        return out, result

    def _batch(self, x) -> int | None:
        if x.ndim != 3:
            return None
        return x.shape[0] if self.batch_first else x.shape[1]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(_RNNBase):
    """Elman RNN: ``h_t = act(x_t @ W_ih^T + b_ih + h_{t-1} @ W_hh^T + b_hh)``, ``act`` tanh or
    relu (``nonlinearity``).

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``; ``forward(x, h0=None)`` returns
    ``(output, h_n)`` (see the module docstring for shapes); ``h0`` defaults to zeros.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.__dict__["mode"] = nonlinearity  # before the base class sizes the gates
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            rng=rng,
            dtype=dtype,
            device=device,
        )
        self.nonlinearity = nonlinearity

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if isinstance(x, PackedSequence):
            return run_packed(self, x, h0)
        h0 = self._check_state("h0", h0, self._batch(x))
        out, (h_n,) = self._run(x, [h0])
        return out, h_n

    def extra_repr(self) -> str:
        extra = super().extra_repr()
        return extra if self.nonlinearity == "tanh" else extra + ", nonlinearity='relu'"


class LSTM(_RNNBase):
    """Long short-term memory, gates stacked i, f, g, o:
    ``c_t = f*c_{t-1} + i*g``, ``h_t = o*tanh(c_t)``.

    ``forward(x, (h0, c0)=None)`` returns ``(output, (h_n, c_n))``. ``proj_size`` is not
    supported (it must be 0).
    """

    mode = "lstm"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        *,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
    ) -> None:
        if proj_size != 0:
            raise ValueError(f"LSTM: proj_size={proj_size!r} is not supported (only 0)")
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            rng=rng,
            dtype=dtype,
            device=device,
        )

    def forward(self, x: Tensor, hx=None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"{self!r}: the initial state must be a pair (h0, c0)")
        if isinstance(x, PackedSequence):
            return run_packed(self, x, hx)
        n = self._batch(x)
        states = None
        if hx is not None:
            states = [self._check_state("h0", hx[0], n), self._check_state("c0", hx[1], n)]
        out, (h_n, c_n) = self._run(x, states)
        return out, (h_n, c_n)


class GRU(_RNNBase):
    """Gated recurrent unit, gates stacked r, z, n:
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h_t = (1 - z) * n + z * h_{t-1}``.

    ``forward(x, h0=None)`` returns ``(output, h_n)``.
    """

    mode = "gru"

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if isinstance(x, PackedSequence):
            return run_packed(self, x, h0)
        h0 = self._check_state("h0", h0, self._batch(x))
        out, (h_n,) = self._run(x, [h0])
        return out, h_n


# -- cells -------------------------------------------------------------------------------------
class _CellBase(Module):
    mode = "tanh"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        *,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.input_size = _check_size(name, "input_size", input_size)
        self.hidden_size = _check_size(name, "hidden_size", hidden_size)
        self.bias = _check_flag(name, "bias", bias)
        if device is not None and str(device) != "cpu":
            raise ValueError(f"{name}: tapegrad runs on the CPU; got device {device!r}")
        G, H = _GATES[self.mode], self.hidden_size
        self.weight_ih = Parameter(np.empty((G * H, self.input_size), dtype=float_dtype(dtype)))
        self.weight_hh = Parameter(np.empty((G * H, H), dtype=float_dtype(dtype)))
        _gate_blocks_init(self.weight_ih, G, H, rng)
        _gate_blocks_init(self.weight_hh, G, H, rng)
        self.bias_ih = Parameter(np.zeros(G * H, dtype=float_dtype(dtype))) if self.bias else None
        self.bias_hh = Parameter(np.zeros(G * H, dtype=float_dtype(dtype))) if self.bias else None

    def _zeros(self, x) -> np.ndarray:
        """A zero state for ``x`` (as PyTorch's cells start: ``weight_hh`` then gets its zero
        gradient, so optimisers treat it as PyTorch's do)."""
        return np.zeros((*x.shape[:-1], self.hidden_size), x.dtype)

    def _check(self, x, states: list) -> bool:
        """Whether ``x`` is batched; checks ``x`` and the given states."""
        ok = x.ndim in (1, 2) and x.shape[-1] == self.input_size
        if not ok:
            raise ShapeError(
                f"{self!r}: expected input of shape (N, {self.input_size}) or "
                f"({self.input_size},), got {tuple(x.shape)}"
            )
        want = (x.shape[0], self.hidden_size) if x.ndim == 2 else (self.hidden_size,)
        for name, s in states:
            if s is not None and tuple(s.shape) != want:
                raise ShapeError(f"{self!r}: expected {name} of shape {want}, got {tuple(s.shape)}")
        return x.ndim == 2

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


def _batched(v):
    return v[None] if isinstance(v, np.ndarray) else ops.expand_dims(v, 0)


class RNNCell(_CellBase):
    """One Elman step: ``h' = act(x @ W_ih^T + b_ih + h @ W_hh^T + b_hh)``; ``forward(x,
    h=None)`` with ``x (N, I)`` (or ``(I,)``) returns ``h' (N, H)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        *,
        rng: np.random.Generator | None = None,
        dtype=None,
        device=None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}"
            )
        super().__init__(input_size, hidden_size, bias, rng=rng, dtype=dtype, device=device)
        self.nonlinearity = nonlinearity

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        batched = self._check(x, [("hx", hx)])
        hx = self._zeros(x) if hx is None else hx
        if batched:
            return F.rnn_cell(
                x, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, self.nonlinearity
            )
        h = F.rnn_cell(
            _batched(x),
            _batched(hx),
            self.weight_ih,
            self.weight_hh,
            self.bias_ih,
            self.bias_hh,
            self.nonlinearity,
        )
        return h[0]


class LSTMCell(_CellBase):
    """One LSTM step; ``forward(x, (h, c)=None)`` returns ``(h', c')``."""

    mode = "lstm"

    def forward(self, x: Tensor, hx=None) -> tuple[Tensor, Tensor]:
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"{self!r}: the state must be a pair (h, c)")
        h, c = (None, None) if hx is None else hx
        w = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        batched = self._check(x, [("h", h), ("c", c)])
        if hx is None:
            h = c = self._zeros(x)
        if batched:
            return F.lstm_cell(x, (h, c), *w)
        h2, c2 = F.lstm_cell(_batched(x), (_batched(h), _batched(c)), *w)
        return h2[0], c2[0]


class GRUCell(_CellBase):
    """One GRU step; ``forward(x, h=None)`` returns ``h'``."""

    mode = "gru"

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        w = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        batched = self._check(x, [("hx", hx)])
        hx = self._zeros(x) if hx is None else hx
        if batched:
            return F.gru_cell(x, hx, *w)
        return F.gru_cell(_batched(x), _batched(hx), *w)[0]
