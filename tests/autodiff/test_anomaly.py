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
