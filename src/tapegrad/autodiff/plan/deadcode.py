"""Dead-code elimination: drop the equations whose results nothing reads."""

from __future__ import annotations

from .trace import VAR, Eq, Reduce, Sink, _spec_vars


def _live_events(events: list, out_spec) -> list:
    """The events a replay must run: side effects, and the equations whose values something
    reads (dead-code elimination, from the last event back)."""
    needed = set(_spec_vars(out_spec))
    live = []
    for e in reversed(events):
        if isinstance(e, Eq):
            if not (e.prim.effect or any(v in needed for v in e.outs)):
                continue
            needed.update(p for k, p in e.ins if k == VAR)
        elif isinstance(e, Sink):
            if e.grad[0] == VAR:
                needed.add(e.grad[1])
        elif isinstance(e, Reduce):
            needed.add(e.loss)
        live.append(e)
    live.reverse()
    return live
