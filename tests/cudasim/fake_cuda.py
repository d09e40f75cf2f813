"""A stand-in CUDA device for machines without a GPU: arrays that behave as CuPy's do towards
NumPy, computing with NumPy underneath.

``DeviceArray`` is not an ``np.ndarray`` (so ``isinstance(a, np.ndarray)`` is False, as for a
CuPy array), takes NumPy's functions and ufuncs through ``__array_function__`` and
``__array_ufunc__`` (as CuPy does), refuses to become a NumPy array implicitly
(``np.asarray(a)`` raises, as CuPy's does), and refuses to be mixed with NumPy arrays in one
call (CuPy raises ``TypeError: Unsupported type numpy.ndarray``). Its module, ``XP``, is NumPy
with every array it makes wrapped: ``XP.empty(...)`` is a device array, ``np.empty(...)`` a host
one. A forward that makes an array with ``np.empty``/``np.zeros``/``np.asarray`` from device
inputs therefore either fails at the mix or hands back a host array, which the tests catch.

Numba's CUDA simulator runs tapegrad's CUDA kernels on the NumPy arrays underneath
(``kernel_arg``), so with ``NUMBA_ENABLE_CUDASIM=1`` this device is a whole CUDA backend that
CI can run: only speed and CuPy's own coverage of NumPy's names are left to a real GPU.
"""

from __future__ import annotations

import types

import numpy as np

from tapegrad.autodiff import backend


class MixedDevices(TypeError):
    """A host (NumPy) array met a device array in one call."""


def _strict(x, where: str):
    """``x`` with device arrays unwrapped; a NumPy array anywhere inside is refused."""
    if isinstance(x, DeviceArray):
        return x._a
    if type(x) is np.ndarray:
        raise MixedDevices(
            f"{where}: a NumPy (host) array of shape {x.shape} was mixed with device arrays "
            f"(CuPy refuses this: the array was made on the CPU where it should have been made "
            f"with the device's module)"
        )
    if isinstance(x, tuple):
        return tuple(_strict(v, where) for v in x)
    if isinstance(x, list):
        return [_strict(v, where) for v in x]
    if isinstance(x, dict):
        return {k: _strict(v, where) for k, v in x.items()}
    return x


def _lenient(x):
    if isinstance(x, DeviceArray):
        return x._a
    if isinstance(x, (tuple, list)):
        return type(x)(_lenient(v) for v in x)
    return x


def _wrap(r):
    """Device arrays for NumPy results; NumPy scalars become 0-d device arrays (CuPy's
    reductions and ufuncs return 0-d arrays, never scalars)."""
    if type(r) is np.ndarray:
        return DeviceArray(r)
    if isinstance(r, np.generic):
        return DeviceArray(np.asarray(r))
    if isinstance(r, tuple):
        return type(r)(*map(_wrap, r)) if hasattr(r, "_fields") else tuple(map(_wrap, r))
    if isinstance(r, list):
        return [_wrap(v) for v in r]
    return r


def _binary(ufunc, reflected=False):
    def op(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:  # a Tensor: its own operator
            return NotImplemented
        return ufunc(other, self) if reflected else ufunc(self, other)

    return op


def _inplace(ufunc):
    def op(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        ufunc(self, other, out=self)
        return self

    return op


class DeviceArray:
    """An array of the stand-in device (see the module docstring)."""

    __slots__ = ("_a", "__weakref__")
    __hash__ = None

    def __init__(self, a: np.ndarray):
        self._a = a

    # -- NumPy's protocols, as CuPy implements them ---------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed (a device array); "
            "copy it to the host explicitly"
        )

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        where = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        # what CuPy 14.2 refuses (seen on an H200): np.add.at with a tuple index (NotImplemented:
        # a TypeError), and accumulate for all but add and multiply
        if method == "at" and isinstance(inputs[1], tuple):
            return NotImplemented
        if method == "accumulate" and ufunc not in (np.add, np.multiply):
            raise NotImplementedError(f"`cupy_{ufunc.__name__}.accumulate` is not supported yet")
        args = _strict(inputs, where)
        outs = kwargs.get("out")
        kwargs = _strict(kwargs, where)
        r = getattr(ufunc, method)(*args, **kwargs)
        if outs is not None:
            return outs[0] if len(outs) == 1 else outs
        return _wrap(r)

    def __array_function__(self, func, types_, args, kwargs):
        where = f"np.{func.__name__}"
        out = kwargs.get("out")
        if func in (np.min, np.amin) and out is not None:  # CuPy 14.2 hands out= to CUB as dtype
            raise TypeError("np.min(..., out=...): CuPy 14.2 passes out to its reduction as dtype")
        r = func(*_strict(args, where), **_strict(kwargs, where))
        if out is not None and isinstance(out, DeviceArray):
            return out
        if func is np.copyto:
            return None
        return _wrap(r)

    # -- attributes and methods: NumPy's, with arrays wrapped ----------------------------------
    def __getattr__(self, name):
        v = getattr(self._a, name)
        if callable(v):

            def method(*args, **kwargs):
                where = f"ndarray.{name}"
                return _wrap(v(*_strict(args, where), **_strict(kwargs, where)))

            return method
        return _wrap(v)

    def get(self) -> np.ndarray:
        """A host copy (CuPy's name)."""
        return self._a.copy()

    def __repr__(self) -> str:
        return f"device_array({self._a!r})"

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self):
        return (DeviceArray(np.asarray(r)) for r in self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __index__(self) -> int:
        return self._a.__index__()

    def __getitem__(self, index):
        return _wrap(self._a[_strict(index, "indexing")])

    def __setitem__(self, index, value):
        self._a[_strict(index, "indexing")] = _strict(value, "assignment")

    __add__, __radd__ = _binary(np.add), _binary(np.add, True)
    __sub__, __rsub__ = _binary(np.subtract), _binary(np.subtract, True)
    __mul__, __rmul__ = _binary(np.multiply), _binary(np.multiply, True)
    __truediv__, __rtruediv__ = _binary(np.true_divide), _binary(np.true_divide, True)
    __floordiv__, __rfloordiv__ = _binary(np.floor_divide), _binary(np.floor_divide, True)
    __mod__, __rmod__ = _binary(np.remainder), _binary(np.remainder, True)
    __pow__, __rpow__ = _binary(np.power), _binary(np.power, True)
    __matmul__, __rmatmul__ = _binary(np.matmul), _binary(np.matmul, True)
    __and__, __rand__ = _binary(np.bitwise_and), _binary(np.bitwise_and, True)
    __or__, __ror__ = _binary(np.bitwise_or), _binary(np.bitwise_or, True)
    __xor__, __rxor__ = _binary(np.bitwise_xor), _binary(np.bitwise_xor, True)
    __lshift__, __rshift__ = _binary(np.left_shift), _binary(np.right_shift)
    __lt__, __le__ = _binary(np.less), _binary(np.less_equal)
    __gt__, __ge__ = _binary(np.greater), _binary(np.greater_equal)
    __eq__, __ne__ = _binary(np.equal), _binary(np.not_equal)
    __iadd__, __isub__ = _inplace(np.add), _inplace(np.subtract)
    __imul__, __itruediv__ = _inplace(np.multiply), _inplace(np.true_divide)
    __ipow__, __imod__ = _inplace(np.power), _inplace(np.remainder)
    __iand__, __ior__ = _inplace(np.bitwise_and), _inplace(np.bitwise_or)

    def __neg__(self):
        return np.negative(self)

    def __pos__(self):
        return np.positive(self)

    def __abs__(self):
        return np.absolute(self)

    def __invert__(self):
        return np.invert(self)


_HOST_IN = {"asarray", "array", "asanyarray"}  # the module's functions that copy host data in


def _add_at(a, index, values):
    np.add.at(a._a, _strict(index, "xp.add.at"), _strict(values, "xp.add.at"))


def _rounding_at(ufunc):
    def at(a, index, values):
        """CuPy 14.2's maximum.at/minimum.at on float64 (seen on an H200): through float32."""
        tmp = a._a.astype(np.float32)
        ufunc.at(tmp, _strict(index, "xp.at"), np.float32(_strict(values, "xp.at")))
        a._a[...] = tmp

    return at


_SCATTERS = {
    "add": _add_at,
    "maximum": _rounding_at(np.maximum),
    "minimum": _rounding_at(np.minimum),
}
"""The module's scatters (``xp.add.at``, ...) as CuPy 14.2 has them."""


class _Module:
    """NumPy as the stand-in device's module: what it makes is a device array."""

    def __init__(self, module: types.ModuleType):
        self._m = module

    def __getattr__(self, name):
        v = getattr(self._m, name)
        if isinstance(v, types.ModuleType):
            return _Module(v)
        if isinstance(v, type) or not callable(v):
            return v
        strict = name not in _HOST_IN

        def fn(*args, **kwargs):
            where = f"xp.{name}"
            if name == "indices" and "sparse" in kwargs:  # as CuPy's
                raise TypeError("indices() got an unexpected keyword argument 'sparse'")
            if strict:
                args, kwargs = _strict(args, where), _strict(kwargs, where)
            else:
                args, kwargs = _lenient(args), _lenient(kwargs)
            r = v(*args, **kwargs)
            if name in _HOST_IN and type(r) is np.ndarray and r is (args[0] if args else None):
                r = r.copy()  # a copy onto the device, never the host array itself
            return _wrap(r)

        if name in _SCATTERS:
            fn.at = _SCATTERS[name]
        return fn

    ndarray = DeviceArray


XP = _Module(np)


def _from_block(block, shape, dtype, strides):
    return DeviceArray(np.ndarray(shape, dtype, buffer=block._a, strides=strides))


def device(name: str = "cuda", kernels: str = "cuda") -> backend.Device:
    """The stand-in device, under ``name``, its forwards calling ``kernels``' kernels."""
    return backend.Device(
        name,
        DeviceArray,
        XP,
        to_host=lambda a: a._a.copy(),
        from_host=lambda h: DeviceArray(np.array(h, copy=True)),
        from_block=_from_block,
        data_ptr=lambda a: a._a.__array_interface__["data"][0],
        kernels=kernels,
        kernel_arg=lambda a: a._a,
    )


def install(name: str = "cuda") -> backend.Device:
    """Register the stand-in device as ``name`` (``"cuda"``: tapegrad's CUDA paths use it)."""
    dev = device(name)
    backend.register_device(dev)
    return dev
