"""Stateless forms of the layers and the losses: ``nn.functional.linear``, ``relu``,
``conv2d``, ``lstm``, ``cross_entropy``, ...

Each composes engine primitives (``tapegrad.ops``); the modules in :mod:`tapegrad.nn.layers`
hold parameters and call these. Argument orders follow the names PyTorch users know
(``embedding(indices, weight)``, ``cross_entropy(logits, target)``).

Recurrent functions take time-major input ``(T, N, I)`` by default (``batch_first=True``:
``(N, T, I)``) and return outputs in the same layout; the input projection ``x @ W_ih^T`` is one
matrix product over all time steps, and only the recurrence ``h @ W_hh^T`` runs step by step.
"""

from __future__ import annotations

import numpy as np

from ..autodiff import backend, ops
from ..autodiff.errors import ShapeError
from ..autodiff.graph import no_grad
from ..autodiff.tensor import Tensor
from ._functional.dense import dropout, dropout1d, dropout2d, linear  # noqa: F401

ArrayLike = Tensor | np.ndarray

# -- activations -------------------------------------------------------------------------------
relu = ops.relu
tanh = ops.tanh
sigmoid = ops.sigmoid


def leaky_relu(x: ArrayLike, negative_slope: float = 0.01) -> Tensor:
    """x where x > 0, ``negative_slope * x`` elsewhere."""
    return ops.where(_t(x) > 0, x, _t(x) * negative_slope)


def _exp_branch(x, alpha: float = 1.0):
    # alpha * (exp(x / alpha) - 1) on min(x, 0): the branch where() leaves unselected never
    # overflows, so its zero gradient stays zero (not 0 * inf)
    return ops.expm1(ops.minimum(_t(x), 0.0) * (1.0 / alpha)) * alpha


def elu(x: ArrayLike, alpha: float = 1.0) -> Tensor:
    """x where x > 0, ``alpha * (exp(x) - 1)`` elsewhere."""
    return ops.where(_t(x) > 0, x, _exp_branch(x) * alpha)


def selu(x: ArrayLike) -> Tensor:
    """Self-normalising ELU with the usual constants (scale 1.0507..., alpha 1.6732...)."""
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def celu(x: ArrayLike, alpha: float = 1.0) -> Tensor:
    """x where x > 0, ``alpha * (exp(x / alpha) - 1)`` elsewhere."""
    return ops.where(_t(x) > 0, x, _exp_branch(x, alpha))


def gelu(x: ArrayLike, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``: exact through erf (``approximate="none"``, one compiled pass each way)
    or with the tanh approximation (``"tanh"``)."""
    x = _t(x)
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * float(np.sqrt(2 / np.pi))
        return x * (ops.tanh(inner) + 1.0) * 0.5
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return ops.gelu(x)


def silu(x: ArrayLike) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    return _t(x) * ops.sigmoid(x)


def mish(x: ArrayLike) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return _t(x) * ops.tanh(ops.softplus(x))


def hardtanh(x: ArrayLike, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clipped to [min_val, max_val]."""
    return ops.clip(x, min_val, max_val)


def relu6(x: ArrayLike) -> Tensor:
    """x clipped to [0, 6]."""
    return ops.clip(x, 0.0, 6.0)


def hardsigmoid(x: ArrayLike) -> Tensor:
    """``clip(x / 6 + 1 / 2, 0, 1)``."""
    return ops.clip(_t(x) * (1.0 / 6.0) + 0.5, 0.0, 1.0)


def hardswish(x: ArrayLike) -> Tensor:
    """``x * hardsigmoid(x)``."""
    return _t(x) * hardsigmoid(x)


def softsign(x: ArrayLike) -> Tensor:
    """``x / (1 + |x|)``."""
    return _t(x) / (ops.absolute(x) + 1.0)


def logsigmoid(x: ArrayLike) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, stable."""
    return -ops.softplus(-_t(x))


def softmin(x: ArrayLike, axis: int = -1, *, dim: int | None = None, dtype=None) -> Tensor:
    """``softmax(-x)`` along ``axis`` (or ``dim``)."""
    return ops.softmax(-_t(_cast(x, dtype)), axis, dim=dim)


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _cast(x, dtype):
    """``x`` as ``dtype`` first (PyTorch's ``dtype=`` argument of the softmaxes)."""
    return x if dtype is None else ops.astype(_t(x), dtype)


def softmax(x: ArrayLike, axis: int = -1, *, dim: int | None = None, dtype=None) -> Tensor:
    """Softmax along ``axis`` (or PyTorch's ``dim``), after casting to ``dtype`` if given."""
    return ops.softmax(_cast(x, dtype), axis, dim=dim)


def log_softmax(x: ArrayLike, axis: int = -1, *, dim: int | None = None, dtype=None) -> Tensor:
    """Log-softmax along ``axis`` (or ``dim``), stable, after casting to ``dtype`` if given."""
    return ops.log_softmax(_cast(x, dtype), axis, dim=dim)


def identity(x: Tensor) -> Tensor:
    return x


# -- dense, dropout ----------------------------------------------------------------------------
# -- convolution, pooling, embedding -----------------------------------------------------------
def conv1d(x: ArrayLike, weight: Tensor, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (cross-correlation) of ``x (N, C, L)`` with ``weight (O, C/groups, K)``;
    ``padding`` an int, ``'same'``, ``'valid'`` or a ((before, after),) pair (see
    :func:`tapegrad.conv1d`)."""
    return ops.conv1d(x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: ArrayLike, weight: Tensor, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution: ``x (N, C, H, W)``, ``weight (O, C/groups, KH, KW)``; stride, padding,
    dilation: int or pair (padding also ``'same'``/``'valid'``)."""
    return ops.conv2d(x, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(
    x: ArrayLike,
    weight: Tensor,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
):
    """Transposed 1-D convolution, PyTorch's arguments: ``weight (C_in, C_out/groups, K)``."""
    return ops.conv_transpose1d(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(
    x: ArrayLike,
    weight: Tensor,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
):
    """Transposed 2-D convolution, PyTorch's arguments: ``weight (C_in, C_out/groups, KH, KW)``."""
    return ops.conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation)


def max_pool1d(
    x: ArrayLike,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode=False,
    return_indices=False,
):
    """Max over windows along L of ``x (N, C, L)``; ``stride`` defaults to ``kernel_size``;
    -inf padding, dilation, ceil_mode and return_indices as PyTorch."""
    if _t(x).dtype.kind in "iu":  # as in PyTorch, which has max_pool2d for integers only
        from ..autodiff.errors import DTypeNotImplemented

        raise DTypeNotImplemented(f"max_pool1d: input must be floating point, got {_t(x).dtype}")
    return ops.max_pool1d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(
    x: ArrayLike,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode=False,
    return_indices=False,
):
    """Max over windows of ``x (N, C, H, W)``; ``stride`` defaults to ``kernel_size``. An
    integer ``x`` gives an integer result (no gradient), exact up to 2**53 as PyTorch's."""
    x = _t(x)
    if x.dtype.kind in "iu":
        out = ops.max_pool2d(
            x.detach().astype(np.float64),
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            return_indices,
        )
        if return_indices:
            return Tensor(out[0].data.astype(x.dtype)), out[1]
        return Tensor(out.data.astype(x.dtype))
    return ops.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_unpool1d(x: ArrayLike, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Each value of x at its max_pool1d index in a zero output (PyTorch's max_unpool1d)."""
    return ops.max_unpool1d(x, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(x: ArrayLike, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Each value of x at its max_pool2d index in a zero output (PyTorch's max_unpool2d)."""
    return ops.max_unpool2d(x, indices, kernel_size, stride, padding, output_size)


def pad(x: ArrayLike, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """PyTorch's form of ``tg.pad``: ``pad`` lists (before, after) pairs from the last axis
    backwards, ``(left, right)`` for the last axis, ``(left, right, top, bottom)`` for the last
    two; ``mode`` is ``constant`` (with ``value``, 0 by default), ``reflect``, ``replicate`` or
    ``circular``. A negative width crops (constant mode)."""
    x = _t(x)
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(
            f"pad: {pad} must be (before, after) pairs for at most the {x.ndim} axes of a "
            f"tensor of shape {x.shape}, the last axis first"
        )
    pairs = [(pad[i], pad[i + 1]) for i in range(len(pad) - 2, -1, -2)]
    width = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    if any(p < 0 for p in pad):  # a negative width crops, as in PyTorch (constant mode)
        if mode != "constant":
            raise ShapeError(f"pad: negative width in {pad} works only in constant mode")
        crop = tuple(slice(max(-a, 0), n - max(-b, 0)) for (a, b), n in zip(width, x.shape))
        if any(c.stop <= c.start for c in crop):
            raise ShapeError(f"pad: {pad} crops a tensor of shape {x.shape} to nothing")
        x = x[crop]
        width = [(max(a, 0), max(b, 0)) for a, b in width]
    return ops.pad(x, width, value=0.0 if value is None else value, mode=mode)


def embedding(indices, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight (num, dim)`` picked by integer ``indices``, giving shape
    ``indices.shape + (dim,)``. Repeated indices accumulate their gradients. Non-integer or
    out-of-range indices raise (checked by the primitive's wrapper).

    ``padding_idx``: that row is looked up as usual but gets no gradient (the positions that
    pick it contribute theirs to nothing), so a padding vector stays as it is while training.
    """
    out = ops.embedding(weight, indices)
    if padding_idx is None:
        return out
    num = weight.shape[0]
    if not -num <= padding_idx < num:
        raise IndexError(f"embedding: padding_idx {padding_idx} is out of range for {num} rows")
    pad = padding_idx % num
    with no_grad():  # the same rows, without a path back to the table
        frozen = ops.embedding(weight, indices)
    idx = indices if isinstance(indices, Tensor) else Tensor(np.asarray(indices))
    is_pad = ops.expand_dims(ops.equal(idx, pad), -1)
    return ops.where(is_pad, frozen, out)


# -- recurrent ---------------------------------------------------------------------------------
_NONLIN = {"tanh": ops.tanh, "relu": ops.relu}


def _time_major_projection(op: str, x, weight_ih, bias, batch_first: bool):
    """``x @ W_ih^T + bias`` for every step at once, as a ``(T, N, G)`` tensor.

    A batch-first input is projected in its own layout (a free reshape to one matrix) and the
    result viewed time-major: the scans write their input gradient in that layout too, so no
    step copies the input or the gradient into time-major order."""
    if x.ndim != 3:
        layout = "(batch, time, features)" if batch_first else "(time, batch, features)"
        raise ShapeError(f"{op}: input must be 3-D {layout}, got {x.shape}")
    if x.shape[1 if batch_first else 0] == 0:
        raise ShapeError(f"{op}: the input has no time steps (no last state), got {x.shape}")
    xp = linear(x, weight_ih, bias)
    return ops.permute(xp, (1, 0, 2)) if batch_first else xp


def _bias_sum(b1, b2):
    if b1 is None:
        return b2
    return b1 if b2 is None else b1 + b2


def rnn_cell(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None, nonlinearity="tanh"):
    """One Elman step ``act(x @ W_ih^T + b_ih + h @ W_hh^T + b_hh)``; ``x (N, I)``, ``h (N, H)``
    (``None``: zeros). One step of the fused scan (``ops.rnn_scan`` over T = 1), so a cell is
    a handful of operations, not one per gate (first-order, as the scans are)."""
    if nonlinearity not in _NONLIN:
        raise ValueError(f"rnn_cell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    pre = linear(x, weight_ih, _bias_sum(bias_ih, bias_hh))
    h0 = _zeros(pre, pre.shape) if h is None else h
    return ops.rnn_scan(pre[None], weight_hh, h0, nonlinearity=nonlinearity, zero_h0=h is None)[0]


def recurrent_layer(
    mode: str,
    x: ArrayLike,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
    state=None,
    batch_first: bool = False,
):
    """One recurrent layer in one direction over a whole sequence, with one fused scan:
    returns ``(hidden states (T, N, H) time-major, final state)``; the final state is ``h``
    ``(N, H)`` (``mode`` "tanh", "relu", "gru") or ``(h, c)`` ("lstm"). ``state`` (``h0``, or
    ``(h0, c0)``) defaults to zeros. The building block of :func:`rnn`, :func:`lstm`,
    :func:`gru` and the layers' stacked and bidirectional forms."""
    if mode in _NONLIN:
        xp = _time_major_projection("rnn", x, weight_ih, _bias_sum(bias_ih, bias_hh), batch_first)
        zero_h0 = state is None  # the scan then skips step 0's product with the zero state
        h0 = _zeros(xp, (xp.shape[1], weight_hh.shape[0])) if zero_h0 else state
        hs = ops.rnn_scan(xp, weight_hh, h0, nonlinearity=mode, zero_h0=zero_h0)
        return hs, hs[xp.shape[0] - 1]
    if mode == "lstm":
        xp = _time_major_projection("lstm", x, weight_ih, _bias_sum(bias_ih, bias_hh), batch_first)
        T, N = xp.shape[0], xp.shape[1]
        if state is None:
            zeros = _zeros(xp, (N, weight_hh.shape[1]))
            state = (zeros, zeros)
        out = ops.lstm_scan(xp, weight_hh, *state)  # (2, T, N, H): hidden and cell states
        hs = out[0]
        return hs, (hs[T - 1], out[1, T - 1])
    if mode == "gru":
        xp = _time_major_projection("gru", x, weight_ih, bias_ih, batch_first)
        G = weight_hh.shape[0]
        h0 = state
        if h0 is None:
            h0 = _zeros(xp, (xp.shape[1], weight_hh.shape[1]))
        if bias_hh is None:
            bias_hh = _zeros(xp, (G,))
        hs = ops.gru_scan(xp, weight_hh, bias_hh, h0)  # (T, N, H), one rule
        return hs, hs[xp.shape[0] - 1]
    raise ValueError(f"recurrent_layer: mode must be 'tanh', 'relu', 'lstm' or 'gru', got {mode!r}")


def _zeros(like: Tensor, shape: tuple):
    """Zeros in ``like``'s dtype, on its device."""
    return backend.xp_of(like).zeros(shape, dtype=like.dtype)


def _batch_layout(hs: Tensor, batch_first: bool) -> Tensor:
    return ops.permute(hs, (1, 0, 2)) if batch_first else hs


def rnn(
    x: ArrayLike,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
    h0: ArrayLike | None = None,
    nonlinearity: str = "tanh",
    batch_first: bool = False,
) -> tuple[Tensor, Tensor]:
    """Elman RNN over a sequence (one layer, one direction); returns (all hidden states, last
    hidden state ``(N, H)``).

    ``x`` is ``(T, N, I)`` (``(N, T, I)`` when ``batch_first``), and so are the outputs;
    ``h0 (N, H)`` defaults to zeros. Both biases are added once, inside the input projection.
    """
    if nonlinearity not in _NONLIN:
        raise ValueError(f"rnn: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    hs, last = recurrent_layer(
        nonlinearity, x, weight_ih, weight_hh, bias_ih, bias_hh, h0, batch_first
    )
    return _batch_layout(hs, batch_first), last


def lstm_cell(x, state, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One LSTM step; ``state = (h, c)`` each ``(N, H)`` (``None``, or either of them
    ``None``: zeros); gates stacked in order i, f, g, o. One step of the fused scan
    (``ops.lstm_scan`` over T = 1)."""
    gx = linear(x, weight_ih, _bias_sum(bias_ih, bias_hh))
    h, c = (None, None) if state is None else state
    if h is None or c is None:
        zeros = _zeros(gx, (gx.shape[0], weight_hh.shape[1]))
        h, c = zeros if h is None else h, zeros if c is None else c
    out = ops.lstm_scan(gx[None], weight_hh, h, c)  # (2, 1, N, H)
    return out[0, 0], out[1, 0]


def lstm(
    x: ArrayLike,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
    state: tuple[ArrayLike, ArrayLike] | None = None,
    batch_first: bool = False,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """LSTM over a sequence (one layer, one direction); returns (outputs, (h, c)) with ``h, c``
    of shape ``(N, H)``; layouts as in :func:`rnn`.

    Weights stack the gates as ``[i; f; g; o]`` (``weight_ih (4H, I)``, ``weight_hh (4H, H)``);
    ``c' = f*c + i*g``, ``h' = o*tanh(c')``. ``state`` defaults to zeros.
    """
    hs, last = recurrent_layer(
        "lstm", x, weight_ih, weight_hh, bias_ih, bias_hh, state, batch_first
    )
    return _batch_layout(hs, batch_first), last


def gru_cell(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One GRU step; gates stacked in order r, z, n; ``h' = (1 - z) * n + z * h`` (``h``
    ``None``: zeros). One step of the fused scan (``ops.gru_scan`` over T = 1)."""
    gx = linear(x, weight_ih, bias_ih)
    h0 = _zeros(gx, (gx.shape[0], weight_hh.shape[1])) if h is None else h
    bhh = _zeros(gx, (weight_hh.shape[0],)) if bias_hh is None else bias_hh
    return ops.gru_scan(gx[None], weight_hh, bhh, h0)[0]


def gru(
    x: ArrayLike,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
    h0: ArrayLike | None = None,
    batch_first: bool = False,
) -> tuple[Tensor, Tensor]:
    """GRU over a sequence (one layer, one direction); returns (outputs, last hidden
    ``(N, H)``); layouts as in :func:`rnn`.

    Gates stacked ``[r; z; n]``: ``r, z = sigmoid(W_i x + b_i + W_h h + b_h)``,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.
    ``b_hh`` stays inside the recurrence because ``r`` multiplies its ``n`` part.
    """
    hs, last = recurrent_layer("gru", x, weight_ih, weight_hh, bias_ih, bias_hh, h0, batch_first)
    return _batch_layout(hs, batch_first), last


# -- the families in files of their own (nn/_functional/) -------------------------------------
from ._functional.activation import (  # noqa: E402
    glu,
    hardshrink,
    prelu,
    rrelu,
    softplus,
    softshrink,
    tanhshrink,
    threshold,
)
from ._functional.attention import (  # noqa: E402
    multi_head_attention_forward,
    scaled_dot_product_attention,
)
from ._functional.conv3d import conv3d, conv_transpose3d, max_pool3d  # noqa: E402
from ._functional.losses import (  # noqa: E402
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cosine_similarity,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from ._functional.misc import (  # noqa: E402
    normalize,
    one_hot,
    pairwise_distance,
    rms_norm,
)
from ._functional.normalization import batch_norm, group_norm, layer_norm  # noqa: E402
from ._functional.pooling import (  # noqa: E402
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    interpolate,
)

__all__ = [
    "normalize",
    "pairwise_distance",
    "rms_norm",
    "one_hot",
    "dropout1d",
    "tanhshrink",
    "softshrink",
    "hardshrink",
    "threshold",
    "prelu",
    "glu",
    "rrelu",
    "pad",
    "relu",
    "tanh",
    "sigmoid",
    "softplus",
    "leaky_relu",
    "elu",
    "selu",
    "celu",
    "gelu",
    "silu",
    "mish",
    "hardtanh",
    "relu6",
    "hardsigmoid",
    "hardswish",
    "softsign",
    "logsigmoid",
    "softmin",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "kl_div",
    "nll_loss",
    "cosine_similarity",
    "cosine_embedding_loss",
    "batch_norm",
    "layer_norm",
    "group_norm",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "conv3d",
    "conv_transpose3d",
    "max_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "interpolate",
    "dropout2d",
    "scaled_dot_product_attention",
    "multi_head_attention_forward",
    "softmax",
    "log_softmax",
    "identity",
    "linear",
    "dropout",
    "conv1d",
    "conv2d",
    "max_pool1d",
    "max_pool2d",
    "embedding",
    "rnn_cell",
    "recurrent_layer",
    "rnn",
    "lstm_cell",
    "lstm",
    "gru_cell",
    "gru",
    "cross_entropy",
    "binary_cross_entropy_with_logits",
    "mse_loss",
]
