"""Compiled (numba) kernels for the hot loops NumPy cannot vectorise well.

Each kernel has a plain-NumPy reference that the tests compare it with, and that is used instead
when numba is not importable. Kernels are cached on disk (``cache=True``), so the compilation
cost (about a second each) is paid once per machine, not per process.
"""

from .bias import (  # noqa: F401
    add_channel_bias,
    add_channel_bias_reference,
    add_into,
    add_into_reference,
    add_taps,
    add_taps_reference,
)
from .fused import (  # noqa: F401
    relu_max_pool_backward,
    relu_max_pool_backward_reference,
    relu_max_pool_forward,
    relu_max_pool_forward_reference,
)
from .pool import (  # noqa: F401
    max_pool_backward,
    max_pool_backward_reference,
    max_pool_forward,
    max_pool_forward_reference,
)
from .scatter import scatter_add_rows, scatter_add_rows_reference  # noqa: F401
from .select import select, select_reference  # noqa: F401
