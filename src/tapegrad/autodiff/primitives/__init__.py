"""Importing this package registers every primitive family in ``registry.REGISTRY``."""

from . import (  # noqa: F401
    activation,
    batch_norm,
    conv,
    device,
    einsum,
    elementwise,
    fused,
    indexing,
    integer,
    linalg,
    movement,
    nn,
    norm,
    pointwise,
    pool,
    recurrent,
    reduce,
    scan,
    scatter_reduce,
    shape,
    sort,
    subscript,
    update,
)
from .registry import REGISTRY, Primitive, Sample, primitive, register  # noqa: F401
