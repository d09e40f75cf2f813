"""Run a module with some of its parameters and buffers swapped for other Tensors (what
``tapegrad.func.functional_call`` needs): the swap writes the module's own slots and puts the
originals back afterwards, even when the call raises. Inside ``tapegrad.compile`` the plan's
guards record the modules' own parameters before the swap, so replays are not invalidated by
the per-call tensors swapped in."""

from __future__ import annotations

from contextlib import contextmanager

from ...autodiff.core.state import active_trace
from ...autodiff.plan import state_changed
from ...autodiff.tensor import Tensor


def _owner(module, name: str):
    *path, leaf = name.split(".")
    sub = module
    for part in path:
        child = sub._modules.get(part)
        if child is None:
            raise KeyError(
                f"functional_call: {type(module).__name__} has no sub-module for {name!r}"
            )
        sub = child
    if leaf in sub._parameters:
        return sub, leaf, sub._parameters
    if leaf in sub._buffers:
        return sub, leaf, sub._buffers
    raise KeyError(f"functional_call: {type(module).__name__} has no parameter or buffer {name!r}")


def _slots(module, values: dict, tie_weights: bool) -> dict:
    """(owner module, attribute, its table) -> new value, for every name given, plus (with
    ``tie_weights``) every other name that shares a given parameter."""
    slots = {}
    replaced = {}
    for name, value in values.items():
        if not isinstance(value, Tensor):
            value = Tensor(value)
        sub, leaf, table = _owner(module, name)
        slots[(id(sub), leaf)] = (sub, leaf, table, value)
        if table[leaf] is not None:
            replaced[id(table[leaf])] = value
    if tie_weights and replaced:
        for sub in module.modules():
            for table in (sub._parameters, sub._buffers):
                for leaf, old in table.items():
                    if old is not None and id(old) in replaced and (id(sub), leaf) not in slots:
                        slots[(id(sub), leaf)] = (sub, leaf, table, replaced[id(old)])
    return slots


@contextmanager
def swapped(module, values: dict, *, tie_weights: bool = True, strict: bool = False):
    """``module`` with the parameters/buffers named in ``values`` (dotted names) replaced."""
    if strict:
        expected = {n for n, _ in module.named_parameters()} | {
            n for n, _ in module.named_buffers()
        }
        missing, unexpected = expected - set(values), set(values) - expected
        if missing or unexpected:
            raise KeyError(
                f"functional_call(strict=True): missing {sorted(missing)}, "
                f"unexpected {sorted(unexpected)}"
            )
    slots = _slots(module, values, tie_weights)
    trace = active_trace()
    if trace is not None:  # a compiled plan depends on the modules' own state, not the swap's
        for sub in module.modules():
            trace.guard(sub, sub._replay_state, sub._replay_change)
    saved = [(sub, leaf, table, table[leaf]) for sub, leaf, table, _ in slots.values()]
    state_changed()
    try:
        for sub, leaf, table, value in slots.values():
            table[leaf] = value
            object.__setattr__(sub, leaf, value)
        yield module
    finally:
        for sub, leaf, table, old in saved:
            table[leaf] = old
            object.__setattr__(sub, leaf, old)
        state_changed()
