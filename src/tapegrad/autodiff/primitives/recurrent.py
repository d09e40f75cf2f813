"""The Elman recurrence as one primitive: every time step forward, backward through time in its
VJP. Composing it from per-step slices, matmuls, adds and stacks gives the same values, but
costs a graph node (and, in compiled plans, a kernel call and a gradient delivery) per piece
per step, and a full-size zero gradient per slice; as one primitive it is a loop over time
inside one rule.

    hs[t] = act(xp[t] + hs[t-1] @ whh.T),  hs[-1] = h0,  act in {tanh, relu}

``xp`` (T, N, H) is the input projection with both biases already added (one matmul for all
steps, outside), ``whh`` (H, H), ``h0`` (N, H).
"""

from __future__ import annotations

import numpy as np

from . import samples as S
from .registry import Sample, primitive


def rnn_scan_forward(xp, whh, h0, nonlinearity, hs):
    """Fill ``hs`` (T, N, H) with the hidden states."""
    whh_t = whh.T
    h = h0
    for t in range(xp.shape[0]):
        out = hs[t]
        np.matmul(h, whh_t, out=out)
        np.add(out, xp[t], out=out)
        if nonlinearity == "tanh":
            np.tanh(out, out=out)
        else:
            np.maximum(out, 0, out=out)
        h = out


def rnn_scan_backward(g, hs, xp, whh, h0, nonlinearity, dxp, dwhh, dh, tmp, needs):
    """Backward through time: ``dxp`` (T, N, H), ``dwhh`` (H, H) and ``dh`` (N, H, the
    gradient of h0 at the end), using ``tmp`` (H, H) as scratch. ``g`` is the gradient of hs."""
    dh.fill(0)
    dwhh.fill(0)
    for t in range(xp.shape[0] - 1, -1, -1):
        dpre = dxp[t]
        np.add(g[t], dh, out=dpre)
        if nonlinearity == "tanh":
            np.multiply(hs[t], hs[t], out=dh)  # dh as scratch: 1 - h^2
            np.subtract(1, dh, out=dh)
            np.multiply(dpre, dh, out=dpre)
        else:
            np.greater(hs[t], 0, out=dh)
            np.multiply(dpre, dh, out=dpre)
        h_prev = hs[t - 1] if t > 0 else h0
        if needs[1]:
            np.matmul(dpre.T, h_prev, out=tmp)
            np.add(dwhh, tmp, out=dwhh)
        np.matmul(dpre, whh, out=dh)


def _forward(xp, whh, h0, nonlinearity):
    hs = np.empty(xp.shape, dtype=xp.dtype)
    rnn_scan_forward(xp, whh, h0, nonlinearity, hs)
    return hs


def _vjp(g, hs, needs, xp, whh, h0, nonlinearity):
    dxp = np.empty_like(xp, dtype=g.dtype)  # in xp's memory layout (batch-major, usually)
    dwhh = np.empty(whh.shape, dtype=g.dtype)
    dh = np.empty(h0.shape, dtype=g.dtype)
    tmp = np.empty(whh.shape, dtype=g.dtype)
    rnn_scan_backward(g, hs, xp, whh, h0, nonlinearity, dxp, dwhh, dh, tmp, needs)
    return [dxp if needs[0] else None, dwhh if needs[1] else None, dh if needs[2] else None]


def _reference(xp, whh, h0, nonlinearity):
    act = np.tanh if nonlinearity == "tanh" else (lambda z: np.where(z > 0, z, 0.0))
    h, out = h0, []
    for t in range(xp.shape[0]):
        h = act(np.einsum("nk,hk->nh", h, whh) + xp[t])
        out.append(h)
    return np.array(out)


def _samples(rng):
    out = []
    for (t, n, h), act in [((3, 2, 4), "tanh"), ((1, 3, 2), "tanh"), ((4, 1, 3), "relu")]:
        xp = S.values(rng, (t, n, h), -1, 1)
        whh = S.values(rng, (h, h), -0.5, 0.5)
        h0 = S.values(rng, (n, h), -0.5, 0.5)
        if act == "relu":  # keep pre-activations off relu's kink at 0
            xp = np.where(np.abs(xp) < 0.2, 0.5, xp) + 0.0
        out.append(Sample((xp, whh, h0), {"nonlinearity": act}))
    return out


rnn_scan = primitive(
    "rnn_scan",
    _forward,
    _vjp,
    reference=_reference,
    samples=_samples,
    doc="The Elman recurrence over all time steps: hs[t] = act(xp[t] + hs[t-1] @ whh.T).",
)

__all__ = ["rnn_scan"]
