"""Finite-difference checks of the engine's gradients, for tests and for users' own code.

``gradcheck(f, *inputs)`` evaluates ``f`` in float64, contracts its output with a fixed random
cotangent ``v`` (so any output shape works), and compares the engine's gradient of
``sum(f(x) * v)`` with central differences, entry by entry. The error of an entry is
``|analytic - numeric| / max(1, |numeric|)``: relative for entries of magnitude above one,
absolute below (where finite differences carry absolute noise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .functional import vjp
from .graph import no_grad
from .tensor import Tensor


class GradcheckError(AssertionError):
    """The engine's gradient and finite differences disagree beyond the tolerance."""


@dataclass
class GradcheckReport:
    ok: bool
    max_error: float
    worst_input: int
    worst_index: tuple
    analytic: float
    numeric: float
    checked: int

    def __str__(self) -> str:
        verdict = "passed" if self.ok else "FAILED"
        return (
            f"gradcheck {verdict}: max error {self.max_error:.3g} over {self.checked} entries; "
            f"worst at input {self.worst_input}, index {self.worst_index}: "
            f"analytic {self.analytic:.10g}, numeric {self.numeric:.10g}"
        )


def gradcheck(
    f: Callable,
    *inputs,
    eps: float = 1e-6,
    tol: float = 1e-6,
    seed: int = 0,
    raise_exception: bool = True,
) -> GradcheckReport:
    """Check the gradient of ``f`` at ``inputs`` (all converted to float64) by central differences.

    Returns a :class:`GradcheckReport`; raises :class:`GradcheckError` naming the worst entry if
    the error exceeds ``tol`` and ``raise_exception`` is true.
    """
    xs = [np.array(x.data if isinstance(x, Tensor) else x, dtype=np.float64) for x in inputs]
    out, pullback = vjp(f, *xs)
    if out.dtype != np.float64:
        raise TypeError(f"gradcheck: f returned dtype {out.dtype} for float64 inputs")
    v = np.random.default_rng(seed).standard_normal(out.shape)
    analytic = pullback(v)

    def objective() -> float:
        with no_grad():
            return float(np.sum(np.asarray(f(*[Tensor(x) for x in xs]).data) * v))

    report = GradcheckReport(True, 0.0, -1, (), 0.0, 0.0, 0)
    for i, x in enumerate(xs):
        for idx in np.ndindex(x.shape):
            orig = x[idx]
            x[idx] = orig + eps
            hi = objective()
            x[idx] = orig - eps
            lo = objective()
            x[idx] = orig
            numeric = (hi - lo) / (2 * eps)
            a = float(analytic[i][idx])
            err = abs(a - numeric) / max(1.0, abs(numeric))
            report.checked += 1
            if err != err:  # NaN on either side is the worst possible error
                err = float("inf")
            if report.worst_input < 0 or err > report.max_error:
                report.max_error, report.worst_input, report.worst_index = err, i, idx
                report.analytic, report.numeric = a, numeric
    report.ok = report.max_error <= tol
    if not report.ok and raise_exception:
        raise GradcheckError(str(report))
    return report
