"""The figure checks never pass on nothing: a claim with no cell, row or weight to
judge (a method not run, a grid that misses the regime, an edge not measured) gives
a check that is not made (passed None) or fails, never PASS with "0/0"."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from samflow.figures._linf_limit import _check_linf, _LinfDepth
from samflow.figures._regime_chart import _chart_cells_check
from samflow.figures._staircase import _staircase_checks, staircase
from samflow.figures._trajectories import _check_sweep_order

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "figures"


def test_staircase_checks_of_methods_not_run_or_rows_not_drawn_are_not_passes(tmp_path):
    """staircase.toml with methods = ["gd"]: the l2-SAM and linf-SAM claims have
    nothing to judge. They used to PASS with an empty measurement ("0/0 rows with
    alpha > rho", "")."""
    cfg_dir = tmp_path / "cfg"
    shutil.copytree(CONFIG_DIR, cfg_dir)
    path = cfg_dir / "staircase.toml"
    text = path.read_text().replace('methods = ["gd", "l2", "linf"]', 'methods = ["gd"]')
    text = text.replace("num_alpha = 24", "num_alpha = 3").replace("alpha_over_rho = [0.05, 5.0]", "alpha_over_rho = [0.05, 0.5]")
    assert text.count("[0.05, 0.5]") == 2 and 'methods = ["gd"]' in text
    path.write_text(text)
    result = staircase(tmp_path / "out", quick=True, config_dir=cfg_dir)
    by_claim = {c.claim: c for c in result.checks}
    assert len(by_claim) == 8
    for dname in ("one sample", "4 samples"):
        assert by_claim[f"{dname}, GD, depths 2: flat at the major feature"].passed is True  # 3 x 48 cells at d
        for claim in (f"{dname}, l2-SAM, depths 2: minor first, major last", f"{dname}, l2-SAM: collapse by depth",
                      f"{dname}, linf-SAM: alpha > rho gives the major feature first"):
            c = by_claim[claim]
            assert c.passed is None and c.note, c


def test_staircase_checks_fail_on_wrong_measurements():
    ok = _staircase_checks("x", 5, [2, 3], ["gd", "l2", "linf"], (10, 10), [(2, 4, 4, []), (3, 2, 2, [])],
                           [(2, 3), (3, 0)], (6, 0))
    assert [c.passed for c in ok] == [True, True, True, True]
    bad = _staircase_checks("x", 5, [2, 3], ["gd", "l2", "linf"], (9, 10), [(2, 4, 3, [[2, 1]]), (3, 2, 2, [])],
                            [(2, 3), (3, 1)], (6, 1))
    assert [c.passed for c in bad] == [False, False, False, False]
    # An l2 run with no depth in regime 2, and a run at a depth the rule does not cover.
    none = _staircase_checks("x", 5, [5], ["l2"], (0, 0), [(5, 0, 0, [])], [(5, 2)], (0, 0))
    assert [c.passed for c in none] == [None, False, None, None]
    # linf run on a grid with no alpha above rho: nothing to judge.
    assert _staircase_checks("x", 5, [2], ["linf"], (0, 0), [], [], (0, 0))[3].passed is None


def test_chart_cells_check_fails_when_no_cell_is_judged():
    ratio = np.geomspace(0.01, 10.0, 40)[:, None] * np.ones((1, 3))
    reg = np.where(ratio < 0.5, 1, np.where(ratio < 0.9, 2, 3))
    assert _chart_cells_check(ratio, reg, 0.5, 0.9).passed is True
    wrong = reg.copy()
    wrong[0, 0] = 3
    assert _chart_cells_check(ratio, wrong, 0.5, 0.9).passed is False
    # No edge measured: every comparison with NaN is False, so no cell is judged.
    c = _chart_cells_check(ratio, reg, np.nan, np.nan)
    assert c.passed is False and c.measurement.startswith("0 of 0 cells")
    # A grid entirely above the 2/3 edge judges one regime only.
    assert _chart_cells_check(ratio[-5:], reg[-5:], 0.5, 0.9).passed is False


def test_first_dominant_check_with_every_init_collapsing_is_not_a_pass():
    mu = np.array([0.2, 0.6, 1.0])
    sa = np.array([0.1, 0.2])
    beta = np.zeros((2, 4, 3))  # collapsed: no informative dominant feature
    run = SimpleNamespace(plan=SimpleNamespace(mu=mu, d=3, sa=sa), tr2=SimpleNamespace(beta=beta), reg2=np.array([1, 1]), seqs={})
    checks = _check_sweep_order(run)
    assert checks[1].measurement == "0/0 inits match" and checks[1].passed is False


def test_linf_slide_check_without_weights_below_rho_is_not_a_pass():
    mu = np.array([0.2, 0.6, 1.0])
    rho = np.array([0.1, 0.2])
    alpha = np.array([[0.3, 0.4, 0.5], [0.5, 0.6, 0.7]])  # every alpha_j above rho: nothing slides
    slide = np.full((2, 2, 3), np.nan)
    dep = _LinfDepth(2, np.array([3]), None, np.array([3]), np.array([3, 3]), SimpleNamespace(slide_time=slide),
                     np.full(2, np.nan), np.array([3, 3]))
    plan = SimpleNamespace(mu=mu, d=3, alpha_r=alpha, rho_r=rho, axes=(1, 3), n_random=2, random_alpha=(1.5, 5.0),
                           random_rho=(0.1, 0.2))
    run = SimpleNamespace(plan=plan, depths=[dep])
    slide_check = _check_linf(run)[2]
    assert "slides" in slide_check.claim and slide_check.passed is False
    # A weight below rho at its predicted time passes; a wrong time fails.
    alpha[0, 0] = 0.05
    tz = np.log(rho[0] / (rho[0] - 0.05)) / mu[0]
    slide[0, 0, 0] = tz
    assert _check_linf(run)[2].passed is True
    slide[0, 0, 0] = 1.01 * tz
    assert _check_linf(run)[2].passed is False
