"""The documentation site builds (`mkdocs build --strict`: a broken link or anchor, a missing
page or snippet, a docstring that does not render fails), and its config reference, generated
from the pydantic schemas by docs/_hooks/config_reference.py, has a meaning for every key."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "_hooks" / "config_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _schemas(hook) -> list[tuple[str, type]]:
    """(key prefix, schema) of every table of every documented config."""
    return [t for entries in hook.roots().values() for _, model in entries for t in hook.tables(model)]


def test_every_config_field_has_a_description():
    hook = _hook()
    missing = [f"{m.__module__}.{m.__name__}.{name}" for _, m in _schemas(hook)
               for name, f in m.model_fields.items() if not (f.description or "").strip()]
    assert not missing, f"config fields without a description (add a docstring under the field): {missing}"


def test_the_reference_reaches_every_config_schema():
    """A new schema (a table of some config) must be reachable from the documented roots,
    or its keys would be missing from the site."""
    import importlib
    import pkgutil

    import samflow
    from samflow.config import ConfigModel

    # Every schema of the package, whatever this worker imported before (and none that a test defines).
    for info in pkgutil.walk_packages(samflow.__path__, "samflow."):
        if not info.name.endswith("__main__") and info.name not in ("samflow.model", "samflow.data", "samflow.parallel"):
            importlib.import_module(info.name)
    hook = _hook()
    reached = {m for _, m in _schemas(hook)}
    bases = {b for m in reached for b in m.__mro__}
    every, todo = set(), [ConfigModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in every:
                every.add(sub)
                todo.append(sub)
    assert len(reached) >= 40  # the sweep, atlas, CNN, CNN study and figure schemas
    every = {m for m in every if m.__module__.startswith("samflow.")}
    own = {m for m in every if set(m.model_fields) - set().union(*(b.model_fields for b in m.__bases__ if hasattr(b, "model_fields")))}
    assert not {f"{m.__module__}.{m.__name__}" for m in own - reached - bases}


def test_reference_rows_carry_type_default_range_and_meaning():
    from samflow._settings import SETTING_BOUNDS

    text = _hook().render("sweep")
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert rows["depth"].split(" | ")[1:4] == ["`int`", "`2`", ">= 1, <= 64"]
    assert rows["methods"].split(" | ")[2:4] == ["**required**", "length >= 1"]
    assert "`\"linear\"` / `\"log\"`" in rows["solver.coords"] and "log\\|W\\|" in rows["solver.coords"]
    lo = SETTING_BOUNDS["rtol"]
    assert f"> {lo['gt']:g}" in rows["solver.rtol"] and f"< {lo['lt']:g}" in rows["solver.rtol"]
    assert rows["grid.alpha.num"].split(" | ")[2] == "**required**"  # a table under a key: its own rows
    assert rows["output.plot_rho"].split(" | ")[2] == "unset"
    assert "switch event" in rows["output.switch_times"]
    figures = _hook().render("figures")
    assert "### `common.toml`" in figures and "### `regime_chart.toml`" in figures
    assert "| `rows.depth` |" in figures  # a list of tables, [[rows]]


def test_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('mkdocs is not installed: pip install -e ".[docs]" (CI installs it)')
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    out = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    configs = (out / "configs" / "index.html").read_text()
    assert "solver.coords" in configs and "integrate x = log|W|" in configs  # the generated reference
    api = {p: (out / "reference" / p / "index.html").read_text() for p in ("solvers", "sweeps")}
    assert 'id="samflow.solver.solve"' in api["solvers"] and 'id="samflow.sweep.solve_grid"' in api["sweeps"]
    examples = (out / "examples" / "index.html").read_text()
    assert "collapsed to 0 at t = 14.17" in examples  # a recorded output, included
