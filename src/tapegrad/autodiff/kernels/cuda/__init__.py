"""CUDA counterparts of the numba CPU kernels, written with numba-cuda (``numba.cuda.jit``).

Each kernel here has the signature of its CPU twin in ``kernels/`` and is tested against the
same NumPy reference, in numba's CUDA simulator on machines without a GPU (``tests/cudasim``)
and on the GPU itself (``tests/gpu``). The primitives choose between the two by the arrays'
device (``cuda_kernels`` of ``kernels/dispatch.py``). On a GPU they take CuPy arrays through
``__cuda_array_interface__`` and run on the default stream, the one CuPy uses, so they are
ordered with CuPy's own work without a synchronisation.

What differs from the CPU kernels, by design:

* elementwise math uses CUDA's ``exp``/``tanh``/``log1p``, not the CPU kernels' polynomial, so
  values agree to a few ulp, not bit for bit (eager and compiled runs on the GPU still call the
  same kernels, so they agree with each other);
* the embedding's scatter-add (``scatter_add_rows``) adds with atomics: repeated ids sum in an
  unspecified order (a few ulp between runs);
* the direct convolution backward kernel has no CUDA twin: on the GPU convolutions take the
  im2col + matmul path (cuBLAS) both ways;
* the losses' forward returns the total as a 1-element device array rather than a Python float
  (reading it back would synchronise the device every step).

Importing this package imports ``numba.cuda``; set ``NUMBA_ENABLE_CUDASIM=1`` before that to
run the kernels in the simulator.
"""

from .bias import add_channel_bias, add_into  # noqa: F401
from .fused import (  # noqa: F401
    bias_relu_backward,
    bias_relu_forward,
    relu_max_pool_backward,
    relu_max_pool_forward,
)
from .launch import SIMULATED  # noqa: F401
from .loss import bce_backward, bce_forward, softmax_ce_backward, softmax_ce_forward  # noqa: F401
from .pool import max_pool_backward, max_pool_forward  # noqa: F401
from .recurrent import (  # noqa: F401
    gru_backward_step,
    gru_forward_step,
    lstm_backward_step,
    lstm_forward_step,
    rnn_backward_step,
)
from .reduce import sum_rows  # noqa: F401
from .scan import linear_recurrence  # noqa: F401
from .scatter import scatter_add_rows  # noqa: F401
