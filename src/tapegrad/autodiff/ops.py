"""Every differentiable operation, in one flat namespace (re-exported as ``tapegrad.*``)."""

from __future__ import annotations

from .primitives.elementwise import (  # noqa: F401
    absolute,
    add,
    astype,
    clip,
    cos,
    div,
    dropout_mask,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    maximum,
    minimum,
    mul,
    neg,
    not_equal,
    power,
    random_draw,
    relu,
    sigmoid,
    sign,
    sin,
    softplus,
    sqrt,
    sub,
    tanh,
    where,
)
from .primitives.linalg import matmul  # noqa: F401
from .primitives.nn import *  # noqa: F401,F403
from .primitives.recurrent import gru_scan, lstm_scan, rnn_scan  # noqa: F401
from .primitives.reduce import (  # noqa: F401
    log_softmax,
    logsumexp,
    max,
    mean,
    min,
    softmax,
    sum,
)
from .primitives.shape import (  # noqa: F401
    broadcast_to,
    concatenate,
    expand_dims,
    flatten,
    getitem,
    pad,
    permute,
    reshape,
    squeeze,
    stack,
    transpose,
)

abs = absolute  # noqa: A001
pow = power  # noqa: A001

__all__ = sorted(n for n in dir() if not n.startswith("_") and n != "annotations")
