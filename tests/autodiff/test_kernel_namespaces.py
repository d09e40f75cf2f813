"""One kernel namespace per device: ``kernels/cpu`` and ``kernels/cuda`` export the same names
with the same parameters, and primitives and optimisers reach kernels only through
``kernels_for`` (no module of one device imported, no choice between devices of their own).

Read from the source with ``ast``, so the CUDA namespace is checked without importing
``numba.cuda`` (its kernels run in ``tests/cudasim``)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tapegrad.autodiff import backend
from tapegrad.autodiff.kernels import cpu
from tapegrad.autodiff.kernels.dispatch import kernels_for

SRC = Path(__file__).resolve().parents[2] / "src" / "tapegrad"
KERNELS = SRC / "autodiff" / "kernels"


def _module_file(package: Path, level: int, module: str | None) -> Path:
    base = package
    for _ in range(level - 1):
        base = base.parent
    path = base.joinpath(*module.split(".")) if module else base
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _exported(init: Path) -> list[str]:
    tree = ast.parse(init.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{init} has no __all__")


def _parameters(path: Path, name: str) -> list[tuple]:
    """(kind, name, default) of each parameter of the function ``name`` that ``path`` defines
    or imports (followed through ``from ... import ... as ...``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            plain = a.posonlyargs + a.args
            defaults = [None] * (len(plain) - len(a.defaults)) + list(a.defaults)
            out = [("positional", p.arg, d and ast.dump(d)) for p, d in zip(plain, defaults)]
            out += [("*", a.vararg.arg, None)] if a.vararg else []
            out += [
                ("keyword", p.arg, d and ast.dump(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)
            ]
            return out + ([("**", a.kwarg.arg, None)] if a.kwarg else [])
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    target = _module_file(path.parent, node.level, node.module)
                    return _parameters(target, alias.name)
    raise AssertionError(f"{name} is neither defined nor imported in {path}")


def test_every_device_namespace_exports_the_same_names_and_parameters():
    names = _exported(KERNELS / "cpu" / "__init__.py")
    assert names == _exported(KERNELS / "cuda" / "__init__.py")
    assert names == sorted(cpu.__all__) and all(callable(getattr(cpu, n)) for n in names)
    differ = {}
    for name in names:
        on_cpu = _parameters(KERNELS / "cpu" / "__init__.py", name)
        on_cuda = _parameters(KERNELS / "cuda" / "__init__.py", name)
        if on_cpu != on_cuda:
            differ[name] = (on_cpu, on_cuda)
    assert not differ, f"namespaces differ in parameters: {differ}"
    # a name that is also a module of the package would hide the module from
    # ``from tapegrad.autodiff.kernels.cpu import <module>``
    modules = {p.stem for d in ("cpu", "cuda") for p in (KERNELS / d).glob("*.py")}
    assert not modules & set(names)


def test_parameters_are_read_from_defs_and_followed_through_imports(tmp_path):
    (tmp_path / "a.py").write_text("def f(x, out, *, k=2):\n    pass\n")
    (tmp_path / "b.py").write_text("from .a import f as g\n")
    assert _parameters(tmp_path / "b.py", "g") == [
        ("positional", "x", None),
        ("positional", "out", None),
        ("keyword", "k", ast.dump(ast.Constant(2))),
    ]


def test_kernels_for_gives_numpy_arrays_and_plain_values_the_cpu_namespace():
    x = np.zeros(3)
    assert kernels_for(x) is cpu
    assert kernels_for(None, 1.0, x) is cpu
    assert kernels_for() is cpu


def test_a_device_naming_a_namespace_that_does_not_exist_is_refused():
    class Arrayish:
        shape = (1,)

    dev = backend.Device(
        "nowhere", Arrayish, np, lambda a: a, lambda a: a, None, lambda a: 0, kernels="nosuch"
    )
    backend.register_device(dev)
    try:
        with pytest.raises(backend.DeviceError, match="no kernel namespace 'nosuch'"):
            kernels_for(Arrayish())
    finally:
        backend.unregister_device("nowhere")


def _kernel_imports(path: Path) -> list[str]:
    return _kernel_imports_of(path.read_text(encoding="utf-8"), path)


def _kernel_imports_of(code: str, path: Path) -> list[str]:
    """What ``code`` (the module at ``path``) imports from the kernels, as names under
    ``kernels/`` (``dispatch/kernels_for``, ``cpu``, ``cuda/optim/adam_update``, ...)."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            pairs = [(_module_file(SRC.parent, 1, a.name), None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = path.parent if node.level else SRC.parent
            base = _module_file(package, node.level or 1, node.module)
            pairs = [(base, a.name) for a in node.names]
        else:
            continue
        for base, name in pairs:
            stem = base.parent if base.name == "__init__.py" else base.with_suffix("")
            if stem == KERNELS or KERNELS in stem.parents:
                parts = stem.relative_to(KERNELS).parts + ((name,) if name else ())
                found.append("/".join(parts))
    return found


def test_primitives_and_optimisers_reach_kernels_only_through_the_seam():
    allowed = ("dispatch/", "common/", "generic")
    bad = {}
    files = sorted((SRC / "autodiff" / "primitives").glob("*.py")) + sorted(
        (SRC / "optim").glob("*.py")
    )
    for path in files:
        text = path.read_text(encoding="utf-8")
        wrong = [k for k in _kernel_imports(path) if not k.startswith(allowed)]
        if "cuda_kernels" in text:
            wrong.append("cuda_kernels")
        if wrong:
            bad[path.relative_to(SRC).as_posix()] = wrong
    assert not bad, f"kernels reached past kernels_for: {bad}"
    assert _kernel_imports(SRC / "autodiff" / "primitives" / "pool.py") == ["dispatch/kernels_for"]


def test_kernel_imports_are_seen_in_every_form():
    prim = SRC / "autodiff" / "primitives" / "x.py"
    code = (
        "from ..kernels import cpu\n"
        "from ..kernels.cuda.optim import adam_update\n"
        "import tapegrad.autodiff.kernels.cuda\n"
        "def f():\n    from tapegrad.autodiff.kernels.dispatch import kernels_for\n"
    )
    found = sorted(_kernel_imports_of(code, prim))
    assert found == ["cpu", "cuda", "cuda/optim/adam_update", "dispatch/kernels_for"]
