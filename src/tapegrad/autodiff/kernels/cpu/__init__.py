"""The CPU's kernel namespace: numba loops over NumPy arrays (``kernels_for`` of
``kernels/dispatch.py`` hands it to a forward whose arrays are NumPy's).

Every device's namespace (``kernels/cuda`` too) exports the names of ``__all__`` with the same
signatures, in device-level conventions: (N, C, ...) arrays and window tuples, outputs written
into given arrays. The modules here hold the loops (often over flattened planes or rows) and a
NumPy ``*_reference`` of each, which the tests compare them with and which serves where numba
is not importable; the functions exported here take the namespace's arguments.
"""

from .batch_norm import batch_norm_backward, batch_norm_forward, batch_stats
from .bias import add_channel_bias, add_into, add_taps
from .by_image import conv_by_image
from .columns import col2im, im2col, im2col_whole_batch
from .conv import conv_backward, direct_layout_ok
from .conv2d import (
    conv_few_forward,
    conv_few_weight,
    conv_image_forward,
    conv_image_input,
    conv_image_weight,
    conv_rows_forward,
)
from .elman import rnn_scan_backward, rnn_scan_forward
from .few_channels import conv_few_channels
from .fused import (
    bias_relu_backward,
    bias_relu_forward,
    relu_max_pool_backward,
    relu_max_pool_forward,
)
from .gated import (
    gru_scan_backward,
    gru_scan_forward,
    lstm_scan_backward,
    lstm_scan_forward,
)
from .loss import bce_backward, bce_forward, softmax_ce_backward, softmax_ce_forward
from .norm import layer_norm_backward, layer_norm_forward, softmax_backward, softmax_forward
from .optim import adam_update, sgd_update
from .pool import max_pool_backward, max_pool_forward
from .products import bind_matmul, matmul
from .random import dropout_mask
from .recurrent import (
    gru_backward_step,
    gru_forward_step,
    lstm_backward_step,
    lstm_forward_step,
    rnn_backward_step,
)
from .reduce import sum_rows
from .scan import linear_recurrence
from .scan_chunks import scan_rows
from .scatter import gather_rows, scatter_add_rows
from .selection import select
from .special import (
    add_arrays,
    erf,
    gelu_backward,
    gelu_forward,
    relu_backward,
    relu_forward,
)

__all__ = [
    "adam_update",
    "add_arrays",
    "add_channel_bias",
    "add_into",
    "add_taps",
    "batch_norm_backward",
    "batch_norm_forward",
    "batch_stats",
    "bce_backward",
    "bce_forward",
    "bias_relu_backward",
    "bias_relu_forward",
    "bind_matmul",
    "col2im",
    "conv_backward",
    "conv_by_image",
    "conv_few_channels",
    "conv_few_forward",
    "conv_few_weight",
    "conv_image_forward",
    "conv_image_input",
    "conv_image_weight",
    "conv_rows_forward",
    "direct_layout_ok",
    "dropout_mask",
    "erf",
    "gather_rows",
    "gelu_backward",
    "gelu_forward",
    "gru_backward_step",
    "gru_forward_step",
    "gru_scan_backward",
    "gru_scan_forward",
    "im2col",
    "im2col_whole_batch",
    "layer_norm_backward",
    "layer_norm_forward",
    "linear_recurrence",
    "lstm_backward_step",
    "lstm_forward_step",
    "lstm_scan_backward",
    "lstm_scan_forward",
    "matmul",
    "max_pool_backward",
    "max_pool_forward",
    "relu_backward",
    "relu_forward",
    "relu_max_pool_backward",
    "relu_max_pool_forward",
    "rnn_backward_step",
    "rnn_scan_backward",
    "rnn_scan_forward",
    "scan_rows",
    "scatter_add_rows",
    "select",
    "sgd_update",
    "softmax_backward",
    "softmax_ce_backward",
    "softmax_ce_forward",
    "softmax_forward",
    "sum_rows",
]
