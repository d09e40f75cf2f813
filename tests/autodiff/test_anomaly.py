"""detect_anomaly names the first primitive that makes a NaN or Inf, forward or backward."""

import numpy as np
import pytest

import tapegrad as tg


def test_forward_anomaly_names_primitive_shapes_and_call_site():
    x = tg.tensor(np.array([1.0, 0.0, 2.0]), requires_grad=True)
    with tg.detect_anomaly(), np.errstate(divide="ignore"):
        with pytest.raises(tg.AnomalyError) as info:
            (x * 2).log()  # log(0) = -inf: this line is the culprit
    msg = str(info.value)
    assert msg.startswith("log produced Inf in its forward pass")
    assert "(3,)" in msg and f"{__file__}:" in msg


def test_backward_anomaly_names_the_primitive_whose_vjp_failed():
    x = tg.tensor(np.array([4.0, 0.0]), requires_grad=True)
    with tg.detect_anomaly(), np.errstate(divide="ignore"):
        y = x.sqrt().sum()  # finite forward; d sqrt/dx at 0 is inf
        with pytest.raises(tg.AnomalyError, match=r"backward of sqrt produced Inf .* input 0"):
            y.backward()


def test_nan_propagated_from_inputs_is_not_blamed_on_later_ops():
    x = tg.tensor(np.array([np.nan, 1.0]))
    with tg.detect_anomaly():
        y = (x * 2 + 1).tanh()  # NaN came in with the data: no primitive produced it
    assert np.isnan(y.data[0])
    with tg.detect_anomaly(), np.errstate(invalid="ignore"):
        inf = tg.tensor(np.array([np.inf]))
        assert np.isnan((inf - inf).data).all()  # inputs were not finite: not blamed either
    # ... but an op that turns finite inputs into NaN is:
    with tg.detect_anomaly(), np.errstate(invalid="ignore"):
        with pytest.raises(tg.AnomalyError, match=r"^div produced NaN"):
            tg.tensor(np.zeros(2)) / tg.tensor(np.zeros(2))


def test_off_by_default_and_restored_after_the_block():
    with np.errstate(divide="ignore"):
        assert np.isinf(tg.tensor(np.zeros(1)).log().data).all()
        with tg.detect_anomaly():
            pass
        assert np.isinf(tg.tensor(np.zeros(1)).log().data).all()


def _compiled_log_step():
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)

    @tg.compile
    def step(x):
        w.grad = None
        loss = (w * tg.tensor(x)).log().sum()  # log of a negative product: NaN
        loss.backward()
        return loss

    return step


def test_a_compiled_replay_names_the_first_primitive_that_made_a_nan():
    step = _compiled_log_step()
    step(np.array([1.0, 1.0]))  # traced with finite values
    with np.errstate(invalid="ignore"):
        assert np.isnan(step(np.array([-1.0, 1.0])).item())  # without the mode: just NaN
        with tg.detect_anomaly():
            with pytest.raises(tg.AnomalyError) as info:
                step(np.array([-1.0, 1.0]))
    msg = str(info.value)
    assert msg.startswith("log produced NaN in a compiled replay from finite inputs")
    assert "(2,)" in msg and f"{__file__}:" in msg
    assert len(step.all_plans) == 1  # the same plan, replayed with checks


def test_a_compiled_replay_names_a_backward_anomaly():
    w = tg.tensor(np.array([4.0, 1.0]), requires_grad=True)

    @tg.compile
    def step(x):
        w.grad = None
        loss = (w * tg.tensor(x)).sqrt().sum()
        loss.backward()
        return loss

    step(np.array([1.0, 1.0]))
    with tg.detect_anomaly(), np.errstate(divide="ignore"):
        with pytest.raises(tg.AnomalyError, match=r"produced Inf in a compiled replay") as info:
            step(np.array([0.0, 1.0]))  # sqrt(0) = 0 is finite; its gradient is not
    assert "loss.backward()" not in str(info.value)  # the site is a file:line
    assert f"{__file__}:" in str(info.value)
