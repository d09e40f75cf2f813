"""``Module``: the base of every layer and model, plus the containers ``Sequential`` and
``ModuleList``.

A Module owns Parameters and sub-Modules, registered simply by assigning them to attributes
(``self.weight = Parameter(...)``, ``self.fc = Linear(...)``), in assignment order, and
buffers: state that is not trained but belongs to the model (BatchNorm's running statistics),
registered with ``register_buffer``. From that registry come ``parameters()``, dotted
``named_parameters()``, ``buffers()``, ``state_dict()`` and ``load_state_dict()``,
``train()``/``eval()``, ``to()`` and a nested ``repr``. Parameters and buffers live in the
instance ``__dict__`` as well, so reading ``self.weight`` in ``forward`` costs a plain attribute
lookup.

A parameter shared by two modules (weight tying) is one Parameter: ``parameters()`` yields it
once, both uses accumulate into its one gradient, and ``state_dict()`` lists it under every
name it has (as PyTorch does, so state dicts map 1:1); loading gives each name's value to the
same array and refuses two different values for it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ..autodiff import backend
from ..autodiff.core.state import active_trace
from ..autodiff.plan import state_changed
from ..autodiff.tensor import Tensor
from .parameter import Parameter


class StateDictError(ValueError):
    """``load_state_dict`` found missing, unexpected or mismatched entries (nothing was loaded)."""


class LoadResult(NamedTuple):
    """Names ``load_state_dict(strict=False)`` skipped."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers and models: subclass it, assign parameters and sub-modules in
    ``__init__`` (after ``super().__init__()``), and define ``forward``."""

    training: bool
    _load_aliases: dict[str, str] = {}
    """Other names ``load_state_dict`` accepts for this module's parameters (alias -> name),
    e.g. the recurrent layers accept PyTorch's single-layer names ``weight_ih_l0``."""

    def __init__(self) -> None:
        d = self.__dict__
        d["_parameters"] = OrderedDict()
        d["_modules"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["training"] = True

    # -- registration ---------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        state_changed()  # compiled plans re-check the modules they called (mode, parameters)
        d = self.__dict__
        params = d.get("_parameters")
        if params is None:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError(
                    f"{type(self).__name__}: call super().__init__() before assigning "
                    f"parameters or sub-modules (while setting {name!r})"
                )
            object.__setattr__(self, name, value)
            return
        modules = d["_modules"]
        buffers = d.get("_buffers", {})
        if name in buffers and not isinstance(value, (Parameter, Module)):
            buffers[name] = _as_buffer(self, name, value)
            object.__setattr__(self, name, buffers[name])
            return
        if isinstance(value, Parameter):
            modules.pop(name, None)
            buffers.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None)
            buffers.pop(name, None)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to parameter "
                    f"{name!r}; assign an nn.Parameter or None"
                )
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to sub-module "
                    f"{name!r}; assign an nn.Module or None"
                )
            modules[name] = None
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        state_changed()
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers.pop(name, None)
        self._non_persistent.discard(name)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or an empty slot, ``None``) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None")
        state_changed()
        self._parameters[name] = param
        object.__setattr__(self, name, param)

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Register ``tensor`` (a Tensor or an ndarray, kept as a Tensor without gradient; or
        ``None``, an empty slot) as the buffer ``name``: state that belongs to the model but is
        not trained, such as running statistics. Buffers are in ``buffers()``, follow
        ``to(dtype)`` (float ones), and are saved by ``state_dict()`` unless
        ``persistent=False``. Assigning to ``self.name`` later replaces the buffer. Inside a
        compiled step, update a buffer in place with ``tg.assign`` so replays repeat it."""
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(
                f"register_buffer: the name must be a non-empty string without '.', got {name!r}"
            )
        if "_buffers" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before registering buffers "
                f"(while registering {name!r})"
            )
        if name in self._parameters or name in self._modules:
            raise KeyError(f"register_buffer: {name!r} is already a parameter or sub-module")
        if name not in self._buffers and hasattr(self, name):
            raise KeyError(f"register_buffer: attribute {name!r} already exists")
        state_changed()
        self._buffers[name] = _as_buffer(self, name, tensor)
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)
        object.__setattr__(self, name, self._buffers[name])

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` under ``name`` (names need not be identifiers: "0", "1", ...)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module, got {type(module).__name__}")
        state_changed()
        self._modules[name] = module
        object.__setattr__(self, name, module)

    # -- traversal ------------------------------------------------------------------------
    def named_parameters(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` pairs: own parameters in assignment order, then each
        sub-module's. A parameter shared by two modules appears once, under its first name."""
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mprefix}.{name}" if mprefix else name), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter (see :meth:`named_parameters`), e.g. for an optimiser."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def trainable_parameters(self) -> list[Parameter]:
        """The parameters with ``requires_grad=True``: what an optimiser should update (frozen
        ones, e.g. a pretrained Embedding, are left out)."""
        return [p for p in self.parameters() if p.requires_grad]

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, buffer)`` pairs, in the order of :meth:`named_parameters` (each buffer
        once)."""
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, b in m._buffers.items():
                if b is None or id(b) in seen:
                    continue
                seen.add(id(b))
                yield (f"{mprefix}.{name}" if mprefix else name), b

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer (see :meth:`named_buffers`)."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        """Direct sub-modules, in assignment order."""
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module (name ``prefix``) and every descendant, depth first, each once."""
        seen: set[int] = set()
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [(f"{name}.{k}" if name else k, c) for k, c in m.named_children()]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator[Module]:
        """This module and every descendant, depth first."""
        for _, m in self.named_modules():
            yield m

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every sub-module (children first) and then on this one."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def num_parameters(self) -> int:
        """Total number of parameter entries."""
        return sum(p.size for p in self.parameters())

    # -- modes, gradients, dtype ---------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (Dropout active) on this module and all descendants."""
        state_changed()
        for m in self.modules():
            m.__dict__["training"] = bool(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (Dropout off) on this module and all descendants."""
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's accumulated gradient (``grad = None``), or zero it in place
        with ``set_to_none=False``."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.fill(0)

    def register_module(self, name: str, module: Module | None) -> None:
        """PyTorch's other name for :meth:`add_module`."""
        self.add_module(name, module)

    def get_submodule(self, target: str) -> Module:
        """The sub-module at the dotted path ``target`` (``""``: this module)."""
        mod = self
        for part in target.split(".") if target else ():
            child = mod._modules.get(part)
            if child is None:
                raise AttributeError(
                    f"{type(mod).__name__} has no sub-module {part!r} ({target!r})"
                )
            mod = child
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at the dotted path ``target`` (``"encoder.weight"``)."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._parameters:
            raise AttributeError(f"{type(mod).__name__} has no parameter {name!r} ({target!r})")
        return mod._parameters[name]

    def requires_grad_(self, flag: bool = True) -> Module:
        """Freeze (``False``) or unfreeze every parameter."""
        for p in self.parameters():
            p.requires_grad = bool(flag)
        return self

    def to(self, *args, dtype=None, device=None) -> Module:
        """Move every parameter and buffer to ``device`` (``"cpu"``, ``"cuda"``) and/or convert
        the parameters and floating-point buffers to float ``dtype`` (e.g. ``np.float64`` for
        gradchecks): ``to("cuda")``, ``to(np.float64)``, ``to("cpu", np.float64)``,
        ``to(dtype=..., device=...)``. Integer buffers (counters) keep their dtype.

        The Parameter and buffer objects stay the same but get new arrays (their gradients are
        moved with them). An optimiser's state follows its parameters to their device on its
        next step; build optimisers after a dtype change.
        """
        for a in args:
            if _is_device(a):
                device = a
            elif dtype is None:
                dtype = a
            else:
                raise TypeError(f"Module.to: unexpected argument {a!r}")
        if device is not None:
            self._move(backend.get_device(device))
        if dtype is None:
            return self
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"Module.to: {dtype!r} is neither a dtype nor a device") from None
        if dtype.kind != "f":
            raise TypeError(f"Module.to: parameters must stay floating point, got {dtype}")
        for p in self.parameters():
            if p.data.dtype != dtype:
                p.data = p.data.astype(dtype)
                p.grad = None
        for b in self.buffers():
            if b.data.dtype.kind == "f" and b.data.dtype != dtype:
                b.data = b.data.astype(dtype)
        return self

    def _move(self, dev) -> None:
        state_changed()
        for t in (*self.parameters(), *self.buffers()):
            if backend.device_of(t.data) is not dev:
                t.data = backend.copy_to_device(t.data, dev)
                if t.grad is not None:
                    t.grad = backend.copy_to_device(t.grad, dev)

    def cpu(self) -> Module:
        """Move every parameter and buffer to the CPU (the module itself is returned)."""
        return self.to("cpu")

    def cuda(self, device=None) -> Module:
        """Move every parameter and buffer to the GPU (``Module.to("cuda")``)."""
        return self.to("cuda" if device is None else f"cuda:{device}")

    def double(self) -> Module:
        return self.to(np.float64)

    def float(self) -> Module:
        return self.to(np.float32)

    # -- state -------------------------------------------------------------------------------
    def _state_entries(self, prefix: str = "", path: tuple = ()) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, tensor)`` of every parameter and persistent buffer, under every name
        (a tied parameter appears once per module holding it): own parameters, own buffers,
        then each sub-module's, the order PyTorch's state dicts have."""
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                yield prefix + name, b
        for name, m in self._modules.items():
            if m is not None and id(m) not in path:  # a module containing itself: once
                yield from m._state_entries(f"{prefix}{name}.", (*path, id(self)))

    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        """Ordered ``name -> copy of the array`` of every parameter and persistent buffer
        (module by module: its parameters, its buffers, then its sub-modules'). A parameter
        shared by several modules is listed under each of its names."""
        return OrderedDict((n, backend.to_host(t.data).copy()) for n, t in self._state_entries())

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> LoadResult:
        """Copy values from ``state_dict`` into the parameters and persistent buffers, in place.

        Everything is checked first: with ``strict`` every entry of :meth:`state_dict` must be
        present and every given entry must name one; always, shapes and dtypes must match
        exactly (no silent cast), and a tied parameter given under two names must get the same
        value under both. Any problem raises one :class:`StateDictError` listing all of them
        and leaves the model untouched. On success values are copied with ``np.copyto``, so
        arrays held by an optimiser stay valid.
        """
        own = OrderedDict(self._state_entries())
        state_dict = self._resolve_aliases(state_dict)
        missing = [n for n in own if n not in state_dict]
        unexpected = [n for n in state_dict if n not in own]
        problems: list[str] = []
        values: dict[str, np.ndarray] = {}
        first_name: dict[int, str] = {}
        for name, p in own.items():
            if name not in state_dict:
                continue
            v = state_dict[name]
            v = v.data if isinstance(v, Tensor) else v
            v = backend.to_host(v) if backend.is_array(v) else np.asarray(v)
            if v.shape != p.shape:
                problems.append(f"  {name}: shape {v.shape} given, the model has {p.shape}")
            elif v.dtype != p.dtype:
                problems.append(f"  {name}: dtype {v.dtype} given, the model has {p.dtype}")
            elif id(p) in first_name and not np.array_equal(values[first_name[id(p)]], v):
                problems.append(
                    f"  {name}: shares its array with {first_name[id(p)]} (tied) but is given "
                    f"a different value"
                )
            first_name.setdefault(id(p), name)
            values[name] = v
        if strict:
            problems += [f"  missing: {n} {own[n].shape}" for n in missing]
            problems += [f"  unexpected: {n}" for n in unexpected]
        if problems:
            raise StateDictError(
                f"load_state_dict into {type(self).__name__}: {len(problems)} problem(s), "
                f"nothing was loaded:\n" + "\n".join(problems)
            )
        for name, v in values.items():
            target = own[name].data
            np.copyto(target, backend.copy_to_device(v, backend.device_of(target)))
        return LoadResult(missing, unexpected)

    def _resolve_aliases(self, state_dict: dict) -> dict:
        """Rename entries given under a sub-module's alias to the parameter's own name."""
        renames = {}
        for prefix, m in self.named_modules():
            for alias, name in m._load_aliases.items():
                full_alias = f"{prefix}.{alias}" if prefix else alias
                full_name = f"{prefix}.{name}" if prefix else name
                if full_alias in state_dict and full_name not in state_dict:
                    renames[full_alias] = full_name
        if not renames:
            return state_dict
        return {renames.get(k, k): v for k, v in state_dict.items()}

    # -- calling, printing ---------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        trace = active_trace()
        if trace is not None:  # a compiled plan depends on this module's mode and parameters
            trace.guard(self, self._replay_state, self._replay_change)
        hooks = self.__dict__.get("_hooks")
        if hooks:
            return _call_with_hooks(self, hooks, trace, args, kwargs)
        return self.forward(*args, **kwargs)

    def register_forward_pre_hook(self, hook: Callable) -> _HookHandle:
        """PyTorch's ``hook(module, args)`` run before ``forward``; a non-None result replaces
        the positional arguments (a tuple, or one value). Returns a handle: ``.remove()``."""
        return _add_hook(self, "pre", hook)

    def register_forward_hook(self, hook: Callable) -> _HookHandle:
        """PyTorch's ``hook(module, args, output)`` run after ``forward``; a non-None result
        replaces the output. Eager only: a compiled step would run it once, at its trace."""
        return _add_hook(self, "post", hook)

    def _replay_state(self) -> tuple:
        """What a compiled plan that called this module replays under: train/eval mode and
        the parameter, sub-module and buffer objects it holds (compared by identity)."""
        return (
            self.training,
            *self._parameters.values(),
            *self._modules.values(),
            *self._buffers.values(),
        )

    def _replay_change(self, old: tuple) -> str:
        name = type(self).__name__
        if old[0] != self.training:
            return f"{name} was switched to {'training' if self.training else 'evaluation'} mode"
        return f"a parameter, buffer or sub-module of {name} was replaced"

    def extra_repr(self) -> str:
        """The arguments shown inside ``Name(...)``; layers override it."""
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        head = f"{type(self).__name__}({extra}" if extra else f"{type(self).__name__}("
        return head + "\n" + "\n".join(lines) + "\n)"


def _as_buffer(module: Module, name: str, value) -> Tensor | None:
    """A buffer's value as a leaf Tensor without gradient (ndarrays are wrapped, not copied)."""
    if value is None:
        return None
    if isinstance(value, Parameter):
        raise TypeError(f"{type(module).__name__}: buffer {name!r} cannot be a Parameter")
    if isinstance(value, Tensor):
        if value._node is not None or value.requires_grad:
            raise TypeError(
                f"{type(module).__name__}: buffer {name!r} must be a leaf tensor without "
                f"gradient; pass .detach() of it"
            )
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        return Tensor(np.asarray(value))
    raise TypeError(
        f"{type(module).__name__}: buffer {name!r} must be a Tensor, an ndarray or None, "
        f"got {type(value).__name__}"
    )


def _is_device(a) -> bool:
    if isinstance(a, backend.Device) or type(a).__name__ == "device":
        return True
    return isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda", "mps", "meta", "xla")


class _HookHandle:
    """What ``register_forward_(pre_)hook`` returns: ``remove()`` takes the hook off."""

    def __init__(self, hooks: list, entry: tuple) -> None:
        self._hooks, self._entry = hooks, entry

    def remove(self) -> None:
        if self._entry in self._hooks:
            self._hooks.remove(self._entry)


def _add_hook(module: Module, kind: str, hook: Callable) -> _HookHandle:
    if not callable(hook):
        raise TypeError(f"{type(module).__name__}: a forward hook must be callable, got {hook!r}")
    hooks = module.__dict__.setdefault("_hooks", [])  # not a registered attribute
    entry = (kind, hook)
    hooks.append(entry)
    return _HookHandle(hooks, entry)


def _call_with_hooks(module: Module, hooks: list, trace, args: tuple, kwargs: dict):
    """``forward`` between the pre-hooks and the hooks, in registration order."""
    if trace is not None:
        from ..autodiff.plan import TraceError

        raise TraceError(
            f"{type(module).__name__} has forward hooks: a compiled step would run their Python "
            f"code once, when traced, and never again; remove them (handle.remove()) or run "
            f"the step eagerly"
        )
    for kind, hook in list(hooks):
        if kind == "pre":
            new = hook(module, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
    out = module.forward(*args, **kwargs)
    for kind, hook in list(hooks):
        if kind == "post":
            new = hook(module, args, out)
            out = out if new is None else new
    return out


class ModuleList(Module):
    """A list of modules whose parameters are registered under "0", "1", ..."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        self.extend(modules)

    def _items(self) -> list[Module]:
        return list(self._modules.values())

    def _reindex(self, items: list[Module]) -> None:
        for k in list(self._modules):
            object.__delattr__(self, k)
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = self._items()
        items.insert(index, module)
        self._reindex(items)

    def __getitem__(self, index):
        items = self._items()
        if isinstance(index, slice):
            return type(self)(items[index])
        return items[index]

    def __setitem__(self, index: int, module: Module) -> None:
        items = self._items()
        items[index] = module
        self._reindex(items)

    def __delitem__(self, index) -> None:
        items = self._items()
        del items[index]
        self._reindex(items)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList is a container; call its modules one by one")


class Sequential(ModuleList):
    """Modules applied one after another: ``Sequential(a, b, c)(x) == c(b(a(x)))``.

    Supports ``len``, iteration, indexing (a slice gives a Sequential) and ``append``.
    """

    def __init__(self, *modules: Module) -> None:
        named = len(modules) == 1 and isinstance(modules[0], dict)  # Sequential(OrderedDict)
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):
            modules = tuple(modules[0])
        items = modules[0].items() if named else enumerate(modules)
        for i, m in items:
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: item {i} is a {type(m).__name__}, not an nn.Module")
        if not named:
            super().__init__(modules)
            return
        super().__init__(())
        for name, m in modules[0].items():  # PyTorch's named form: parameters "fc.weight", ...
            self.add_module(str(name), m)

    def __getitem__(self, index):
        items = self._items()
        if isinstance(index, slice):
            return Sequential(*items[index])
        return items[index]

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x
