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


def _rows() -> list[tuple[str, str]]:
    """(first column's first name, the whole row) of every row of docs/layout.md's tables, in order."""
    rows = []
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        if line.startswith("| `"):
            rows.append((re.findall(r"`([^`]+)`", line.split("|")[1])[0].removeprefix("samflow/"), line))
    return rows


def _group(name: str) -> int:
    """0 public, 1 the figures (plot.py, plots/, figures/), 2 the engine, 3 the other private modules."""
    if name.startswith("_engine/"):
        return 2
    if name.startswith("_") and name != "__init__.py":
        return 3
    return 1 if name in ("plot.py", "plots/", "figures/") else 0


def test_layout_rows_come_in_the_order_its_first_lines_promise():
    """Public modules first, then the figures, then the engine, then `_util/` and the other
    private modules (the page promised it, and mixed them: `_engine/cell_state.py` sat
    among `_margin.py` and `plots/`)."""
    groups = [_group(name) for name, _ in _rows()]
    assert groups == sorted(groups), [name for name, _ in _rows()]


def test_each_package_row_names_its_modules():
    """A package's row names every module in it (figures/_measure.py, the atlas's four
    modules and models/_generic.py were on no row)."""
    rows = dict(_rows())
    missing = []
    for name, row in rows.items():
        if not name.endswith("/") or name == "_engine/":
            continue
        for p in sorted((PKG / name).glob("*.py")):
            if p.name not in ("__init__.py", "__main__.py") and f"`{p.name}`" not in row:
                missing.append(f"{name}{p.name}")
    assert not missing, f"docs/layout.md's package rows do not name {missing}"


def test_the_figures_row_says_which_figures_read_their_config_into_a_plan():
    """The page said every figure reads its config once into a plan, and samflow.figures
    that the smaller four "do the same within one function" (they read `cfg.` as they
    go): the row names the planned modules before "The four smaller ones", the others after."""
    row = dict(_rows())["figures/"]
    planned_part, rest = row.split("The four smaller ones")
    unplanned_part = rest.split("Beside them")[0]
    named = lambda text: set(re.findall(r"`(_[a-z0-9_]+\.py)`", text))  # noqa: E731
    src = {p.name: p.read_text() for p in (PKG / "figures").glob("_*.py") if p.name != "__init__.py"}
    planned = {n for n, s in src.items() if "_planned_figure(" in s or "= _plan(ctx" in s} - {"_report.py"}
    unplanned = {n for n, s in src.items() if "cfg = ctx.config(" in s}
    assert named(planned_part) == planned and named(unplanned_part) == unplanned
    assert len(planned) == 7 and len(unplanned) == 4
    import samflow.figures as figures

    doc = " ".join(figures.__doc__.split())
    assert "do the same within one function" not in doc
    assert "The four smaller figures (staircase, depth1_directions, usam_ablation, discrete_gap) have no plan" in doc
