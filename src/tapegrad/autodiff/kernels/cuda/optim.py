"""The optimiser update kernels on CUDA (twins of ``kernels/cpu/optim.py``): one thread per element
of a parameter, reading ``p``, ``g`` and the moments once and writing them once. Imported only
when a parameter lives on a CUDA device (it imports ``numba.cuda``)."""

from __future__ import annotations

import math

from numba import cuda

from ...backend import xp_of
from ..common import adam_scalars, sgd_scalars
from .launch import jit, launch


@jit
def _adam(p, g, m, v, vmax, amsgrad, l2, decoupled, wd, decay, c1, b2, c2, b2s, eps, size):
    for i in range(cuda.grid(1), p.shape[0], cuda.gridsize(1)):  # pragma: no cover - compiled
        d = g[i] + p[i] * wd if l2 else g[i]
        m[i] = m[i] + (d - m[i]) * c1
        v[i] = v[i] * b2 + d * c2 * d
        vv = v[i]
        if amsgrad:
            x = vmax[i]
            x = x if (x >= vv or x != x) else vv
            vmax[i] = x
            vv = x
        step = m[i] / (math.sqrt(vv) / b2s + eps) * size
        p[i] = (p[i] * decay if decoupled else p[i]) - step


_UNUSED: dict = {}


def _unused(p):
    """A one-element array standing in for the AMSGrad maximum when there is none (never
    read; a separate array, as a launch must not be given one array twice)."""
    key = (type(p), p.dtype)
    if key not in _UNUSED:
        _UNUSED[key] = xp_of(p).zeros(1, p.dtype)
    return _UNUSED[key]


def adam_update(p, g, m, v, vmax, scratch, *, lr, beta1, beta2, eps, wd, decoupled, step):
    """Adam (``decoupled``: AdamW) step ``step`` on a CUDA device, in place, with the scalars
    of the CPU kernel (``kernels.cpu.optim.adam_update``), each cast to the parameter's dtype.
    ``scratch`` is unused (the arrays of a parameter and its state are contiguous)."""
    flat = [a.reshape(-1) for a in (p, g, m, v)]
    vm = vmax.reshape(-1) if vmax is not None else _unused(p)
    scalars = adam_scalars(p.dtype, lr, beta1, beta2, eps, wd, decoupled, step)
    launch(_adam, p.size, *flat, vm, vmax is not None, *scalars)


@jit
def _sgd(p, g, buf, momentum, first, nesterov, l2, damp, wd, mom, keep, lr):
    for i in range(cuda.grid(1), p.shape[0], cuda.gridsize(1)):  # pragma: no cover - compiled
        d = g[i] + p[i] * wd if l2 else g[i]
        if momentum:
            b = d if first else (buf[i] * mom + d * keep if damp else buf[i] * mom + d)
            buf[i] = b
            d = d + b * mom if nesterov else b
        p[i] = p[i] - d * lr


def sgd_update(p, g, buf, scratch, *, lr, momentum, dampening, wd, nesterov, first):
    """SGD on a CUDA device, in place, with the scalars and the order of operations of the CPU
    kernel (``kernels.cpu.optim.sgd_update``). ``scratch`` is unused."""
    flat = [a.reshape(-1) for a in (p, g)]
    bf = buf.reshape(-1) if buf is not None else _unused(p)
    scalars = sgd_scalars(p.dtype, lr, momentum, dampening, wd)
    flags = (first, nesterov, wd != 0, dampening != 0)
    launch(_sgd, p.size, *flat, bf, buf is not None, *flags, *scalars)
