"""The figure script end to end in its quick form: every figure, caption, index link and check.

`python scripts/reproduce_figures.py --quick` is the small version of the command that
regenerates every figure; it runs once per session (module fixture) into a temporary
folder, and the tests read what it wrote.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from samflow import figures

# Slow (a quick run of every figure, several minutes): run with `pytest -m slow`; CI runs it.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "configs" / "figures"

# Every figure of the issue, by file stem: 1 directions, 2 linf rule, 3 regime chart,
# 4 staircases (one and four samples), 5 trajectories, 6 USAM ablation, 7 discrete gap,
# 8 banded data (three models), 9 generic (autodiff) models, 10 the lp-SAM family, 11 the
# lp-SAM family on four samples.
PNG_STEMS = [
    "depth1_directions",
    "linf_limit",
    "regime_chart",
    "staircase_single",
    "staircase_multi",
    "trajectories",
    "usam_ablation",
    "discrete_gap",
    "banded",
    "generic_models",
    "lp_family",
    "lp_family_multi",
]
CONFIG_MODELS = {
    "common": figures.CommonConfig,
    "depth1_directions": figures.DirectionsConfig,
    "linf_limit": figures.LinfConfig,
    "regime_chart": figures.RegimeChartConfig,
    "staircase": figures.StaircaseConfig,
    "trajectories": figures.TrajectoriesConfig,
    "usam_ablation": figures.UsamConfig,
    "discrete_gap": figures.DiscreteGapConfig,
    "banded": figures.BandedConfig,
    "generic_models": figures.GenericModelsConfig,
    "lp_family": figures.LpFamilyConfig,
    "lp_family_multi": figures.LpFamilyMultiConfig,
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reproduce_figures.py"), "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"quick run: {wall:.0f} s wall, {cpu:.0f} s CPU")
    return out, proc, wall, cpu


def test_quick_run_succeeds_and_prints_the_report(quick_run):
    out, proc, wall, cpu = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "| # | figure | claim | prediction | measurement | result |" in proc.stdout
    assert re.search(r"\d+ checks pass, 0 fail", proc.stdout)
    assert "time per figure" in proc.stdout
    for name in figures.FIGURES:
        assert re.search(rf"^\s+{name}\s+[0-9.]+\s+[0-9.]+$", proc.stdout, re.M), f"no timing line for {name}"


def test_every_figure_has_png_pdf_and_caption(quick_run):
    out = quick_run[0]
    for stem in PNG_STEMS:
        png, pdf = out / f"{stem}.png", out / f"{stem}.pdf"
        assert png.is_file() and png.stat().st_size > 10_000, stem
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert pdf.is_file() and pdf.read_bytes()[:5] == b"%PDF-"
    for name in figures.FIGURES:
        cap = (out / f"{name}.caption.md").read_text()
        # What it shows, and which config made it.
        assert cap.startswith("# Figure ")
        assert f"configs/figures/{name}.toml" in cap and "configs/figures/common.toml" in cap
        assert "reproduce_figures.py --quick" in cap
        assert len(cap) > 400


def test_index_links_every_figure_and_the_report(quick_run):
    out = quick_run[0]
    index = (out / "index.md").read_text()
    for stem in PNG_STEMS:
        assert f"]({stem}.png)" in index and f"]({stem}.pdf)" in index, stem
    for name in figures.FIGURES:
        assert f"]({name}.caption.md)" in index
    assert "](report.md)" in index
    for link in re.findall(r"\]\(([^)#]+)\)", index):
        assert (out / link).is_file(), f"index.md links a missing file: {link}"


def test_report_checks_all_pass_or_are_marked(quick_run):
    out = quick_run[0]
    report = (out / "report.md").read_text()
    rows = [r for r in report.splitlines() if re.match(r"^\| \d+ \|", r)]
    assert len(rows) >= 35
    figs_checked = {r.split("|")[2].strip() for r in rows}
    assert figs_checked == set(figures.FIGURES)
    for r in rows:
        result = r.rstrip(" |").rsplit("|", 1)[-1]
        assert "**PASS" in result or "**NOTE (" in result, f"check failed or unmarked: {r}"
    # Each example the issue names is among the checks.
    text = report.lower()
    for phrase in ["random inits", "boundary is a line", "depth 1", "l1 max-margin", "increasing order of mu", "plateau",
                   "usam", "eta", "banded data", "two-layer linear conv net", "autodiff"]:
        assert phrase in text, phrase


def test_banded_report_measures_the_climb(quick_run):
    """The banded figure's rows carry measured values: GD at the major band in every
    cell, the diagonal net's climb range, the autodiff-vs-hand-written difference."""
    rows = {}
    for r in (quick_run[0] / "report.md").read_text().splitlines():
        if re.match(r"^\| \d+ \| (banded|generic_models) \|", r):
            rows[r.split("|")[3].strip()] = r
    gd = next(r for c, r in rows.items() if c.startswith("banded data, GD"))
    assert gd.count(" 1.000 (") == 3  # fraction 1 of the cells, for each model
    climb = next(r for c, r in rows.items() if "climbs minor -> major" in c)
    m = re.search(r"(\d+)/(\d+) rows \(([0-9.]+)\) climb to band 3, alpha/rho in \[([0-9.]+), ([0-9.]+)\]", climb)
    assert m and int(m.group(1)) >= 1
    lo, hi = float(m.group(4)), float(m.group(5))
    coll = float(re.search(r"collapse up to ([0-9.]+)", climb).group(1))
    mark = float(re.search(r"band-3-first mark ([0-9.]+)", climb).group(1))
    assert coll < lo <= hi < mark * 1.01  # mark_tol of banded.toml
    auto = next(r for c, r in rows.items() if c.startswith("any model by autodiff"))
    assert float(re.search(r"\| ([0-9.e+-]+) over \d+ cells", auto).group(1)) < 1e-6


def test_only_with_an_unknown_name_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reproduce_figures.py"), "--only", "nope", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "unknown figure" in proc.stderr and "staircase" in proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("name", list(CONFIG_MODELS))
def test_figure_configs_validate(name, quick):
    figures.load_figure_config(CONFIG_DIR / f"{name}.toml", CONFIG_MODELS[name], quick)


@pytest.mark.parametrize("where", ["top", "quick"])
@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_figure_config_rejects_an_unknown_key(tmp_path, where, quick):
    text = (CONFIG_DIR / "trajectories.toml").read_text()
    # A misspelt key at the top level, or in the [quick] table (last in the file).
    raw = "rhoo = 1.0\n" + text if where == "top" else text + "\nrhoo = 1.0\n"
    tomllib.loads(raw)
    path = tmp_path / "trajectories.toml"
    path.write_text(raw)
    with pytest.raises(ValueError, match="rhoo"):
        figures.load_figure_config(path, figures.TrajectoriesConfig, quick)


@pytest.mark.parametrize(
    "seq, ok",
    [
        ([1, 2, 3, 4, 5], True),
        ([3, 4, 5], True),
        ([5], True),
        ([2, 1, 2, 3, 4, 5], True),  # the initial step-down just above the 1/2 edge
        ([2, 1, 3, 5], True),  # a switch can fall between two save times
        ([2, 3, 2, 5], False),  # a step down after the climb started
        ([1, 2, 3], False),  # never reaches the major feature
        ([], False),
    ],
)
def test_staircase_ok(seq, ok):
    assert figures.staircase_ok(seq, 5) is ok


def test_no_value_legends_name_the_status():
    """Issue 12 sibling: the legend of a "no value" pixel names the statuses, not "failed"."""
    from samflow.status import Status

    colors = figures._staircase_cmap(5)[2]
    labels = [h.get_label() for h in figures._staircase_handles(5, colors, [int(Status.MAX_STEPS), int(Status.BLEW_UP)])]
    assert labels[-1] == "no value (BLEW_UP: blew up; MAX_STEPS: step limit, solver.max_steps)"


def test_linf_limit_map_draws_unmeasured_cells_black():
    """-1 (not measured) was below the norm's range and drawn grey like 0 (no limit feature)."""
    from matplotlib.colors import to_rgba

    cmap, norm, colors = figures._linf_cmap(5)
    assert cmap(norm(-1)) == to_rgba("#000000")
    assert cmap(norm(0)) == to_rgba("#d9d9d9") == to_rgba(colors[0])
    assert cmap(norm(5)) == to_rgba(colors[5])
