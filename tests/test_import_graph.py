"""No import circle in the package (issue 28): data flow one way, config -> grid ->
solve -> store -> analysis -> figures, and each module can be read without the
ones that use it.

The graph is built from the source with `ast`, so that it holds every import a
module can make: at module level, inside functions (imports deferred for speed),
under `if TYPE_CHECKING:`, relative and absolute. An edge goes to the module
named (`from . import store` -> samflow.store; `from .analysis import tied` ->
samflow.analysis). Importing a submodule runs its package's `__init__` too, but
that is not counted as an edge: a package re-exporting its submodules is not a
circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "samflow"


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package __init__)} of every module under `package`."""
    mods = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return mods


def _absolute(module: "str | None", level: int, importer: str, is_pkg: bool) -> str:
    """The absolute name of `from <level dots><module> import ...` written in `importer`."""
    if not level:
        return module or ""
    base = importer.split(".") if is_pkg else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: modules of the package it imports anywhere in its source}."""
    mods = _modules(package)
    root = package.name
    graph = {}
    for name, (path, is_pkg) in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, name, is_pkg)
                for a in node.names:  # `from pkg import mod` names a module; `from mod import f` does not
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[name] = {t for t in targets if t in mods and t != name and t.split(".")[0] == root}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> "list[str] | None":
    """One import circle [a, b, ..., a], or None (depth-first search, three colours)."""
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == "open":
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = "done"
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The checker itself: a circle made only of a function-level relative import,
    a TYPE_CHECKING import and an absolute import is found; the graph has the
    edges of the real package that the fixes of issue 28 kept."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import X\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg"] == {"pkg.a"} and graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("import os\n")
    assert find_cycle(import_graph(pkg)) is None

    real = import_graph()
    assert "samflow.plots" in real["samflow.merge"]  # a function-level import
    assert "samflow.switches" in real["samflow.analysis"]  # the lazy re-export in __getattr__
    assert "samflow.store" in real["samflow.sweep._cli"]  # `from .. import store`
