"""The regime atlas command (`python -m samflow.atlas`, samflow.atlas)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from samflow.atlas import load_atlas_config, main, quick_config, spectra
from samflow.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "atlas.toml"


def test_shipped_config_is_valid_and_quick_is_small():
    cfg = load_atlas_config(CONFIG)
    assert cfg.methods == ["l2", "linf"] and cfg.depths == [2, 3, 4, 5, 6]
    assert cfg.dims == [2, 3, 5, 10, 20, 50]
    q = quick_config(cfg)
    assert q.depths == [2, 3] and q.dims == [2, 3] and q.samples.n == 0


def test_spectra_have_their_definitions():
    cfg = load_atlas_config(CONFIG)
    sp = dict(spectra(cfg, 5))
    np.testing.assert_allclose(sp["linear"], [0.2, 0.4, 0.6, 0.8, 1.0])
    g = sp["geometric 0.1"]
    np.testing.assert_allclose(g[0] / g[-1], 0.1)  # r = mu_1 / mu_d
    np.testing.assert_allclose(g[:-1] / g[1:], 0.1 ** 0.25)
    for k in (1, 2, 3):
        r = sp[f"random {k}"]
        assert r[-1] == 1.0 and np.all(np.diff(r) >= 0) and r[0] >= 0.1
    assert not np.allclose(sp["random 1"], sp["random 2"])


@pytest.mark.parametrize(
    "text, match",
    [
        ("name = 'x'\nbogus = 1\n", "bogus: unknown key"),
        ("[bisection]\nrtol = 0.7\n", "bisection.rtol"),
        ("[samples]\nn = 1\n", "n >= 2"),
        ("[spectra]\ngeometric = [1.5]\n", "spectra.geometric.0"),
        ("depths = [2, 2]\n", "values repeat"),
        # The solver keys have SolverSettings' bounds: out of them the atlas used to
        # validate, then stop with a SolverSettings traceback inside compute_atlas.
        ("[solver]\nrtol = 2.0\n", "solver.rtol"),
        ("[solver]\natol = 1.0\n", "solver.atol"),
        ("[solver]\nmax_steps = 100000000\n", "solver.max_steps"),
        # tau_min past tau1: decreasing save times, a check_save_times traceback before.
        ("[staircase]\ntau_min = 500.0\n", "staircase.tau_min"),
    ],
)
def test_bad_config_is_refused_in_one_line_with_exit_2(tmp_path, capsys, text, match):
    p = tmp_path / "a.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_atlas_config(p)
    assert main([str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and match.split(":")[0].split(".")[0] in err
    assert not (tmp_path / "out").exists()


def test_missing_config_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "none.toml")]) == 2
    assert "config file not found" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_atlas_writes_edges_and_figures(tmp_path):
    out = tmp_path / "atlas"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "samflow.atlas", str(CONFIG), "--quick", "--out", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import xarray as xr

    ds = xr.open_dataset(out / "atlas.nc", engine="h5netcdf")
    s = ds.sel({"method": "l2", "samples": "one", "spectrum": "linear"})
    # d = 2, mu = (0.5, 1) (the direction of docs/theory.md's mu = (1, 2)): collapse
    # up to ~0.52, major first from 3 / sqrt 10 = 0.949.
    c2 = float(s.collapse_edge.sel(depth=2, d=2))
    assert 0.50 < c2 < 0.54 and bool(s.collapse_converged.sel(depth=2, d=2))
    assert abs(float(s.major_edge.sel(depth=2, d=2)) - 3 / np.sqrt(10)) < 1e-8
    # Depth 3 never collapses; its regime 2 is bounded below by the first-leader change.
    assert np.isnan(float(s.collapse_edge.sel(depth=3, d=2)))
    assert float(s.major_low_edge.sel(depth=3, d=3)) < float(s.major_edge.sel(depth=3, d=3))
    np.testing.assert_allclose(s.major_edge, s.mark_major, rtol=1e-8)
    lf = ds.sel({"method": "linf", "samples": "one", "spectrum": "linear"})
    np.testing.assert_allclose(lf.collapse_edge.sel(depth=2), 1.0, rtol=2e-6)
    assert int(s.collapse_n_solves.sel(depth=2, d=2)) > 16
    for name in ("fig_edges_vs_depth", "fig_edges_vs_d", "fig_edges_vs_gap", "fig_width", "fig_staircase_time"):
        assert (out / f"{name}.png").stat().st_size > 5000
    # The staircase takes longer as a nears the collapse edge from above (s.3.1).
    t = ds.stair_last_switch.sel(stair_depth=2).values
    ok = np.isfinite(t)
    assert ok.sum() >= 5 and t[ok][0] > t[ok][-1]
    # tables.md explains its empty cells (fresh-user finding: "-" with no key).
    md = (out / "tables.md").read_text()
    assert "| - " in md and "A `-` cell has no value" in md
