"""The import graph of src/tapegrad has no cycle.

The graph is built from the source with ``ast``: every ``import`` and
``from ... import`` statement anywhere in a module (module level, inside
functions, methods and ``try`` blocks) is an edge.  ``from pkg import x`` is an
edge to the submodule ``pkg.x`` when ``x`` is a module of the package, otherwise
an edge to ``pkg``'s ``__init__``.  Imports under ``if TYPE_CHECKING:`` never
run and are left out.  Run this file as a script to print every cycle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "tapegrad"


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    names = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom node, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the tapegrad modules it imports (anywhere in its code)."""
    names = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for module, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_nodes(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _base(module, path, node)
                targets = []
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in names else base)
            for target in targets:
                # `import a.b.c` of a name that is not a module: its nearest module.
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def one_loop(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest closed path through the component's first module."""
    members = set(component)
    start = component[0]
    previous = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component


def describe(graph: dict[str, set[str]], found: list[list[str]]) -> str:
    lines = []
    for component in sorted(found, key=len, reverse=True):
        lines.append(f"{len(component)} modules: {', '.join(component)}")
        lines.append("  e.g. " + " -> ".join(one_loop(graph, component)))
    return "\n".join(lines)


# The layers, lowest first: a module imports modules of its own layer and of those below it
# (ARCHITECTURE.md, "Layers and imports"). Names are relative to tapegrad; a name covers its
# submodules.
LAYERS = [
    ("base", ("autodiff.errors", "autodiff.backend", "autodiff.promotion", "autodiff.anomaly",
              "blas", "safefile", "version")),
    ("kernels", ("autodiff.kernels",)),
    ("core", ("autodiff.core", "autodiff.graph", "autodiff.traced_grads")),
    ("primitives", ("autodiff.primitives",)),
    ("tensor and wrappers", ("autodiff.ops", "autodiff.inplace", "autodiff.tensor",
                             "autodiff.tensor_ops", "autodiff.tensor_torch", "autodiff.custom",
                             "autodiff.checkpoint", "autodiff.functional", "autodiff.gradcheck")),
    ("plan compiler", ("autodiff.plan",)),
    ("engine package", ("autodiff",)),
    ("library", ("creation", "func", "autograd", "compat", "compat_ops", "dtypes", "cuda", "linalg",
                 "serialization", "nn", "optim")),
    ("data and distributed", ("data", "distributed")),
    ("training", ("models", "utils", "train")),
    ("programs", ("cli", "bench", "__main__", "")),
]  # fmt: skip


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest name that covers ``module``."""
    name = module.removeprefix(PACKAGE).removeprefix(".")
    best, found = -1, None
    for k, (_, names) in enumerate(LAYERS):
        for n in names:
            covers = n == "" and name == "" or name == n or name.startswith(n + ".")
            if covers and len(n) > best:
                best, found = len(n), k
    if found is None:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it")
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module in a higher layer than the importer's."""
    return [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m in sorted(graph)
        for t in sorted(graph[m])
        if layer_of(t) > layer_of(m)
    ]


def test_graph_sees_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import b\n")
    (pkg / "a.py").write_text("def f():\n    from . import sub\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n"
    )
    (pkg / "sub" / "c.py").write_text("from .. import a\nimport tapegrad.sub.b\n")
    graph = import_graph(tmp_path)
    assert graph == {
        "tapegrad": {"tapegrad.sub.b"},
        "tapegrad.a": {"tapegrad.sub"},
        "tapegrad.sub": set(),
        "tapegrad.sub.b": set(),
        "tapegrad.sub.c": {"tapegrad.a", "tapegrad.sub.b"},
    }
    assert cycles(graph) == []
    (pkg / "sub" / "__init__.py").write_text("def g():\n    from .c import x\n")
    found = cycles(import_graph(tmp_path))
    assert found == [["tapegrad.a", "tapegrad.sub", "tapegrad.sub.c"]]
    assert "tapegrad.a -> tapegrad.sub -> tapegrad.sub.c -> tapegrad.a" in describe(
        import_graph(tmp_path), found
    )


def test_no_import_cycle_in_tapegrad():
    graph = import_graph()
    assert len(graph) > 100
    found = cycles(graph)
    assert not found, "import cycles in src/tapegrad:\n" + describe(graph, found)


def test_every_import_goes_down_the_layers():
    found = upward_imports(import_graph())
    assert not found, "imports against the layers (ARCHITECTURE.md):\n" + "\n".join(found)


if __name__ == "__main__":
    graph = import_graph()
    found = cycles(graph)
    print(describe(graph, found) if found else f"no cycle among {len(graph)} modules")
    upward = upward_imports(graph)
    print("\n".join(upward) if upward else "every import goes down the layers")
    sys.exit(1 if found or upward else 0)


def test_only_the_engine_touches_the_trace_flag():
    """Above ``autodiff/`` a module asks ``active_trace()`` and suspends a trace with
    ``untraced()``; the flag itself (``_TRACING``) is the engine's."""
    offenders = []
    for path in sorted((ROOT / "tapegrad").rglob("*.py")):
        if (ROOT / "tapegrad" / "autodiff") in path.parents:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            name = getattr(node, "id", None) or getattr(node, "attr", None)
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if name == "_TRACING" or "_TRACING" in names:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"_TRACING used outside autodiff/: {offenders}"
