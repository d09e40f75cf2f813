"""``Parameter``: a Tensor that a :class:`~tapegrad.nn.Module` owns and an optimiser updates."""

from __future__ import annotations

import numpy as np

from ..autodiff.backend import default_dtype
from ..autodiff.tensor import Tensor


class Parameter(Tensor):
    """A leaf Tensor with ``requires_grad=True`` by default.

    Assigning one to an attribute of a Module registers it (``parameters()``, ``state_dict()``).
    The value is always a fresh, writable float array owned by the parameter, so initialisers,
    ``load_state_dict`` and optimisers can update it in place without touching the caller's
    array. Lists and Python numbers become float32; float arrays keep their dtype.
    """

    def __init__(self, data, requires_grad: bool = True, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        arr = np.array(data, dtype=dtype, copy=True)
        if dtype is None and not isinstance(data, np.ndarray) and arr.dtype != default_dtype():
            arr = arr.astype(default_dtype())
        if arr.dtype.kind != "f":
            raise TypeError(f"Parameter: values must be floating point, got dtype {arr.dtype}")
        super().__init__(arr, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
