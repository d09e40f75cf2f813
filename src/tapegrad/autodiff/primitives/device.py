"""Moving values between devices as a primitive, so ``x.to("cuda")`` and ``x.cpu()`` are
differentiable (the gradient moves back) and can sit inside a compiled step."""

from __future__ import annotations

import numpy as np

from .. import backend
from . import samples as S
from .args import plain
from .registry import Sample, primitive, run


def _to_device_fwd(x, device: str, out=None):
    y = backend.copy_to_device(x, backend.get_device(device))
    if out is None:
        return y if y is not x else x.copy()
    np.copyto(out, y)
    return out


def _to_device_vjp(g, out, x, device):
    return run(to_device, g, device=backend.device_of(plain(x)).name)


to_device = primitive(
    "to_device",
    _to_device_fwd,
    (_to_device_vjp,),
    reference=lambda x, device: np.array(x, copy=True),
    samples=lambda rng: [Sample((S.values(rng, s),), {"device": "cpu"}) for s in [(), (3, 4)]],
    doc="A copy of x on ``device`` (a name: 'cpu', 'cuda'); the gradient is copied back to x's "
    "device.",
)
