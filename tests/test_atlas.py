"""The regime atlas command (`python -m samflow.atlas`, samflow.atlas)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from samflow.atlas import load_atlas_config, main, spectra
from samflow.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "atlas.toml"


def test_shipped_config_is_valid_and_quick_is_small():
    cfg = load_atlas_config(CONFIG)
    assert cfg.methods == ["l2", "linf"] and cfg.depths == [2, 3, 4, 5, 6]
    assert cfg.dims == [2, 3, 5, 10, 20, 50]
    q = cfg.quick()
    assert q.depths == [2, 3] and q.dims == [2, 3] and q.samples.n == 0


def test_quick_config_is_the_old_name_of_the_method_with_a_future_warning():
    """quick_config(cfg), 0.2's name, still works in 0.3 and says the method's name."""
    import samflow.atlas as atlas

    cfg = load_atlas_config(CONFIG)
    assert "quick_config" not in atlas.__all__
    with pytest.warns(FutureWarning, match=r"^samflow\.atlas\.quick_config\(cfg\) is now the method AtlasConfig\.quick\(\) "
                                           r"\(cfg\.quick\(\)\); the old name goes in the release after 0\.3$"):
        q = atlas.quick_config(cfg)
    assert q == cfg.quick()


def test_spectra_have_their_definitions():
    cfg = load_atlas_config(CONFIG)
    sp = dict(spectra(cfg.spectra, 5))
    np.testing.assert_allclose(sp["linear"], [0.2, 0.4, 0.6, 0.8, 1.0])
    g = sp["geometric 0.1"]
    np.testing.assert_allclose(g[0] / g[-1], 0.1)  # r = mu_1 / mu_d
    np.testing.assert_allclose(g[:-1] / g[1:], 0.1 ** 0.25)
    for k in (1, 2, 3):
        r = sp[f"random {k}"]
        assert r[-1] == 1.0 and np.all(np.diff(r) >= 0) and r[0] >= 0.1
    assert not np.allclose(sp["random 1"], sp["random 2"])


def test_spectra_refuses_the_whole_config_in_one_line():
    """0.3.0: spectra(s, d) takes the [spectra] section; the whole config gave a bare
    AttributeError ('AtlasConfig' object has no attribute 'linear')."""
    cfg = load_atlas_config(CONFIG)
    with pytest.raises(TypeError, match=r"^spectra takes the config's \[spectra\] section since samflow 0\.3\.0: "
                                        r"pass cfg\.spectra, not cfg$"):
        spectra(cfg, 5)


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
        # issue 27: the optional p axis of lp-SAM
        ("methods = ['l2', 'lp']\n", "p: method \"lp\" needs its exponents"),
        ("p = [3.0]\n", "p: no method \"lp\" in methods"),
        ("methods = ['lp']\np = [1.0]\n", "p: each exponent must be a number with 1 < p < inf"),
        ("methods = ['lp']\np = [3.0, 3.0]\n", "p: values repeat"),
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


def _atlas_with_an_unconverged_edge():
    """The atlas dataset of the quick config (l2 and linf, depths 2-3, d 2-3, linear mu)
    from made-up edges: the l2 depth-2 collapse edge at d = 3 did not converge."""
    from samflow.atlas._compute import _to_dataset

    cfg = load_atlas_config(CONFIG).quick()
    shape = (2, 1, 2, 2, 1)  # method, samples, depth, d, spectrum
    out = {k: np.full(shape, np.nan) for k in ("collapse_edge", "collapse_lo", "collapse_hi", "major_edge", "major_lo",
                                               "major_hi", "major_low_edge", "major_low_lo", "major_low_hi",
                                               "mark_all_shrink", "mark_major", "mark_major_low")}
    for k in ("collapse_n_solves", "major_n_evals", "major_low_n_evals"):
        out[k] = np.full(shape, 20, np.int64)
    for k in ("collapse_converged", "major_converged", "major_low_converged"):
        out[k] = np.ones(shape, bool)
    out["collapse_n_solves"][:, :, 1], out["collapse_converged"][:, :, 1] = 0, False  # L = 3: nothing to solve
    edges = {"collapse": [(0.52, 0.52), (0.40, 0.41)], "major": [(0.95, 0.95), (0.90, 0.90)]}
    for key, pairs in edges.items():
        for di, (lo, hi) in enumerate(pairs):
            at = (slice(None), 0, 0, di, 0)
            out[f"{key}_lo"][at], out[f"{key}_hi"][at] = lo, hi * (1 + 1e-7)
            out[f"{key}_edge"][at] = np.sqrt(lo * hi)
    out["major_low_lo"][:, 0, 1], out["major_low_hi"][:, 0, 1] = 0.30, 0.30 * (1 + 1e-7)
    out["major_low_edge"][:, 0, 1] = 0.30
    out["major_lo"][:, 0, 1], out["major_hi"][:, 0, 1] = 1.1, 1.1 * (1 + 1e-7)
    out["major_edge"][:, 0, 1] = 1.1
    bad = (0, 0, 0, 1, 0)  # l2, one sample, L = 2, d = 3: a bracket 2.5 % wide
    out["collapse_edge"][bad], out["collapse_converged"][bad] = np.nan, False
    mu_bar = np.array([[[[0.5, 1.0, np.nan]], [[1 / 3, 2 / 3, 1.0]]]])
    coords = {"method": [e[0] for e in cfg.method_entries()], "samples": ["one"], "depth": list(cfg.depths),
              "d": list(cfg.dims), "spectrum": ["linear"], "feature": np.arange(1, max(cfg.dims) + 1)}
    about = {"title": "samflow regime atlas", "config_name": cfg.name, "config": cfg.model_dump_json(),
             "code_stamp": "test", "bisection_rtol": cfg.bisection.rtol, "rho_multi_sample": cfg.samples.rho}
    ds = _to_dataset(out, mu_bar, np.ones((2, 1, 2)), {}, coords, about, 0.0)
    return out, ds


def test_unconverged_edge_is_nan_with_its_bracket_in_tables_figures_and_log(tmp_path):
    """The full atlas logged "collapse edge converged for 0" at depth 6 and tables.md
    printed those edges to 4 digits: an unconverged edge is NaN with its bracket."""
    from samflow.atlas._compute import _convergence_note
    from samflow.atlas._figures import tables

    out, ds = _atlas_with_an_unconverged_edge()
    md = tables(ds)
    collapse = md.split("l2-SAM, one sample: collapse edge")[1].split("\n**")[0]
    assert "| 2 | 0.52 | NaN [0.4, 0.41] |" in collapse, collapse
    width = md.split("l2-SAM, one sample: width of regime 2")[1].split("\n**")[0]
    w_lo, w_hi = np.log10(0.90 / (0.41 * (1 + 1e-7))), np.log10(0.90 * (1 + 1e-7) / 0.40)
    assert f"| NaN [{w_lo:.4g}, {w_hi:.4g}] |" in width, width
    assert "A `NaN [lo, hi]` cell is an edge whose bisection did not converge" in md
    assert "Collapse edges: 3 of 4 bisections converged" in md  # linf's two and l2's d = 2
    assert float(ds.width.sel({"method": "l2", "samples": "one", "depth": 2, "d": 2, "spectrum": "linear"})) == pytest.approx(
        np.log10(0.95 / 0.52), rel=1e-6)
    note = _convergence_note(out, "collapse", (0, 0, 0, np.array([0, 1]), np.array([0, 0])))
    assert note == ("collapse edge converged for 1 of 2 (1 not converged: NaN in collapse_edge, "
                    "their brackets [lo, hi] in tables.md)")
    assert _convergence_note(out, "major", (0, 0, 0, np.array([0, 1]), np.array([0, 0]))) == ""
    from samflow.atlas import draw_atlas

    paths = draw_atlas(ds, tmp_path)
    assert [p.name for p in paths] == ["fig_edges_vs_depth.png", "fig_edges_vs_d.png", "fig_edges_vs_gap.png",
                                       "fig_width.png"]
    # In the figures the NaN leaves a gap in the line, and the bracket is drawn as a bar.
    import matplotlib.pyplot as plt

    from samflow.atlas._figures import _bracket, _unconverged

    s = ds.sel({"method": "l2", "samples": "one", "spectrum": "linear", "depth": 2})
    fig, ax = plt.subplots()
    assert _unconverged(ax, s.d.values, s.collapse_edge, *_bracket(s, "collapse_edge"), "k")
    assert [seg.tolist() for seg in ax.collections[0].get_segments()] == [[[3.0, 0.40], [3.0, 0.41 * (1 + 1e-7)]]]
    assert not _unconverged(ax, s.d.values, s.major_edge, *_bracket(s, "major_edge"), "k")
    plt.close(fig)


def test_atlas_p_axis_gives_lp_edges(tmp_path):
    """`p = [...]` with method "lp": one entry of the method axis per p ("lp p=3"),
    its major-first edge the closed form of samflow.theory.lp_alpha_marks, its
    marks beside it, and at p = 2 l2's edges."""
    from samflow import theory
    from samflow.atlas import AtlasConfig, compute_atlas

    cfg = AtlasConfig.model_validate({
        "methods": ["l2", "lp"], "p": [2.0, 3.0], "depths": [2], "dims": [3],
        "bisection": {"rtol": 1e-4},
        "staircase": {"depths": [2], "d": 3, "num_alpha": 2, "num_times": 20},
    })
    ds = compute_atlas(cfg, log=lambda *_: None)
    assert list(ds.method.values) == ["l2", "lp p=2", "lp p=3"]
    at = {"samples": "one", "depth": 2, "d": 3, "spectrum": "linear"}
    mu = np.arange(1, 4) / 3
    for label, p in (("lp p=2", 2.0), ("lp p=3", 3.0)):
        mk = theory.lp_alpha_marks(mu, p=p)
        sub = ds.sel({"method": label, **at})
        assert float(sub.major_edge) == pytest.approx(float(mk.major_first), rel=1e-10)
        assert float(sub.mark_major) == pytest.approx(float(mk.major_first), rel=1e-14)
        assert float(sub.mark_all_shrink) == pytest.approx(float(mk.all_shrink), rel=1e-14)
        assert bool(sub.collapse_converged) and float(mk.all_shrink) < float(sub.collapse_edge) < float(sub.major_edge)
    l2, lp2 = ds.sel({"method": "l2", **at}), ds.sel({"method": "lp p=2", **at})
    assert float(lp2.collapse_edge) == pytest.approx(float(l2.collapse_edge), rel=2e-4)
    assert float(lp2.major_edge) == pytest.approx(float(l2.major_edge), rel=1e-10)
    # the collapse edge rises with p (towards linf's 1)
    assert float(ds.sel({"method": "lp p=3", **at}).collapse_edge) > float(lp2.collapse_edge)
    # tables and figures name each entry
    from samflow.atlas._figures import draw_atlas, tables

    text = tables(ds)
    assert "**lp-SAM (p=3), one sample: collapse edge (regime 1/2)**" in text and "**l2-SAM, one sample" in text
    paths = draw_atlas(ds, tmp_path)
    assert paths and all(p.is_file() and p.stat().st_size > 5000 for p in paths)
