"""Error types the engine raises for bad input. Each message names the operation and shapes."""


class ShapeError(ValueError):
    """Operand shapes that do not fit an operation (broadcasting, matmul, reshape, layers)."""


class DTypeError(TypeError):
    """Float operands of different precision given to one operation (no silent upcast)."""


class GraphError(RuntimeError):
    """Misuse of the recorded graph: backward twice, backward of a non-scalar without a gradient."""
