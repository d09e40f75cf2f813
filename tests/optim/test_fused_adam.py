"""The fused Adam loop equals the NumPy form of the update bit for bit, its blocks run on one
thread or over numba's (the ``blocks`` fixture, ``conftest.py``)."""

import itertools

import numpy as np
import pytest

from tapegrad.autodiff.kernels.cpu.optim import adam_update


@pytest.mark.parametrize(
    "dtype,amsgrad,wd,decoupled",
    list(itertools.product((np.float32, np.float64), (False, True), (0.0, 0.01), (False, True))),
)
def test_fused_adam_equals_the_numpy_form(dtype, amsgrad, wd, decoupled, blocks):
    rng = np.random.default_rng(0)
    p = rng.normal(size=(517, 9)).astype(dtype)  # more than one 2048-element block, odd sizes
    g = rng.normal(size=p.shape).astype(dtype)
    g.flat[3] = np.nan  # NaN flows through both forms alike
    states = [np.abs(rng.normal(size=p.shape)).astype(dtype) for _ in range(3)]
    fused = [a.copy() for a in (p, *states)]
    plain = [a.copy() for a in (p, *states)]
    scratch = (np.empty_like(p), np.empty_like(p))
    g_f = np.asfortranarray(g)  # not C-contiguous: the NumPy form runs
    kw = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=wd, decoupled=decoupled)
    for step in (1, 2, 3):
        for (q, m, v, vmax), grad in ((fused, g), (plain, g_f)):
            adam_update(q, grad, m, v, vmax if amsgrad else None, scratch, step=step, **kw)
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(fused[0], p)  # it did update


def _problem(seed=2):
    import tapegrad as tg

    rng = np.random.default_rng(seed)
    shapes = [(3000,), (7,), (40, 3), (1,), (2049,)]
    params = [tg.tensor(rng.normal(size=s).astype(np.float32), requires_grad=True) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(3)]
    return params, grads


@pytest.mark.parametrize("amsgrad,weight_decay", [(False, 0.0), (True, 0.01)])
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_an_eager_step_equals_the_update_primitive_per_parameter(name, amsgrad, weight_decay):
    """An eager ``step()`` checks every gradient, then updates each parameter (the Adam
    scalars made once a step); the update primitive per parameter (what a compiled plan
    records) gives the same bits, a parameter with no gradient left alone."""
    from tapegrad import optim as topt

    (a, grads), (b, _) = _problem(), _problem()
    kw = dict(lr=1e-2, amsgrad=amsgrad, weight_decay=weight_decay)
    fast, slow = getattr(topt, name)(a, **kw), getattr(topt, name)(b, **kw)
    for step_grads in grads:
        for params in (a, b):
            for i, (p, g) in enumerate(zip(params, step_grads)):
                p.grad = None if i == 3 else g.copy()
        fast.step()
        for group, index, p in slow._with_grads():
            slow._update_primitive.forward(p.data, p._grad, opt=slow, group=group, index=index)
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.data, q.data)
    assert 3 not in fast.state and fast.state[0]["step"] == 3
    for i in fast.state:
        for key, value in fast.state[i].items():
            np.testing.assert_array_equal(value, slow.state[i][key])


def test_a_bad_gradient_stops_the_step_before_any_parameter_moves():
    from tapegrad import optim as topt

    params, grads = _problem()
    opt = topt.Adam(params, lr=1e-2)
    for p, g in zip(params, grads[0]):
        p.grad = g
    opt.step()
    before = [p.data.copy() for p in params]
    for p, g in zip(params, grads[1]):
        p.grad = g
    params[4].grad = np.zeros(5, np.float32)  # the wrong shape, last
    with pytest.raises(ValueError, match="parameter 4 has shape"):
        opt.step()
    assert all(opt.state[i]["step"] == 1 for i in range(5))
    for p, b in zip(params, before):
        np.testing.assert_array_equal(p.data, b)
