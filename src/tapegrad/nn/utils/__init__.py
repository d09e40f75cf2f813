"""``tapegrad.nn.utils``: PyTorch's ``torch.nn.utils``: gradient clipping
(``clip_grad_norm_``, ``clip_grad_value_``), flat parameter vectors
(``parameters_to_vector``, ``vector_to_parameters``) and ``rnn`` (padding and packing
variable-length sequences for the recurrent layers)."""

from __future__ import annotations

import numpy as np

from ...autodiff import ops
from ...autodiff.tensor import Tensor
from . import rnn

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "parameters_to_vector",
    "vector_to_parameters",
    "rnn",
]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None):  # fmt: skip
    """Scale the gradients so their total ``norm_type``-norm is at most ``max_norm``; returns
    the norm before clipping as a 0-d Tensor in the gradients' dtype, as PyTorch does (the
    clipping is the optimisers' ``tapegrad.optim.clip_grad_norm_``, which returns a float)."""
    from ...optim.clip import clip_grad_norm_ as clip  # the clipping lives with the optimisers

    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    norm = clip(params, max_norm, norm_type, error_if_nonfinite=error_if_nonfinite)
    if isinstance(norm, Tensor):
        return norm
    dtype = next((p.grad.dtype for p in params if p.grad is not None), np.float32)
    return Tensor(np.asarray(norm, dtype=dtype))


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient entry into ``[-clip_value, clip_value]``."""
    from ...optim.clip import clip_grad_value_ as clip

    return clip(parameters, clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """The parameters flattened and joined into one 1-d Tensor (recorded: gradients flow back
    to the parameters)."""
    params = list(parameters)
    if not params:
        raise ValueError("parameters_to_vector: no parameters")
    return ops.concatenate([ops.reshape(p, (-1,)) for p in params], 0)


def vector_to_parameters(vec, parameters) -> None:
    """Copy consecutive slices of the 1-d ``vec`` into the parameters' values, in place."""
    v = np.asarray(vec.data if isinstance(vec, Tensor) else vec)
    params = list(parameters)
    total = sum(p.data.size for p in params)
    if v.ndim != 1 or v.size != total:
        raise ValueError(
            f"vector_to_parameters: expects a 1-d vector of {total} values, got shape {v.shape}"
        )
    at = 0
    for p in params:
        n = p.data.size
        p.data[...] = v[at : at + n].reshape(p.data.shape)
        at += n
