"""The lp-SAM family on several samples (`samflow.figures.lp_family_multi`, issue 36):
its checks judge real values and fail on wrong ones (default tests, no solve), and the
figure on a small grid passes them with the values docs/figures-overview.md states (slow)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from samflow import figures
from samflow.figures._lp_family import MAJOR_DIES
from samflow.figures._lp_family_multi import _cells_check, _linf_cells_check, beta_gap

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "figures"


def _run(reg, ce, me, linf_reg, ps=(2.0, 4.0)):
    a = np.geomspace(0.1, 3.0, 24)
    return SimpleNamespace(plan=SimpleNamespace(a_ax=a, ps=np.asarray(ps)), reg=reg, linf_reg=linf_reg,
                           ce=SimpleNamespace(edge=np.asarray(ce)), me=SimpleNamespace(edge=np.asarray(me)))


def _cells(a, ce, me, middle=2):
    return np.where(a < ce, 1, np.where(a < me, middle, 3))


def test_cells_check_judges_each_column_against_its_edges():
    a = np.geomspace(0.1, 3.0, 24)
    ce, me = [0.35, 0.6], [0.87, 0.85]
    reg = np.stack([_cells(a, ce[0], me[0]), _cells(a, ce[1], me[1], middle=MAJOR_DIES)], axis=1)
    run = _run(reg, ce, me, _cells(a, 1.0, 1.0))
    c = _cells_check(run)
    assert c.passed is True and c.measurement.startswith("0 of "), c
    # A collapse above the major-first edge fails.
    wrong = reg.copy()
    wrong[-1, 0] = 1
    assert _cells_check(_run(wrong, ce, me, run.linf_reg)).passed is False
    # "Major dies" at p = 2 fails even inside the band: only p > 2 can lose a weight at 0.
    wrong = reg.copy()
    k = int(np.flatnonzero((a > 0.4) & (a < 0.8))[0])
    wrong[k, 0] = MAJOR_DIES
    c = _cells_check(_run(wrong, ce, me, run.linf_reg))
    assert c.passed is False and "'major dies' at p <= 2: 1" in c.measurement
    # No edge measured: nothing judged, no pass.
    nan = [np.nan, np.nan]
    assert _cells_check(_run(reg, nan, nan, run.linf_reg)).passed is False


def test_linf_cells_check_needs_linf_threshold_and_the_largest_p_to_match():
    a = np.geomspace(0.1, 3.0, 24)
    ce, me = [0.35, 0.96], [0.87, 0.99]
    reg = np.stack([_cells(a, ce[0], me[0]), _cells(a, ce[1], me[1])], axis=1)
    linf = _cells(a, 1.0, 1.0)
    assert _linf_cells_check(_run(reg, ce, me, linf)).passed is True
    # linf collapsing above alpha = rho fails.
    bad = linf.copy()
    bad[-2] = 1
    assert _linf_cells_check(_run(reg, ce, me, bad)).passed is False
    # The largest p's column differing from linf's outside its band fails.
    top = reg.copy()
    top[0, -1] = 3
    c = _linf_cells_check(_run(top, ce, me, linf))
    assert c.passed is False and "1 of" in c.measurement


def test_beta_gap_is_relative_and_treats_nan_and_zero():
    ref = np.ones((3, 4, 2))
    ref[1] = 0.0  # a collapsed cell: 0 at every save
    ref[2, 2:] = np.nan  # a cell stopped early: NaN after
    b = ref.copy()
    b[0, 3, 1] = 1.0 + 2e-9
    np.testing.assert_allclose(beta_gap(b, ref), [2e-9, 0.0, 0.0], rtol=1e-6, atol=0)
    b[2, 3, 0] = 1.0  # a value where the reference has none
    assert beta_gap(b, ref)[2] == np.inf


def test_config_validates_and_needs_the_l2_column():
    for quick in (False, True):
        cfg = figures.load_figure_config(CONFIG_DIR / "lp_family_multi.toml", figures.LpFamilyMultiConfig, quick)
        assert 2.0 in cfg.p and cfg.t_min < cfg.t1
    assert figures.FIGURE_CONFIGS["lp_family_multi"] is figures.LpFamilyMultiConfig
    assert figures.FIGURES["lp_family_multi"] is figures.lp_family_multi
    with pytest.raises(ValueError, match="must contain 2"):
        figures.LpFamilyMultiConfig.model_validate(
            {**figures.load_figure_config(CONFIG_DIR / "lp_family_multi.toml", figures.LpFamilyMultiConfig,
                                          True).model_dump(), "p": [1.5, 3.0]})


@pytest.mark.slow  # compiles lp, l2 and linf in real time on 4 samples, and the edges' solves: ~2 min
def test_lp_family_multi_on_a_small_grid(tmp_path):
    """Two columns, p = 2 and 64, eight rows: every check passes, with the values of the
    full run (docs/figures-overview.md): p = 2 is l2-SAM (cells and edges), the major-first
    edge is the closed form with mu = mean y_i x_i, p = 64 is near linf's a = 1."""
    from samflow._util.x64 import prepare_process

    prepare_process()
    cdir = tmp_path / "cfg"
    shutil.copytree(CONFIG_DIR, cdir)
    path = cdir / "lp_family_multi.toml"
    text = path.read_text()
    old = "p = [1.5, 2.0, 3.0, 8.0, 64.0]\na = { start = 0.08, stop = 3.0, num = 16 }"
    assert old in text
    path.write_text(text.replace(old, "p = [2.0, 64.0]\na = { start = 0.1, stop = 3.0, num = 8 }"))
    res = figures.lp_family_multi(tmp_path / "out", quick=True, config_dir=cdir)
    assert [c.passed for c in res.checks] == [True] * 7, [c.measurement for c in res.checks if not c.passed]
    assert (tmp_path / "out" / "lp_family_multi.png").stat().st_size > 10_000
    cap = (tmp_path / "out" / "lp_family_multi.caption.md").read_text()
    assert cap.startswith("# Figure 11") and "configs/figures/lp_family_multi.toml [quick]" in cap
    l2 = next(c for c in res.checks if "every cell of the p = 2 column" in c.claim)
    assert "8/8 regimes equal" in l2.measurement
    edges = next(c for c in res.checks if "its collapse and major-first edges are l2's" in c.claim)
    # l2-SAM on these data at rho = 0.01 (the full run: 0.348547, 0.872626).
    assert "collapse 0.3485" in edges.prediction and "major-first 0.8726" in edges.prediction
    top = next(c for c in res.checks if "tends to linf-SAM" in c.claim)
    assert "collapse 0.958" in top.measurement and "major-first 0.9869" in top.measurement
