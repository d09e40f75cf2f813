"""PyTorch's dtype names as attributes of ``tapegrad`` (``tg.float32``, ``tg.long``,
``tg.double``, ``tg.bool``, ...). They are NumPy's scalar types (``tg.float32 is np.float32``),
so they work wherever tapegrad takes a dtype, and ``x.dtype == tg.float32`` compares as PyTorch
users expect. (A module of its own: ``float``, ``int`` and ``bool`` here shadow the builtins.)
"""

import numpy as np

float32 = float = np.float32  # noqa: A001
float64 = double = np.float64
float16 = half = np.float16
int64 = long = np.int64
int32 = int = np.int32  # noqa: A001
int16 = short = np.int16
int8 = np.int8
uint8 = np.uint8
bool = np.bool_  # noqa: A001

__all__ = [
    "float32", "float", "float64", "double", "float16", "half", "int64", "long", "int32", "int",
    "int16", "short", "int8", "uint8", "bool",
]  # fmt: skip
