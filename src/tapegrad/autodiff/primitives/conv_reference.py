"""Plain-NumPy definitions of convolution, written independently of ``conv.py``'s kernels:
the registry test checks ``conv``, ``conv_transpose`` and ``conv_weight`` against them."""

from __future__ import annotations

import itertools

import numpy as np


def _interior(padding: tuple, shape: tuple) -> tuple:
    return (slice(None), slice(None)) + tuple(
        slice(lo, lo + n) for (lo, _), n in zip(padding, shape[2:])
    )


def _conv_reference(x, w, *bias, stride, padding, dilation, groups):
    # Direct definition: pad with np.pad, then one einsum per output position and group.
    d = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(padding))
    ksize = w.shape[2:]
    reach = tuple(dl * (k - 1) + 1 for dl, k in zip(dilation, ksize))
    out_shape = tuple((xp.shape[2 + i] - reach[i]) // stride[i] + 1 for i in range(d))
    og, cg = w.shape[0] // groups, w.shape[1]
    out = np.zeros((x.shape[0], w.shape[0]) + out_shape)
    letters = "abc"[:d]
    for pos in itertools.product(*(range(n) for n in out_shape)):
        window = xp[
            (slice(None), slice(None))
            + tuple(
                slice(pos[i] * stride[i], pos[i] * stride[i] + reach[i], dilation[i])
                for i in range(d)
            )
        ]
        for gi in range(groups):
            out[(slice(None), slice(gi * og, (gi + 1) * og)) + pos] = np.einsum(
                f"nc{letters},oc{letters}->no",
                window[:, gi * cg : (gi + 1) * cg],
                w[gi * og : (gi + 1) * og],
            )
        if bias:
            out[(slice(None), slice(None)) + pos] += bias[0]
    return out


def _conv_backward_reference(g, x, w, *saved, stride, padding, dilation, groups, needs):
    # Direct definition: every output position's window adds g * w to the input gradient and
    # g * window to the weight gradient, group by group.
    d = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(padding))
    gxp, gw = np.zeros_like(xp), np.zeros_like(w)
    ksize = w.shape[2:]
    reach = tuple(dl * (k - 1) + 1 for dl, k in zip(dilation, ksize))
    og, cg = w.shape[0] // groups, w.shape[1]
    for pos in itertools.product(*(range(n) for n in g.shape[2:])):
        win = (slice(None), slice(None)) + tuple(
            slice(pos[i] * stride[i], pos[i] * stride[i] + reach[i], dilation[i]) for i in range(d)
        )
        for gi in range(groups):
            gp = g[(slice(None), slice(gi * og, (gi + 1) * og)) + pos]  # (N, O/G)
            ch = slice(gi * cg, (gi + 1) * cg)
            sub = (win[0], ch) + win[2:]
            gxp[sub] += np.einsum("no,oc...->nc...", gp, w[gi * og : (gi + 1) * og])
            gw[gi * og : (gi + 1) * og] += np.einsum("no,nc...->oc...", gp, xp[sub])
    grads = (gxp[_interior(padding, x.shape)], gw, g.sum(axis=(0,) + tuple(range(2, g.ndim))))
    return tuple(a for a, need in zip(grads, needs) if need)
