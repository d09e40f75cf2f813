"""The single table of primitives, for the primitive modules: it lives in the core
(``autodiff/core/primitive.py``, whose docstring describes a primitive's forward and VJP)."""

from ..core.primitive import (  # noqa: F401
    REGISTRY,
    Primitive,
    Sample,
    Workspace,
    kernel_scratch,
    primitive,
    register,
    run,
    scratch,
)
