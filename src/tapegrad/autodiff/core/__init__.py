"""The engine's core: primitives and their registry, the interpreter state, and ``apply``.

It imports nothing of tapegrad above it (only ``backend``, ``errors``, ``promotion`` and
``anomaly``, which import nothing of the engine). Everything else builds on it:

* ``state.py``: grad mode (``no_grad``, ``enable_grad``), the trace being recorded
  (``_TRACING``), :func:`effect`, and :class:`TensorBase`, the tensor's data fields; the tensor
  module registers the ``Tensor`` class that results are made of (:func:`register_tensor_class`);
* ``primitive.py``: :class:`Primitive`, the registry (``REGISTRY``, :func:`primitive`), the
  rules' helpers (:func:`run`, :func:`scratch`), :class:`Node` and :func:`apply`.

The backward pass over recorded nodes is ``autodiff/graph.py``, which imports only the core.
"""

from ..errors import TraceError  # noqa: F401
from . import state  # noqa: F401
from .primitive import (  # noqa: F401
    REGISTRY,
    Node,
    Primitive,
    Sample,
    Workspace,
    apply,
    primitive,
    register,
    run,
    scratch,
)
from .state import (  # noqa: F401
    TensorBase,
    effect,
    enable_grad,
    is_grad_enabled,
    new_tensor,
    no_grad,
    register_tensor_class,
    untraceable,
)
