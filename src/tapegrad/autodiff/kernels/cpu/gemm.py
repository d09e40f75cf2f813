"""Matrix products called from inside compiled kernels: NumPy's own OpenBLAS, one thread per call.

NumPy multiplies matrices with OpenBLAS, whose threads are a second pool beside numba's: a
step that alternates numba kernels and NumPy products hands the cores from one pool to the
other dozens of times, and a product with a short side (a convolution's 16 output channels
against 78,400 positions) runs at half the GEMM rate on two threads. A kernel that instead
splits its work over numba's threads (images of a batch, ``by_image.py``) calls ``gemm`` here
on each thread: OpenBLAS's ``cblas_sgemm``/``cblas_dgemm`` (the ILP64 symbols of NumPy's
wheels, found by ``tapegrad.blas.gemm_symbols``), declared to numba as external functions by a
fixed name, so the kernels that call them are cached like any other. While such a kernel runs,
OpenBLAS is held to one thread (:func:`one_blas_thread`), so each call computes on the thread
that made it: one pool for the whole product, and a result that does not depend on the thread
count. The setting is OpenBLAS's, process-wide: a NumPy product another Python thread runs
meanwhile runs on one thread too (its result unchanged).

``AVAILABLE`` is False where NumPy's BLAS is not an ILP64 OpenBLAS (a 32-bit-integer build,
MKL): the kernels that need ``gemm`` then say so (``by_image.applies``) and the convolutions
keep their NumPy products.
"""

from __future__ import annotations

from ....blas import gemm_symbols, threads_setter

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enumerations

_SYMBOLS = gemm_symbols()
_THREADS = threads_setter()
AVAILABLE = _SYMBOLS is not None and _THREADS is not None

try:
    import numba
    from llvmlite import binding as _llvm
    from numba import types
except ImportError:  # pragma: no cover
    AVAILABLE = False

if AVAILABLE:
    for _dtype, _name in (("float32", "tapegrad_cblas_sgemm"), ("float64", "tapegrad_cblas_dgemm")):
        _llvm.add_symbol(_name, _SYMBOLS[_dtype])

    def _signature(real):
        # order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc (addresses as
        # integers: they pass as pointers do in the x86-64 and AArch64 calling conventions)
        i, e, a = types.int64, types.intc, types.uintp
        return types.void(e, e, e, i, i, i, real, a, i, a, i, real, a, i)

    _sgemm = types.ExternalFunction("tapegrad_cblas_sgemm", _signature(types.float32))
    _dgemm = types.ExternalFunction("tapegrad_cblas_dgemm", _signature(types.float64))

    @numba.njit(inline="always", nogil=True)
    def gemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # pragma: no cover
        """c (m, n, row stride ldc) <- alpha op(a) op(b) + beta c, row-major, op = transpose
        where ``trans*`` is TRANS; ``a``, ``b``, ``c`` arrays (of the same float dtype) whose
        first element starts the matrix."""
        if c.itemsize == 4:
            _sgemm(ROW_MAJOR, transa, transb, m, n, k, alpha, a.ctypes.data, lda, b.ctypes.data,
                   ldb, beta, c.ctypes.data, ldc)  # fmt: skip
        else:
            _dgemm(ROW_MAJOR, transa, transb, m, n, k, alpha, a.ctypes.data, lda, b.ctypes.data,
                   ldb, beta, c.ctypes.data, ldc)  # fmt: skip


def describe() -> str:
    """What ``tapegrad info`` says of the kernels that call BLAS themselves."""
    if AVAILABLE:
        return (
            "2-d convolutions from 16 channels image by image, float32 3x3 stride-1 ones from "
            "32 channels by Winograd's F(2x2, 3x3), over numba's threads (NumPy's OpenBLAS "
            "called from the kernels)"
        )
    return (
        "column layouts (NumPy's BLAS is not an ILP64 OpenBLAS, which the image-by-image "
        "kernels call)"
    )


class one_blas_thread:  # noqa: N801 (used as a function: ``with one_blas_thread():``)
    """OpenBLAS held to one thread inside the block (and its count restored after): each
    ``gemm`` a numba thread calls then runs on that thread. (A class, not a generator: entering
    and leaving cost ~1 us, around products of ~10 us.)"""

    __slots__ = ("before",)

    def __enter__(self):
        setter, getter = _THREADS
        self.before = getter()
        if self.before > 1:
            setter(1)

    def __exit__(self, *exc):
        if self.before > 1:
            _THREADS[0](self.before)
