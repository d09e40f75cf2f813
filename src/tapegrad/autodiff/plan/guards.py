"""What a plan depends on besides its inputs, and the key it is kept under.

A plan is kept under its arguments' *signature*: the structure of tuples, lists and dicts, the
shape and dtype of every array and tensor in it, and every other value. A replay also checks
the Python values the step reads from its closure and globals (and those of helper functions of
its module), the state modules report through ``Trace.guard``, and refuses at trace time what no
replay could repeat (``global`` assignments, draws from NumPy's generators).
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable

import numpy as np

from ..backend import is_array
from ..errors import TraceError
from ..tensor import Tensor
from .trace import Trace

# -- what a traced function reads and writes outside tapegrad ---------------------------------
_MISSING = object()


_PLAIN = (int, float, complex, str, bytes, bool, type(None), np.generic)


def _same(a, b) -> bool:
    """Identity, or equal plain values (numbers, strings; NaN equals NaN), elementwise in
    tuples: how guards compare what a plan was traced under with what a call finds."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, _PLAIN):
        return bool(a == b) or (a != a and b != b)
    return False


def _code_objects(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _captured(fn) -> list[tuple[str, Callable[[], object]]]:
    """(name, getter) of every closure variable and global that ``fn`` reads, and those of
    the plain Python functions of its own module that it reaches that way (helpers)."""
    out: list = []
    seen: set[int] = set()

    def visit(f, depth):
        f = getattr(f, "__func__", f)  # bound methods
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen or depth > 3:
            return
        seen.add(id(f))
        globs = f.__globals__
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            out.append((f"the closure variable {name!r} of {f.__qualname__}", _cell_getter(cell)))
            _follow(_cell_value(cell), globs, depth)
        names = {n for n in _global_reads(code) if n in globs}
        for name in sorted(names):
            value = globs[name]
            if isinstance(value, types.ModuleType):
                continue
            out.append((f"the global {name!r} of {f.__qualname__}", _global_getter(globs, name)))
            _follow(value, globs, depth)

    def _follow(value, globs, depth):
        if isinstance(value, types.FunctionType) and value.__globals__ is globs:
            visit(value, depth + 1)

    visit(fn, 0)
    return out


def _global_reads(code: types.CodeType) -> set[str]:
    """The global names ``code`` (and the functions nested in it) reads: not its attribute
    names (``opt.step`` reads no global ``step``), which share ``co_names`` with them."""
    return {
        ins.argval
        for c in _code_objects(code)
        for ins in dis.get_instructions(c)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    }


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _cell_getter(cell):
    return lambda: _cell_value(cell)


def _global_getter(globs, name):
    return lambda: globs.get(name, _MISSING)


def _check_assignments(fn) -> None:
    """Refuse ``global``/``nonlocal`` assignments: a replay would not repeat them."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    if code is None:
        return
    for c in _code_objects(code):
        for ins in dis.get_instructions(c):
            if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") or (
                ins.opname == "STORE_DEREF" and ins.argval in c.co_freevars
            ):
                kind = "global" if "GLOBAL" in ins.opname else "nonlocal"
                raise TraceError(
                    f"compile: {f.__qualname__} assigns the {kind} variable {ins.argval!r}; a "
                    f"plan replays only tapegrad operations and recorded effects, so that "
                    f"assignment would run once. Keep such state outside the compiled function "
                    f"(return the value), or wrap the update in tg.effect(fn)"
                )


def _state_equal(a, b) -> bool:
    """Generator states: dicts of numbers and (for MT19937) arrays."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_state_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _rng_draws(trace: Trace, legacy_before) -> str | None:
    """Which generator the step drew from outside tapegrad's random operations, if any."""
    after = np.random.get_state()  # noqa: NPY002 (watching the legacy generator)
    if after[2] != legacy_before[2] or not np.array_equal(after[1], legacy_before[1]):
        return "NumPy's global generator (np.random.randn, np.random.rand, ...)"
    for k, (gen, state) in trace.rngs.items():
        if k not in trace.rngs_of_ops and not _state_equal(gen.bit_generator.state, state):
            return f"a {type(gen).__name__} the step holds"
    return None


class _Guards:
    epoch = 0  # bumped whenever a guarded object may have changed (see state_changed)


def state_changed() -> None:
    """Say that an object plans guard on (a module: its mode, parameters, sub-modules) may have
    changed: the next replay re-checks those guards. Until then a replay skips them, which keeps
    the check out of the steady-state step."""
    _Guards.epoch += 1


def _leaves(args, out: list) -> tuple:
    """Flatten ``args`` (tuples, lists, dicts of them, nested) into ``out``, the arrays and
    tensors in order; return the structure with every other leaf by value: the key a plan is
    kept under (a new structure or value is a new signature)."""
    if isinstance(args, Tensor):
        out.append(args)
        d = args.data
        return ("t", d.shape, d.dtype.str, args.requires_grad, type(d))
    if is_array(args):
        out.append(args)
        return ("a", args.shape, args.dtype.str, type(args))
    if isinstance(args, (tuple, list)):
        return (type(args), tuple(_leaves(a, out) for a in args))
    if isinstance(args, dict):
        return (dict, tuple((k, _leaves(v, out)) for k, v in args.items()))
    try:
        hash(args)
    except TypeError:
        raise TraceError(
            f"compile: an argument of type {type(args).__name__} is neither an array, a "
            f"tensor, a tuple, list or dict of them, nor hashable; pass arrays/Tensors, or "
            f"close over the value"
        ) from None
    return ("v", args)


def _signature(args) -> tuple:
    leaves: list = []
    return _leaves(args, leaves), leaves


def _rebuild(args, new: list):
    """``args`` with its arrays and tensors replaced, in order, by ``new``'s (consumed)."""
    if isinstance(args, Tensor) or is_array(args):
        return new.pop(0)
    if isinstance(args, (tuple, list)):
        items = [_rebuild(a, new) for a in args]
        return type(args)(*items) if hasattr(args, "_fields") else type(args)(items)
    if isinstance(args, dict):
        return type(args)((k, _rebuild(v, new)) for k, v in args.items())
    return args


def _difference(old: tuple, new: tuple, where: str = "the arguments") -> str | None:
    """What differs between two signatures, in words (None if only array shapes do)."""
    if old == new:
        return None
    if old[0] == "v" or new[0] == "v":
        if old[0] == new[0] == "v":
            return f"{where} changed from {old[1]!r} to {new[1]!r}"
        return f"{where} changed kind"
    if old[0] in ("t", "a") or new[0] in ("t", "a"):
        return None  # an array of another shape or dtype: a plan of its own is expected
    if old[0] is not new[0] or len(old[1]) != len(new[1]):
        return f"the structure of {where} changed"
    for k, (a, b) in enumerate(zip(old[1], new[1])):
        if old[0] is dict:
            if a[0] != b[0]:
                return f"the keys of {where} changed"
            d = _difference(a[1], b[1], f"{where}[{a[0]!r}]")
        else:
            d = _difference(a, b, f"argument {k}" if where == "the arguments" else f"{where}[{k}]")
        if d is not None:
            return d
    return None
