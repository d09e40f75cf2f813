"""The Elman, LSTM and GRU recurrences as one primitive each: every time step forward,
backward through time in the VJP. Composing them from per-step slices, matmuls, adds and
stacks gives the same values, but costs a graph node (and, in compiled plans, a kernel call
and a gradient delivery) per piece per step, and a full-size zero gradient per slice; as one
primitive each is a loop over time inside one rule.

    hs[t] = act(xp[t] + hs[t-1] @ whh.T),  hs[-1] = h0,  act in {tanh, relu}

``xp`` (T, N, H) is the input projection with both biases already added (one matmul for all
steps, outside), ``whh`` (H, H), ``h0`` (N, H).

``lstm_scan(xp, whh, h0, c0)``: ``xp`` (T, N, 4H) with both biases added, gates ``[i; f; g; o]``,
``c' = f*c + i*g``, ``h' = o*tanh(c')``. Its output (2, T, N, H) stacks the hidden states
(``out[0]``) and the cell states (``out[1]``), so one output carries both the sequence and the
final ``(h, c)``; slicing it is cheap and its gradient flows through the usual getitem rule.

``gru_scan(xp, whh, bhh, h0)``: ``xp`` (T, N, 3H) with the input bias added, gates ``[r; z; n]``,
``r, z = sigmoid(xp_rz + h @ W_hrz^T + b_hrz)``, ``n = tanh(xp_n + r * (h @ W_hn^T + b_hn))``,
``h' = (1 - z) * n + z * h``; ``bhh`` (3H,) stays inside because ``r`` multiplies its n part.
Output: the hidden states (T, N, H).

Per step, the recurrent product is one BLAS call into a buffer and all the gate math one
compiled kernel (``kernels/cpu/recurrent.py``); backward through time is a primitive of its own per
scan (``rnn_scan_backward``, ``lstm_scan_backward``, ``gru_scan_backward``), which computes every
input's gradient in one pass, and the recurrent weight's gradient as one product over all steps
at the end (the gate gradients of every step are kept anyway: they are the input projection's
gradient). The scans are first-order only: their backward kernels are not differentiable.
"""

from __future__ import annotations

import numpy as np

from ..backend import xp_of as _xp
from ..core.state import new_tensor
from ..errors import ShapeError
from ..kernels.dispatch import kernels_for
from . import samples as S
from .linalg import matmul_into
from .registry import Sample, kernel_scratch, primitive, run, scratch


def rnn_scan_forward(xp, whh, h0, nonlinearity, hs, scratch, zero_h0=False):
    """Fill ``hs`` (T, N, H) with the hidden states, using ``scratch`` (N, H). With
    ``zero_h0`` the state starts at zeros (``h0`` is not read) and step 0 skips its recurrent
    product. ``xp`` may be any strided view (the batch-major projection seen time-major): it
    is only ever copied from, since ufuncs over strided operands allocate buffers."""
    whh_t = whh.T
    h = h0
    for t in range(xp.shape[0]):
        out = hs[t]
        np.copyto(out, xp[t])
        if t > 0 or not zero_h0:
            matmul_into(h, whh_t, scratch)
            np.add(out, scratch, out=out)
        if nonlinearity == "tanh":
            np.tanh(out, out=out)
        else:
            np.maximum(out, 0, out=out)
        h = out


def rnn_scan_backward(
    g, hs, xp, whh, h0, nonlinearity, dxp, dwhh, dh, tmp, scratch, needs, zero_h0=False
):
    """Backward through time: ``dxp`` (T, N, H, any strided layout: written by copies only),
    ``dwhh`` (H, H) and ``dh`` (N, H, the gradient of h0 at the end), with ``tmp`` (H, H) and
    ``scratch`` (N, H) as work space. ``g`` is the gradient of hs. Step 0's products are
    skipped where they only feed gradients nobody asked for or that are zero (a zero initial
    state gives the recurrent weight nothing and takes no gradient)."""
    dh.fill(0)
    dwhh.fill(0)
    dpre = scratch
    tanh = nonlinearity == "tanh"
    rnn_backward_step = kernels_for(g).rnn_backward_step
    for t in range(xp.shape[0] - 1, -1, -1):
        rnn_backward_step(g[t], dh, hs[t], tanh, dpre, dxp[t])  # one pass, no buffers
        if t == 0 and zero_h0:
            dh.fill(0)
            break
        h_prev = hs[t - 1] if t > 0 else h0
        if needs[1]:
            matmul_into(dpre.T, h_prev, tmp)
            np.add(dwhh, tmp, out=dwhh)
        if t > 0 or needs[2]:
            matmul_into(dpre, whh, dh)


def _forward(xp, whh, h0, nonlinearity, zero_h0=False, out=None, ws=None):
    # h0's shape sets the backward kernel's loop bounds (boundscheck off), even with zero_h0
    _check_states("rnn_scan", xp, whh, 1, {"h0": h0})
    hs = _xp(xp).empty(xp.shape, dtype=xp.dtype) if out is None else out
    kernels = kernels_for(xp)
    if _kernels_take(kernels, (hs,), (xp, whh, h0)):  # the whole scan at once
        tanh, work = nonlinearity == "tanh", kernel_scratch(ws, xp)
        kernels.rnn_scan_forward(xp, whh, h0, tanh, zero_h0, hs, work)
    else:
        hw = scratch(ws, "h", h0.shape, xp.dtype, like=xp)
        rnn_scan_forward(xp, whh, h0, nonlinearity, hs, hw, zero_h0)
    return hs


def _kernels_take(kernels, written, read) -> bool:
    """Whether the device's whole-scan kernels (``kernels/cpu/elman.py``, ``gated.py``) take
    these arrays: the device has them for this dtype, the arrays they write (``written``) are
    C-contiguous, and every array has the dtype of the first."""
    dtype = written[0].dtype
    return (
        kernels.scan_rows(dtype)
        and all(a.flags.c_contiguous for a in written)
        and all(a.dtype == dtype for a in (*written, *read))
    )


def _vjp(g, hs, needs, xp, whh, h0, nonlinearity, zero_h0=False):
    grads = run(
        rnn_scan_backward_kernel,
        g,
        hs,
        xp,
        whh,
        h0,
        nonlinearity=nonlinearity,
        zero_h0=zero_h0,
        needs=needs,
    )
    return [d if need else None for d, need in zip(grads, needs)]


def _backward(g, hs, xp, whh, h0, nonlinearity, needs, zero_h0=False, out=None, ws=None):
    dt = g.dtype
    if out is None:  # dxp in xp's memory layout (batch-major, usually)
        out = (
            np.empty_like(xp, dtype=dt),
            _xp(xp).empty(whh.shape, dt),
            _xp(xp).empty(h0.shape, dt),
        )
    dxp, dwhh, dh = out
    kernels = kernels_for(g)
    if _kernels_take(kernels, (hs, dh), (g, whh, h0)):  # the whole scan at once
        tanh, work = nonlinearity == "tanh", kernel_scratch(ws, g)
        kernels.rnn_scan_backward(g, hs, whh, h0, tanh, zero_h0, needs, dxp, dwhh, dh, work)
        return dxp, dwhh, dh
    tmp, work = scratch(ws, "tmp", whh.shape, dt, like=xp), scratch(ws, "h", h0.shape, dt, like=xp)
    rnn_scan_backward(g, hs, xp, whh, h0, nonlinearity, dxp, dwhh, dh, tmp, work, needs, zero_h0)
    return dxp, dwhh, dh


def _reference(xp, whh, h0, nonlinearity, zero_h0=False):
    act = np.tanh if nonlinearity == "tanh" else (lambda z: np.where(z > 0, z, 0.0))
    h, out = (h0 * 0 if zero_h0 else h0), []
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
        out.append(Sample((xp, whh, h0), {"nonlinearity": act, "zero_h0": True}))
    return out


rnn_scan = primitive(
    "rnn_scan",
    _forward,
    _vjp,
    reference=_reference,
    samples=_samples,
    higher_order=False,
    doc="The Elman recurrence over all time steps: hs[t] = act(xp[t] + hs[t-1] @ whh.T); "
    "zero_h0=True starts from the zero state (h0 unread, its gradient zero).",
)


# -- LSTM ----------------------------------------------------------------------------------------
def _check_states(name: str, xp, whh, gates: int, states: dict) -> None:
    if xp.ndim != 3 or whh.ndim != 2 or xp.shape[2] != gates * whh.shape[1]:
        raise ShapeError(
            f"{name}: expected xp (T, N, {gates}H) and whh ({gates}H, H), got xp {xp.shape} "
            f"and whh {whh.shape}"
        )
    if whh.shape[0] != xp.shape[2]:
        raise ShapeError(f"{name}: whh must be ({xp.shape[2]}, H), got {whh.shape}")
    if xp.shape[0] == 0:
        raise ShapeError(f"{name}: xp {xp.shape} has no time steps")
    want = (xp.shape[1], whh.shape[1])
    for k, v in states.items():
        if v.shape != want:
            raise ShapeError(f"{name}: {k} must have shape {want}, got {v.shape}")


def lstm_scan_buffers(xp: np.ndarray) -> tuple:
    """The forward's saved arrays: gate activations (T, N, 4H), ``tanh(c)`` (T, N, H), and the
    per-step scratch for ``h @ whh.T`` (N, 4H)."""
    T, N, G = xp.shape
    return (
        _xp(xp).empty((T, N, G), xp.dtype),
        _xp(xp).empty((T, N, G // 4), xp.dtype),
        _xp(xp).empty((N, G), xp.dtype),
    )


def lstm_scan_forward(xp, whh, h0, c0, out, act, tc, hw) -> None:
    """Fill ``out`` (2, T, N, H) with the hidden and cell states, ``act``/``tc`` with what the
    backward pass reads; ``hw`` (N, 4H) is scratch."""
    whh_t = whh.T
    hs, cs = out[0], out[1]
    h, c = h0, c0
    lstm_forward_step = kernels_for(xp).lstm_forward_step
    for t in range(xp.shape[0]):
        matmul_into(h, whh_t, hw)
        lstm_forward_step(xp[t], hw, c, hs[t], cs[t], act[t], tc[t])
        h, c = hs[t], cs[t]


def lstm_scan_backward(g, out, act, tc, whh, h0, c0, dxp, dwhh, dh, dc, tmp, needs) -> None:
    """Backward through time. ``g`` (2, T, N, H) is the output's gradient. Fills ``dxp``
    (T, N, 4H, the gate pre-activation gradients), ``dwhh`` when ``needs[1]``, and ``dh``/``dc``
    (N, H) with the gradients of ``h0``/``c0``; ``tmp`` (4H, H) is scratch."""
    T, H = dxp.shape[0], dh.shape[1]
    hs, cs = out[0], out[1]
    kernels = kernels_for(g)
    if _kernels_take(kernels, (hs, dxp, dh, dc), (g, act, tc, whh, c0)):
        # the steps at once (the weight's gradient below: one product)
        kernels.lstm_scan_backward(g, out, act, tc, whh, c0, dxp, dh, dc, needs[2])
    else:
        dh.fill(0)
        dc.fill(0)
        step = kernels.lstm_backward_step
        for t in range(T - 1, -1, -1):
            step(g[0, t], g[1, t], act[t], tc[t], cs[t - 1] if t else c0, dh, dc, dxp[t])
            if t or needs[2]:
                matmul_into(dxp[t], whh, dh)
    if needs[1]:
        _recurrent_weight_grad(dxp, hs, h0, dwhh, tmp, H)


def in_layout_of(xp: np.ndarray, dgates: np.ndarray) -> np.ndarray:
    """The array the input projection's gradient goes to: ``dgates`` itself when ``xp`` is
    time-major contiguous, else a new array in ``xp``'s layout (the batch-major projection
    viewed time-major), which the gradient is copied into once, so that it flows back to the
    projection as one contiguous matrix. ``dgates`` stays time-major: the recurrent weight's
    gradient reads it as one (T*N, G) matrix."""
    return dgates if xp.flags.c_contiguous else np.empty_like(xp, dtype=dgates.dtype)


def _recurrent_weight_grad(dpre, hs, h0, dwhh, tmp, H) -> None:
    """``dwhh = sum_t dpre[t].T @ h_{t-1}``: one product for step 0 (against h0), one for all
    later steps at once (against hs[:-1], contiguous)."""
    matmul_into(dpre[0].T, h0, dwhh)
    if dpre.shape[0] > 1:
        G = dpre.shape[2]
        matmul_into(dpre[1:].reshape(-1, G).T, hs[:-1].reshape(-1, H), tmp)
        np.add(dwhh, tmp, out=dwhh)


def _lstm_forward(xp, whh, h0, c0, out=None, ws=None):
    """(states (2, T, N, H), gate activations, tanh of the cell states)."""
    _check_states("lstm_scan", xp, whh, 4, {"h0": h0, "c0": c0})
    T, N, G = xp.shape
    if out is None:
        act, tc, _ = lstm_scan_buffers(xp)
        out = (_xp(xp).empty((2, T, N, G // 4), xp.dtype), act, tc)
    states, act, tc = out
    kernels = kernels_for(xp)
    if _kernels_take(kernels, (states, act, tc), (xp, whh, h0, c0)):  # the whole scan at once
        kernels.lstm_scan_forward(xp, whh, h0, c0, states, act, tc, kernel_scratch(ws, xp))
        return out
    lstm_scan_forward(
        xp, whh, h0, c0, states, act, tc, scratch(ws, "hw", (N, G), xp.dtype, like=xp)
    )
    return out


def _lstm_vjp(g, out, needs, xp, whh, h0, c0, aux):
    grads = run(lstm_scan_backward_kernel, g, out, *aux, xp, whh, h0, c0, needs=needs)
    return [d if need else None for d, need in zip(grads, needs)]


def _lstm_backward(g, states, act, tc, xp, whh, h0, c0, needs, out=None, ws=None):
    """(dx in xp's layout, dwhh, dh0, dc0); the gate gradients are computed time-major."""
    dt = g.dtype
    if out is None:
        out = (np.empty_like(xp, dtype=dt), _xp(xp).empty(whh.shape, dt))
        out += (_xp(xp).empty(h0.shape, dt), _xp(xp).empty(c0.shape, dt))
    dx, dwhh, dh, dc = out
    dxp = dx if dx.flags.c_contiguous else scratch(ws, "dgates", xp.shape, dt, like=xp)
    tmp = scratch(ws, "tmp", whh.shape, dt, like=xp)
    lstm_scan_backward(g, states, act, tc, whh, h0, c0, dxp, dwhh, dh, dc, tmp, needs)
    if dxp is not dx:
        np.copyto(dx, dxp)
    return out


def _sig(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _lstm_reference(xp, whh, h0, c0):
    H = whh.shape[1]
    h, c, hs, cs = h0, c0, [], []
    for t in range(xp.shape[0]):
        z = xp[t] + np.einsum("nk,gk->ng", h, whh)
        i, f, o = _sig(z[:, :H]), _sig(z[:, H : 2 * H]), _sig(z[:, 3 * H :])
        c = f * c + i * np.tanh(z[:, 2 * H : 3 * H])
        h = o * np.tanh(c)
        hs.append(h)
        cs.append(c)
    return np.array([hs, cs])


SCAN_SHAPES = [(3, 2, 4), (1, 3, 2), (4, 1, 3), (2, 3, 5)]  # (T, N, H): T=1, batch 1, odd


def _lstm_samples(rng):
    out = []
    for t, n, h in SCAN_SHAPES:
        xp = S.values(rng, (t, n, 4 * h), -1.5, 1.5)
        whh = S.values(rng, (4 * h, h), -0.6, 0.6)
        h0, c0 = S.values(rng, (n, h), -0.5, 0.5), S.values(rng, (n, h), -1, 1)
        out.append(Sample((xp, whh, h0, c0)))
    return out


lstm_scan = primitive(
    "lstm_scan",
    _lstm_forward,
    _lstm_vjp,
    reference=_lstm_reference,
    samples=_lstm_samples,
    aux=True,
    higher_order=False,
    doc="The LSTM recurrence over all time steps; out[0] holds the hidden, out[1] the cell "
    "states, (2, T, N, H).",
)


# -- GRU -----------------------------------------------------------------------------------------
def gru_scan_buffers(xp: np.ndarray) -> tuple:
    """The forward's saved array ``act`` (T, N, 4H: r, z, n, h @ W_hn^T + b_hn) and the
    per-step scratch for ``h @ whh.T`` (N, 3H)."""
    T, N, G = xp.shape
    return _xp(xp).empty((T, N, 4 * (G // 3)), xp.dtype), _xp(xp).empty((N, G), xp.dtype)


def gru_scan_forward(xp, whh, bhh, h0, hs, act, hw) -> None:
    """Fill ``hs`` (T, N, H) with the hidden states and ``act`` with what backward reads."""
    whh_t = whh.T
    h = h0
    gru_forward_step = kernels_for(xp).gru_forward_step
    for t in range(xp.shape[0]):
        matmul_into(h, whh_t, hw)
        gru_forward_step(xp[t], hw, bhh, h, hs[t], act[t])
        h = hs[t]


def gru_scan_backward(g, hs, act, whh, h0, dxp, dhw, dwhh, dbhh, dh, dhd, tmp, needs) -> None:
    """Backward through time. ``g`` (T, N, H) is the output's gradient. Fills ``dxp``
    (T, N, 3H), ``dhw`` (T, N, 3H, the gradient of ``h @ whh.T + bhh`` per step), ``dwhh``
    and ``dbhh`` when needed, and ``dh`` (N, H) with the gradient of ``h0``; ``dhd`` (N, H)
    and ``tmp`` (3H, H) are scratch."""
    T, H = g.shape[0], dh.shape[1]
    kernels = kernels_for(g)
    if _kernels_take(kernels, (hs, dhw, dh, dhd), (g, act, whh, h0, dxp)):
        # the steps at once (the weight's and bias's gradients below: a product and a sum)
        kernels.gru_scan_backward(g, hs, act, whh, h0, dxp, dhw, dh, dhd, needs[3])
    else:
        dh.fill(0)
        dhd.fill(0)
        step = kernels.gru_backward_step
        for t in range(T - 1, -1, -1):
            step(g[t], dh, dhd, act[t], hs[t - 1] if t else h0, dxp[t], dhw[t])
            if t or needs[3]:
                matmul_into(dhw[t], whh, dh)
    if needs[3]:
        np.add(dh, dhd, out=dh)
    if needs[1]:
        _recurrent_weight_grad(dhw, hs, h0, dwhh, tmp, H)
    if needs[2]:
        np.sum(dhw.reshape(-1, dhw.shape[2]), axis=0, out=dbhh)


def _gru_forward(xp, whh, bhh, h0, out=None, ws=None):
    """(hidden states (T, N, H), the gate activations the backward reads)."""
    _check_states("gru_scan", xp, whh, 3, {"h0": h0})
    if bhh.shape != (xp.shape[2],):
        raise ShapeError(f"gru_scan: bhh must have shape ({xp.shape[2]},), got {bhh.shape}")
    T, N, G = xp.shape
    if out is None:
        act, _ = gru_scan_buffers(xp)
        out = (_xp(xp).empty((T, N, G // 3), xp.dtype), act)
    hs, act = out
    kernels = kernels_for(xp)
    if _kernels_take(kernels, (hs, act), (xp, whh, bhh, h0)):  # the whole scan at once
        kernels.gru_scan_forward(xp, whh, bhh, h0, hs, act, kernel_scratch(ws, xp))
        return out
    gru_scan_forward(xp, whh, bhh, h0, hs, act, scratch(ws, "hw", (N, G), xp.dtype, like=xp))
    return out


def _gru_vjp(g, hs, needs, xp, whh, bhh, h0, aux):
    grads = run(gru_scan_backward_kernel, g, hs, aux[0], xp, whh, bhh, h0, needs=needs)
    return [d if need else None for d, need in zip(grads, needs)]


def _gru_backward(g, hs, act, xp, whh, bhh, h0, needs, out=None, ws=None):
    """(dxp in xp's layout, dwhh, dbhh, dh0)."""
    dt = g.dtype
    if out is None:
        out = (np.empty_like(xp, dtype=dt), _xp(xp).empty(whh.shape, dt))
        out += (_xp(xp).empty(bhh.shape, dt), _xp(xp).empty(h0.shape, dt))
    dxp, dwhh, dbhh, dh = out
    dhw = scratch(ws, "dhw", xp.shape, dt, like=xp)
    tmp, dhd = scratch(ws, "tmp", whh.shape, dt, like=xp), scratch(ws, "dhd", h0.shape, dt, like=xp)
    gru_scan_backward(g, hs, act, whh, h0, dxp, dhw, dwhh, dbhh, dh, dhd, tmp, needs)
    return out


def _gru_reference(xp, whh, bhh, h0):
    H = whh.shape[1]
    h, hs = h0, []
    for t in range(xp.shape[0]):
        a = np.einsum("nk,gk->ng", h, whh) + bhh
        r = _sig(xp[t][:, :H] + a[:, :H])
        z = _sig(xp[t][:, H : 2 * H] + a[:, H : 2 * H])
        n = np.tanh(xp[t][:, 2 * H :] + r * a[:, 2 * H :])
        h = (1 - z) * n + z * h
        hs.append(h)
    return np.array(hs)


def _gru_samples(rng):
    out = []
    for t, n, h in SCAN_SHAPES:
        xp = S.values(rng, (t, n, 3 * h), -1.5, 1.5)
        whh = S.values(rng, (3 * h, h), -0.6, 0.6)
        bhh = S.values(rng, (3 * h,), -0.5, 0.5)
        out.append(Sample((xp, whh, bhh, S.values(rng, (n, h), -0.8, 0.8))))
    return out


gru_scan = primitive(
    "gru_scan",
    _gru_forward,
    _gru_vjp,
    reference=_gru_reference,
    samples=_gru_samples,
    aux=True,
    higher_order=False,
    doc="The GRU recurrence over all time steps: hidden states (T, N, H).",
)


# -- backward through time: one fused primitive per scan ------------------------------------------
def _through_generic_ops(scan, g, arrays):
    """A scan's VJP computed by the engine's generic operations (``scan`` written with
    matmul, tanh, sigmoid, slices, stack): the reference the fused backward kernels match."""
    from ..graph import gradients  # the backward pass (it imports only the core)

    leaves = [new_tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    grads = gradients(scan(*leaves), leaves, np.asarray(g, np.float64), allow_unused=True)
    return tuple(t.data for t in grads)


def _rnn_generic(xp, whh, h0, nonlinearity, zero_h0):
    h, hs = (h0 * 0.0 if zero_h0 else h0), []
    for t in range(xp.shape[0]):
        z = xp[t] + h @ whh.T
        h = z.tanh() if nonlinearity == "tanh" else z.relu()
        hs.append(h)
    return _stack(hs)


def _lstm_generic(xp, whh, h0, c0):
    H = whh.shape[1]
    h, c, hs, cs = h0, c0, [], []
    for t in range(xp.shape[0]):
        z = xp[t] + h @ whh.T
        i, f, o = z[:, :H].sigmoid(), z[:, H : 2 * H].sigmoid(), z[:, 3 * H :].sigmoid()
        c = f * c + i * z[:, 2 * H : 3 * H].tanh()
        h = o * c.tanh()
        hs.append(h)
        cs.append(c)
    return _stack([_stack(hs), _stack(cs)])


def _gru_generic(xp, whh, bhh, h0):
    H = whh.shape[1]
    h, hs = h0, []
    for t in range(xp.shape[0]):
        a = h @ whh.T + bhh
        r = (xp[t][:, :H] + a[:, :H]).sigmoid()
        z = (xp[t][:, H : 2 * H] + a[:, H : 2 * H]).sigmoid()
        n = (xp[t][:, 2 * H :] + r * a[:, 2 * H :]).tanh()
        h = (1 - z) * n + z * h
        hs.append(h)
    return _stack(hs)


def _stack(xs):
    from .shape import stack

    return stack(xs)


def _backward_samples(forward_samples, forward, extra):
    """Samples of a scan's backward kernel: each forward sample, its outputs, a random output
    gradient, and every input's gradient asked for."""

    def build(rng):
        out = []
        for sample in forward_samples(rng):
            res = forward(*sample.args, **sample.attrs)
            res = res if isinstance(res, tuple) else (res,)
            g = S.values(rng, res[0].shape)
            attrs = {**sample.attrs, "needs": (True,) * len(sample.args)}
            out.append(Sample((g, *extra(res, sample.args)), attrs))
        return out

    return build


rnn_scan_backward_kernel = primitive(
    "rnn_scan_backward",
    _backward,
    None,
    reference=lambda g, hs, xp, whh, h0, nonlinearity, needs, zero_h0=False: _through_generic_ops(
        lambda a, b, c: _rnn_generic(a, b, c, nonlinearity, zero_h0), g, (xp, whh, h0)
    ),
    samples=_backward_samples(_samples, _forward, lambda res, args: (res[0], *args)),
    doc="rnn_scan's backward through time: (dxp, dwhh, dh0) in one pass (not differentiable).",
)
lstm_scan_backward_kernel = primitive(
    "lstm_scan_backward",
    _lstm_backward,
    None,
    reference=lambda g, states, act, tc, xp, whh, h0, c0, needs: _through_generic_ops(
        _lstm_generic, g, (xp, whh, h0, c0)
    ),
    samples=_backward_samples(_lstm_samples, _lstm_forward, lambda res, args: (*res, *args)),
    doc="lstm_scan's backward through time: (dxp, dwhh, dh0, dc0) in one pass (not "
    "differentiable).",
)
gru_scan_backward_kernel = primitive(
    "gru_scan_backward",
    _gru_backward,
    None,
    reference=lambda g, hs, act, xp, whh, bhh, h0, needs: _through_generic_ops(
        _gru_generic, g, (xp, whh, bhh, h0)
    ),
    samples=_backward_samples(_gru_samples, _gru_forward, lambda res, args: (*res, *args)),
    doc="gru_scan's backward through time: (dxp, dwhh, dbhh, dh0) in one pass (not "
    "differentiable).",
)

__all__ = ["rnn_scan", "lstm_scan", "gru_scan"]
