"""Every differentiable operation, in one flat namespace (re-exported as ``tapegrad.*``)."""

from __future__ import annotations

from .inplace import assign  # noqa: F401  (the in-place form over the assign primitive)
from .primitives.conv import (  # noqa: F401
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
)
from .primitives.elementwise import (  # noqa: F401
    absolute,
    add,
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctanh,
    astype,
    ceil,
    clip,
    cos,
    cosh,
    dropout_mask,
    equal,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    maximum,
    minimum,
    mul,
    neg,
    not_equal,
    power,
    random_draw,
    reciprocal,
    round_,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sinh,
    softplus,
    sqrt,
    square,
    sub,
    tan,
    tanh,
    trunc,
    where,
)
from .primitives.linalg import matmul  # noqa: F401
from .primitives.nn import *  # noqa: F401,F403
from .primitives.pool import (  # noqa: F401
    max_pool1d,
    max_pool2d,
    max_unpool1d,
    max_unpool2d,
)
from .primitives.recurrent import gru_scan, lstm_scan, rnn_scan  # noqa: F401
from .primitives.reduce import (  # noqa: F401
    all,
    any,
    argmax,
    argmin,
    log_softmax,
    logsumexp,
    masked_softmax,
    max,
    mean,
    min,
    norm,
    softmax,
    std,
    std_mean,
    sum,
    var,
)
from .primitives.shape import (  # noqa: F401
    broadcast_to,
    concatenate,
    expand_dims,
    flatten,
    pad,
    permute,
    reshape,
    squeeze,
    stack,
    transpose,
)

abs = absolute  # noqa: A001
pow = power  # noqa: A001
round = round_  # noqa: A001  (round_ in the primitives' module: round is a builtin there)
asin, acos, atan, asinh, acosh, atanh = arcsin, arccos, arctan, arcsinh, arccosh, arctanh

# issue 14: scans, sorting, index and movement operations, einsum, more elementwise operations
from .primitives.activation import gelu, relu  # noqa: E402, F401
from .primitives.einsum import einsum  # noqa: E402, F401
from .primitives.indexing import (  # noqa: E402, F401
    gather,
    index_add,
    index_select,
    scatter,
    scatter_add,
    take,
)
from .primitives.integer import (  # noqa: E402, F401
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    divide,
    floor_divide,
    left_shift,
    right_shift,
)
from .primitives.movement import (  # noqa: E402, F401
    cat,
    chunk,
    diag,
    diagonal,
    flip,
    meshgrid,
    pad,  # noqa: F811  (the constant pad, plus reflect/replicate/circular modes)
    repeat_interleave,
    roll,
    split,
    tile,
    tril,
    triu,
    unbind,
)
from .primitives.pointwise import (  # noqa: E402, F401
    copysign,
    fmod,
    isclose,
    isfinite,
    isinf,
    isnan,
    lerp,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    remainder,
)
from .primitives.scan import cummax, cummin, cumprod, cumsum, logcumsumexp, prod  # noqa: E402, F401
from .primitives.scatter_reduce import scatter_reduce  # noqa: E402, F401
from .primitives.sort import argsort, sort, topk  # noqa: E402, F401
from .primitives.subscript import (  # noqa: E402, F401
    getitem,
    index_get,
    index_put,
    masked_fill,
    masked_select,
    nonzero,
)

concat = cat  # PyTorch's other name
div = divide  # PyTorch's div: true division, or rounded with rounding_mode=
bitwise_left_shift, bitwise_right_shift = left_shift, right_shift  # PyTorch's names

__all__ = sorted(n for n in dir() if not n.startswith("_") and n != "annotations")
