"""A release people can cite and install (issue 28): one version everywhere, the
deprecations dated against it, and (slow) a wheel and an sdist built with
`python -m build` that install into fresh virtual environments and run the
default sweep from the repository's configs/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

import samflow

ROOT = Path(__file__).resolve().parents[1]


def _project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_version_is_stated_alike_everywhere():
    """pyproject.toml, samflow.__version__, CITATION.cff and the newest CHANGELOG entry."""
    version = _project_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert samflow.__version__ == version
    cff = (ROOT / "CITATION.cff").read_text()
    assert re.search(r"^version: (\S+)$", cff, re.M).group(1) == version
    assert re.search(r"^cff-version: 1\.2\.0$", cff, re.M)
    assert "preferred-citation:" in cff and "Minor First, Major Last" in cff
    first = re.search(r"^## \[(.+?)\]", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert first == version


def test_deprecations_name_the_release_that_removes_them():
    """Every deprecation note says it goes in the release after this one ("after
    0.2"); "the next release" was read against 0.1 and would be stale at 0.2."""
    minor = ".".join(_project_version().split(".")[:2])
    notes = []
    for path in sorted((ROOT / "samflow").rglob("*.py")):
        text = path.read_text()
        assert "in the next release" not in text, f"{path.relative_to(ROOT)}: say 'the release after {minor}'"
        notes += re.findall(r"(?:removed|goes) in the release after (\d+\.\d+)", text)
    assert len(notes) >= 1  # solver.max_segments, now max_runs (0.3.0 removed what 0.2.x deprecated)
    assert set(notes) == {minor}


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _fresh_venv(folder: Path, artifact: Path, env: dict) -> Path:
    """A new virtual environment (no system site-packages) with `artifact` and its
    dependencies installed by pip; returns its python."""
    _run([sys.executable, "-m", "venv", folder], env=env)
    python = folder / "bin" / "python"
    _run([python, "-m", "pip", "install", "--quiet", artifact], cwd=folder, env=env)
    return python


def _default_sweep(python: Path, out: Path, env: dict) -> "object":
    """`python -m samflow.sweep configs/default.toml` run by `python` outside the
    checkout; returns the results Dataset (read with this process's samflow)."""
    from samflow.store import read_results

    where = _run([python, "-c", "import samflow; print(samflow.__file__); print(samflow.__version__)"],
                 cwd=out.parent, env=env).stdout.split()
    assert Path(where[0]).is_relative_to(python.parent.parent) and where[1] == _project_version()
    done = _run([python, "-m", "samflow.sweep", ROOT / "configs" / "default.toml", "--out", out, "--quiet"],
                cwd=out.parent, env=env)
    for name in ("results.nc", "dominant_heatmap.png", "trajectories.png"):
        assert (out / name).is_file(), f"{name} missing; stdout:\n{done.stdout}"
    return read_results(out / "results.nc")


@pytest.mark.slow
def test_wheel_and_sdist_install_into_fresh_venvs_and_run_the_default_sweep(tmp_path):
    pytest.importorskip("build", reason="the packaging test needs `build` (pip install -e '.[test]')")
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", dist, ROOT])
    (wheel,) = dist.glob("samflow-*.whl")
    (sdist,) = dist.glob("samflow-*.tar.gz")
    version = _project_version()
    assert wheel.name == f"samflow-{version}-py3-none-any.whl" and sdist.name == f"samflow-{version}.tar.gz"
    # Every module of the package is in the wheel; the sdist has what the tests and docs read.
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "samflow").rglob("*.py")}
    with zipfile.ZipFile(wheel) as z:
        assert sources <= set(z.namelist())
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert sources | {"configs/default.toml", "CITATION.cff", "CHANGELOG.md", "README.md", "docs/theory.md",
                      "tests/conftest.py"} <= names

    # Outside the checkout: no PYTHONPATH (pip would take the checkout's samflow.egg-info
    # for an installed samflow), and one compile cache for both runs, in tmp_path.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["SAMFLOW_COMPILATION_CACHE"] = str(tmp_path / "cache")
    from_wheel = _default_sweep(_fresh_venv(tmp_path / "venv-wheel", wheel, env), tmp_path / "out-wheel", env)
    from_sdist = _default_sweep(_fresh_venv(tmp_path / "venv-sdist", sdist, env), tmp_path / "out-sdist", env)

    # The default physics (README): the three l2-SAM regimes, one sample, d = 5; and the
    # two installs give the same numbers, bit for bit.
    from samflow.plots._common import _regimes

    assert dict(from_wheel.sizes)["alpha"] == 96 and list(from_wheel["flow"].values) == ["gd", "l2", "linf"]
    assert {1, 2, 3} <= set(np.unique(_regimes(from_wheel, "l2")).tolist())  # (0: undetermined cells)
    for name in ("beta", "loss", "status", "event_time"):
        np.testing.assert_array_equal(from_wheel[name].values, from_sdist[name].values, err_msg=name)
