"""The matrix-product kernel on numba's threads (``kernels/cpu/products.py``): NumPy's product
(within a float's rounding of an inner product) for every layout it takes in place, a piece
per thread, the same bits on one thread as over the pool, and OpenBLAS's thread count given
back."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu import gemm
from tapegrad.autodiff.kernels.cpu import products as P

pytestmark = pytest.mark.skipif(not gemm.AVAILABLE, reason="NumPy's BLAS is not ILP64 OpenBLAS")


def _cols(x):
    """``x`` with the same values, each matrix stored by columns (a transposed view)."""
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)


def _assert_product(out, a, b):
    """``out`` is ``a @ b`` within the rounding bound of inner products of length K (the order of
    the sums is BLAS's: a product cut into pieces may round differently from NumPy's)."""
    k = a.shape[-1]
    bound = 2 * k * np.finfo(out.dtype).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(out - np.matmul(a, b)) <= bound)


def _case(rng, a_shape, b_shape, dtype, a_cols=False, b_cols=False):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    return (_cols(a) if a_cols else a), (_cols(b) if b_cols else b)


SHAPES = [
    ((300, 200), (200, 100)),  # rows split
    ((64, 700), (700, 300)),  # columns split (fewer rows than columns)
    ((6, 50, 80), (80, 70)),  # a weight over a batch: one GEMM over all rows
    ((40, 64, 32), (40, 32, 64)),  # a batch of small products
    ((3, 1, 40, 30), (5, 30, 60)),  # broadcast batch: two dimensions
    ((130, 90), (90, 1)),  # one column
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("a_cols", [False, True])
@pytest.mark.parametrize("b_cols", [False, True])
def test_every_layout_gives_numpys_product(dtype, shapes, a_cols, b_cols):
    rng = np.random.default_rng(0)
    a, b = _case(rng, *shapes, dtype, a_cols, b_cols)
    out = np.full(np.matmul(a, b).shape, np.nan, dtype)
    assert P.matmul(a, b, out) is out
    _assert_product(out, a, b)


def test_views_of_attention_are_read_in_place():
    """Queries and keys as views of one (N, T, 3, H, D) projection (batch strides that do not
    merge, rows 3 H D apart) and a key transposed: no copy, one GEMM per (sample, head)."""
    qkv = np.random.default_rng(1).standard_normal((8, 64, 3, 4, 32)).astype(np.float32)
    q, k, _ = qkv.transpose(2, 0, 3, 1, 4)
    kt = np.swapaxes(k, -1, -2)
    out = np.empty((8, 4, 64, 64), np.float32)
    plan = P._plan(q, kt, out, 2)
    assert plan is not None and plan[0] == 8 * 4  # units: one per matrix
    P.matmul(q, kt, out)
    _assert_product(out, q, kt)


def test_a_weight_over_a_batch_is_one_split_gemm():
    a = np.ones((32, 64, 128), np.float32)
    w = np.ones((128, 512), np.float32)
    plan = P._plan(a, w, np.empty((32, 64, 512), np.float32), 2)
    units, m, pieces = plan[0], plan[7], plan[17]
    assert m == 32 * 64 and units == pieces == 2


def test_a_piece_per_thread_unless_too_small():
    assert P._pieces(2048, 128, 512, 2) == (2, 1024, True)
    assert P._pieces(2048, 128, 512, 4) == (4, 512, True)
    assert P._pieces(128, 784, 100, 3) == (3, 262, False)  # columns, when fewer rows
    assert P._pieces(100, 100, 150, 8) == (2, 50, True)  # 3 MFLOP: pieces of >= 1 MFLOP
    assert P._pieces(100, 100, 90, 8)[0] == 1  # 1.8 MFLOP: one piece
    assert P._pieces(40, 5000, 2000, 8) == (8, 625, False)
    assert P._pieces(20, 40, 5000, 8) == (2, 20, False)  # pieces of >= 16 columns


def test_what_it_does_not_take_is_numpys():
    out = np.empty((4, 4), np.float32)
    small = np.ones((4, 4), np.float32)
    assert P.matmul(small, small, out) is out and np.all(out == 4)  # below OpenBLAS's threads
    ints = np.arange(400 * 400).reshape(400, 400) % 7
    got = np.empty((400, 400), ints.dtype)
    P.matmul(ints, ints, got)
    assert np.array_equal(got, ints @ ints)  # integers stay integers
    assert P._plan(ints, ints, got, 2) is None
    strided = np.ones((400, 800), np.float32)[:, ::2]  # neither by rows nor by columns
    assert P._plan(strided, strided, np.empty((400, 400), np.float32), 2) is None
    res = np.empty((400, 400), np.float32)
    P.matmul(strided, strided, res)  # taken after a contiguous copy
    assert np.all(res == 400)


def test_a_non_contiguous_out_is_written():
    rng = np.random.default_rng(2)
    a, b = _case(rng, (300, 200), (200, 100), np.float64)
    big = np.zeros((100, 300))
    P.matmul(a, b, big.T)
    _assert_product(big.T, a, b)


def test_non_finite_entries_propagate_as_numpys():
    a = np.ones((300, 200), np.float32)
    b = np.ones((200, 100), np.float32)
    a[5, 7], b[3, 9] = np.inf, np.nan
    out = np.empty((300, 100), np.float32)
    P.matmul(a, b, out)
    want = a @ b  # column 9 NaN, the rest of row 5 inf, 200 elsewhere
    assert np.isnan(out).sum() == 300 and np.isinf(out).sum() == 99
    assert np.array_equal(out, want, equal_nan=True)


def test_the_same_bits_on_one_thread_as_over_the_pool(monkeypatch):
    """A plan's pieces give the same bits whether the serial loop (one thread) or the parallel
    one runs them, and the public call gives them; on one numba thread the call is NumPy's.
    (The register-blocked products, which take some of these shapes, have their own tests.)"""
    monkeypatch.setattr(P, "BLOCKED", False)
    rng = np.random.default_rng(3)
    for shapes in SHAPES[:4]:
        a, b = _case(rng, *shapes, np.float32, b_cols=True)
        want = np.matmul(a, b)
        _assert_product(P.matmul(a, b, np.empty_like(want)), a, b)
        outs = []
        threads = max(2, numba.get_num_threads())
        for loop in (P._serial, P._parallel):
            out = np.empty_like(want)
            units, single, *rest = P._plan(a, b, out, threads)
            with gemm.one_blas_thread():
                loop(units, single, a.ctypes.data, b.ctypes.data, out.ctypes.data, *rest)
            outs.append(out)
        assert np.array_equal(outs[0], outs[1])
        before = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            one = P.matmul(a, b, np.empty_like(want))
        finally:
            numba.set_num_threads(before)
        # NumPy's product, a weight over a batch as one GEMM over all its rows (OpenBLAS's
        # AVX2 kernels round a batch of products differently from one over the merged rows)
        merged = a.ndim == 3 and b.ndim == 2
        numpy = np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(want.shape) if merged else want
        assert np.array_equal(one, numpy)
        if before > 1:
            assert np.array_equal(P.matmul(a, b, np.empty_like(want)), outs[0])


def test_openblas_gets_its_thread_count_back():
    _, getter = gemm._THREADS
    before = getter()
    a = np.ones((400, 300), np.float32)
    P.matmul(a, a.T, np.empty((400, 400), np.float32))
    assert getter() == before


BOUND_SHAPES = [
    *SHAPES,
    ((20, 30), (30, 10)),  # under OpenBLAS's own threading: NumPy's call
    ((100, 200), (200, 64)),  # 2-4 MFLOP: two pieces, or one BLAS thread
    ((4, 20, 30), (30, 10)),  # a small weight over a batch
]


@pytest.mark.parametrize("shapes", BOUND_SHAPES)
@pytest.mark.parametrize("b_cols", [False, True])
def test_a_bound_product_gives_the_calls_bits_at_every_thread_count(shapes, b_cols):
    """``bind_matmul`` (what a compiled plan replays) writes the bits ``matmul`` writes, bound
    at one thread count and called at another too: it follows the count of each call."""
    rng = np.random.default_rng(4)
    a, b = _case(rng, *shapes, np.float32, b_cols=b_cols)
    out = np.full(np.matmul(a, b).shape, np.nan, np.float32)
    before = numba.get_num_threads()
    counts = sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)})
    try:
        for bound_at in counts:
            numba.set_num_threads(bound_at)
            call = P.bind_matmul(a, b, out)
            for called_at in counts:
                numba.set_num_threads(called_at)
                want = P.matmul(a, b, np.empty_like(out))
                out.fill(np.nan)
                call()
                assert np.array_equal(out, want), (bound_at, called_at)
                a *= 1.5  # the call reads the arrays as they are now, not as when bound
                call()
                assert np.array_equal(out, P.matmul(a, b, np.empty_like(out)))
    finally:
        numba.set_num_threads(before)


def test_a_compiled_plan_replays_bound_products():
    """A traced step's products are bound once: its program calls them directly, and the
    plan's results are the eager step's bits."""
    import tapegrad as tg

    rng = np.random.default_rng(5)
    w = tg.tensor(rng.standard_normal((128, 300)).astype(np.float32), requires_grad=True)

    def step(x):
        w.grad = None
        loss = (x @ w.T).relu().sum()
        loss.backward()
        return loss

    compiled = tg.compile(step)
    x = rng.standard_normal((200, 300)).astype(np.float32)
    for _ in range(3):
        compiled(x)
    (plan,) = compiled.all_plans
    calls = [f for f, label in zip(plan.program, plan.labels) if label.startswith("matmul")]
    assert calls
    names = {getattr(f, "__name__", None) or getattr(f.func, "__name__", "") for f in calls}
    assert "_matmul" not in names  # not the primitive's forward: its bound call
    got = w.grad.copy()
    step(tg.tensor(x))
    np.testing.assert_array_equal(got, w.grad)


# -- register-blocked products (16 x 16 blocks: ``microkernels.product_block``) -------------------
BLOCKED_CASES = [  # (a, b): 2 MFLOP or more, at least 16 columns, a up to 512 KiB
    (lambda r: r((100, 784)), lambda r: r((128, 784)).T),  # a Linear's x @ W.T: b turned
    (lambda r: r((100, 128)).T, lambda r: r((100, 784))),  # its weight gradient g.T @ x
    (lambda r: r((6, 50, 80)), lambda r: r((80, 64))),  # a weight over a batch
    (lambda r: r((37, 600)), lambda r: r((600, 48))),  # rows past the last block of 16
    (lambda r: r((64, 300)), lambda r: r((300, 96))[:, :64]),  # b's rows with gaps
    (lambda r: r((400, 64)).T, lambda r: r((400, 196))),  # 196 columns: the last block's 4
    (lambda r: r((100, 1014)), lambda r: r((84, 1014)).T),  # 84 columns of a turned W.T
]


@pytest.fixture
def blocked(monkeypatch):
    """The blocked products taken wherever they apply (on any CPU: without AVX-512 they run,
    slower, and their arithmetic is the same)."""
    monkeypatch.setattr(P, "BLOCKED", True)


@pytest.mark.parametrize("case", range(len(BLOCKED_CASES)))
def test_blocked_products_give_the_product_with_the_same_bits_on_any_thread_count(case, blocked):
    rng = np.random.default_rng(7)

    def draw(shape):
        return rng.standard_normal(shape).astype(np.float32)

    make_a, make_b = BLOCKED_CASES[case]
    a, b = make_a(draw), make_b(draw)
    out = np.full(np.matmul(a, b).shape, np.nan, np.float32)
    run = P._blocked(a, b, out)
    assert run is not None
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        run()
        _assert_product(out, a, b)
        pool = out.copy()
        out.fill(np.nan)
        numba.set_num_threads(1)
        run()  # the serial loop: each entry summed by one thread, in K's order
        assert pool.tobytes() == out.tobytes()
        for count in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(count)  # the call and a bound call take the blocks at any count
            assert P.matmul(a, b, np.empty_like(out)).tobytes() == pool.tobytes()
            bound = np.empty_like(out)
            P.bind_matmul(a, b, bound)()
            assert bound.tobytes() == pool.tobytes()
    finally:
        numba.set_num_threads(before)


def test_blocked_products_propagate_non_finite_entries_as_numpys(blocked):
    a = np.ones((100, 200), np.float32)
    b = np.ones((64, 200), np.float32)
    a[5, 7], b[9, 3] = np.inf, np.nan
    out = np.empty((100, 64), np.float32)
    P._blocked(a, b.T, out)()
    assert np.array_equal(out, a @ b.T, equal_nan=True)


def test_what_the_blocked_products_do_not_take(blocked, monkeypatch):
    def take(a_shape, b_shape, dtype=np.float32):
        a, b = np.ones(a_shape, dtype), np.ones(b_shape, dtype)
        return P._blocked(a, b, np.empty((a_shape[0], b_shape[1]), dtype)) is not None

    assert take((100, 784), (784, 128)) and take((100, 784), (784, 120))
    assert not take((100, 784), (784, 10))  # fewer columns than a block
    assert not take((64, 200), (200, 64))  # under 2 MFLOP: OpenBLAS on the calling thread
    assert not take((100, 784), (784, 128), np.float64)
    assert not take((2048, 128), (128, 384))  # a past 512 KiB: OpenBLAS packs it better
    a, b = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    assert P._blocked(a, b, np.empty((64, 128), np.float32)[:, :64]) is None  # out with gaps
    monkeypatch.setattr(P, "BLOCKED", False)  # no AVX-512 (``microkernels.WIDE``)
    assert not take((100, 784), (784, 128))
