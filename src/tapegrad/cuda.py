"""``tg.cuda.is_available()``, PyTorch's habit: whether ``device="cuda"`` works here (CuPy
installed and a GPU visible). The device itself lives in ``autodiff/backend.py``."""

from __future__ import annotations

from .autodiff.backend import DeviceError, get_device


def is_available() -> bool:
    """True when tensors can be put on ``"cuda"`` in this process."""
    try:
        get_device("cuda")
    except DeviceError:
        return False
    return True


def unavailable_reason() -> str | None:
    """Why ``"cuda"`` cannot be used here (what to install), or None when it can."""
    try:
        get_device("cuda")
    except DeviceError as e:
        return str(e)
    return None


def manual_seed(seed: int) -> None:
    """PyTorch's ``torch.cuda.manual_seed``: nothing to seed. tapegrad draws random numbers
    on the host, also for CUDA tensors, from the one generator ``tg.manual_seed`` seeds
    (PyTorch, too, ignores this call where CUDA is absent)."""
    int(seed)  # a seed PyTorch would refuse is refused


manual_seed_all = manual_seed
