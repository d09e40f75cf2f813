"""Error types the engine raises for bad input. Each message names the operation and shapes."""


class ShapeError(ValueError, RuntimeError):
    """Operand shapes that do not fit an operation (broadcasting, matmul, reshape, layers).

    Also a ``RuntimeError``, the class PyTorch raises for shape mismatches."""


class IndexOutOfRange(ShapeError, IndexError):
    """An index outside a tensor's shape. Also an ``IndexError``, so Python's protocols that
    rely on it (iteration by ``__getitem__``, unpacking) work on tensors."""


class DTypeError(TypeError):
    """Float operands of different precision given to one operation (no silent upcast)."""


class GraphError(RuntimeError):
    """Misuse of the recorded graph: backward twice, backward of a non-scalar without a gradient."""


class TraceError(RuntimeError):
    """Something in a traced function cannot be replayed faithfully (``tapegrad.compile``)."""


class ArgumentError(ValueError, RuntimeError):
    """Arguments that make no call (``clamp(x)`` with neither bound). Also a ``RuntimeError``,
    the class PyTorch raises for these."""


class DTypeNotImplemented(DTypeError, NotImplementedError):
    """An operation PyTorch too has no kernel for at this dtype (interpolating integers).
    Also a ``NotImplementedError``, the class PyTorch raises."""
