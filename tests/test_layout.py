"""docs/layout.md against the tree (issue 37): the package layout page names every
top-level module and package of samflow/ and every module of the engine, and
names nothing that is not there; the top level stays small."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "samflow"

#: Issue 37's target for the top level (modules beside the packages, `__init__.py` not counted).
MAX_TOP_LEVEL_MODULES = 22


def _named() -> set[str]:
    """Every path in the first column of docs/layout.md's table, relative to samflow/."""
    names = set()
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        for name in re.findall(r"`([^`]+)`", first):
            names.add(name.removeprefix("samflow/"))
    return names


def _tree() -> set[str]:
    """The top-level modules and packages of samflow/ and the engine's modules, as layout.md names them."""
    top = {p.name for p in PKG.glob("*.py") if p.name != "__init__.py"} | {"__init__.py"}
    packages = {f"{p.name}/" for p in PKG.iterdir() if (p / "__init__.py").is_file() and p.name != "_engine"}
    engine = {f"_engine/{p.name}" for p in (PKG / "_engine").glob("*.py") if p.name != "__init__.py"}
    return top | packages | engine


def test_layout_names_every_module_and_nothing_else():
    named, tree = _named(), _tree()
    missing = sorted(tree - named)
    stale = sorted(n for n in named - tree if not (PKG / n).exists())
    assert not missing, f"docs/layout.md does not name {missing}"
    assert not stale, f"docs/layout.md names {stale}, which samflow/ does not have"


def test_the_top_level_stays_small():
    top = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"
