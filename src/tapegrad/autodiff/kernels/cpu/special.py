"""The error function, exact GELU, ReLU's two passes and the sum of two arrays as compiled
elementwise loops.

NumPy has no ``erf``; calling Python's ``math.erf`` once per element cost ~650 ms per million
elements. Numba compiles ``math.erf`` to the C library's ``erf``, which is the very function
CPython's ``math.erf`` calls, so the float64 results are the same bits as Python's. Float32
inputs are widened to float64, evaluated, and rounded once on the store (what rounding
Python's result would give), so the float32 results are correctly rounded from the float64
ones.

``gelu``: ``y = 0.5 * x * (1 + erf(x / sqrt(2)))`` (exact, PyTorch's ``approximate="none"``)
and its derivative ``gelu'(x) = Phi(x) + x * phi(x)`` applied to an incoming gradient, each
in one pass, evaluated in float64 and rounded once. The composed form (scale, erf, add,
multiply, multiply) reads and writes the array five times each way.

Float32 GELU takes a faster road that LLVM turns into SIMD code (the C library's ``erf`` and
``exp`` are scalar calls, ~20 ns an element): ``Phi(-|x|) = exp(-z^2) * erfcx(z) / 2`` with
``z = |x| / sqrt(2)``, where ``exp(-w)`` is a Taylor polynomial of ``exp(-w / 256)`` squared
eight times and ``erfcx`` a degree-12 polynomial in ``t = 1 / (1 + 0.3 z)`` (least squares
for relative error against SciPy's ``erfcx`` on z in [0, 10], Chebyshev nodes; largest
relative error 1.1e-11); beyond z = 10 ``Phi(-|x|)`` is 0 in float32. Everything runs in
float64 and is rounded once on the store, so the float32 results are within one unit in the
last place of the correctly rounded ones (the kernel tests check this against the C library's
``erf`` on a dense grid). The same ``exp(-z^2)`` gives the derivative's density ``phi(x)``.

``relu_forward``: ``max(x, 0)`` as NumPy's ``maximum`` computes it (NaN kept, -0 gives 0);
``relu_backward``: ``g`` where ``x > 0``, else 0 (ReLU's VJP in one pass: a select, so masked
entries are 0 even where ``g`` is not finite, and x NaN gives 0, as ``where(x > 0, g, 0)``).

``add_arrays``: ``x + y`` for two arrays of one shape (what NumPy's ``add`` computes, on every
core for large arrays: a residual connection, two gradients of one value summed).

Large arrays run in chunks over numba's threads (``prange``): each element's value does not
depend on the split, so the results are the same bits at any thread count. No ``fastmath``
beyond float32 GELU's fused multiply-adds (``contract``: 7% faster, still within one unit in
the last place): reassociation would change results against the reference.
"""

from __future__ import annotations

import math

import numpy as np

_INV_SQRT2 = 0.7071067811865476  # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)
_ERFCX_COEFFS = (  # erfcx(z) ~ t * sum(c[k] * u**k), t = 1 / (1 + 0.3 z), u = 8 t / 3 - 5 / 3
    0.40863308210004395,
    0.3016180354487128,
    0.17584674629786118,
    0.08004631682274278,
    0.02730749621631516,
    0.0062252882228655505,
    0.0005499391854274827,
    -0.00017377182767987697,
    -5.876143529979764e-05,
    2.0690745753721304e-06,
    3.674847062003263e-06,
    7.677418330784528e-08,
    -1.9172319949962973e-07,
)
_CHUNK = 1 << 14
_PARALLEL_MIN = 1 << 16  # below this the threads' start-up costs more than they save


def erf_reference(x: np.ndarray, out: np.ndarray) -> None:
    """Python's ``math.erf``, one element at a time (the slow path the kernel replaces)."""
    flat = np.asarray(x, dtype=np.float64).reshape(-1)
    out.reshape(-1)[...] = [math.erf(v) for v in flat]


def gelu_forward_reference(x: np.ndarray, out: np.ndarray) -> None:
    e = np.empty(np.shape(x), np.float64)
    erf_reference(np.asarray(x, np.float64) * _INV_SQRT2, e)
    out[...] = 0.5 * np.asarray(x, np.float64) * (1.0 + e)


def add_arrays_reference(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    np.add(x, y, out=out)


def relu_forward_reference(x: np.ndarray, out: np.ndarray) -> None:
    np.maximum(x, 0, out=out)


def relu_backward_reference(g: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, np.where(x > 0, g, 0))


def gelu_backward_reference(g: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    x64 = np.asarray(x, np.float64)
    e = np.empty(x64.shape, np.float64)
    erf_reference(x64 * _INV_SQRT2, e)
    out[...] = g * (0.5 * (1.0 + e) + x64 * (_INV_SQRT_2PI * np.exp(-0.5 * x64 * x64)))


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .loops import keyed_by_body

    _jit = cached_jit(boundscheck=False, nogil=True, error_model="numpy")
    # float32 GELU: fused multiply-adds in its float64 polynomials (no reassociation)
    _jit_fma = cached_jit(boundscheck=False, nogil=True, error_model="numpy", fastmath={"contract"})
    _PJIT = dict(boundscheck=False, nogil=True, parallel=True, error_model="numpy")

    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12 = _ERFCX_COEFFS

    @cached_jit(inline="always", error_model="numpy", fastmath={"contract"})
    def _normal_tail(v):  # pragma: no cover - compiled
        """(Phi(-|v|), phi(v)) for a float64 ``v``, branch-free (see the module's notes)."""
        z = abs(v) * _INV_SQRT2
        zc = min(z, 10.0)
        s = zc * zc * (-1.0 / 256.0)  # exp(s), |s| <= 0.39, Taylor to degree 12
        s2 = s * s  # both polynomials by Estrin's scheme: short dependency chains
        s4 = s2 * s2
        q0 = (1.0 + s) + s2 * (0.5 + s * (1.0 / 6.0))
        q1 = (1.0 / 24.0 + s * (1.0 / 120.0)) + s2 * (1.0 / 720.0 + s * (1.0 / 5040.0))
        q2 = (1.0 / 40320.0 + s * (1.0 / 362880.0)) + s2 * (
            1.0 / 3628800.0 + s * (1.0 / 39916800.0)
        )
        e = (q0 + s4 * q1) + (s4 * s4) * (q2 + s4 * (1.0 / 479001600.0))
        for _ in range(8):
            e = e * e
        e = 0.0 if z > 10.0 else e  # exp(-z^2), 0 past float32's range
        t = 1.0 / (1.0 + 0.3 * zc)
        u = t * (8.0 / 3.0) - 5.0 / 3.0
        u2 = u * u
        u4 = u2 * u2
        h0 = (c0 + u * c1) + u2 * (c2 + u * c3)
        h1 = (c4 + u * c5) + u2 * (c6 + u * c7)
        h2 = (c8 + u * c9) + u2 * (c10 + u * c11)
        h = (h0 + u4 * h1) + (u4 * u4) * (h2 + u4 * c12)
        return 0.5 * e * t * h, e * _INV_SQRT_2PI

    @_jit_fma
    def _gelu32_range(x, out, lo, hi):  # pragma: no cover - compiled
        x, out = x[lo:hi], out[lo:hi]  # from 0 up: indices LLVM can vectorise over
        for i in range(out.size):
            v = np.float64(x[i])
            tail, _ = _normal_tail(v)
            out[i] = v * (1.0 - tail if v > 0 else tail)

    @_jit_fma
    def _gelu32_grad_range(g, x, out, lo, hi):  # pragma: no cover - compiled
        g, x, out = g[lo:hi], x[lo:hi], out[lo:hi]
        for i in range(out.size):
            v = np.float64(x[i])
            tail, pdf = _normal_tail(v)
            out[i] = np.float64(g[i]) * ((1.0 - tail if v > 0 else tail) + v * pdf)

    @_jit
    def _erf_range(x, out, lo, hi):  # pragma: no cover - compiled
        x, out = x[lo:hi], out[lo:hi]  # from 0 up: indices LLVM can vectorise over
        for i in range(out.size):
            out[i] = math.erf(np.float64(x[i]))

    @_jit
    def _gelu_range(x, out, lo, hi):  # pragma: no cover - compiled
        x, out = x[lo:hi], out[lo:hi]  # from 0 up: indices LLVM can vectorise over
        for i in range(out.size):
            v = np.float64(x[i])
            out[i] = 0.5 * v * (1.0 + math.erf(v * _INV_SQRT2))

    @_jit
    def _gelu_grad_range(g, x, out, lo, hi):  # pragma: no cover - compiled
        g, x, out = g[lo:hi], x[lo:hi], out[lo:hi]
        for i in range(out.size):
            v = np.float64(x[i])
            cdf = 0.5 * (1.0 + math.erf(v * _INV_SQRT2))
            out[i] = np.float64(g[i]) * (cdf + v * (_INV_SQRT_2PI * math.exp(-0.5 * v * v)))

    @_jit
    def _add_range(x, y, out, lo, hi):  # pragma: no cover - compiled
        x, y, out = x[lo:hi], y[lo:hi], out[lo:hi]
        for i in range(out.size):
            out[i] = x[i] + y[i]

    @cached_jit(inline="always", error_model="numpy")
    def relu_value(v):  # pragma: no cover - compiled
        """ReLU's arithmetic, the one definition (BatchNorm's fused ReLU calls it too): NaN
        kept, -0 to +0."""
        return v if (v > 0 or v != v) else 0

    @_jit
    def _relu_range(x, out, lo, hi):  # pragma: no cover - compiled
        x, out = x[lo:hi], out[lo:hi]
        for i in range(out.size):
            out[i] = relu_value(x[i])

    @_jit
    def _relu_grad_range(g, x, out, lo, hi):  # pragma: no cover - compiled
        g, x, out = g[lo:hi], x[lo:hi], out[lo:hi]
        zero = out.dtype.type(0)
        for i in range(out.size):
            out[i] = g[i] if x[i] > 0 else zero

    # The same operations where an input is the output itself (``primitives/activation.py``
    # stages a non-contiguous operand into the output): the loops above, given one array as
    # both, fail LLVM's overlap check and run its scalar loop, whose select became a branch
    # (30x slower on random signs); these read and write the one array.
    @_jit
    def _relu_into(out, lo, hi):  # pragma: no cover - compiled
        out = out[lo:hi]
        for i in range(out.size):
            out[i] = relu_value(out[i])

    @_jit
    def _relu_grad_into(x, out, lo, hi):  # pragma: no cover - compiled
        x, out = x[lo:hi], out[lo:hi]  # out holds g
        zero = out.dtype.type(0)
        for i in range(out.size):
            out[i] = out[i] if x[i] > 0 else zero

    @_jit
    def _add_into(y, out, lo, hi):  # pragma: no cover - compiled
        y, out = y[lo:hi], out[lo:hi]  # out holds the other term (addition commutes)
        for i in range(out.size):
            out[i] = out[i] + y[i]

    def _chunked(body):
        """``body(*arrays, lo, hi)`` over chunks of the flat arrays on numba's threads (cached by
        the body: numba's own key for this closure differs in every process)."""

        @cached_jit(**_PJIT)
        def run(*arrays):  # pragma: no cover - compiled
            n = arrays[-1].size
            for c in numba.prange((n + _CHUNK - 1) // _CHUNK):
                body(*arrays, c * _CHUNK, min(n, (c + 1) * _CHUNK))

        return keyed_by_body((run,), body, _PJIT)[0]

    _SERIAL = {
        "erf": _erf_range,
        "gelu": _gelu_range,
        "gelu_grad": _gelu_grad_range,
        "gelu32": _gelu32_range,
        "gelu32_grad": _gelu32_grad_range,
        "add": _add_range,
        "relu": _relu_range,
        "relu_grad": _relu_grad_range,
    }
    _PARALLEL = {name: _chunked(body) for name, body in _SERIAL.items()}
    # name -> the operation with its first (aliased) input read from the output
    _SERIAL_INTO = {"relu": _relu_into, "relu_grad": _relu_grad_into, "add": _add_into}
    _PARALLEL_INTO = {name: _chunked(body) for name, body in _SERIAL_INTO.items()}

    def _launch(name: str, *arrays) -> None:
        flat = [a.reshape(-1) for a in arrays]
        n = flat[-1].size
        serial, parallel = _SERIAL, _PARALLEL
        if name in _SERIAL_INTO:  # the staged operand is the output object itself
            if name == "add" and arrays[1] is arrays[-1]:
                flat = [flat[0], flat[2]]  # x + out: addition commutes
            elif arrays[0] is arrays[-1]:
                flat = flat[1:]
            if len(flat) < len(arrays):
                serial, parallel = _SERIAL_INTO, _PARALLEL_INTO
        if numba.get_num_threads() > 1 and n >= _PARALLEL_MIN:
            parallel[name](*flat)
        else:
            serial[name](*flat, 0, n)

    def erf(x: np.ndarray, out: np.ndarray) -> None:
        """``out = erf(x)`` for C-contiguous float arrays of one shape."""
        _launch("erf", x, out)

    def gelu_forward(x: np.ndarray, out: np.ndarray) -> None:
        """``out = 0.5 * x * (1 + erf(x / sqrt(2)))``; C-contiguous, one shape and dtype."""
        _launch("gelu32" if x.dtype == np.float32 else "gelu", x, out)

    def gelu_backward(g: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        """``out = g * gelu'(x)``; C-contiguous, one shape and dtype."""
        _launch("gelu32_grad" if x.dtype == np.float32 else "gelu_grad", g, x, out)

    def add_arrays(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        """``out = x + y``; C-contiguous, one shape and dtype."""
        _launch("add", x, y, out)

    def relu_forward(x: np.ndarray, out: np.ndarray) -> None:
        """``out = max(x, 0)``; C-contiguous, one shape and dtype."""
        _launch("relu", x, out)

    def relu_backward(g: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        """``out = g where x > 0 else 0``; C-contiguous, one shape and dtype."""
        _launch("relu_grad", g, x, out)

else:  # pragma: no cover
    erf, gelu_forward, gelu_backward = (
        erf_reference,
        gelu_forward_reference,
        gelu_backward_reference,
    )
    relu_forward, relu_backward = relu_forward_reference, relu_backward_reference
    add_arrays = add_arrays_reference
