"""``Optimizer``: parameter groups, in-place steps, and a flat, file-friendly state dict.

Every optimiser updates ``p.data`` in place. Its per-parameter state (momentum, moment
estimates) is allocated once, on the parameter's first step, and the temporaries a step needs
live in scratch buffers shared by all parameters of one dtype, so a steady-state ``step()``
allocates (almost) nothing: every array operation is a ufunc with ``out=``.

State is keyed by the parameter's position in the concatenation of all groups' ``params``.
``state_dict()`` is flat, with string keys and values that are ndarrays or JSON-ready
scalars and lists::

    {"type": "Adam",
     "param_groups.0.params": [0, 1], "param_groups.0.lr": 0.001, "param_groups.0.betas": [...],
     "state.0.step": 3, "state.0.exp_avg": ndarray, ...}

so a checkpoint writer can put the arrays in a safetensors file and the rest in its JSON
metadata.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor, backend, enable_grad
from ..autodiff.core.state import active_trace, untraced
from ..autodiff.plan import effect, state_changed
from ..autodiff.primitives.registry import Primitive

__all__ = ["Optimizer"]


class Optimizer:
    """Base class: holds ``param_groups`` (dicts with ``"params"`` and hyperparameters) and
    ``state`` (parameter index -> dict of buffers and step counts).

    Subclasses define ``_n_scratch`` (temporaries per update), ``_check_group`` (validate one
    group's hyperparameters), ``_state_arrays``/``_state_scalars``/``_state_floats`` (the state
    keys a parameter has under a group's hyperparameters: arrays shaped like it, step counts,
    real numbers such as NAdam's momentum product), ``_init_state`` and ``_update``. One whose
    state is not per parameter (LBFGS: one vector over all of them) overrides ``step``,
    ``_saved_state`` (what ``state_dict`` writes) and ``_loaded_state`` (validation on load).
    """

    _n_scratch = 2
    _update_primitive: Primitive  # made for each subclass (``__init_subclass__``)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._update_primitive = Primitive(
            f"{cls.__name__.lower()}_update",
            _update_forward,
            None,
            effect=True,
            doc=f"One {cls.__name__} update of a parameter, in place, from its gradient "
            f"(``opt.step()`` runs it for each parameter; compiled plans record it).",
        )

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], defaults: dict[str, Any]):
        self.defaults = dict(defaults)
        self._check_group(self.defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[int, dict[str, Any]] = {}
        self._offsets: list[int] = []
        self._scratch_bufs: dict[np.dtype, np.ndarray] = {}
        self._scratch_views: dict[int, tuple] = {}
        if isinstance(params, (Tensor, dict)):
            raise TypeError(
                f"{self._name}: params must be an iterable of Tensors or of parameter-group "
                f"dicts, got a single {type(params).__name__}; wrap it in a list"
            )
        groups = list(params)
        if not groups:
            raise ValueError(f"{self._name}: got an empty parameter list")
        if all(isinstance(g, dict) for g in groups):
            for g in groups:
                self.add_param_group(g)
        elif any(isinstance(g, dict) for g in groups):
            raise TypeError(
                f"{self._name}: params mixes Tensors and parameter-group dicts; pass one kind"
            )
        else:
            self.add_param_group({"params": groups})

    # -- groups ------------------------------------------------------------------------------
    @property
    def _name(self) -> str:
        return type(self).__name__

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (the rest from defaults)."""
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{self._name}: a parameter group is a dict with a 'params' entry")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        gi = len(self.param_groups)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for j, p in enumerate(params):
            where = f"{self._name}: parameter {j} of group {gi}"
            if not isinstance(p, Tensor):
                raise TypeError(f"{where} is a {type(p).__name__}, expected a tapegrad Tensor")
            if p.data.dtype.kind != "f":
                raise TypeError(f"{where} has dtype {p.data.dtype}; optimisers need float tensors")
            if not p.is_leaf:
                raise ValueError(f"{where} is not a leaf tensor; optimise leaves only")
            if id(p) in seen:
                raise ValueError(f"{where} appears more than once across the parameter groups")
            seen.add(id(p))
        if not params:
            raise ValueError(f"{self._name}: parameter group {gi} has no parameters")
        new = {k: v for k, v in self.defaults.items()}
        new.update({k: v for k, v in group.items() if k != "params"})
        self._check_group(new, where=f"group {gi}")
        new["params"] = params
        self._offsets.append(sum(len(g["params"]) for g in self.param_groups))
        self.param_groups.append(new)
        state_changed()  # compiled plans that step this optimiser see the new group

    # -- subclass hooks ----------------------------------------------------------------------
    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        """Validate and normalise (to plain Python numbers) one group's hyperparameters."""
        if "lr" in group:
            group["lr"] = self._number(group, "lr", where, lo=0.0)

    def _state_arrays(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ()

    def _state_scalars(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ()

    def _state_floats(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ()

    def _init_state(self, p: np.ndarray, grad: np.ndarray, group: dict[str, Any]) -> dict:
        """A parameter's first state: its counts at 0, its real numbers at 0.0, its arrays
        zeros shaped like it."""
        state: dict[str, Any] = dict.fromkeys(self._state_scalars(group), 0)
        state.update(dict.fromkeys(self._state_floats(group), 0.0))
        for k in self._state_arrays(group):
            state[k] = backend.xp_of(p).zeros(p.shape, dtype=p.dtype)
        return state

    def _update(self, p: np.ndarray, grad: np.ndarray, state: dict, group: dict, scratch) -> None:
        raise NotImplementedError

    # -- validation helpers --------------------------------------------------------------------
    def _number(
        self,
        group: dict,
        key: str,
        where: str,
        lo: float | None = None,
        hi: float | None = None,
        hi_open: bool = False,
        value: Any = None,
        label: str | None = None,
    ) -> float:
        v = group[key] if value is None else value
        label = label or key
        place = f"{self._name}{' ' + where if where else ''}"
        if isinstance(v, (bool, np.bool_)) or not isinstance(
            v, (int, float, np.integer, np.floating)
        ):
            raise TypeError(f"{place}: {label} must be a real number, got {v!r}")
        v = float(v)
        if not math.isfinite(v):
            raise ValueError(f"{place}: {label} must be finite, got {v}")
        if lo is not None and v < lo:
            raise ValueError(f"{place}: invalid {label} {v}; expected {label} >= {lo:g}")
        if hi is not None and (v >= hi if hi_open else v > hi):
            op = "<" if hi_open else "<="
            raise ValueError(f"{place}: invalid {label} {v}; expected {label} {op} {hi:g}")
        return v

    def _integer(self, group: dict, key: str, where: str, lo: int = 1) -> int:
        v = group[key]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
            place = f"{self._name}{' ' + where if where else ''}"
            raise ValueError(f"{place}: {key} must be an int >= {lo}, got {v!r}")
        return int(v)

    def _betas(self, group: dict, where: str) -> tuple[float, float]:
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            place = f"{self._name}{' ' + where if where else ''}"
            raise ValueError(f"{place}: betas must be a pair (beta1, beta2), got {betas!r}")
        b1, b2 = (
            self._number(
                group, "betas", where, lo=0.0, hi=1.0, hi_open=True, value=b, label=f"betas[{i}]"
            )
            for i, b in enumerate(betas)
        )
        return b1, b2

    def _flag(self, group: dict, key: str, where: str) -> bool:
        v = group[key]
        if not isinstance(v, (bool, np.bool_)):
            place = f"{self._name}{' ' + where if where else ''}"
            raise TypeError(f"{place}: {key} must be True or False, got {v!r}")
        return bool(v)

    @staticmethod
    def _direction(
        p: np.ndarray, grad: np.ndarray, out: np.ndarray, wd: float, maximize: bool
    ) -> np.ndarray:
        """The gradient an update follows: ``-grad`` with ``maximize``, plus ``wd * p`` (L2
        weight decay), written into ``out``; ``grad`` itself (no copy) when neither applies."""
        if wd != 0:
            np.multiply(p, wd, out=out)
            if maximize:
                np.subtract(out, grad, out=out)
            else:
                np.add(grad, out, out=out)
            return out
        if maximize:
            return np.negative(grad, out=out)
        return grad

    # -- stepping ------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (``None``), or zero them in place with ``set_to_none=False``."""
        effect(lambda: self._zero_grad(set_to_none), f"{type(self).__name__}.zero_grad()")

    def _zero_grad(self, set_to_none: bool) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.fill(0)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient, in place; parameters with ``grad=None``
        are skipped. ``closure`` (optional) re-evaluates the loss, which is returned.

        Each parameter's update is one call of this optimiser's update primitive
        (``adam_update``, ``sgd_update``, ...); inside a compiled step each is recorded as an
        equation of the plan, which reads the parameter's gradient and the optimiser's
        hyperparameters and state as they are when it runs (a scheduler's new ``lr`` too)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        trace = active_trace()
        if trace is None:
            for group, offset in zip(self.param_groups, self._offsets):
                self._update_group(group, offset)
        else:
            self._record_step(trace)
        return loss

    def _update_group(self, group: dict, offset: int) -> None:
        """The eager updates of one group's parameters that have a gradient (``offset``: the
        index of its first), each what its update primitive does (``_update_param``), with
        every gradient checked first: a bad one stops the step before any parameter moves."""
        params = group["params"]
        states = [
            None if p._grad is None else self._param_state(offset + j, group, p.data, p._grad)
            for j, p in enumerate(params)
        ]
        for j, (p, state) in enumerate(zip(params, states)):
            if state is not None:
                self._update(p.data, p._grad, state, group, self._scratch(offset + j, p.data))

    def _with_grads(self):
        """(group, index, parameter) of each parameter that has a gradient, in order."""
        for group, offset in zip(self.param_groups, self._offsets):
            for j, p in enumerate(group["params"]):
                if p._grad is not None:
                    yield group, offset + j, p

    def _record_step(self, trace) -> None:
        """``step()`` inside a compiled step: one update equation per parameter."""
        trace.check_untouched(f"before {self._name}.step()")
        trace.guard(self, self._replay_state, self._replay_change)
        try:
            with untraced():  # the updates' own array operations are not traced
                for group, index, p in self._with_grads():
                    attrs = {"opt": self, "group": group, "index": index}
                    trace.record_update(self._update_primitive, p, attrs)
                    self._update_primitive.forward(p.data, p._grad, **attrs)
        finally:
            trace.resnapshot()

    def _replay_state(self) -> tuple:
        return tuple(tuple(g["params"]) for g in self.param_groups)

    def _replay_change(self, old: tuple) -> str:
        return f"{self._name}'s parameter groups changed (add_param_group)"

    def _update_param(self, idx: int, group: dict, data: np.ndarray, grad) -> None:
        """Parameter ``idx``'s update (its array ``data``, its gradient ``grad``), in place:
        the body of every update primitive."""
        state = self._param_state(idx, group, data, grad)
        self._update(data, grad, state, group, self._scratch(idx, data))

    def _param_state(self, idx: int, group: dict, data: np.ndarray, grad) -> dict:
        """Parameter ``idx``'s state, made on its first update, after checking its gradient."""
        if grad is None:
            raise ValueError(
                f"{self._name}: parameter {idx} has no gradient at this point of a compiled "
                f"step, while the trace found one; reset gradients in the same place on every "
                f"call (zero_grad() before backward())"
            )
        if grad.shape != data.shape or grad.dtype != data.dtype:
            raise ValueError(
                f"{self._name}: parameter {idx} has shape {data.shape} dtype "
                f"{data.dtype} but its grad has shape {grad.shape} dtype {grad.dtype}"
            )
        state = self.state.get(idx)
        if state is None:
            state = self.state[idx] = self._init_state(data, grad, group)
        elif type(data) is not np.ndarray:
            _follow(state, data)
        return state

    def _scratch(self, idx: int, data: np.ndarray) -> tuple[np.ndarray, ...]:
        """``_n_scratch`` temporaries shaped like ``data``: views of one buffer per dtype."""
        views = self._scratch_views.get(idx)
        if (
            views is not None
            and views[0].shape == data.shape
            and views[0].dtype == data.dtype
            and type(views[0]) is type(data)
        ):
            return views
        n = data.size
        key = (data.dtype, type(data))
        buf = self._scratch_bufs.get(key)
        if buf is None or buf.shape[1] < n:
            same = [
                p.data.size
                for g in self.param_groups
                for p in g["params"]
                if p.data.dtype == data.dtype
            ]
            xp = backend.xp_of(data)
            buf = xp.empty((self._n_scratch, max([n, *same])), dtype=data.dtype)
            self._scratch_bufs[key] = buf
            self._scratch_views = {
                k: v for k, v in self._scratch_views.items() if (v[0].dtype, type(v[0])) != key
            }
        views = tuple(buf[k, :n].reshape(data.shape) for k in range(self._n_scratch))
        self._scratch_views[idx] = views
        return views

    # -- state dict ------------------------------------------------------------------------------
    def _params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict[str, Any]:
        """A flat copy of the optimiser: hyperparameters per group, step counts, state arrays."""
        sd: dict[str, Any] = {"type": self._name}
        for gi, (group, offset) in enumerate(zip(self.param_groups, self._offsets)):
            sd[f"param_groups.{gi}.params"] = list(range(offset, offset + len(group["params"])))
            for k, v in group.items():
                if k != "params":
                    sd[f"param_groups.{gi}.{k}"] = list(v) if isinstance(v, tuple) else v
        for idx in sorted(self.state):
            for k, v in self._saved_state(self.state[idx]).items():
                sd[f"state.{idx}.{k}"] = backend.to_host(v).copy() if backend.is_array(v) else v
        return sd

    def _saved_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """One parameter's state as ``state_dict()`` writes it (arrays, counts, numbers)."""
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict()`` returned, exactly. Everything is validated first
        (type, group structure, hyperparameters, state keys, shapes); on any error the
        optimiser is left untouched. Arrays are copied into the parameters' dtype."""
        name = self._name
        if not isinstance(state_dict, dict):
            raise TypeError(f"{name}.load_state_dict: expected a dict, got {type(state_dict)}")
        kind = state_dict.get("type")
        if kind != name:
            raise ValueError(f"{name}.load_state_dict: state dict is for {kind!r}, not {name!r}")
        saved_groups: dict[int, dict[str, Any]] = {}
        saved_state: dict[int, dict[str, Any]] = {}
        for key, value in state_dict.items():
            if key == "type":
                continue
            parts = key.split(".", 2)
            if (
                len(parts) != 3
                or parts[0] not in ("param_groups", "state")
                or not parts[1].isdigit()
            ):
                raise ValueError(f"{name}.load_state_dict: unexpected key {key!r}")
            target = saved_groups if parts[0] == "param_groups" else saved_state
            target.setdefault(int(parts[1]), {})[parts[2]] = value
        if sorted(saved_groups) != list(range(len(self.param_groups))):
            raise ValueError(
                f"{name}.load_state_dict: state dict has {len(saved_groups)} parameter groups, "
                f"this optimiser has {len(self.param_groups)}"
            )
        index_map: dict[int, int] = {}
        new_groups = []
        for gi, (group, offset) in enumerate(zip(self.param_groups, self._offsets)):
            saved = dict(saved_groups[gi])
            ids = saved.pop("params", None)
            n = len(group["params"])
            if not isinstance(ids, list) or len(ids) != n:
                got = len(ids) if isinstance(ids, list) else ids
                raise ValueError(
                    f"{name}.load_state_dict: group {gi} has {n} parameters, "
                    f"the state dict's has {got}"
                )
            for j, sid in enumerate(ids):
                index_map[sid] = offset + j
            new = {k: v for k, v in group.items() if k != "params"}
            for k, v in saved.items():
                new[k] = tuple(v) if isinstance(new.get(k), tuple) and isinstance(v, list) else v
            self._check_group(new, where=f"group {gi} (loaded)")
            new_groups.append(new)
        group_of = {}
        for gi, (group, offset) in enumerate(zip(self.param_groups, self._offsets)):
            for j in range(len(group["params"])):
                group_of[offset + j] = gi
        new_state = self._loaded_state(saved_state, index_map, group_of, new_groups)
        for group, new in zip(self.param_groups, new_groups):
            group.update(new)
        self.state = new_state

    def _loaded_state(
        self,
        saved: dict[int, dict[str, Any]],
        index_map: dict[int, int],
        group_of: dict[int, int],
        groups: list[dict[str, Any]],
    ) -> dict[int, dict[str, Any]]:
        """The state that ``load_state_dict`` installs, validated: ``saved`` maps the state
        dict's parameter ids to their entries, ``index_map`` those ids to this optimiser's
        indices, ``group_of`` indices to groups, whose (validated) hyperparameters are
        ``groups``. Raises ``ValueError`` on anything amiss."""
        name = self._name
        params = self._params()
        new_state: dict[int, dict[str, Any]] = {}
        for sid, entries in saved.items():
            if sid not in index_map:
                raise ValueError(f"{name}.load_state_dict: state for unknown parameter {sid}")
            idx = index_map[sid]
            p = params[idx].data
            group = groups[group_of[idx]]
            arrays, scalars = self._state_arrays(group), self._state_scalars(group)
            reals = self._state_floats(group)
            expected = set(arrays) | set(scalars) | set(reals)
            if set(entries) != expected:
                raise ValueError(
                    f"{name}.load_state_dict: parameter {sid} has state {sorted(entries)}, "
                    f"expected {sorted(expected)}"
                )
            st: dict[str, Any] = {}
            for k in scalars:
                st[k] = self._loaded_count(f"state.{sid}.{k}", entries[k])
            for k in reals:
                st[k] = self._loaded_real(f"state.{sid}.{k}", entries[k])
            for k in arrays:
                st[k] = self._loaded_array(f"state.{sid}.{k}", entries[k], p, p.shape)
            new_state[idx] = st
        return new_state

    def _loaded_count(self, key: str, v: Any) -> int:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{self._name}.load_state_dict: {key} must be a count >= 0, got {v!r}")
        return int(v)

    def _loaded_real(self, key: str, v: Any, finite: bool = True) -> float:
        if (
            isinstance(v, (bool, np.bool_))
            or not isinstance(v, (int, float, np.integer, np.floating))
            or (finite and not math.isfinite(v))
        ):
            what = "a finite real number" if finite else "a real number"
            raise ValueError(f"{self._name}.load_state_dict: {key} must be {what}, got {v!r}")
        return float(v)

    def _loaded_array(
        self,
        key: str,
        v: Any,
        p: np.ndarray,
        shape: tuple[int, ...],
        whose: str = "the parameter's",
    ) -> np.ndarray:
        """A copy of ``v`` in ``p``'s dtype, after checking it is a float array of ``shape``."""
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.shape != shape:
            got = (
                f"{v.dtype} array of shape {v.shape}"
                if isinstance(v, np.ndarray)
                else type(v).__name__
            )
            raise ValueError(
                f"{self._name}.load_state_dict: {key} must be a float array of "
                f"shape {shape} ({whose}), got {got}"
            )
        return np.array(v, dtype=p.dtype, order="C", copy=True)

    def __repr__(self) -> str:
        lines = [f"{self._name}("]
        for gi, g in enumerate(self.param_groups):
            hp = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {gi}: {len(g['params'])} params, {hp}")
        return "\n".join(lines) + "\n)"


def _update_forward(p, g, *, opt: Optimizer, group: dict, index: int):
    """The forward of every optimiser's update primitive: parameter ``index`` (array ``p``,
    gradient ``g``) of ``group`` updated in place by ``opt``'s rule, with the hyperparameters
    and state the optimiser holds now; returns ``p``."""
    opt._update_param(index, group, p, g)
    return p


def _follow(state: dict, data) -> None:
    """Move a parameter's state arrays to the parameter's device (after ``Module.to``)."""
    for k, v in state.items():
        if backend.is_array(v) and type(v) is not type(data):
            state[k] = backend.copy_to_device(v, backend.device_of(data))
