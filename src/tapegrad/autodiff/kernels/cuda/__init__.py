"""CUDA counterparts of the numba CPU kernels, written with numba-cuda (``numba.cuda.jit``).

This package is CUDA's kernel namespace: it exports the names of ``kernels/cpu`` with the same
signatures (``__all__``), each tested against the same NumPy reference, in numba's CUDA
simulator on machines without a GPU (``tests/cudasim``) and on the GPU itself (``tests/gpu``).
A name CUDA has no kernel of its own for is bound to array-generic code (``kernels/generic.py``,
which CuPy runs). A forward gets this namespace from ``kernels_for`` (``kernels/dispatch.py``)
when its arrays live on a device whose ``kernels`` is "cuda". On a GPU the kernels take CuPy
arrays through ``__cuda_array_interface__`` and run on the default stream, the one CuPy uses,
so they are ordered with CuPy's own work without a synchronisation.

What differs from the CPU kernels, by design:

* elementwise math uses CUDA's ``exp``/``tanh``/``log1p``, not the CPU kernels' polynomial, so
  values agree to a few ulp, not bit for bit (eager and compiled runs on the GPU still call the
  same kernels, so they agree with each other);
* the embedding's scatter-add (``scatter_add_rows``) adds with atomics: repeated ids sum in an
  unspecified order (a few ulp between runs);
* the direct convolution backward kernel has no CUDA twin (``direct_layout_ok`` is False
  here): on the GPU convolutions take the im2col + matmul path (cuBLAS) both ways; LayerNorm,
  BatchNorm, softmax's backward and ``select`` run as array operations (``generic.py``), erf
  and GELU through CuPy's erf (``special.py``);
* the losses' forward returns the total as a 1-element device array rather than a Python float
  (reading it back would synchronise the device every step).

Importing this package imports ``numba.cuda``; set ``NUMBA_ENABLE_CUDASIM=1`` before that to
run the kernels in the simulator.
"""

from ..generic import (
    add_arrays,
    add_taps,
    batch_norm_backward,
    batch_norm_forward,
    batch_stats,
    bind_matmul,
    col2im,
    conv_backward,
    conv_by_image,
    conv_few_channels,
    conv_few_forward,
    conv_few_weight,
    conv_image_forward,
    conv_image_input,
    conv_image_weight,
    conv_rows_forward,
    direct_layout_ok,
    dropout_mask,
    gather_rows,
    gru_scan_backward,
    gru_scan_forward,
    im2col,
    im2col_whole_batch,
    layer_norm_backward,
    layer_norm_forward,
    lstm_scan_backward,
    lstm_scan_forward,
    matmul,
    relu_backward,
    relu_forward,
    rnn_scan_backward,
    rnn_scan_forward,
    scan_rows,
    select,
    softmax_backward,
    softmax_forward,
)
from .bias import add_channel_bias, add_into
from .fused import (
    bias_relu_backward,
    bias_relu_forward,
    relu_max_pool_backward,
    relu_max_pool_forward,
)
from .launch import SIMULATED  # noqa: F401
from .loss import bce_backward, bce_forward, softmax_ce_backward, softmax_ce_forward
from .optim import adam_update, sgd_update
from .pool import max_pool_backward, max_pool_forward
from .recurrent import (
    gru_backward_step,
    gru_forward_step,
    lstm_backward_step,
    lstm_forward_step,
    rnn_backward_step,
)
from .reduce import sum_rows
from .scan import linear_recurrence
from .scatter import scatter_add_rows
from .special import erf, gelu_backward, gelu_forward

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
