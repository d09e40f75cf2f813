"""PyTorch's other containers: ``ModuleDict``, ``ParameterList`` and ``ParameterDict``.

Their entries are registered under their keys (``"0"``, ``"1"``, ... for the list), so
``parameters()``, ``state_dict()`` and optimisers see them with PyTorch's names
(``heads.cls.weight``, ``scales.0``). Tensors that are not Parameters are made Parameters, as
PyTorch does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ..autodiff.tensor import Tensor
from .module import Module
from .parameter import Parameter


def _check_key(owner: str, key) -> str:
    if not isinstance(key, str) or not key or "." in key:
        raise KeyError(f"{owner}: keys must be non-empty strings without '.', got {key!r}")
    return key


def _entries(values) -> Iterable:
    if values is None:
        return ()
    if isinstance(values, Mapping):
        return values.items()
    return values


class ModuleDict(Module):
    """Sub-modules by name: ``d["encoder"]``, ``d.items()``, ``"x" in d``, ``update(...)``."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(
                f"ModuleDict: {key!r} must be an nn.Module, got {type(module).__name__}"
            )
        self.add_module(_check_key("ModuleDict", key), module)

    def __delitem__(self, key: str) -> None:
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def __contains__(self, key) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def pop(self, key: str) -> Module:
        module = self._modules[key]
        del self[key]
        return module

    def clear(self) -> None:
        for key in list(self._modules):
            del self[key]

    def update(self, modules) -> None:
        for key, module in _entries(modules):
            self[key] = module

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict is a container; call its modules by name")


def _param(value) -> Parameter | None:
    if value is None or isinstance(value, Parameter):
        return value
    if isinstance(value, Tensor):
        return Parameter(value.data, requires_grad=value.requires_grad or value.is_leaf)
    return Parameter(value)


class ParameterList(Module):
    """A list of Parameters registered as ``"0"``, ``"1"``, ...: indexing, ``append``,
    ``extend``, ``len``, iteration."""

    def __init__(self, values=None) -> None:
        super().__init__()
        self.extend(values or ())

    def __getitem__(self, index):
        items = list(self._parameters.values())
        if isinstance(index, slice):
            return ParameterList(items[index])
        return items[index]

    def __setitem__(self, index: int, value) -> None:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"ParameterList: index {index} out of range for {n} parameters")
        self.register_parameter(str(index % n), _param(value))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(list(self._parameters.values()))

    def append(self, value) -> ParameterList:
        self.register_parameter(str(len(self)), _param(value))
        return self

    def extend(self, values) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(
            f"({k}): Parameter of shape {tuple(p.shape)} ({p.dtype})"
            for k, p in self._parameters.items()
        )

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList is a container; use its parameters")


class ParameterDict(Module):
    """Parameters by name: ``d["scale"]``, ``d.items()``, ``"x" in d``, ``update(...)``."""

    def __init__(self, parameters=None) -> None:
        super().__init__()
        self.update(parameters)

    def __getitem__(self, key: str) -> Parameter:
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(_check_key("ParameterDict", key), _param(value))

    def __delitem__(self, key: str) -> None:
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._parameters))

    def __contains__(self, key) -> bool:
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()

    def pop(self, key: str) -> Parameter:
        p = self._parameters[key]
        del self[key]
        return p

    def update(self, parameters) -> None:
        for key, value in _entries(parameters):
            self[key] = value

    def extra_repr(self) -> str:
        return "\n".join(
            f"({k}): Parameter of shape {tuple(p.shape)} ({p.dtype})"
            for k, p in self._parameters.items()
        )

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict is a container; use its parameters")
