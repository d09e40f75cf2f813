"""Matrix products on numba's threads, so that a training step runs on one thread pool.

NumPy multiplies matrices on OpenBLAS's threads, and OpenBLAS's idle workers spin for a while
after each product waiting for the next (``OPENBLAS_THREAD_TIMEOUT``). A numba kernel that
follows a product shares the cores with them: on two cores, GELU's forward over 1M float32
entries took 2.2 ms right after a NumPy product against 1.1 ms alone (its two threads got one
core), and every parallel kernel of a transformer's step follows a product. Letting OpenBLAS's
workers sleep instead slowed back-to-back products (BENCHMARKS.md, *Two thread pools*).

Here a product of at least ``_PARALLEL_FLOPS`` is cut into pieces, each piece one
single-threaded GEMM of NumPy's own OpenBLAS (``gemm.py``) on one of numba's threads: a batch's
matrices, and a large matrix's blocks of rows (or of columns, when it has fewer rows than
columns). OpenBLAS's workers never wake; the cores stay with numba's pool, for the products and
for the kernels around them (whose idle workers spin briefly: ``tapegrad/blas.py``). Smaller
products that OpenBLAS would still thread run on the calling thread (OpenBLAS held to one);
the smallest, which OpenBLAS runs on the calling thread anyway, are NumPy's as they are.

A product is cut into as many pieces as numba has threads (``_pieces``; fewer where a piece
would fall under ~1 MFLOP or 16 rows), each run whole on one thread: every piece packs the
other operand again, so more pieces than threads only cost (cutting into up to eight whatever
the thread count took 5-26% longer on two threads for products of 20-270 MFLOP, BENCHMARKS.md,
*One thread pool*). A product gives the same bits run after run at a thread count; OpenBLAS's
sums depend on where a matrix is cut, so they can differ in the last place between thread
counts, as NumPy's own products do between OpenBLAS's thread counts. With one numba thread
there is no pool to share and products are NumPy's (the pieces' Python overhead, ~8 us a
product, cost the seed presets 14-26% of a one-thread epoch), but for the register blocks below.

Float32 products of 2 MFLOP or more with at least 16 columns (``(..., M, K) @ (K, N)``, a up
to 512 KiB: a Linear's forward and weight gradient in the seed presets) run instead as
register-blocked 16 x 16 blocks (``microkernels.product_block``, on a CPU with AVX-512; the last
block's columns past N masked), a block of 16 columns per task over numba's threads, at any
thread count: OpenBLAS's kernels ran these shapes at 120-165 GFLOP/s on two threads, the blocks
at ~200 (mlp's (100, 784) @ (784, 128) 153 -> 108 us, seed-rnn's weight gradient (64, 400) @
(400, 196) 99 -> 65 us), and on one thread 3-15% quicker than OpenBLAS's (a Linear's ``x @
W.T`` reads W's 16 rows a task turned into a panel by that task's thread). Each entry is summed
in K's order by one thread, so their bits do not depend on the thread count.

Operands are read in place wherever each matrix is stored by rows or by columns (a transposed
view is a transposed GEMM, not a copy) and a batch's strides collapse to at most two
dimensions (other operands are copied first); a weight broadcast over a batch
(``(..., M, K) @ (K, N)``) whose rows are evenly spaced is one ``(rows, K) @ (K, N)`` GEMM.
1-D operands, other dtypes and a BLAS other than an ILP64 OpenBLAS (``gemm.AVAILABLE``) are
NumPy's ``matmul``.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from .gemm import AVAILABLE, one_blas_thread

try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

# OpenBLAS runs products of M * N * K <= 262144 on the calling thread itself; from there on it
# wakes its workers, so this module takes over (a batch of small products counts as one)
_MIN_FLOPS = 2 * 262144
_PARALLEL_FLOPS = 1 << 21  # from ~2 MFLOP (~20 us on one core) numba's threads share a product
# a matrix is split into a piece per thread of at least ~1 MFLOP... (with 2 MFLOP pieces a
# product of 2-4 MFLOP was one piece on one thread, after a parallel region's cost: 36 against
# 20 us for (100, 200) @ (200, 64) on two threads in two pieces: BENCHMARKS.md, *Eager
# per-operation cost; the Elman scan in one call*)
_UNIT_FLOPS = 1 << 20
_MIN_SIDE = 16  # ...and at least 16 rows or columns
_NO_TRANS, _TRANS = 111, 112
# the register-blocked products read all of a for each block of 16 columns: from a of this size
# (in bytes) on, past a core's L2, that costs more than OpenBLAS's packing (char-lm's (2048,
# 128) @ (128, 384) products: its step 1.07x slower), and they are OpenBLAS's
_BLOCKED_MAX_A_BYTES = 1 << 19
_PLANS: dict = {}  # (shapes, strides, dtype, threads) -> the loop's arguments but the addresses


def _route(a, b, out, count) -> int:
    """How ``out[...] = a @ b`` runs with ``count()`` numba threads (asked only where it
    matters): 0, NumPy's matmul as it is (what OpenBLAS runs on the calling thread anyway, 1-D
    operands, one numba thread: no pool to share); 1, NumPy's with OpenBLAS held to one
    thread; else in pieces over that many threads."""
    shape = out.shape
    if len(shape) == 2:  # (the common case first: every Python step counts at ~10 us a product)
        flops = 2 * shape[0] * shape[1] * a.shape[-1]
    else:
        flops = 2 * a.shape[-1]
        for d in shape:
            flops *= d
    if flops < _MIN_FLOPS or not AVAILABLE or a.ndim < 2 or b.ndim < 2:
        return 0
    threads = count() if type(out) is np.ndarray else 1
    if threads == 1:
        return 0
    return 1 if flops < _PARALLEL_FLOPS else threads


def _two() -> int:
    return 2


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[...] = a @ b`` with NumPy's batching and broadcasting (``out`` of the result's shape
    and dtype, not overlapping the operands); returns ``out``.

    Products OpenBLAS would run on the calling thread are NumPy's, and so are those up to
    ``_PARALLEL_FLOPS`` with OpenBLAS held to one thread; larger ones are cut into pieces run
    over numba's threads (see the module)."""
    blocks = _blocked(a, b, out)
    if blocks is not None:
        blocks()
        return out
    threads = _route(a, b, out, numba.get_num_threads if AVAILABLE else _two)
    if threads == 0:
        return _numpy_matmul(a, b, out)
    if threads == 1:
        with one_blas_thread():
            return _numpy_matmul(a, b, out)
    plan = _plan(a, b, out, threads)
    if plan is not None:
        return _run(plan, a, b, out)
    # an operand stored neither by rows nor by columns, a batch that does not collapse:
    # contiguous copies rather than OpenBLAS's pool
    a2, b2 = np.ascontiguousarray(a), np.ascontiguousarray(b)
    out2 = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    plan = _plan(a2, b2, out2, threads)
    if plan is None:
        return _numpy_matmul(a, b, out)
    _run(plan, a2, b2, out2)
    if out2 is not out:
        np.copyto(out, out2)
    return out


def bind_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray):
    """A call with no arguments computing ``out[...] = a @ b`` for these very arrays, as
    :func:`matmul` does, its decisions taken now: a compiled plan binds each product once
    (its operands and output are buffers it keeps) instead of sizing, planning and finding
    the arrays' addresses on every replay (~5-10 us a product). The thread count is read at
    every call; where it changed since binding the product runs as :func:`matmul`, so the
    pieces (and their bits) are always the current count's."""
    blocks = _blocked(a, b, out, own=True)
    if blocks is not None:  # the same blocks, and bits, at any thread count
        return blocks
    if _route(a, b, out, _two) == 0:  # NumPy's at any thread count
        return functools.partial(_numpy_matmul, a, b, out)
    count = numba.get_num_threads
    now = count()
    route = _route(a, b, out, count)
    plan = _plan(a, b, out, route) if route > 1 else None
    if route > 1 and plan is None:
        return functools.partial(matmul, a, b, out)

    def whole():
        if count() != now:
            return matmul(a, b, out)
        if route == 0:
            return _numpy_matmul(a, b, out)
        with one_blas_thread():
            return _numpy_matmul(a, b, out)

    if plan is None:
        return whole
    units, single, *rest = plan
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data  # the closure keeps the arrays

    def pieces():
        if count() != now:
            return matmul(a, b, out)
        with one_blas_thread():
            _parallel(units, single, pa, pb, pc, *rest)
        return out

    return pieces


def bind_matmul_reference(a, b, out):
    """:func:`bind_matmul` for a device without these kernels: its ``matmul`` each call."""
    return functools.partial(matmul_reference, a, b, out)


def describe() -> str:
    """What ``tapegrad info`` says of how matrix products run."""
    if AVAILABLE:
        blocks = (
            "float32 ones of 16 or more columns as register-blocked 16 x 16 blocks, others "
            if BLOCKED
            else ""
        )
        return (
            f"from 2 MFLOP over numba's threads ({blocks}a piece per numba thread: NumPy's "
            "OpenBLAS on one thread per piece); NumPy's matmul below and with one numba thread"
        )
    return "NumPy's matmul (NumPy's BLAS is not an ILP64 OpenBLAS, which the pieces call)"


def _blocked(a, b, out, own: bool = False):
    """A call ``run()`` computing ``out[...] = a @ b`` (and returning it) as 16 x 16 register
    blocks (``microkernels.product_block``: each entry's K products summed in order by one
    thread, the same bits at any thread count), a block of 16 columns at a time over numba's
    threads; or None where they do not take the product: 2 MFLOP or more, numba compiles for
    AVX-512, float32 matrices (``(..., M, K) @ (K, N)`` with a's rows evenly spaced as one, up
    to 512 KiB), N >= 16 (the last block's columns past N masked), ``out`` contiguous, each
    operand stored by rows or by columns. b's 16 columns are read in place when b is stored by
    rows, else (a Linear's ``x @ W.T``) first turned into a panel of their own by the thread
    that uses them (16 x 16 blocks turned in registers; ``own``: panels of the call's own, for
    a bound call, else this Python thread's)."""
    if not (
        BLOCKED
        and type(a) is np.ndarray
        and type(b) is np.ndarray
        and type(out) is np.ndarray
        and a.dtype == b.dtype == out.dtype == np.float32
        and b.ndim == 2
        and a.ndim >= 2
        and out.flags.c_contiguous
    ):
        return None
    k, n = b.shape
    if n < _LANES or k == 0:
        return None
    if a.ndim > 2:
        if not a.flags.c_contiguous:
            return None
        a = a.reshape(-1, k)
    m = a.shape[0]
    if 2 * m * n * k < _PARALLEL_FLOPS or m * k * 4 > _BLOCKED_MAX_A_BYTES:
        return None
    lay_a = _matrix_layout(a.shape, a.strides, 4)
    lay_b = _matrix_layout(b.shape, b.strides, 4)
    if lay_a is None or lay_b is None:
        return None
    ta, lda = lay_a
    tb, ldb = lay_b
    if ta == _NO_TRANS:  # a[r, j] at r*lda + j
        offs, span, walk = _row_offsets(m, lda), (m - 1) * lda + k, (1, k, 0)
    else:  # a[r, i] at r + i*lda
        offs, span, walk = _row_offsets(m, 1), (k - 1) * lda + m, (k, 1, lda)
    af = np.lib.stride_tricks.as_strided(a, (span,), (4,))
    if tb == _NO_TRANS:
        bf = np.lib.stride_tricks.as_strided(b, ((k - 1) * ldb + n,), (4,))
        panels = _NO_PANELS
    else:  # b[i, j] at bf[j*ldb + i]
        bf = np.lib.stride_tricks.as_strided(b, ((n - 1) * ldb + k,), (4,))
        panels = _panels(k, own)
    of = out.reshape(-1)

    def run() -> np.ndarray:
        loop = _columns_parallel if numba.get_num_threads() > 1 else _columns
        loop(-(-n // _LANES), af, offs, *walk, bf, ldb, panels, of, n, m)
        return out

    return run


@functools.lru_cache(maxsize=256)
def _row_offsets(m: int, pitch: int) -> np.ndarray:
    """Where each of a's M rows starts (``r * pitch``), up to a multiple of 16 rows (past M:
    row M - 1's, whose results are not written); kept per shape (read-only)."""
    rows = np.minimum(np.arange(-(-m // _LANES) * _LANES), m - 1).astype(np.int64) * pitch
    rows.flags.writeable = False
    return rows


_KEPT = threading.local()  # this Python thread's panels by K, for the calls that bind nothing


def _panels(k: int, own: bool) -> np.ndarray:
    """A panel (K + 16, 16) per numba thread: a bound call's own (``own``), else kept per
    Python thread and K (a plan's unbound calls allocate nothing a step; two Python threads
    never share one)."""
    shape = (numba.config.NUMBA_NUM_THREADS, k + _LANES, _LANES)
    if own:
        return np.empty(shape, np.float32)
    kept = getattr(_KEPT, "panels", None)
    if kept is None or len(kept) > 64:
        kept = _KEPT.panels = {}
    if k not in kept:
        kept[k] = np.empty(shape, np.float32)
    return kept[k]


def _run(plan, a, b, out):
    """The pieces of ``plan`` over numba's threads, OpenBLAS on one thread. (The parallel loop
    even for one piece: the same Python calls at any size, which tests count; a product this
    large pays the region's few microseconds easily.)"""
    units, single, *rest = plan
    with one_blas_thread():
        _parallel(units, single, a.ctypes.data, b.ctypes.data, out.ctypes.data, *rest)
    return out


def matmul_reference(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.matmul(a, b, out=out)


def _numpy_matmul(a, b, out):
    """NumPy's matmul, a weight over a batch (``(..., M, K) @ (K, N)``) as one GEMM over all
    rows: NumPy runs a GEMM per matrix (32 of (64, 128) @ (128, 512) took 1.7x PyTorch's time).
    ``a`` is copied first where its batch does not merge into rows as a view."""
    if a.ndim < 3 or b.ndim != 2:
        return np.matmul(a, b, out=out)
    if out.flags.c_contiguous and a.dtype == b.dtype == out.dtype:
        np.matmul(a.reshape(-1, a.shape[-1]), b, out=out.reshape(-1, b.shape[-1]))
        return out
    return np.matmul(a, b, out=out)


def _matrix_layout(shape, strides, itemsize):
    """(CBLAS transpose flag, leading dimension) of a matrix of ``shape`` and byte ``strides``
    stored by rows or by columns; None otherwise."""
    rows, cols = shape
    s0, s1 = strides
    if cols == 1:
        s1 = itemsize
    if rows == 1:
        s0 = max(cols, 1) * itemsize
    if s0 % itemsize or s1 % itemsize:
        return None
    if s1 == itemsize and s0 >= max(cols, 1) * itemsize:
        return _NO_TRANS, s0 // itemsize
    if s0 == itemsize and s1 >= max(rows, 1) * itemsize:
        return _TRANS, s1 // itemsize
    if rows == 1 and cols == 1:
        return _NO_TRANS, 1
    return None


def _batch_strides(x, batch):
    """``x``'s byte strides over the ``batch`` dimensions (0 where it broadcasts)."""
    lead = len(batch) - (x.ndim - 2)
    shape, strides = x.shape[:-2], x.strides[:-2]
    return [0 if i < lead or shape[i - lead] == 1 else strides[i - lead] for i in range(len(batch))]


def _collapse(batch, strides):
    """The batch dimensions merged where every operand steps evenly across them, size-1
    dimensions dropped: (sizes, per-operand strides)."""
    dims = [(n, [s[i] for s in strides]) for i, n in enumerate(batch) if n != 1]
    merged: list = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(p == q * n for p, q in zip(pst, st)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    return [n for n, _ in merged], [[st[j] for _, st in merged] for j in range(len(strides))]


def _pieces(m: int, n: int, k: int, threads: int) -> tuple[int, int, bool]:
    """(pieces, their size, split by rows) of one ``(m, k) @ (k, n)`` product on ``threads``
    threads: a piece per thread, fewer where they would fall under ``_UNIT_FLOPS`` or
    ``_MIN_SIDE`` rows (or columns)."""
    by_rows = m >= n
    side = m if by_rows else n
    pieces = max(1, min(threads, 2 * m * n * k // _UNIT_FLOPS, side // _MIN_SIDE))
    size = -(-side // pieces)
    return -(-side // size), size, by_rows


def _plan(a, b, out, threads: int):
    """The parallel loop's arguments but the three addresses (``(units, single, ta, ...)``), or
    None where this module does not take the product (see the module). Cached by layout and
    thread count."""
    key = (a.shape, a.strides, b.shape, b.strides, out.shape, out.strides, a.dtype, b.dtype,
           out.dtype, threads)  # fmt: skip
    plan = _PLANS.get(key, False)
    if plan is False:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        plan = _PLANS[key] = _layout_plan(a, b, out, threads)
    return plan


def _layout_plan(a, b, out, threads: int):
    if not (
        type(a) is np.ndarray
        and type(b) is np.ndarray
        and a.dtype == b.dtype == out.dtype
        and a.dtype.type in (np.float32, np.float64)
    ):
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = out.shape[:-2]
    isz = a.itemsize
    lay_a = _matrix_layout(a.shape[-2:], a.strides[-2:], isz)
    lay_b = _matrix_layout(b.shape[-2:], b.strides[-2:], isz)
    if lay_a is None or lay_b is None or out.strides[-1] != isz or out.strides[-2] < n * isz:
        return None
    if out.strides[-2] % isz or min(out.strides) < 0:
        return None
    sizes, (sa, sb, sc) = _collapse(batch, [_batch_strides(x, batch) for x in (a, b, out)])
    ldc = out.strides[-2] // isz
    ta, lda = lay_a
    tb, ldb = lay_b
    if len(sizes) == 1 and sb[0] == 0 and ta == _NO_TRANS:
        # a weight over a batch: one GEMM when the batch continues a's and out's rows evenly
        if sa[0] == m * lda * isz and sc[0] == m * ldc * isz:
            m, sizes, sa, sb, sc = m * sizes[0], [], [], [], []
    if len(sizes) > 2:
        return None
    while len(sizes) < 2:
        sizes, sa, sb, sc = [1, *sizes], [0, *sa], [0, *sb], [0, *sc]
    pieces, size, by_rows = _pieces(m, n, k, threads)
    units = sizes[0] * sizes[1] * pieces
    return (units, isz == 4, ta, lda, tb, ldb, ldc, m, n, k, sizes[1], sa[0], sa[1], sb[0],
            sb[1], sc[0], sc[1], pieces, size, by_rows, isz)  # fmt: skip


if AVAILABLE:
    from ..jit import cached_jit
    from .gemm import _dgemm, _sgemm
    from .loops import split_loops, thread_loops

    @cached_jit(nogil=True)
    def _piece(single, pa, pb, pc, ta, lda, tb, ldb, ldc, m, n, k, b1, sa0, sa1, sb0, sb1,
               sc0, sc1, pieces, size, by_rows, isz, u):  # fmt: skip  # pragma: no cover
        """Piece ``u``: matrix ``u // pieces`` of the batch (grid (., b1), byte strides s*0,
        s*1), block ``u % pieces`` of its rows or columns."""
        mat = u // pieces
        j = u - mat * pieces
        i0 = mat // b1
        i1 = mat - i0 * b1
        pa += i0 * sa0 + i1 * sa1
        pb += i0 * sb0 + i1 * sb1
        pc += i0 * sc0 + i1 * sc1
        lo = j * size
        if by_rows:
            m = min(m, lo + size) - lo
            pa += (lo * lda if ta == _NO_TRANS else lo) * isz
            pc += lo * ldc * isz
        else:
            n = min(n, lo + size) - lo
            pb += (lo if tb == _NO_TRANS else lo * ldb) * isz
            pc += lo * isz
        if single:
            _sgemm(101, ta, tb, m, n, k, np.float32(1.0), pa, lda, pb, ldb, np.float32(0.0),
                   pc, ldc)  # fmt: skip
        else:
            _dgemm(101, ta, tb, m, n, k, 1.0, pa, lda, pb, ldb, 0.0, pc, ldc)

    _serial, _parallel = split_loops(_piece, nogil=True)

    from .microkernels import LANES as _LANES
    from .microkernels import WIDE, product_block, transposed

    BLOCKED = WIDE

    _NO_PANELS = np.zeros((0, 0, _LANES), np.float32)

    @cached_jit(nogil=True, boundscheck=False)
    def _column_block(t, af, offs, rows, width, step, bf, ldb, panels, of, n, m, jb):
        """Columns 16 jb.. of ``out`` (M, N) for every block of 16 rows; b's 16 columns (fewer in
        the last block) read in place (b by rows, pitch ldb) or turned into thread t's panel
        first (b by columns)."""
        c = jb * _LANES
        cols = min(_LANES, n - c)  # the last block's columns past N: masked
        if panels.shape[0]:
            k = panels.shape[1] - _LANES
            panel = panels[t].ravel()
            for i in range(0, k, _LANES):
                turn = min(_LANES, k - i)
                transposed(bf, c * ldb + i, ldb, turn, panel, i * _LANES, _LANES, cols)
            src, pitch, at = panel, _LANES, 0
        else:
            src, pitch, at = bf, ldb, c
        for r in range(0, m, _LANES):
            count = min(_LANES, m - r)
            product_block(
                af, offs, r, rows, width, step, src, pitch, at, of, n, c, False, count, cols
            )

    _columns, _columns_parallel = thread_loops(_column_block, nogil=True, boundscheck=False)

else:  # pragma: no cover
    BLOCKED = False
    _LANES = 16
