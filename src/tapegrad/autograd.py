"""``tapegrad.autograd``: PyTorch's ``torch.autograd`` names over tapegrad's engine.

``grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
allow_unused=None, materialize_grads=False)`` returns the gradients as Tensors without touching
``.grad`` (with ``create_graph=True`` they record their own graph: gradient penalties, higher
derivatives); an input the outputs do not reach gives None with ``allow_unused=True`` (zeros
with ``materialize_grads=True``) and raises otherwise. ``backward(tensors, grad_tensors)``
accumulates into ``.grad`` like ``Tensor.backward``. Function transformations (``grad``,
``vjp``, ``jvp``, ``hessian``, ``vmap``) are in ``tapegrad.func``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .autodiff import (
    GraphError,
    Tensor,
    detect_anomaly,
    enable_grad,
    gradcheck,
    gradients,
    is_grad_enabled,
    no_grad,
)
from .autodiff.anomaly import is_anomaly_enabled

__all__ = [
    "grad",
    "backward",
    "Variable",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "set_grad_enabled",
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "gradcheck",
]


def _as_list(x) -> list:
    return [x] if isinstance(x, Tensor) else list(x)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple:
    """The gradients of ``outputs`` (summed, each weighted by its ``grad_outputs`` entry)
    with respect to each of ``inputs``, as a tuple of Tensors (PyTorch's
    ``torch.autograd.grad``)."""
    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched is not supported; loop")
    ins = _as_list(inputs)
    unused_ok = bool(allow_unused) or materialize_grads
    if isinstance(grad_outputs, Sequence) and not isinstance(outputs, Tensor):
        grad_outputs = [
            g if g is not None else Tensor(np.ones_like(o.data))
            for o, g in zip(outputs, grad_outputs)
        ]
    kw = {"grad_outputs": grad_outputs, "create_graph": create_graph}
    try:
        return gradients(outputs, ins, retain_graph=retain_graph, **kw)
    except GraphError:
        if not unused_ok:
            raise
    # some input is unreached: its gradient is None (or zeros when materialize_grads)
    found = []
    for t in ins:
        try:
            found.append(gradients(outputs, [t], retain_graph=True, **kw)[0])
        except GraphError:
            found.append(Tensor(np.zeros_like(t.data)) if materialize_grads else None)
    return tuple(found)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs=None,
) -> None:
    """Accumulate the gradients of ``tensors`` (each weighted by its ``grad_tensors`` entry)
    into ``.grad`` of the leaves they depend on (PyTorch's ``torch.autograd.backward``)."""
    if inputs is not None:
        raise NotImplementedError(
            "autograd.backward: inputs= is not supported; use autograd.grad(outputs, inputs)"
        )
    ts = _as_list(tensors)
    gs = [None] * len(ts) if grad_tensors is None else _as_list(grad_tensors)
    if len(gs) != len(ts):
        raise ValueError(f"autograd.backward: {len(gs)} grad_tensors for {len(ts)} tensors")
    for k, (t, g) in enumerate(zip(ts, gs)):
        last = k == len(ts) - 1
        t.backward(g, retain_graph=retain_graph if last else True, create_graph=create_graph)


def Variable(data, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802
    """PyTorch's legacy wrapper: the tensor itself (marked ``requires_grad`` if asked)."""
    t = data if isinstance(data, Tensor) else Tensor(data)
    return t.requires_grad_() if requires_grad and not t.requires_grad else t


class set_grad_enabled:  # noqa: N801  (PyTorch's name)
    """Recording on (``True``) or off (``False``), as a context manager or a plain call."""

    def __init__(self, mode: bool) -> None:
        self._ctx = enable_grad() if mode else no_grad()
        self._ctx.__enter__()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)


class set_detect_anomaly:  # noqa: N801  (PyTorch's name)
    """Anomaly detection on or off for a ``with`` block."""

    def __init__(self, mode: bool) -> None:
        self._ctx = detect_anomaly() if mode else None

    def __enter__(self):
        if self._ctx is not None:
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
