"""3x3 stride-1 convolutions by Winograd's minimal filtering, F(2x2, 3x3), over numba's threads.

An output tile of 2x2 is computed from a 4x4 input tile d and the 3x3 kernel w as
``Y = A^T [(G w G^T) * (B^T d B)] A`` (``*`` elementwise): 16 multiplications instead of 36.
Over a batch the 16 elementwise products become 16 matrix products, one per position xi of the
4x4 transformed tile, ``M[xi] (T, O) = V[xi] (T, C) @ U[xi] (C, O)`` over T tiles, which
single-threaded OpenBLAS runs at its rate (``gemm.py``): 2.25x fewer multiplies than the
direct convolution's, for transforms of the input and output tiles (a few additions an entry,
in passes over contiguous runs that LLVM vectorises: the tiles are laid out channels last).

* ``wino_forward(x, w, res, padding, scratch)``: ``res`` (N, O, OH, OW) <- conv(x, w) at
  stride 1, ``padding`` (top, left) (the bottom and right follow from the shapes).
* ``wino_input(g, w, gx, padding, scratch)``: ``gx`` <- its adjoint in x: the forward of g
  with the kernel flipped and its channels swapped, padded by 2 - padding.
* ``wino_weight(x, g, gw, padding, scratch)``: ``gw`` (O, C, 3, 3) <- the weight's gradient,
  the chain rule through the same computation: ``dU[xi] = dM[xi]^T @ V[xi]`` summed over the
  tiles, ``dM = A dY A^T``, ``gw = G^T dU G``.

The images go in fixed chunks (a function of the batch and image size alone) of about
``TILES`` tiles, each chunk computed whole by one thread, and the weight gradient's per-chunk
sums are added in chunk order: serial and parallel runs give the same bits.

The transforms add and subtract: an inf in an operand meets another as inf - inf (NaN) where
the direct convolution gives inf. The copies into the tiles' layout note any inf or NaN they
meet, and such a call returns False: its caller (``conv2d.py``) then runs the image-by-image
kernels, whose results are the references' there. The result differs from the direct
convolution's by rounding (relative ~1e-6 in float32: the transforms' additions), so only
float32 takes this path; float64, whose users want the direct sums, keeps them.
"""

from __future__ import annotations

import numpy as np

from . import gemm as _gemm

# tiles of a chunk (the matrix products' width): ~2-4 chunks per thread on the ResNet's layers
TILES = 128
# from how many transformed entries (all images together) the chunks are split over numba's threads
PARALLEL_MIN_SIZE = 1 << 16
# from how many input and output channels (each) the transform pays for itself: at 16 the
# products are short (K = 16) and memory-bound
MIN_CHANNELS = 32


def applies(x_dtype, w_shape, stride, dilation, groups: int) -> bool:
    """Whether a convolution of this kind runs here: float32, ungrouped, 3x3, stride 1,
    dilation 1, at least ``MIN_CHANNELS`` input and output channels."""
    return (
        AVAILABLE
        and np.dtype(x_dtype) == np.float32
        and groups == 1
        and len(w_shape) == 4
        and tuple(w_shape[2:]) == (3, 3)
        and min(w_shape[:2]) >= MIN_CHANNELS
        and tuple(stride) == (1, 1)
        and tuple(dilation) == (1, 1)
    )


# the most transformed entries of one image (tiles x the larger channel count) taken here: a
# chunk holds at least one image, and its buffers (16 entries a tile and channel, for the input
# and the products, a thread each) grow with it; larger images keep the image-by-image kernels
MAX_IMAGE_ENTRIES = 1 << 17  # 8 MiB of float32 a buffer a thread (64 channels at 90x90)


def fits(out_shape, channels: int) -> bool:
    """Whether an image with output ``out_shape`` (OH, OW) and the larger of its input and
    output channel counts ``channels`` fits the chunks' buffers (``MAX_IMAGE_ENTRIES``)."""
    tiles = -(-out_shape[0] // 2) * -(-out_shape[1] // 2)
    return tiles * channels <= MAX_IMAGE_ENTRIES


def chunking(n: int, tiles_per_image: int) -> tuple[int, int]:
    """(the most images in a chunk, chunks): about ``TILES`` tiles a chunk, an even count of
    chunks where there are two or more (two threads share them evenly), chunk k the images
    ``k * n // chunks`` to ``(k + 1) * n // chunks``; a function of the shapes alone."""
    chunks = max(1, round(n * tiles_per_image / TILES))
    chunks = min(n, chunks + chunks % 2 if chunks > 1 else chunks)
    return -(-n // chunks), chunks


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

AVAILABLE = numba is not None and _gemm.AVAILABLE

if AVAILABLE:
    from ..jit import cached_jit
    from .gemm import NO_TRANS, TRANS, gemm, one_blas_thread
    from .loops import thread_loops, threaded

    _opts = dict(boundscheck=False, nogil=True)

    @cached_jit(inline="always", **_opts)
    def _g3(a0, a1, a2):  # pragma: no cover - compiled
        """G (4x3) applied to a 3-vector, in float64 (rounded once where it is stored)."""
        a0, a1, a2 = np.float64(a0), np.float64(a1), np.float64(a2)
        return a0, (a0 + a1 + a2) * 0.5, (a0 - a1 + a2) * 0.5, a2

    @cached_jit(**_opts)
    def _transform_weight(w, u, adjoint):  # pragma: no cover - compiled
        """u (16, C, O) <- G w[o, c] G^T, or (``adjoint``) u (16, O, C) <- G w'[c, o] G^T for the
        kernel flipped in both axes, w'[c, o, i, j] = w[o, c, 2 - i, 2 - j] (the rows of u are
        the product's inputs, its columns the outputs). Returns whether w holds an inf or NaN."""
        bad = False
        for o in range(w.shape[0]):
            for c in range(w.shape[1]):
                k = w[o, c]
                for i in range(3):
                    for j in range(3):
                        bad |= k[i, j] - k[i, j] != 0
                if adjoint:
                    r = (_g3(k[2, 2], k[2, 1], k[2, 0]), _g3(k[1, 2], k[1, 1], k[1, 0]),
                         _g3(k[0, 2], k[0, 1], k[0, 0]))  # fmt: skip
                else:
                    r = (_g3(k[0, 0], k[0, 1], k[0, 2]), _g3(k[1, 0], k[1, 1], k[1, 2]),
                         _g3(k[2, 0], k[2, 1], k[2, 2]))  # fmt: skip
                for j in range(4):
                    col = _g3(r[0][j], r[1][j], r[2][j])
                    for i in range(4):
                        if adjoint:
                            u[i * 4 + j, o, c] = col[i]
                        else:
                            u[i * 4 + j, c, o] = col[i]
        return bad

    # Every transform below is a sequence of passes over contiguous runs with at most three
    # operands and one result: loops LLVM vectorises (a loop over one tile's 16 values, each
    # from its own address, it leaves scalar: too many addresses to check for overlap).
    @cached_jit(inline="always", **_opts)
    def _sub(a, b, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = a[k] - b[k]

    @cached_jit(inline="always", **_opts)
    def _add(a, b, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = a[k] + b[k]

    @cached_jit(inline="always", **_opts)
    def _add3(a, b, c, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = a[k] + b[k] + c[k]

    @cached_jit(inline="always", **_opts)
    def _sub3(a, b, c, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = a[k] - b[k] - c[k]

    @cached_jit(inline="always", **_opts)
    def _neg(a, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = -a[k]

    @cached_jit(inline="always", **_opts)
    def _neg_add(a, b, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = -(a[k] + b[k])

    @cached_jit(inline="always", **_opts)
    def _copy(a, out):  # pragma: no cover - compiled
        for k in range(out.size):
            out[k] = a[k]

    @cached_jit(inline="always", **_opts)
    def _fill(x, n, xp, pt, pl):  # pragma: no cover - compiled
        """xp (HP, 2, WP/2, C), image n of x (N, C, H, W) zero-padded at (pt, pl) (cropped where
        that is negative or the image overhangs), channels last and each row's columns split
        by parity (column 2m + p at [p, m]): the tiles' column pairs are then contiguous runs.
        The border is never written (zero). Returns whether the image holds an inf or NaN
        (v - v is 0 for every finite v) that the copy met."""
        h0, w0 = max(0, -pt), max(0, -pl)
        h1, w1 = min(x.shape[2], xp.shape[0] - pt), min(x.shape[3], 2 * xp.shape[2] - pl)
        bad = False
        for c in range(x.shape[1]):  # x read in order (from memory), xp written across (cached)
            for i in range(h0, h1):
                src, dst = x[n, c, i], xp[pt + i]
                for j in range(w0, w1):
                    v = src[j]
                    dst[(pl + j) % 2, (pl + j) // 2, c] = v
                    bad |= v - v != 0
        return bad

    @cached_jit(inline="always", **_opts)
    def _input_tiles(xp, z, v, base, th_, tw_, c_):  # pragma: no cover - compiled
        """v (16, T, C) <- B^T d B at tiles base + th*TW + tw for each 4x4 tile d at (2th, 2tw)
        of xp (HP, 2, TW + 1, C): B^T along the rows into z (4, 2, TW + 1, C), then along the
        columns. Every array flat, every run a 1-d slice of it (no reshape: numba's costs a
        call)."""
        row, half, run = 2 * (tw_ + 1) * c_, (tw_ + 1) * c_, tw_ * c_
        plane = v.size // 16
        z0, z1, z2, z3 = z[:row], z[row : 2 * row], z[2 * row : 3 * row], z[3 * row :]
        for th in range(th_):
            r = 2 * th * row
            x0, x1 = xp[r : r + row], xp[r + row : r + 2 * row]
            x2, x3 = xp[r + 2 * row : r + 3 * row], xp[r + 3 * row : r + 4 * row]
            _sub(x0, x2, z0)
            _add(x1, x2, z1)
            _sub(x2, x1, z2)
            _sub(x1, x3, z3)
            t = (base + th * tw_) * c_
            for i in range(4):
                zi = i * row
                e0, e1 = z[zi : zi + run], z[zi + c_ : zi + c_ + run]  # columns 2tw, 2tw + 2
                o0, o1 = z[zi + half : zi + half + run], z[zi + half + c_ : zi + half + c_ + run]
                q = 4 * i * plane + t
                _sub(e0, e1, v[q : q + run])
                _add(o0, e1, v[q + plane : q + plane + run])
                _sub(e1, o0, v[q + 2 * plane : q + 2 * plane + run])
                _sub(o0, o1, v[q + 3 * plane : q + 3 * plane + run])

    @cached_jit(inline="always", **_opts)
    def _output_tiles(m, s, size):  # pragma: no cover - compiled
        """m's first four planes (2a + b) <- the output entry (a, b) of every tile, A^T m A, for
        m (16, T, O) flat over its first ``size`` entries a plane: A^T along the columns into
        s (8, T, O), then along the rows."""
        pm, ps = m.size // 16, s.size // 8

        def mp(k):
            return m[k * pm : k * pm + size]

        def sp(k):
            return s[k * ps : k * ps + size]

        for i in range(4):
            _add3(mp(4 * i), mp(4 * i + 1), mp(4 * i + 2), sp(2 * i))
            _sub3(mp(4 * i + 1), mp(4 * i + 2), mp(4 * i + 3), sp(2 * i + 1))
        for b in range(2):
            _add3(sp(b), sp(2 + b), sp(4 + b), mp(b))
            _sub3(sp(2 + b), sp(4 + b), sp(6 + b), mp(2 + b))

    @cached_jit(inline="always", **_opts)
    def _unfill(y, res, n, base):  # pragma: no cover - compiled
        """res[n] (O, OH, OW) <- the output entries y (4, T, O) of image n's tiles from ``base``
        (entries past OH, OW dropped)."""
        oh_, ow_ = res.shape[2], res.shape[3]
        tw_ = -(-ow_ // 2)
        for o in range(res.shape[1]):
            for i in range(oh_):
                dst = res[n, o, i]
                row = y[2 * (i % 2) :, base + (i // 2) * tw_ :]
                for j in range(ow_):
                    dst[j] = row[j % 2, j // 2, o]

    @cached_jit(inline="always", **_opts)
    def _gradient_fill(g, n, gb, base):  # pragma: no cover - compiled
        """gb[2a + b, base + th*TW + tw, o] <- g[n, o, 2th + a, 2tw + b] (what lies past OH, OW is
        never written: zero). Returns whether g[n] holds an inf or NaN."""
        oh_, ow_ = g.shape[2], g.shape[3]
        tw_ = -(-ow_ // 2)
        bad = False
        for o in range(g.shape[1]):
            for i in range(oh_):
                src = g[n, o, i]
                row = gb[2 * (i % 2) :, base + (i // 2) * tw_ :]
                for j in range(ow_):
                    v = src[j]
                    row[j % 2, j // 2, o] = v
                    bad |= v - v != 0
        return bad

    @cached_jit(inline="always", **_opts)
    def _gradient_tiles(gb, p, dm, size):  # pragma: no cover - compiled
        """dm (16, T, O) <- A y A^T for every tile y of gb (4, T, O) (its entry (a, b) at 2a + b),
        each flat over its first ``size`` entries a plane: A along the columns (the rows of
        A y: y0, y0 + y1, y0 - y1, -y1), then A^T along the rows (p, p + q, p - q, -q), p (2,
        T, O) a buffer."""
        pg, pm = gb.size // 4, dm.size // 16

        def f(k):
            return dm[k * pm : k * pm + size]

        y00, y01 = gb[:size], gb[pg : pg + size]
        y10, y11 = gb[2 * pg : 2 * pg + size], gb[3 * pg : 3 * pg + size]
        p0, p1 = p[:size], p[p.size // 2 : p.size // 2 + size]
        _copy(y00, f(0))
        _add(y00, y01, f(1))
        _sub(y00, y01, f(2))
        _neg(y01, f(3))
        for r in range(1, 3):
            if r == 1:
                _add(y00, y10, p0)
                _add(y01, y11, p1)
            else:
                _sub(y00, y10, p0)
                _sub(y01, y11, p1)
            _copy(p0, f(4 * r))
            _add(p0, p1, f(4 * r + 1))
            _sub(p0, p1, f(4 * r + 2))
            _neg(p1, f(4 * r + 3))
        _neg(y10, f(12))
        _neg_add(y10, y11, f(13))
        _sub(y11, y10, f(14))
        _copy(y11, f(15))

    @cached_jit(inline="always", **_opts)
    def _span(xp, n, chunks, k):  # pragma: no cover - compiled
        """(tile rows, tile columns, first image, past the last image) of chunk k."""
        return xp.shape[0] // 2 - 1, xp.shape[2] - 1, k * n // chunks, (k + 1) * n // chunks

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _forward_chunk(
        tid, x, u, res, bad, xps, zs, vs, ms, ss, pt, pl, chunks, k
    ):  # pragma: no cover
        xp, v, m = xps[tid], vs[tid], ms[tid]
        th_, tw_, first, last = _span(xp, x.shape[0], chunks, k)
        for n in range(first, last):
            if _fill(x, n, xp, pt, pl):
                bad[k] = True
                return  # the caller computes the whole result another way
            _input_tiles(xp.ravel(), zs[tid].ravel(), v.ravel(), (n - first) * th_ * tw_, th_,
                         tw_, x.shape[1])  # fmt: skip
        c_, o_, width = u.shape[1], u.shape[2], (last - first) * th_ * tw_
        for xi in range(16):  # M[xi] (T, O) = V[xi] (T, C) @ U[xi] (C, O)
            gemm(NO_TRANS, NO_TRANS, width, o_, c_, 1.0, v[xi], c_, u[xi], o_, 0.0, m[xi], o_)
        _output_tiles(m.reshape(-1), ss[tid].reshape(-1), width * o_)
        for n in range(first, last):
            _unfill(m, res, n, (n - first) * th_ * tw_)

    @cached_jit(**_opts)  # called through thread_loops: not inlined
    def _weight_chunk(
        tid, x, g, parts, bad, xps, zs, vs, ms, ss, pt, pl, chunks, k
    ):  # pragma: no cover
        xp, v, dm = xps[tid], vs[tid], ms[tid]
        gb, p = ss[tid, :4], ss[tid, 4:6]  # g's tiles, the transform's halfway values
        th_, tw_, first, last = _span(xp, x.shape[0], chunks, k)
        for n in range(first, last):
            at = (n - first) * th_ * tw_
            if _fill(x, n, xp, pt, pl) or _gradient_fill(g, n, gb, at):
                bad[k] = True
                return  # the caller computes the whole result another way
            _input_tiles(xp.ravel(), zs[tid].ravel(), v.ravel(), at, th_, tw_, x.shape[1])
        c_, o_, width = x.shape[1], g.shape[1], (last - first) * th_ * tw_
        _gradient_tiles(gb.reshape(-1), p.reshape(-1), dm.reshape(-1), width * o_)
        for xi in range(16):  # dU[xi] (O, C) = dM[xi]^T (O, T) @ V[xi] (T, C)
            gemm(TRANS, NO_TRANS, o_, c_, width, 1.0, dm[xi], o_, v[xi], c_, 0.0, parts[k, xi], c_)

    @cached_jit(inline="always", **_opts)
    def _gt(d0, d1, d2, d3):  # pragma: no cover - compiled
        """G^T (3x4) applied to a 4-vector, in float64 (rounded once where it is stored)."""
        d0, d1, d2, d3 = np.float64(d0), np.float64(d1), np.float64(d2), np.float64(d3)
        return d0 + (d1 + d2) * 0.5, (d1 - d2) * 0.5, (d1 + d2) * 0.5 + d3

    @cached_jit(**_opts)
    def _weight_from(parts, gw):  # pragma: no cover - compiled
        """gw[o, c] <- G^T du[:, o, c] G for du the chunks' sum of parts (K, 16, O, C), added in
        chunk order (into parts[0])."""
        du, flat = parts[0], parts.reshape(parts.shape[0], -1)
        total = flat[0]
        for k in range(1, flat.shape[0]):
            _add(total, flat[k], total)
        for o in range(gw.shape[0]):
            for c in range(gw.shape[1]):
                c0 = _gt(du[0, o, c], du[4, o, c], du[8, o, c], du[12, o, c])
                c1 = _gt(du[1, o, c], du[5, o, c], du[9, o, c], du[13, o, c])
                c2 = _gt(du[2, o, c], du[6, o, c], du[10, o, c], du[14, o, c])
                c3 = _gt(du[3, o, c], du[7, o, c], du[11, o, c], du[15, o, c])
                for i in range(3):
                    r = _gt(c0[i], c1[i], c2[i], c3[i])
                    for j in range(3):
                        gw[o, c, i, j] = r[j]

    _forward, _forward_parallel = thread_loops(_forward_chunk, **_opts)
    _weight, _weight_parallel = thread_loops(_weight_chunk, **_opts)

    def _buffers(scratch, key, threads, shape, dtype, zero=False):
        shape = (threads, *shape)
        a = np.empty(shape, dtype) if scratch is None else scratch(key, shape)
        if zero:
            a.fill(0)
        return a

    def _plan(x_shape, out_shape, c, o, dtype, scratch):
        """The chunks, threads and per-thread buffers of one call: the padded image (HP, 2,
        WP/2, C) and its rows' transform (4, 2, WP/2, C), the transformed tiles (16, T, C) and
        their products (16, T, O), and the output transform's halfway values (8, T, O) (the
        weight gradient's tiles of g, zero past OH and OW, and their halfway values)."""
        n = x_shape[0]
        th, tw = -(-out_shape[0] // 2), -(-out_shape[1] // 2)
        per, chunks = chunking(n, th * tw)
        count = numba.get_num_threads()  # asked at every size: the same calls (tests count)
        threads = count if threaded(chunks, n * c * th * tw * 16, PARALLEL_MIN_SIZE) else 1
        t = per * th * tw
        ragged = out_shape[0] % 2 or out_shape[1] % 2
        return (
            chunks,
            threads,
            _buffers(scratch, "wino_xp", threads, (2 * th + 2, 2, tw + 1, c), dtype, zero=True),
            _buffers(scratch, "wino_z", threads, (4, 2, tw + 1, c), dtype),
            _buffers(scratch, "wino_v", threads, (16, t, c), dtype),
            _buffers(scratch, "wino_m", threads, (16, t, o), dtype),
            _buffers(scratch, "wino_s", threads, (8, t, o), dtype, zero=ragged),
        )

    def _transformed(w, adjoint, scratch):
        """w's transform (16, C, O), or (``adjoint``) its adjoint's (16, O, C); None where w holds
        an inf or NaN."""
        o, c = w.shape[:2]
        shape, key = ((16, o, c), "wino_ut") if adjoint else ((16, c, o), "wino_u")
        u = np.empty(shape, w.dtype) if scratch is None else scratch(key, shape)
        return None if _transform_weight(np.ascontiguousarray(w), u, adjoint) else u

    def _run_forward(x, u, res, pt, pl, scratch) -> bool:
        if u is None:
            return False
        x = np.ascontiguousarray(x)
        plan = _plan(x.shape, res.shape[2:], u.shape[1], u.shape[2], x.dtype, scratch)
        bad = np.zeros(plan[0], np.bool_)
        run = _forward_parallel if plan[1] > 1 else _forward
        with one_blas_thread():
            run(plan[0], x, u, res, bad, *plan[2:], pt, pl, plan[0])
        return not bad.any()

    def wino_forward(x, w, res, padding, scratch=None) -> bool:
        """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w) at stride 1 (the module); False
        (``res`` then holds anything) where x or w holds an inf or NaN."""
        return _run_forward(x, _transformed(w, False, scratch), res, *padding, scratch)

    def wino_input(g, w, gx, padding, scratch=None) -> bool:
        """``gx`` (N, C, H, W, C-contiguous) <- the adjoint of the convolution in x applied to
        g; False (``gx`` then holds anything) where g or w holds an inf or NaN."""
        u = _transformed(w, True, scratch)
        return _run_forward(g, u, gx, 2 - padding[0], 2 - padding[1], scratch)

    def wino_weight(x, g, gw, padding, scratch=None) -> bool:
        """``gw`` (O, C, 3, 3, C-contiguous) <- the weight's gradient of conv(x, w) for g; False
        (``gw`` untouched) where x or g holds an inf or NaN."""
        x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
        c, o = x.shape[1], g.shape[1]
        plan = _plan(x.shape, g.shape[2:], c, o, x.dtype, scratch)
        chunks = plan[0]
        shape = (chunks, 16, o, c)
        parts = np.empty(shape, x.dtype) if scratch is None else scratch("wino_parts", shape)
        bad = np.zeros(chunks, np.bool_)
        run = _weight_parallel if plan[1] > 1 else _weight
        with one_blas_thread():
            run(chunks, x, g, parts, bad, *plan[2:], padding[0], padding[1], chunks)
        if bad.any():
            return False
        _weight_from(parts, gw)  # the chunks in order: the same bits on any thread count
        return True
