"""Optimiser updates as one compiled pass over each parameter (Adam, SGD).

Adam written with NumPy is thirteen array passes per parameter (each ``out=``, so allocation
free, but each reading and writing the whole array): 200 us of the MLP's 750 us step, 450 us of
the text CNN's 2 ms (its 5000 x 50 embedding). One loop reads ``p``, ``g``, ``m``, ``v`` once
and writes them once. Every scalar is cast to the parameter's dtype first and the loop performs
the NumPy version's operations in its order (no fused multiply-add), so the results are the same
bits: the NumPy form (``*_reference``) stays the fallback for arrays the flat loop cannot take.
"""

from __future__ import annotations

import numpy as np

from ..common import adam_scalars, sgd_scalars


def adam_reference(p, g, m, v, vmax, l2, decoupled, wd, decay, c1, b2, c2, b2s, eps, size, scratch):
    """One Adam(W) step in place with NumPy ufuncs into the two ``scratch`` arrays (shaped like
    ``p``); the scalars as :func:`adam_update` makes them."""
    t0, t1 = scratch
    if decoupled:
        np.multiply(p, decay, out=p)
    d = g
    if l2:
        np.multiply(p, wd, out=t0)
        np.add(g, t0, out=t0)
        d = t0
    np.subtract(d, m, out=t1)  # m += (1 - beta1) * (d - m)
    np.multiply(t1, c1, out=t1)
    np.add(m, t1, out=m)
    np.multiply(v, b2, out=v)  # v = beta2 * v + (1 - beta2) * d * d
    np.multiply(d, c2, out=t1)
    np.multiply(t1, d, out=t1)
    np.add(v, t1, out=v)
    if vmax is not None:
        v = np.maximum(vmax, v, out=vmax)
    np.sqrt(v, out=t1)
    np.divide(t1, b2s, out=t1)
    np.add(t1, eps, out=t1)
    np.divide(m, t1, out=t1)
    np.multiply(t1, size, out=t1)
    np.subtract(p, t1, out=p)


def sgd_reference(p, g, buf, first, nesterov, l2, damp, wd, mom, keep, lr, scratch):
    """One SGD step in place with NumPy ufuncs into the two ``scratch`` arrays, the scalars
    as :func:`sgd_update` makes them; ``buf`` the momentum buffer or None, ``first`` whether
    this step fills it (``b = d``)."""
    t0, t1 = scratch
    d = g
    if l2:
        np.multiply(p, wd, out=t0)
        np.add(g, t0, out=t0)
        d = t0
    if buf is not None:
        if first:
            np.copyto(buf, d)
        else:
            np.multiply(buf, mom, out=buf)
            if damp:
                np.multiply(d, keep, out=t1)
                np.add(buf, t1, out=buf)
            else:
                np.add(buf, d, out=buf)
        if nesterov:
            np.multiply(buf, mom, out=t1)
            np.add(d, t1, out=t1)
            d = t1
        else:
            d = buf
    np.multiply(d, lr, out=t1)
    np.subtract(p, t1, out=p)


try:
    import numba
except ImportError:  # pragma: no cover
    numba = None

if numba is not None:
    from ..jit import cached_jit
    from .loops import split_loops

    _BLOCK = 2048  # elements per pass of the loops below: the block stays in L1 between them

    # error_model="numpy": division by zero gives inf/NaN as in NumPy, rather than Python's
    # ZeroDivisionError check, whose branch kept the last loop scalar
    @cached_jit(boundscheck=False, nogil=True, error_model="numpy")
    def _adam_block(
        p, g, m, v, vmax, amsgrad, l2, decoupled, wd, decay, c1, b2, c2, b2s, eps, size, block
    ):  # pragma: no cover - compiled
        # A loop per array written: a loop that stores into several arrays stays scalar (and
        # scalar float32 sqrt and division cost ~20 cycles an element). The block is sliced
        # so its loops index from 0, which lets LLVM drop numba's negative-index handling and
        # vectorise.
        lo = block * _BLOCK
        hi = min(lo + _BLOCK, p.shape[0])
        pb, gb, mb, vb = p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]
        k = pb.shape[0]
        if l2:
            for i in range(k):
                mb[i] = mb[i] + ((gb[i] + pb[i] * wd) - mb[i]) * c1
            for i in range(k):
                d = gb[i] + pb[i] * wd
                vb[i] = vb[i] * b2 + d * c2 * d
        else:
            for i in range(k):
                mb[i] = mb[i] + (gb[i] - mb[i]) * c1
            for i in range(k):
                vb[i] = vb[i] * b2 + gb[i] * c2 * gb[i]
        vv = vb
        if amsgrad:
            xb = vmax[lo:hi]
            for i in range(k):
                xb[i] = xb[i] if (xb[i] >= vb[i] or xb[i] != xb[i]) else vb[i]
            vv = xb
        if decoupled:
            for i in range(k):
                pb[i] = pb[i] * decay - mb[i] / (np.sqrt(vv[i]) / b2s + eps) * size
        else:
            for i in range(k):
                pb[i] = pb[i] - mb[i] / (np.sqrt(vv[i]) / b2s + eps) * size

    # every element is updated alone, so the blocks give the same bits on any thread count;
    # from _PARALLEL_SIZE elements they run over numba's threads (the update is bound by its
    # float32 sqrt and divisions, ~2 cycles an element: 64 us for the MLP's 100K weights)
    _adam_serial, _adam_parallel = split_loops(
        _adam_block, boundscheck=False, nogil=True, error_model="numpy"
    )
    _PARALLEL_SIZE = 1 << 15
    # plain SGD (no momentum, no weight decay) below this many elements runs as NumPy's two
    # ufunc calls (p -= lr * g), measured cheaper than one compiled call's dispatch: 10
    # elements 3.4 against 5.8 us, 12,544 6.7 against 7.7 us, 65,536 21 against 15 us
    _SGD_LOOP_FROM = 1 << 14

    @cached_jit(boundscheck=False, nogil=True, error_model="numpy")
    def _sgd_block(
        p, g, buf, momentum, first, nesterov, l2, damp, wd, mom, keep, lr, block
    ):  # pragma: no cover - compiled
        # NumPy's operations in its order, a loop per array written (see _adam_block); d (the
        # gradient with its L2 term) is recomputed in each loop from p before p is written
        lo = block * _BLOCK
        hi = min(lo + _BLOCK, p.shape[0])
        pb, gb = p[lo:hi], g[lo:hi]
        k = pb.shape[0]
        if not momentum:
            if l2:
                for i in range(k):
                    pb[i] = pb[i] - (gb[i] + pb[i] * wd) * lr
            else:
                for i in range(k):
                    pb[i] = pb[i] - gb[i] * lr
            return
        bb = buf[lo:hi]
        if first:
            if l2:
                for i in range(k):
                    bb[i] = gb[i] + pb[i] * wd
            else:
                for i in range(k):
                    bb[i] = gb[i]
        elif damp:
            if l2:
                for i in range(k):
                    bb[i] = bb[i] * mom + (gb[i] + pb[i] * wd) * keep
            else:
                for i in range(k):
                    bb[i] = bb[i] * mom + gb[i] * keep
        elif l2:
            for i in range(k):
                bb[i] = bb[i] * mom + (gb[i] + pb[i] * wd)
        else:
            for i in range(k):
                bb[i] = bb[i] * mom + gb[i]
        if nesterov:
            if l2:
                for i in range(k):
                    pb[i] = pb[i] - ((gb[i] + pb[i] * wd) + bb[i] * mom) * lr
            else:
                for i in range(k):
                    pb[i] = pb[i] - (gb[i] + bb[i] * mom) * lr
        else:
            for i in range(k):
                pb[i] = pb[i] - bb[i] * lr

    _sgd_serial, _sgd_parallel = split_loops(
        _sgd_block, boundscheck=False, nogil=True, error_model="numpy"
    )


def adam_update(p, g, m, v, vmax, scratch, *, lr, beta1, beta2, eps, wd, decoupled, step):
    """Adam (``decoupled``: AdamW) step ``step`` of parameter ``p`` with gradient ``g`` and
    moments ``m``, ``v`` (``vmax`` the AMSGrad maximum, or None), all in place; ``scratch``
    (two arrays shaped like ``p``) serves the NumPy form when the loop cannot take the arrays."""
    args = adam_scalars(p.dtype, lr, beta1, beta2, eps, wd, decoupled, step)
    if not _flat(p, g, m, v, vmax):
        adam_reference(p, g, m, v, vmax, *args, scratch)
        return
    vf = v.reshape(-1)
    vm = vf if vmax is None else vmax.reshape(-1)
    blocks = -(-p.size // _BLOCK)
    run = (
        _adam_parallel if p.size >= _PARALLEL_SIZE and numba.get_num_threads() > 1 else _adam_serial
    )
    run(blocks, p.reshape(-1), g.reshape(-1), m.reshape(-1), vf, vm, vmax is not None, *args)


def sgd_update(p, g, buf, scratch, *, lr, momentum, dampening, wd, nesterov, first):
    """SGD (momentum, dampening, Nesterov, L2 weight decay) on parameter ``p`` with gradient
    ``g``, in place; ``buf`` the momentum buffer (None without momentum), filled with the step's
    direction when ``first``; ``scratch`` (two arrays shaped like ``p``) serves the NumPy form
    when the loop cannot take the arrays. The same bits either way."""
    wd_, mom, keep, lr_ = sgd_scalars(p.dtype, lr, momentum, dampening, wd)
    flags = (first, nesterov, wd != 0, dampening != 0)
    plain = buf is None and wd == 0  # two ufunc passes: below the size, cheaper than a call
    if (plain and p.size < _SGD_LOOP_FROM) or not _flat(p, g, buf):
        sgd_reference(p, g, buf, *flags, wd_, mom, keep, lr_, scratch)
        return
    pf = p.reshape(-1)
    bf = pf if buf is None else buf.reshape(-1)  # never read without momentum
    blocks = -(-p.size // _BLOCK)
    run = _sgd_parallel if p.size >= _PARALLEL_SIZE and numba.get_num_threads() > 1 else _sgd_serial
    run(blocks, pf, g.reshape(-1), bf, buf is not None, *flags, wd_, mom, keep, lr_)


def _flat(p, *arrays) -> bool:
    """Whether the loops take ``p`` and ``arrays`` (None among them: absent): C-contiguous, all
    of p's shape and dtype."""
    if numba is None or not p.flags.c_contiguous:
        return False
    for a in arrays:
        if a is not None and (not a.flags.c_contiguous or a.dtype != p.dtype or a.shape != p.shape):
            return False
    return True
