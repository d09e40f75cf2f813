"""The one place where tapegrad names its array modules (NumPy on the CPU, CuPy on CUDA).

Everything that makes an array from nothing (a forward's output or temporary, a compiled plan's
buffers, a workspace, a Python number lifted to an operand) asks this module for the array
module of the arrays it already has, :func:`xp_of`, so a forward given device arrays makes
device arrays. Computation itself goes through NumPy's names (``np.add(x, y, out=o)``,
``np.sum``, ``np.matmul``): a CuPy array takes them over through NumPy's ``__array_ufunc__`` and
``__array_function__`` protocols. Kernels come in one namespace per device (``kernels/cpu``,
``kernels/cuda``): a device names its namespace (``Device.kernels``) and ``kernels_for`` of
``kernels/dispatch.py`` maps the name to it. This module imports nothing of tapegrad.

A *device* is registered under its name (``"cpu"`` always; ``"cuda"`` on first use, when CuPy
and a GPU are there) with its array type, its module, and how arrays cross to and from the host.
Tests register a stand-in device (``tests/fake_device.py``) to prove, without a GPU, that no
forward makes a CPU array from device inputs.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

xp = np
"""The CPU array module (NumPy). Code that may see device arrays calls :func:`xp_of`."""

ndarray = np.ndarray

DEFAULT_DTYPE = np.dtype(np.float32)
"""Tensors made from Python numbers or lists are float32 unless a dtype is given (the initial
default; ``tapegrad.set_default_dtype`` changes what :func:`default_dtype` returns)."""

_default_dtype = [DEFAULT_DTYPE]


def default_dtype() -> np.dtype:
    """The float dtype of tensors made from Python numbers or lists, of creation functions
    (``zeros``, ``randn``, ...) and of layers' parameters when no dtype is given."""
    return _default_dtype[0]


def set_default_dtype(dtype) -> None:
    """Make ``dtype`` (float32 or float64) the default float dtype (PyTorch's
    ``torch.set_default_dtype``); tensors already made keep theirs."""
    d = np.dtype(dtype)
    if d not in (np.float32, np.float64):
        raise TypeError(f"set_default_dtype: the default must be float32 or float64, got {d}")
    _default_dtype[0] = d


def float_dtype(dtype) -> np.dtype:
    """``dtype`` as a NumPy dtype; None: :func:`default_dtype`."""
    return _default_dtype[0] if dtype is None else np.dtype(dtype)


class DeviceError(RuntimeError):
    """A device was asked for that this machine or build cannot give, or operands of one
    operation live on different devices."""


class Array(abc.ABC):  # noqa: B024 - a type to register array types with, no methods
    """``isinstance(a, Array)``: ``a`` is an array of a registered device (a NumPy array, or a
    CuPy array once CUDA is in use). Use it where code used to ask for ``np.ndarray``."""


Array.register(np.ndarray)


@dataclass(frozen=True)
class Device:
    """A place arrays live: its name, array type and module, and the crossings to the host.

    ``from_block(block, shape, dtype, strides)`` views a 1-d uint8 array of this device as an
    array (a compiled plan's buffers are carved from such blocks); ``data_ptr(a)`` is the
    address of ``a``'s first element; ``kernels`` names the kernel namespace its forwards call
    (a package of ``autodiff/kernels``: ``"cpu"``, numba's CPU kernels; ``"cuda"``)."""

    name: str
    array_type: type
    xp: ModuleType | object
    to_host: Callable[[object], np.ndarray]
    from_host: Callable[[np.ndarray], object]
    from_block: Callable
    data_ptr: Callable[[object], int]
    kernels: str = "cpu"
    kernel_arg: Callable = lambda a: a  # noqa: E731
    """What a CUDA kernel launch is given for one of this device's arrays."""


def _np_from_block(block, shape, dtype, strides):
    return np.ndarray(shape, dtype, buffer=block, strides=strides)


CPU = Device(
    "cpu",
    np.ndarray,
    np,
    to_host=lambda a: a,
    from_host=lambda a: a,
    from_block=_np_from_block,
    data_ptr=lambda a: a.__array_interface__["data"][0],
)

_DEVICES: dict[str, Device] = {"cpu": CPU}
_BY_TYPE: dict[type, Device] = {np.ndarray: CPU}
# the array type of every registered device (the live registry: ``type(a) in ARRAY_TYPES`` is
# the cheapest "is an array" test, what every eager operation asks of its result)
ARRAY_TYPES = _BY_TYPE


def register_device(device: Device) -> None:
    """Make ``device`` known by its name and array type (replacing one of the same name)."""
    old = _DEVICES.get(device.name)
    if old is not None and old.array_type is not device.array_type:
        _BY_TYPE.pop(old.array_type, None)
    _DEVICES[device.name] = device
    _BY_TYPE[device.array_type] = device
    Array.register(device.array_type)


def unregister_device(name: str) -> None:
    """Forget a registered device (tests that stand one in)."""
    dev = _DEVICES.pop(name, None)
    if dev is not None and name != "cpu":
        _BY_TYPE.pop(dev.array_type, None)


def device_of(a) -> Device:
    """The device ``a`` lives on (numbers, NumPy scalars and unknown objects: the CPU)."""
    t = type(a)
    if t is np.ndarray:
        return CPU
    dev = _BY_TYPE.get(t)
    if dev is not None:
        return dev
    for base, dev in _BY_TYPE.items():
        if isinstance(a, base):
            return dev
    return CPU


def xp_of(*arrays) -> ModuleType | object:
    """The array module of the first device array among ``arrays`` (NumPy when none is)."""
    for a in arrays:
        t = type(a)
        if t is np.ndarray:
            continue
        if t in _BY_TYPE:
            return _BY_TYPE[t].xp
        if hasattr(a, "requires_grad") and type(a.data) in _BY_TYPE:  # a Tensor
            return _BY_TYPE[type(a.data)].xp
    return np


def on_device(a) -> bool:
    """Whether ``a`` is an array of a device other than the CPU."""
    return type(a) is not np.ndarray and type(a) in _BY_TYPE


def is_array(a) -> bool:
    """Whether ``a`` is an array of any registered device."""
    return type(a) is np.ndarray or type(a) in _BY_TYPE or isinstance(a, Array)


def device_kernels(a) -> str | None:
    """The kernel family (``Device.kernels``) that serves the device array ``a``; None for
    anything that is not a registered device's array (``kernels/dispatch.py`` maps the name
    to the kernels' module)."""
    dev = _BY_TYPE.get(type(a))
    return None if dev is None else dev.kernels


def empty(shape, dtype, like=None):
    """An uninitialised array on ``like``'s device (the CPU when ``like`` is None)."""
    return xp_of(like).empty(shape, dtype)


def zeros(shape, dtype, like=None):
    """Zeros on ``like``'s device."""
    return xp_of(like).zeros(shape, dtype)


def asarray(value, dtype=None, like=None):
    """``value`` (a number, list, NumPy or device array) as an array on ``like``'s device."""
    dev = device_of(like)
    src = device_of(value)
    if dev is src and is_array(value):
        return value if dtype is None or value.dtype == dtype else value.astype(dtype)
    if src is not CPU:
        value = src.to_host(value)
    host = np.asarray(value, dtype=dtype)
    return host if dev is CPU else dev.from_host(host)


def as_strided(a, shape, strides):
    """A read-only (on the CPU) view of ``a``'s memory with ``shape`` and byte ``strides``."""
    if type(a) is np.ndarray:
        return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides, writeable=False)
    return xp_of(a).lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def beside(ref, a):
    """``a`` (a constant made on the host: zeros, an index) on the device of ``ref`` (an
    array or a Tensor); ``a`` itself when ``ref`` is on the CPU."""
    ref = ref.data if hasattr(ref, "requires_grad") else ref
    if type(ref) is np.ndarray or not on_device(ref):
        return a
    return asarray(a, like=ref)


def to_host(a) -> np.ndarray:
    """``a`` as a NumPy array (a copy when it lives on a device; ``a`` itself on the CPU)."""
    dev = device_of(a)
    return a if dev is CPU else dev.to_host(a)


def copy_to_device(a, device: Device):
    """``a`` (any device's array) as an array of ``device``: a copy across, ``a`` if it is
    there already."""
    src = device_of(a)
    if src is device:
        return a
    host = src.to_host(a) if src is not CPU else a
    if device is CPU:
        return host
    return device.from_host(host if host.flags.c_contiguous else host.copy())


_CUDA_NAMES = ("cuda", "gpu")


def get_device(name) -> Device:
    """The device called ``name`` (``"cpu"``, ``"cuda"``, ``"cuda:0"``; a device object of
    another library by its string), loading CUDA on first use. A name this build knows but
    this machine cannot serve raises :class:`DeviceError` in one line saying what to install."""
    if isinstance(name, Device):
        return name
    if name is None:
        return CPU
    if type(name).__name__ == "device":  # another library's device object
        name = str(name)
    if not isinstance(name, str):
        raise TypeError(f"device must be a name such as 'cpu' or 'cuda', got {name!r}")
    base, _, index = name.partition(":")
    dev = _DEVICES.get(base)
    if dev is None and base == "cuda":
        dev = _load_cuda()
    if dev is None:
        known = ", ".join(sorted(set(_DEVICES) | {"cuda"}))
        raise DeviceError(f"unknown device {name!r}; tapegrad knows {known}")
    if index and base != "cpu":
        _check_index(dev, index, name)
    elif index and index != "0":
        raise DeviceError(f"device {name!r}: there is one CPU device, 'cpu' (or 'cpu:0')")
    return dev


def _check_index(dev: Device, index: str, name: str) -> None:
    if not index.isdigit():
        raise DeviceError(f"device {name!r}: the index after ':' must be a number")
    current = getattr(dev.xp, "cuda", None)
    now = current.Device().id if current is not None and hasattr(current, "Device") else 0
    if int(index) != now:
        raise DeviceError(
            f"device {name!r}: tapegrad computes on one GPU per process, the current one "
            f"(cuda:{now}); choose the GPU with CUDA_VISIBLE_DEVICES={index}"
        )


def _load_cuda() -> Device:
    """Register the CUDA device (CuPy), or say in one line why it cannot be had."""
    try:
        import cupy
    except ImportError as e:
        raise DeviceError(
            f"device 'cuda' needs CuPy, which is not installed ({e}): pip install "
            f"cupy-cuda12x (CUDA 12) or cupy-cuda13x (CUDA 13), and numba-cuda for "
            f"tapegrad's CUDA kernels"
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver, no device
        raise DeviceError(
            f"device 'cuda': CuPy is installed but finds no usable GPU ({e}); check the "
            f"driver with nvidia-smi, or use 'cpu'"
        ) from None
    if count < 1:
        raise DeviceError("device 'cuda': CuPy is installed but this machine has no GPU")

    def from_block(block, shape, dtype, strides):
        return cupy.ndarray(shape, dtype, memptr=block.data, strides=strides)

    dev = Device(
        "cuda",
        cupy.ndarray,
        cupy,
        to_host=cupy.asnumpy,
        from_host=cupy.asarray,
        from_block=from_block,
        data_ptr=lambda a: a.data.ptr,
        kernels="cuda",
        kernel_arg=_cuda_view,
    )
    register_device(dev)
    return dev


_VIEWS: dict = {}


def _cuda_view(a):
    """A numba device-array view of CuPy array ``a`` for a kernel launch, kept by address and
    layout: numba's reading of ``__cuda_array_interface__`` costs tens of microseconds per
    argument per launch, and a compiled plan launches on the same buffers every step. The view
    owns nothing (the caller holds ``a`` for the launch), so a cached view of freed memory is
    only ever reused for a new array at the same address with the same layout: the same view."""
    key = (a.data.ptr, a.shape, a.strides, a.dtype.char)
    v = _VIEWS.get(key)
    if v is None:
        from numba import cuda

        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        v = _VIEWS[key] = cuda.from_cuda_array_interface(
            a.__cuda_array_interface__, owner=None, sync=False
        )
    return v


def sparse_indices(shape, like=None) -> tuple:
    """``np.indices(shape, sparse=True)`` on ``like``'s device: one ``arange`` per axis, shaped
    to broadcast along it (CuPy's ``indices`` has no ``sparse``)."""
    xp = xp_of(like)
    last = len(shape) - 1
    return tuple(
        xp.arange(n).reshape((1,) * k + (n,) + (1,) * (last - k)) for k, n in enumerate(shape)
    )


def _index_to(index, dev: Device):
    if isinstance(index, tuple):
        return tuple(_index_to(i, dev) for i in index)
    return copy_to_device(index, dev) if is_array(index) else index


def ufunc_at(ufunc, a, index, values) -> None:
    """``ufunc.at(a, index, values)`` (unbuffered: repeated positions all apply) on ``a``'s
    device. CuPy refuses ``np.add.at`` with a tuple index (it returns NotImplemented), so an
    add on a device array goes to its module's own ``add.at`` with the index moved beside it;
    every other ufunc runs on a host copy, written back (CuPy 14.2 has no ``multiply.at``, and
    its ``maximum.at``/``minimum.at`` rounded float64 values to float32 on an H200)."""
    if type(a) is np.ndarray:
        ufunc.at(a, index, values)
        return
    dev = device_of(a)
    values = copy_to_device(values, dev) if is_array(values) else values
    own = getattr(getattr(dev.xp, "add", None), "at", None) if ufunc is np.add else None
    if own is not None:
        try:
            own(a, _index_to(index, dev), values)
            return
        except (NotImplementedError, TypeError):  # no such scatter/scan there (or dtype)
            pass
    host = dev.to_host(a)
    ufunc.at(host, _index_to(index, CPU), to_host(values) if is_array(values) else values)
    a[...] = dev.from_host(host)


def ufunc_accumulate(ufunc, x, axis: int):
    """``ufunc.accumulate(x, axis=axis)`` on ``x``'s device; where the device's module has no
    such accumulation (CuPy has cumsum/cumprod, not logaddexp/maximum/minimum), the scan runs
    on a host copy and the result is copied back."""
    if type(x) is np.ndarray:
        return ufunc.accumulate(x, axis=axis)
    dev = device_of(x)
    own = getattr(getattr(dev.xp, ufunc.__name__, None), "accumulate", None)
    if own is not None:
        try:
            return own(x, axis=axis)
        except (NotImplementedError, TypeError):  # no such scatter/scan there (or dtype)
            pass
    return dev.from_host(ufunc.accumulate(dev.to_host(x), axis=axis))


def check_same_device(op: str, arrays) -> Device:
    """The one device of ``arrays`` (numbers count as any), or :class:`DeviceError` naming
    ``op`` and both devices."""
    first, where = None, -1
    for i, a in enumerate(arrays):
        t = type(a)
        if t is np.ndarray:
            dev = CPU
        elif t in _BY_TYPE:
            dev = _BY_TYPE[t]
        else:
            continue
        if first is None:
            first, where = dev, i
        elif dev is not first:
            raise DeviceError(
                f"{op}: operands are on different devices: input {where} on {first.name!r} "
                f"(shape {arrays[where].shape}), input {i} on {dev.name!r} (shape {a.shape}); "
                f"move one with .to({first.name!r}) or .to({dev.name!r})"
            )
    return first or CPU


def expand_reduced(g: np.ndarray, in_ndim: int, axes: tuple[int, ...], keepdims: bool):
    """Give a reduction's output gradient back the reduced axes (as size-1 dims)."""
    if keepdims or not axes or in_ndim == 0:
        return g
    shape = list(g.shape)
    for a in axes:  # axes are sorted, so each insert lands at its final position
        shape.insert(a, 1)
    return g.reshape(shape)
