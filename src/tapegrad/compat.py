"""PyTorch's top-level names that a training program reaches for, so that it runs after
``import tapegrad as torch``: the default dtype, thread counts, ``from_numpy``, ``bmm``,
``multinomial``, ``Generator``, ``device`` and ``accelerator``. Re-exported by
``tapegrad/__init__.py``. The dtypes as attributes (``tg.float32``, ``tg.long``, ...) are in
``dtypes.py``.
"""

from __future__ import annotations

import types

import numpy as np

from . import cuda, nn
from .autodiff.backend import default_dtype, set_default_dtype, to_host
from .autodiff.core.state import active_trace
from .autodiff.errors import ShapeError
from .autodiff.plan import TraceError
from .autodiff.tensor import Tensor
from .autodiff.tensor_torch import batch_matmul


def get_default_dtype():
    """The float dtype of tensors made from Python numbers and lists, of ``zeros``/``randn``
    and of new layers' parameters (float32 unless :func:`set_default_dtype` changed it)."""
    return default_dtype().type


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def is_floating_point(x) -> bool:
    return np.dtype(x.dtype).kind == "f"


def numel(x) -> int:
    return int(np.size(x.data if isinstance(x, Tensor) else x))


# -- threads ---------------------------------------------------------------------------------------
def set_num_threads(n: int) -> None:
    """Use ``n`` threads in tapegrad's numba kernels and in NumPy's BLAS (OpenBLAS)."""
    import numba

    from .blas import threads_setter

    if isinstance(n, bool) or not 1 <= n:
        raise ValueError(f"set_num_threads: expects a positive int, got {n!r}")
    numba.set_num_threads(min(int(n), numba.config.NUMBA_NUM_THREADS))
    blas = threads_setter()
    if blas is not None:
        blas[0](int(n))


def get_num_threads() -> int:
    """The thread count of tapegrad's numba kernels."""
    import numba

    return int(numba.get_num_threads())


# -- tensors from arrays ---------------------------------------------------------------------------
def from_numpy(array: np.ndarray) -> Tensor:
    """A Tensor sharing ``array``'s memory and dtype (writes to one show in the other)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expects a numpy.ndarray, got {type(array).__name__}")
    return Tensor(array)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``data`` as a Tensor: itself when it is one already of that dtype and device, sharing
    an ndarray's memory when it can."""
    if isinstance(data, Tensor) and device is None:
        return data if dtype is None else data.to(dtype)
    return Tensor(data, dtype=dtype, device=device)


def bmm(a, b) -> Tensor:
    """Batched matrix product ``(B, n, m) @ (B, m, p) -> (B, n, p)``."""
    return batch_matmul(a, b)


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None):  # noqa: A002
    """``num_samples`` category indices per row of the non-negative weights ``input`` (1-d or
    2-d), drawn from ``generator`` (a ``numpy.random.Generator``; None: ``nn.init``'s default
    generator); without ``replacement`` a row's indices are distinct. int64, not
    differentiable, eager only (a compiled step would freeze one draw)."""
    if active_trace() is not None:
        raise TraceError(
            "multinomial inside a compiled function: the draw would be frozen into the plan; "
            "draw outside it (sampling loops are eager code)"
        )
    w = np.asarray(to_host(input.data if isinstance(input, Tensor) else input), np.float64)
    if w.ndim not in (1, 2) or w.shape[-1] == 0:
        raise ShapeError(f"multinomial: expects 1-d or 2-d weights, got shape {w.shape}")
    n = int(num_samples)
    if n < 1 or (not replacement and n > w.shape[-1]):
        raise ValueError(
            f"multinomial: cannot draw {num_samples} samples from {w.shape[-1]} categories"
            + ("" if replacement else " without replacement")
        )
    rows = w.reshape(-1, w.shape[-1])
    if not np.isfinite(rows).all() or (rows < 0).any() or (rows.sum(1) <= 0).any():
        raise ValueError("multinomial: weights must be finite, non-negative, with a positive sum")
    if not replacement and ((rows > 0).sum(1) < n).any():
        raise ValueError(
            f"multinomial: a row has fewer than {n} nonzero weights to draw without replacement"
        )
    gen = generator if generator is not None else nn.init.default_generator()
    out = np.stack([gen.choice(len(r), size=n, replace=replacement, p=r / r.sum()) for r in rows])
    return Tensor(out.reshape(w.shape[:-1] + (n,)).astype(np.int64))


class Generator(np.random.Generator):
    """PyTorch's ``torch.Generator()``: a NumPy generator (usable wherever tapegrad takes
    ``rng=`` or ``generator=``) with ``manual_seed(seed)`` (which returns it) and
    ``initial_seed()``."""

    def __init__(self, device="cpu") -> None:
        self._seed = int(np.random.SeedSequence().entropy % 2**63)
        super().__init__(np.random.PCG64(self._seed))

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self.bit_generator.state = np.random.PCG64(self._seed).state
        return self

    def initial_seed(self) -> int:
        return self._seed


# -- devices ---------------------------------------------------------------------------------------
class device:  # noqa: N801  (PyTorch's name)
    """``tg.device("cpu")``, ``tg.device("cuda", 0)``, ``tg.device("cuda:0")``: where tensors
    live; accepted by ``Tensor.to`` and ``Module.to``, prints as ``"cpu"``/``"cuda:0"``."""

    def __init__(self, type: str, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index
        name = str(type)
        if ":" in name:
            name, idx = name.split(":", 1)
            index = int(idx)
        if name not in ("cpu", "cuda"):
            raise RuntimeError(
                f"device: tapegrad computes on 'cpu' and 'cuda' (NVIDIA GPUs through CuPy), "
                f"not {type!r}"
            )
        self.type, self.index = name, None if index is None else int(index)

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{idx})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


def _current_accelerator():
    return device("cuda") if cuda.is_available() else None


accelerator = types.SimpleNamespace(
    is_available=cuda.is_available,
    current_accelerator=_current_accelerator,
    device_count=lambda: 1 if cuda.is_available() else 0,
)
"""PyTorch's ``torch.accelerator``: ``is_available()`` (False on a CPU-only machine),
``current_accelerator()`` (``device("cuda")`` or None), ``device_count()``."""


backends = types.SimpleNamespace(
    mps=types.SimpleNamespace(is_available=lambda: False, is_built=lambda: False),
    cudnn=types.SimpleNamespace(
        enabled=True,
        deterministic=False,
        benchmark=False,
        allow_tf32=False,
        is_available=lambda: False,
    ),
    cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)),
    openmp=types.SimpleNamespace(is_available=lambda: True),
)
"""PyTorch's ``torch.backends`` as programs touch it: ``mps.is_available()`` (False: tapegrad
has no Apple GPU backend), and the cuDNN and TF32 switches (settable; tapegrad computes the
same either way: its GPU kernels are deterministic, and its matrix products never use TF32)."""


def _multinomial_method(self, num_samples: int, replacement: bool = False, *, generator=None):
    return multinomial(self, num_samples, replacement, generator=generator)


def _uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None) -> Tensor:
    """Fill with U(a, b) draws in place (``nn.init``'s generator unless ``generator``)."""
    return nn.init.uniform_(self, a, b, rng=generator)


def _normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    """Fill with N(mean, std^2) draws in place."""
    return nn.init.normal_(self, mean, std, rng=generator)


def _new_tensor(self, data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A new tensor of ``data`` in this tensor's dtype (unless ``dtype``), not sharing it."""
    arr = np.array(data.data if isinstance(data, Tensor) else data, dtype=dtype or self.dtype)
    return Tensor(arr, requires_grad=requires_grad)


Tensor.multinomial = _multinomial_method
Tensor.uniform_ = _uniform_
Tensor.normal_ = _normal_
Tensor.new_tensor = _new_tensor
Tensor.new_empty = Tensor.new_zeros
__all__ = [
    "get_default_dtype",
    "set_default_dtype",
    "is_tensor",
    "is_floating_point",
    "numel",
    "set_num_threads",
    "get_num_threads",
    "from_numpy",
    "as_tensor",
    "bmm",
    "multinomial",
    "Generator",
    "device",
    "accelerator",
    "backends",
]
