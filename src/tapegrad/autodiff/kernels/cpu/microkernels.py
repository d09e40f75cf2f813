"""Inner loops written in LLVM's IR (numba intrinsics), for float32 kernels whose accumulators
must stay in vector registers (numba's own loops keep them in memory) or whose lanes must be
shuffled (numba's loops over strided entries run scalar):

* ``window_block`` (``window_block8``): 16 (8) output channels by 16 consecutive positions,
  summed over taps whose windows start at ``offs`` (one vector load and 16 (8) fused
  multiply-adds a tap, the channels' weights broadcast from memory); the positions past
  ``count`` masked (neither read nor written), the channels past ``stored`` not stored. The
  direct convolution's forward (``direct.py``).
* ``product_block``: 16 rows by 16 columns of a product ``A @ B`` over a 2-level range of K
  (rows of A start at ``offs``; B's rows are contiguous vectors), onto what the output holds
  or from zero: the direct convolution's weight gradient. (Winograd's products, K = 32 or 64
  over 128 tiles, ran no faster this way than in OpenBLAS, with the same bits: its kernel
  sums K in order too.)
* ``window_dots``: 16-lane sums of 6 channels' output gradients times 3 taps' windows over
  whole rows of an image: the weight gradient for few input channels and output channels not
  in sixteens (``direct.py``).
* ``transposed``: a 16 x 16 block of a row-major array turned in registers (four rounds of
  two-vector shuffles).
* ``pool_pairs`` / ``unpool_pairs``: 2x2 max pooling at stride 2 along a row pair, 16 windows
  a step (each column's larger row, then the even and odd columns split by two shuffles), and
  its backward (the gradients interleaved back by two shuffles): ``pool.py``'s pairs.
* ``nonzeros``, ``runs_weight`` / ``runs_input``: a row's nonzero offsets, 16 entries a step,
  and through them one run of every window (up to ``RUN_VECTORS`` vectors, unrolled, held in
  registers): the weight gradient's run summed, the input gradient's windows updated; the
  sparse convolution backward (``conv.py``).

Every call's arithmetic is fixed by its arguments (the same order of additions on any thread),
so kernels built on them give the same bits serial and parallel. ``WIDE``: whether numba
compiles for AVX-512, where a block's 16 accumulators fit the 32 vector registers; elsewhere
they are split in two and spill, and the callers' rules keep their other kernels.
"""

from __future__ import annotations

from contextlib import contextmanager

# lanes of a vector (float32 in a 512-bit register): the rows, columns and channels of a block
LANES = 16

try:
    import numba
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic
except ImportError:  # pragma: no cover
    numba = None

AVAILABLE = numba is not None


def _wide_vectors() -> bool:
    """Whether numba compiles for a CPU with AVX-512 (16 float32 lanes a register): elsewhere
    a block's 16 accumulators take two registers each, more than there are, and spill."""
    if not AVAILABLE:
        return False
    if numba.config.CPU_FEATURES is not None:
        return "+avx512f" in numba.config.CPU_FEATURES
    if numba.config.CPU_NAME not in (None, "host"):
        return False
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512f", False))


WIDE = _wide_vectors()

if AVAILABLE:
    _F32 = ir.FloatType()
    _VEC = ir.VectorType(_F32, LANES)
    _I32 = ir.IntType(32)
    _MASK = ir.VectorType(ir.IntType(1), LANES)
    _ZERO = ir.Constant(_VEC, [0.0] * LANES)

    def _data(context, builder, aty, value):
        """The data pointer of the array ``value`` of numba type ``aty``."""
        return cgutils.create_struct_proxy(aty)(context, builder, value=value).data

    def _pointers(context, builder, sig, args, *which):
        """The data pointers of the array arguments at positions ``which``."""
        return [_data(context, builder, sig.args[k], args[k]) for k in which]

    def _fma(builder, a, b, c):
        fnty = ir.FunctionType(_VEC, [_VEC, _VEC, _VEC])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.v16f32")
        return builder.call(fn, [a, b, c])

    def _splat(builder, value):
        """A vector of ``LANES`` copies of the scalar ``value``."""
        one = builder.insert_element(
            ir.Constant(ir.VectorType(value.type, LANES), ir.Undefined), value, _I32(0)
        )
        return builder.shuffle_vector(
            one,
            ir.Constant(one.type, ir.Undefined),
            ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES),
        )

    def _vector_at(builder, base, index):
        return builder.bitcast(builder.gep(base, [index]), _VEC.as_pointer())

    def _first(builder, count):
        """The mask of the lanes below ``count`` (an int64)."""
        lanes = ir.Constant(ir.VectorType(count.type, LANES), list(range(LANES)))
        return builder.icmp_signed("<", lanes, _splat(builder, count))

    def _masked_load(builder, ptr, mask):
        """The lanes of mask from ``ptr``, zero elsewhere (their memory not read)."""
        fnty = ir.FunctionType(_VEC, [_VEC.as_pointer(), _I32, _MASK, _VEC])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.load.v16f32.p0")
        return builder.call(fn, [ptr, _I32(4), mask, _ZERO])

    def _masked_store(builder, value, ptr, mask):
        fnty = ir.FunctionType(ir.VoidType(), [_VEC, _VEC.as_pointer(), _I32, _MASK])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.store.v16f32.p0")
        builder.call(fn, [value, ptr, _I32(4), mask])

    def _float32_c(*arrays) -> bool:
        return all(
            isinstance(a, types.Array) and a.dtype == types.float32 and a.layout == "C"
            for a in arrays
        )

    def _window(channels: int):
        """The ``window_block`` intrinsic with ``channels`` accumulators (16 or 8)."""

        @intrinsic
        def window(typingctx, x, start, offs, w, out, at, pitch, count, stored):
            if not (_float32_c(x, w, out) and isinstance(offs, types.Array)):
                return None
            sig = types.void(x, start, offs, w, out, at, pitch, count, stored)

            def codegen(context, builder, sig, args):
                xa, start, oa, wa, ra, at, pitch, count, stored = args
                xd, od, wd, rd = _pointers(context, builder, sig, args, 0, 2, 3, 4)
                taps = cgutils.create_struct_proxy(sig.args[2])(context, builder, value=oa).nitems
                mask = _first(builder, count)
                accs = [cgutils.alloca_once_value(builder, _ZERO) for _ in range(channels)]
                with cgutils.for_range(builder, taps) as loop:
                    j = loop.index
                    off = builder.add(builder.load(builder.gep(od, [j])), start)
                    xv = _masked_load(builder, _vector_at(builder, xd, off), mask)
                    row = builder.gep(wd, [builder.mul(j, ir.Constant(j.type, channels))])
                    for o, acc in enumerate(accs):
                        at_o = builder.gep(row, [ir.Constant(j.type, o)])
                        wv = _splat(builder, builder.load(at_o))
                        builder.store(_fma(builder, wv, xv, builder.load(acc)), acc)
                for o, acc in enumerate(accs):
                    with builder.if_then(builder.icmp_signed("<", stored.type(o), stored)):
                        where = builder.add(at, builder.mul(ir.Constant(pitch.type, o), pitch))
                        slot = _vector_at(builder, rd, where)
                        _masked_store(builder, builder.load(acc), slot, mask)
                return context.get_dummy_value()

            return sig, codegen

        return window

    window_block = _window(LANES)
    window_block.__doc__ = """``out[at + o*pitch + i] = sum_j w[j*16 + o] * x[offs[j] + start +
        i]`` for i < count and o < stored (both <= 16: the other lanes neither read nor
        written, the other channels' sums not stored); offs (J,) int64, w (J*16,) float32."""
    window_block8 = _window(LANES // 2)
    window_block8.__doc__ = """``window_block`` for 8 channels: w (J*8,), o < stored <= 8."""

    def _dots(channels: int, taps: int):
        """The ``window_dots`` intrinsic for ``channels`` x ``taps`` accumulators."""

        @intrinsic
        def dots(typingctx, x, x0, xstep, offs, first, count, g, g0, gstep, gpitch, stored,
                 rows, width, acc, a0):  # fmt: skip
            if not (_float32_c(x, g, acc) and isinstance(offs, types.Array)):
                return None
            sig = types.void(
                x, x0, xstep, offs, first, count, g, g0, gstep, gpitch, stored, rows, width,
                acc, a0,
            )  # fmt: skip

            def codegen(context, builder, sig, args):
                (xa, x0, xstep, oa, first, count, ga, g0, gstep, gpitch, stored, rows, width,
                 aa, a0) = args  # fmt: skip
                xd, od, gd, ad = _pointers(context, builder, sig, args, 0, 3, 6, 13)
                i64 = x0.type
                last_tap = builder.sub(count, i64(1))
                last_row = builder.sub(stored, i64(1))
                xs, gs = [], []  # where each tap's window and each channel's plane start
                for t in range(taps):
                    tap = builder.select(builder.icmp_signed("<", i64(t), count), i64(t), last_tap)
                    off = builder.load(builder.gep(od, [builder.add(first, tap)]))
                    xs.append(builder.add(off, x0))
                for r in range(channels):
                    row = builder.select(builder.icmp_signed("<", i64(r), stored), i64(r), last_row)
                    gs.append(builder.add(g0, builder.mul(row, gpitch)))
                accs = [
                    [cgutils.alloca_once_value(builder, _ZERO) for _ in range(taps)]
                    for _ in range(channels)
                ]
                blocks = builder.sdiv(builder.add(width, i64(LANES - 1)), i64(LANES))
                with cgutils.for_range(builder, rows) as row:
                    xrow = builder.mul(row.index, xstep)
                    grow = builder.mul(row.index, gstep)
                    with cgutils.for_range(builder, blocks) as block:
                        s = builder.mul(block.index, i64(LANES))
                        mask = _first(builder, builder.sub(width, s))
                        xat = builder.add(xrow, s)
                        gat = builder.add(grow, s)
                        gv = [
                            _masked_load(
                                builder, _vector_at(builder, gd, builder.add(b, gat)), mask
                            )
                            for b in gs
                        ]
                        for t in range(taps):
                            where = _vector_at(builder, xd, builder.add(xs[t], xat))
                            xv = _masked_load(builder, where, mask)
                            for r in range(channels):
                                acc = accs[r][t]
                                builder.store(_fma(builder, gv[r], xv, builder.load(acc)), acc)
                for r in range(channels):
                    with builder.if_then(builder.icmp_signed("<", i64(r), stored)):
                        for t in range(taps):
                            with builder.if_then(builder.icmp_signed("<", i64(t), count)):
                                at = builder.add(a0, i64((r * taps + t) * LANES))
                                slot = _vector_at(builder, ad, at)
                                total = builder.fadd(
                                    builder.load(slot, align=4), builder.load(accs[r][t])
                                )
                                builder.store(total, slot, align=4)
                return context.get_dummy_value()

            return sig, codegen

        return dots

    # the weight gradient's channels and taps a call (27 accumulators of the 32 registers)
    DOT_CHANNELS, DOT_TAPS = 6, 3
    window_dots = _dots(DOT_CHANNELS, DOT_TAPS)
    window_dots.__doc__ = """For r < stored <= 3 and t < count <= 9: ``acc[a0 + (r*9 + t)*16 +
        l] +=`` the sum over rows i < ``rows`` and positions s < ``width`` with s % 16 == l, in
        that order, of ``g[g0 + r*gpitch + i*gstep + s] * x[offs[first + t] + x0 + i*xstep +
        s]``: 16 lanes of the dot products of 3 channels' output gradients with 9 taps' windows
        (the channels and taps past ``stored`` and ``count`` computed again from the last
        ones' data and not stored)."""

    @intrinsic
    def product_block(
        typingctx, a, offs, first, rows, width, step, b, bpitch, b0, out, opitch, o0, add, count,
        columns,
    ):  # fmt: skip
        """``out[(first + jj)*opitch + o0 + o]`` (+)= the sum of ``a[offs[first + jj] + i*step
        + j] * b[(i*width + j)*bpitch + b0 + o]`` over i < rows, j < width in that order, for
        o < columns and jj < count (both <= 16: the other rows' offsets are read, their results
        neither read nor written; b and out past ``columns`` neither); ``add``: onto what out
        holds."""
        if not (_float32_c(a, b, out) and isinstance(offs, types.Array)):
            return None
        sig = types.void(
            a, offs, first, rows, width, step, b, bpitch, b0, out, opitch, o0, add, count, columns
        )

        def codegen(context, builder, sig, args):
            aa, oa, first, rows, width, step, ba, bpitch, b0, ra, opitch, o0, add, count, cols = (
                args
            )
            ad, od, bd, rd = _pointers(context, builder, sig, args, 0, 1, 6, 9)
            i64 = first.type
            keep = builder.icmp_signed("!=", add, ir.Constant(add.type, 0))
            lanes = _first(builder, cols)
            slots, accs, bases, kept = [], [], [], []
            for jj in range(LANES):
                j = builder.add(first, i64(jj))
                bases.append(builder.gep(ad, [builder.load(builder.gep(od, [j]))]))
                slots.append(_vector_at(builder, rd, builder.add(builder.mul(j, opitch), o0)))
                accs.append(cgutils.alloca_once_value(builder, _ZERO))
                kept.append(builder.icmp_signed("<", i64(jj), count))
            with builder.if_then(keep):
                for slot, acc, mine in zip(slots, accs, kept):
                    with builder.if_then(mine):
                        builder.store(_masked_load(builder, slot, lanes), acc)

            def step_at(q, k):  # one K index: a's entry q of each row, b's row k
                at = builder.add(builder.mul(k, bpitch), b0)
                bv = _masked_load(builder, _vector_at(builder, bd, at), lanes)
                for base, acc in zip(bases, accs):
                    av = _splat(builder, builder.load(builder.gep(base, [q])))
                    builder.store(_fma(builder, av, bv, builder.load(acc)), acc)

            single = builder.icmp_signed("==", width, i64(1))
            with builder.if_else(single) as (one, many):
                with one:  # a column of a stored by columns: one loop over K
                    with cgutils.for_range(builder, rows) as row:
                        step_at(builder.mul(row.index, step), row.index)
                with many:
                    with cgutils.for_range(builder, rows) as row:
                        start = builder.mul(row.index, step)
                        dense = builder.mul(row.index, width)
                        with cgutils.for_range(builder, width) as col:
                            step_at(builder.add(start, col.index), builder.add(dense, col.index))
            for slot, acc, mine in zip(slots, accs, kept):
                with builder.if_then(mine):
                    _masked_store(builder, builder.load(acc), slot, lanes)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def transposed(typingctx, g, at, plane, count, gt, to, pitch, channels):
        """``gt[to + r*pitch + c] = g[at + c*plane + r]`` for c, r < 16: a 16 x 16 block of
        channels by positions turned positions by channels (entries r >= count or c >=
        channels: zero, their g entries not read)."""
        if not _float32_c(g, gt):
            return None
        sig = types.void(g, at, plane, count, gt, to, pitch, channels)

        def codegen(context, builder, sig, args):
            ga, at, plane, count, ta, to, pitch, channels = args
            gd, td = _pointers(context, builder, sig, args, 0, 4)
            i64 = at.type
            mask = _first(builder, count)
            none = ir.Constant(_MASK, [0] * LANES)
            rows = []
            for c in range(LANES):
                where = builder.add(at, builder.mul(i64(c), plane))
                read = builder.select(builder.icmp_signed("<", i64(c), channels), mask, none)
                rows.append(_masked_load(builder, _vector_at(builder, gd, where), read))
            b = 1
            while b < LANES:  # swap the off-diagonal b x b blocks of every 2b x 2b block
                for r in range(LANES):
                    if r & b:
                        continue
                    p = r + b
                    low = [c if not c & b else LANES + c - b for c in range(LANES)]
                    high = [c + b if not c & b else LANES + c for c in range(LANES)]
                    a, e = rows[r], rows[p]
                    rows[r] = builder.shuffle_vector(
                        a, e, ir.Constant(ir.VectorType(_I32, LANES), low)
                    )
                    rows[p] = builder.shuffle_vector(
                        a, e, ir.Constant(ir.VectorType(_I32, LANES), high)
                    )
                b *= 2
            for r, v in enumerate(rows):
                where = builder.add(to, builder.mul(i64(r), pitch))
                builder.store(v, _vector_at(builder, td, where), align=4)
            return context.get_dummy_value()

        return sig, codegen

    _I8 = ir.IntType(8)
    _BYTES = ir.VectorType(_I8, LANES)

    def _masked_load_bytes(builder, ptr, mask):
        fnty = ir.FunctionType(_BYTES, [_BYTES.as_pointer(), _I32, _MASK, _BYTES])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.load.v16i8.p0")
        return builder.call(fn, [ptr, _I32(1), mask, ir.Constant(_BYTES, [0] * LANES)])

    def _masked_store_bytes(builder, value, ptr, mask):
        fnty = ir.FunctionType(ir.VoidType(), [_BYTES, _BYTES.as_pointer(), _I32, _MASK])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.store.v16i8.p0")
        builder.call(fn, [value, ptr, _I32(1), mask])

    def _lanes(*order):
        return ir.Constant(ir.VectorType(_I32, LANES), list(order))

    _EVEN = _lanes(*range(0, 2 * LANES, 2))
    _ODD = _lanes(*range(1, 2 * LANES, 2))
    _LOW = _lanes(*(v for i in range(LANES // 2) for v in (i, LANES + i)))
    _HIGH = _lanes(*(v for i in range(LANES // 2, LANES) for v in (i, LANES + i)))

    def _uint8_c(a):
        return isinstance(a, types.Array) and a.dtype == types.uint8 and a.layout == "C"

    @intrinsic
    def pool_pairs(typingctx, x, r0, r1, out, arg, o0, windows, relu):
        """For j < windows: ``out[o0 + j]``, ``arg[o0 + j]`` <- the maximum of the 2x2 window
        ``x[r0 + 2j : r0 + 2j + 2]``, ``x[r1 + 2j : r1 + 2j + 2]`` and its offset ``2*row +
        column`` (the first in that order at ties); with ``relu`` 0 and offset 0 where the
        maximum is not positive. Returns whether an entry read is NaN (the comparisons then do
        not give the first NaN: the caller redoes those windows)."""
        if not (_float32_c(x, out) and _uint8_c(arg)):
            return None
        sig = types.boolean(x, r0, r1, out, arg, o0, windows, relu)

        def codegen(context, builder, sig, args):
            xa, r0, r1, oa, aa, o0, windows, relu = args
            xd, od, ad = _pointers(context, builder, sig, args, 0, 3, 4)
            i64 = r0.type
            keep_all = builder.icmp_unsigned("==", relu, relu.type(0))
            seen = cgutils.alloca_once_value(builder, ir.Constant(_MASK, [0] * LANES))
            zero_b = ir.Constant(_BYTES, [0] * LANES)
            one_b, two_b = ir.Constant(_BYTES, [1] * LANES), ir.Constant(_BYTES, [2] * LANES)
            blocks = builder.sdiv(builder.add(windows, i64(LANES - 1)), i64(LANES))
            with cgutils.for_range(builder, blocks) as block:
                j = builder.mul(block.index, i64(LANES))
                left = builder.sub(windows, j)  # windows from j on
                lo_mask = _first(builder, builder.mul(left, i64(2)))
                hi_mask = _first(builder, builder.sub(builder.mul(left, i64(2)), i64(LANES)))
                col = builder.mul(j, i64(2))
                rows = []
                for r in (r0, r1):
                    at = builder.add(r, col)
                    lo = _masked_load(builder, _vector_at(builder, xd, at), lo_mask)
                    at = builder.add(at, i64(LANES))
                    hi = _masked_load(builder, _vector_at(builder, xd, at), hi_mask)
                    rows.append((lo, hi))
                nan = builder.load(seen)
                for lo, hi in rows:
                    nan = builder.or_(nan, builder.fcmp_unordered("uno", lo, lo))
                    nan = builder.or_(nan, builder.fcmp_unordered("uno", hi, hi))
                builder.store(nan, seen)
                halves = []
                for a, b in zip(rows[0], rows[1]):  # each column's larger row, the second's
                    second = builder.fcmp_ordered(">", b, a)
                    halves.append((builder.select(second, b, a), second))
                (v0, s0), (v1, s1) = halves
                a = builder.shuffle_vector(v0, v1, _EVEN)
                b = builder.shuffle_vector(v0, v1, _ODD)
                sa = builder.shuffle_vector(s0, s1, _EVEN)
                sb = builder.shuffle_vector(s0, s1, _ODD)
                qa = builder.select(sa, two_b, zero_b)
                qb = builder.add(builder.select(sb, two_b, zero_b), one_b)
                right = builder.or_(
                    builder.fcmp_ordered(">", b, a),
                    builder.and_(
                        builder.fcmp_ordered("==", b, a), builder.icmp_unsigned("<", qb, qa)
                    ),
                )
                best = builder.select(right, b, a)
                q = builder.select(right, qb, qa)
                keep = builder.or_(
                    builder.fcmp_ordered(">", best, _ZERO), _splat(builder, keep_all)
                )
                mask = _first(builder, left)
                where = builder.add(o0, j)
                _masked_store(
                    builder, builder.select(keep, best, _ZERO), _vector_at(builder, od, where), mask
                )
                at = builder.bitcast(builder.gep(ad, [where]), _BYTES.as_pointer())
                _masked_store_bytes(builder, builder.select(keep, q, zero_b), at, mask)
            bits = builder.bitcast(builder.load(seen), ir.IntType(LANES))
            return builder.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(LANES), 0))

        return sig, codegen

    @intrinsic
    def unpool_pairs(typingctx, g, arg, out, o0, windows, gx, r0, r1, relu):
        """The backward of ``pool_pairs``: ``gx[r0 : r0 + 2*windows]`` and ``gx[r1 : ...]``
        <- each window's ``g[o0 + j] + 0`` (where ``out[o0 + j] > 0`` with ``relu``, else 0)
        at its offset ``arg[o0 + j]``, zeros at its other three entries."""
        if not (_float32_c(g, out, gx) and _uint8_c(arg)):
            return None
        sig = types.void(g, arg, out, o0, windows, gx, r0, r1, relu)

        def codegen(context, builder, sig, args):
            ga, aa, oa, o0, windows, xa, r0, r1, relu = args
            gd, ad, od, xd = _pointers(context, builder, sig, args, 0, 1, 2, 5)
            i64 = r0.type
            keep_all = builder.icmp_unsigned("==", relu, relu.type(0))
            zero_b = ir.Constant(_BYTES, [0] * LANES)
            blocks = builder.sdiv(builder.add(windows, i64(LANES - 1)), i64(LANES))
            with cgutils.for_range(builder, blocks) as block:
                j = builder.mul(block.index, i64(LANES))
                left = builder.sub(windows, j)
                mask = _first(builder, left)
                where = builder.add(o0, j)
                gv = _masked_load(builder, _vector_at(builder, gd, where), mask)
                gv = builder.fadd(gv, _ZERO)  # -0.0 becomes +0.0, as zeros plus g
                ov = _masked_load(builder, _vector_at(builder, od, where), mask)
                keep = builder.or_(builder.fcmp_ordered(">", ov, _ZERO), _splat(builder, keep_all))
                gv = builder.select(keep, gv, _ZERO)
                at = builder.bitcast(builder.gep(ad, [where]), _BYTES.as_pointer())
                q = _masked_load_bytes(builder, at, mask)
                right = builder.icmp_unsigned(
                    "!=", builder.and_(q, ir.Constant(_BYTES, [1] * LANES)), zero_b
                )
                second = builder.icmp_unsigned(
                    "!=", builder.and_(q, ir.Constant(_BYTES, [2] * LANES)), zero_b
                )
                even = builder.select(right, _ZERO, gv)
                odd = builder.select(right, gv, _ZERO)
                lo_mask = _first(builder, builder.mul(left, i64(2)))
                hi_mask = _first(builder, builder.sub(builder.mul(left, i64(2)), i64(LANES)))
                col = builder.mul(j, i64(2))
                for order, part in ((_LOW, lo_mask), (_HIGH, hi_mask)):
                    both = builder.shuffle_vector(even, odd, order)
                    low = builder.shuffle_vector(second, second, order)
                    first_row = builder.select(low, _ZERO, both)
                    second_row = builder.select(low, both, _ZERO)
                    for r, v in ((r0, first_row), (r1, second_row)):
                        at = builder.add(r, col)
                        if order is _HIGH:
                            at = builder.add(at, i64(LANES))
                        _masked_store(builder, v, _vector_at(builder, xd, at), part)
            return context.get_dummy_value()

        return sig, codegen

    # -- runs of a sparse output gradient (the sparse convolution backward, ``conv.py``) -------
    # the longest run one call takes, in vectors (12 accumulators or weights in registers)
    RUN_VECTORS = 12

    def _int32_c(a) -> bool:
        return isinstance(a, types.Array) and a.dtype == types.int32 and a.layout == "C"

    def _each_length(builder, run, emit):
        """``emit(vectors, last)`` in its own branch for the count of vectors ``run`` (1 to
        ``RUN_VECTORS`` * 16 floats) takes, ``last`` the mask of the last vector's lanes: the
        loops unrolled over the vectors, whose values then stay in registers."""
        i64 = run.type
        vectors = builder.sdiv(builder.add(run, i64(LANES - 1)), i64(LANES))
        tail = builder.sub(run, builder.mul(builder.sub(vectors, i64(1)), i64(LANES)))
        last = _first(builder, tail)
        done = builder.append_basic_block("runs.done")
        switch = builder.switch(vectors, done)
        for v in range(1, RUN_VECTORS + 1):
            block = builder.append_basic_block(f"runs.{v}")
            switch.add_case(i64(v), block)
            builder.position_at_end(block)
            emit(v, last)
            builder.branch(done)
        builder.position_at_end(done)

    def _load_vector(builder, base, at, mask):
        """The vector at ``base + at``: a plain load, or the lanes of ``mask`` (not None)."""
        where = _vector_at(builder, base, at)
        return builder.load(where, align=4) if mask is None else _masked_load(builder, where, mask)

    def _store_vector(builder, value, base, at, mask):
        where = _vector_at(builder, base, at)
        if mask is None:
            builder.store(value, where, align=4)
        else:
            _masked_store(builder, value, where, mask)

    @contextmanager
    def _each_nonzero(builder, gd, jd, g0, count, x0, xstep):
        """A loop over q < count whose body gets (``g[g0 + j]`` in every lane, ``x0 + j *
        xstep``) for j = ``idx[q]`` (int32 at ``jd``)."""
        i64 = g0.type
        with cgutils.for_range(builder, count) as loop:
            j = builder.sext(builder.load(builder.gep(jd, [loop.index])), i64)
            gv = _splat(builder, builder.load(builder.gep(gd, [builder.add(g0, j)])))
            yield gv, builder.add(x0, builder.mul(j, xstep))

    def _runs(update):
        """An intrinsic ``(g, g0, idx, count, a, a0, b, b0, xstep, run)``: one run of ``run``
        floats (1 to 16 * ``RUN_VECTORS``) through the nonzero offsets ``idx[:count]`` of a row
        of g (from g0). ``update(builder, gd, jd, g0, count, (a, a0), (b, b0), xstep, masks)``
        emits the unrolled code for the run's vectors (``masks``: None but the last's)."""

        @intrinsic
        def runs(typingctx, g, g0, idx, count, a, a0, b, b0, xstep, run):
            if not (_float32_c(g, a, b) and _int32_c(idx)):
                return None
            sig = types.void(g, g0, idx, count, a, a0, b, b0, xstep, run)

            def codegen(context, builder, sig, args):
                _, g0, _, count, _, a0, _, b0, xstep, run = args
                gd, jd, ad, bd = _pointers(context, builder, sig, args, 0, 2, 4, 6)

                def emit(vectors, last):
                    masks = [None] * (vectors - 1) + [last]
                    update(builder, gd, jd, g0, count, (ad, a0), (bd, b0), xstep, masks)

                _each_length(builder, run, emit)
                return context.get_dummy_value()

            return sig, codegen

        return runs

    def _at(builder, start, u):
        return builder.add(start, start.type(LANES * u))

    def _weight_runs(builder, gd, jd, g0, count, windows, sums, xstep, masks):
        """acc's run summed in registers over the nonzeros' windows."""
        (xd, x0), (ad, a0) = windows, sums
        accs = [
            cgutils.alloca_once_value(builder, _load_vector(builder, ad, _at(builder, a0, u), m))
            for u, m in enumerate(masks)
        ]
        with _each_nonzero(builder, gd, jd, g0, count, x0, xstep) as (gv, base):
            for u, (acc, m) in enumerate(zip(accs, masks)):
                xv = _load_vector(builder, xd, _at(builder, base, u), m)
                builder.store(_fma(builder, gv, xv, builder.load(acc)), acc)
        for u, (acc, m) in enumerate(zip(accs, masks)):
            _store_vector(builder, builder.load(acc), ad, _at(builder, a0, u), m)

    def _input_runs(builder, gd, jd, g0, count, weights, windows, xstep, masks):
        """The windows' run updated over the nonzeros, the run's weights in registers."""
        (wd, w0), (xd, x0) = weights, windows
        wvs = [_load_vector(builder, wd, _at(builder, w0, u), m) for u, m in enumerate(masks)]
        with _each_nonzero(builder, gd, jd, g0, count, x0, xstep) as (gv, base):
            for u, (wv, m) in enumerate(zip(wvs, masks)):
                at = _at(builder, base, u)
                old = _load_vector(builder, xd, at, m)
                _store_vector(builder, _fma(builder, gv, wv, old), xd, at, m)

    runs_weight = _runs(_weight_runs)
    runs_weight.__doc__ = """``(g, g0, idx, count, x, x0, acc, a0, xstep, run)``: for q < count
        in order, j = idx[q], ``acc[a0 + t] += g[g0 + j] * x[x0 + j*xstep + t]`` for t < run,
        one fused multiply-add each, the run's accumulators held in registers over the q: a
        weight gradient's run from the nonzero entries of one output row."""
    runs_input = _runs(_input_runs)
    runs_input.__doc__ = """``(g, g0, idx, count, w, w0, gx, x0, xstep, run)``: for q < count in
        order, j = idx[q], ``gx[x0 + j*xstep + t] += g[g0 + j] * w[w0 + t]`` for t < run, one
        fused multiply-add each, the run's weights held in registers: an input gradient's
        windows from the nonzero entries of one output row (windows may overlap: each q reads
        what the last one wrote)."""

    _IDX = ir.VectorType(_I32, LANES)

    @intrinsic
    def nonzeros(typingctx, g, g0, length, idx):
        """The count of nonzero entries among ``g[g0 : g0 + length]``, their offsets (from g0,
        in order) at ``idx[0 : count]`` (int32, ``length`` + 16 entries: a step may write past
        the count): 16 entries a step, a compare and the offsets compressed, no branch on the
        values (NaN counts as nonzero, -0.0 does not). With AVX-512 the offsets are
        compressed in a register and stored whole (its compressing store to memory is slow
        on Zen 4: 194 against 34 us for the text CNN's gradient rows); elsewhere by LLVM's
        generic compressing store."""
        if not (_float32_c(g) and _int32_c(idx)):
            return None
        sig = types.intp(g, g0, length, idx)

        def codegen(context, builder, sig, args):
            _, g0, length, _ = args
            gd, jd = _pointers(context, builder, sig, args, 0, 3)
            i64 = g0.type
            if WIDE:
                fnty = ir.FunctionType(_IDX, [_IDX, _IDX, _MASK])
                name = "llvm.x86.avx512.mask.compress.v16i32"
            else:
                fnty = ir.FunctionType(ir.VoidType(), [_IDX, _I32.as_pointer(), _MASK])
                name = "llvm.masked.compressstore.v16i32"
            compress = cgutils.get_or_insert_function(builder.module, fnty, name)
            fnty = ir.FunctionType(ir.IntType(16), [ir.IntType(16)])
            popcount = cgutils.get_or_insert_function(builder.module, fnty, "llvm.ctpop.i16")
            lanes = ir.Constant(_IDX, list(range(LANES)))
            found = cgutils.alloca_once_value(builder, i64(0))
            steps = builder.sdiv(builder.add(length, i64(LANES - 1)), i64(LANES))
            with cgutils.for_range(builder, steps) as loop:
                s = builder.mul(loop.index, i64(LANES))
                inside = _first(builder, builder.sub(length, s))
                gv = _masked_load(builder, _vector_at(builder, gd, builder.add(g0, s)), inside)
                hit = builder.and_(builder.fcmp_unordered("!=", gv, _ZERO), inside)
                where = builder.add(lanes, _splat(builder, builder.trunc(s, _I32)))
                count = builder.load(found)
                at = builder.gep(jd, [count])
                if WIDE:
                    packed = builder.call(compress, [where, where, hit])
                    builder.store(packed, builder.bitcast(at, _IDX.as_pointer()), align=4)
                else:
                    builder.call(compress, [where, at, hit])
                bits = builder.call(popcount, [builder.bitcast(hit, ir.IntType(16))])
                builder.store(builder.add(count, builder.zext(bits, i64)), found)
            return builder.load(found)

        return sig, codegen
