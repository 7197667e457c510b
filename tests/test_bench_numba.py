"""Baseline C of scripts/bench.py, the hand-written numba loop (issue 34): its beta at the
save times and its collapse times against the bench's scipy DOP853 reference (rtol 1e-13),
the collapse located on the interpolant, and the bench's note where numba is missing."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    """scripts/bench.py as a module (it only defines things at import)."""
    spec = importlib.util.spec_from_file_location("samflow_bench_script", ROOT / "scripts" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


# (alpha, rho): two cells that collapse (at t = 0.229 and 6.11 in the reference) and two
# that do not, on the chart's problem (depth-2 l2-SAM, mu = (0.2, ..., 1.0)).
CELLS = np.array([[0.01, 1.0], [0.1, 0.1], [0.1, 0.5], [1.0, 0.05]])
RTOL, ATOL = 1e-9, 1e-13


def test_numba_loop_matches_the_scipy_reference_and_locates_the_collapse(bench):
    pytest.importorskip("numba", reason='baseline C needs numba (the "bench" extra: pip install -e ".[bench]")')
    prob = bench.Problem("l2", 2, bench.MU5)
    alpha, rho = CELLS[:, 0].copy(), CELLS[:, 1].copy()
    out = bench.numba_cells(prob, alpha, rho, RTOL, ATOL)
    b_ref, T_ref = bench.reference(prob, alpha, rho)
    assert out["beta"].shape == (4, bench.N_SAVE, 5)
    # which cells collapse, and when: the reference's event time to 1e-8 relative
    assert np.isfinite(T_ref).tolist() == [True, False, True, False]
    assert np.isfinite(out["T"]).tolist() == [True, False, True, False]
    assert out["status"].tolist() == [bench.NB_COLLAPSED, bench.NB_DONE, bench.NB_COLLAPSED, bench.NB_DONE]
    coll = np.isfinite(T_ref)
    assert 0.2 < T_ref[0] < 0.26 and 5.5 < T_ref[2] < 6.7
    np.testing.assert_allclose(out["T"][coll], T_ref[coll], rtol=1e-8)
    # beta at the saves before the collapse: the bench's error (max rel. error of a cell)
    err = bench.cell_errors(out["beta"], out["T"], b_ref, T_ref)
    assert np.all(err < 1e-7), err  # 0.9e-9 to 3.6e-9 measured
    assert np.all(out["steps"] > 50) and np.all(out["steps"] < 1000), out["steps"]
    # beta = 0 from the collapse on, nonzero before it
    for c in np.flatnonzero(coll):
        after = bench.TS >= out["T"][c]
        assert after.any() and not after.all()
        assert np.all(out["beta"][c, after] == 0.0)
        assert np.all(np.abs(out["beta"][c, ~after]) > 0.0)


def test_numba_collapse_is_the_interpolants_crossing(bench):
    """The steps do not depend on the save times (dense output), so saves put 1e-12
    (relative) either side of the located collapse time see the same run: beta before it
    is that of a W with ||W|| at the capture radius, beta after it is 0."""
    pytest.importorskip("numba", reason='baseline C needs numba (the "bench" extra: pip install -e ".[bench]")')
    prob = bench.Problem("l2", 2, bench.MU5)
    alpha, rho = np.array([0.01]), np.array([1.0])
    T = bench.numba_cells(prob, alpha, rho, RTOL, ATOL)["T"][0]
    ts = np.sort(np.concatenate([bench.TS, [T * (1 - 1e-12), T * (1 + 1e-12)]]))
    out = bench.numba_cells(prob, alpha, rho, RTOL, ATOL, ts=ts)
    assert out["T"][0] == T
    k = int(np.searchsorted(ts, T))
    before, after = out["beta"][0, k - 1], out["beta"][0, k]
    assert np.all(after == 0.0)
    # equal layers: W = (w, w), beta = w^2, ||W||^2 = 2 sum(beta) = (1e-6 rho)^2 there
    radius = np.sqrt(2 * np.sum(before))
    assert radius == pytest.approx(bench.CAPTURE * rho[0], rel=1e-6)


def test_numba_general_depth_matches_the_reference(bench):
    """The loop's general (L, d) field (depth 3) on two cells: the reference's beta."""
    pytest.importorskip("numba", reason='baseline C needs numba (the "bench" extra: pip install -e ".[bench]")')
    prob = bench.Problem("l2", 3, bench.MU5)
    alpha, rho = np.array([0.1, 0.03]), np.array([0.1, 0.3])
    out = bench.numba_cells(prob, alpha, rho, RTOL, ATOL)
    b_ref, T_ref = bench.reference(prob, alpha, rho)
    err = bench.cell_errors(out["beta"], out["T"], b_ref, T_ref)
    assert np.all(err < 1e-6), err  # 1.5e-8 and 1.6e-8 measured
    assert np.all(np.isfinite(out["T"]) == np.isfinite(T_ref))


def test_bench_without_numba_says_so_and_returns_none(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "numba", None)
    assert bench.numba_baseline(bench.Problem("l2", 2, bench.MU5), {}, 1e-6, 3, 1) is None
    text = capsys.readouterr().out
    assert len(text.strip().splitlines()) == 1
    assert "numba is not installed" in text and "nan" in text
    with pytest.raises(RuntimeError, match="numba is not installed"):
        bench.numba_cells(bench.Problem("l2", 2, bench.MU5), np.array([0.1]), np.array([0.1]), 1e-8, 1e-12)
