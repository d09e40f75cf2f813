"""Importing this package registers every primitive family in ``registry.REGISTRY``."""

from . import elementwise, fused, linalg, nn, recurrent, reduce, shape, update  # noqa: F401
from .registry import REGISTRY, Primitive, Sample, primitive, register  # noqa: F401
