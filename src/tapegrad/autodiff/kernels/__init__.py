"""Compiled (numba) kernels for the hot loops NumPy cannot vectorise well.

Each kernel has a plain-NumPy reference with the same signature that it is tested against, and
that is used instead when numba is not importable.
"""

from .scatter import scatter_add_rows, scatter_add_rows_reference  # noqa: F401
