"""The main job end to end: config -> sweep -> results file -> figures, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import samflow as sf
import importlib

solve_mod = importlib.import_module("samflow._engine.lanes")  # where solve_lanes lives (the sweep calls it there)
from samflow.analysis import dominant_index, regime_label
from samflow.config import ConfigError, load_config, parse_config
from samflow.store import read_results
from samflow.sweep import main, run_sweep, solve_grid

ROOT = Path(__file__).resolve().parents[1]

# The default config with a coarser grid: same physics, a fraction of the cost.
SMALL = {
    "name": "small",
    "methods": ["gd", "l2", "linf"],
    "depth": 2,
    "data": {"mu": [0.2, 0.4, 0.6, 0.8, 1.0]},
    "grid": {"alpha": {"start": 1e-2, "stop": 1e2, "num": 24}, "alpha_relative_to_rho": True, "rho": [0.01]},
    "time": {"t1": 1e4, "num": 60, "t_min": 1e-2},
}


@pytest.fixture(scope="module")
def small_ds():
    return run_sweep(parse_config(SMALL), progress=False)


def test_default_config_is_valid_and_matches_the_issue():
    cfg = load_config(ROOT / "configs" / "default.toml")
    assert cfg.depth == 2 and cfg.data.mu is not None and len(cfg.data.mu) == 5
    assert np.all(np.diff(cfg.data.mu) > 0)
    a = cfg.grid.alpha_values()
    assert cfg.grid.alpha_relative_to_rho and np.isclose(a[0], 1e-2) and np.isclose(a[-1], 1e2)
    assert len(cfg.grid.rho_values()) == 1 and cfg.time.values()[-1] >= 1e4
    assert {"gd", "l2", "linf"} <= set(cfg.methods)


# Sweep configs have a top-level [grid] table; the CNN experiment has its own schema.
SWEEP_CONFIGS = sorted(p for p in (ROOT / "configs").glob("*.toml") if "\n[grid]" in p.read_text())


@pytest.mark.parametrize("path", SWEEP_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    load_config(path)


def test_default_sweep_shows_three_regimes_and_gd_is_major(small_ds):
    ds = small_ds
    a = ds["alpha"].values
    l2 = ds.sel(flow="l2").isel(rho=0)
    reg = regime_label(l2["beta"].values, l2["status"].values)
    # docs/theory.md s.3: below the all-shrink mark every weight shrinks -> collapse.
    small = a < 0.1
    assert np.all(reg[small] == 1)
    assert np.all(l2["status"].values[small] == int(sf.Status.COLLAPSED))
    assert np.all(np.isfinite(l2["event_time"].values[small]))
    # Intermediate alpha/rho: the dominant index starts below d and rises to d.
    mid = np.flatnonzero(reg == 2)
    assert mid.size >= 2 and np.all((a[mid] > 0.2) & (a[mid] < 1.0))
    dom = dominant_index(l2["beta"].values)
    for i in mid:
        assert dom[i, 0] < 5 and dom[i, -1] == 5
    # Large alpha/rho: major first.
    assert np.all(reg[a > 2.0] == 3)
    # GD: the major feature at every alpha and every saved time.
    gd_dom = dominant_index(ds.sel(flow="gd").isel(rho=0)["beta"].values)
    assert np.all(gd_dom == 5)
    # No NaN anywhere: collapse and sliding are handled exactly.
    assert np.all(np.isfinite(ds["beta"].values))
    assert np.all(np.isfinite(ds["loss"].values))


def test_collapsed_cells_hold_zero_and_log2_loss(small_ds):
    l2 = small_ds.sel(flow="l2").isel(rho=0)
    coll = l2["status"].values == int(sf.Status.COLLAPSED)
    i = np.flatnonzero(coll)[0]
    after = small_ds["time"].values > l2["event_time"].values[i]
    assert after.any()
    assert np.all(l2["beta"].values[i][after] == 0.0)
    np.testing.assert_allclose(l2["loss"].values[i][after], np.log(2.0), rtol=1e-15)


@pytest.mark.slow
def test_sweep_cells_equal_solo_solves(small_ds):
    ds = small_ds
    ts = ds["time"].values
    data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
    for flow, ia in [("l2", 3), ("l2", 12), ("linf", 5), ("gd", 20)]:
        alpha = float(ds["alpha_init"].values[ia, 0])
        solo = sf.solve(flow, data, alpha, 0.01, ts, depth=2)
        np.testing.assert_allclose(ds.sel(flow=flow)["beta"].values[ia, 0], solo.beta, rtol=1e-12, atol=0)
        assert int(ds.sel(flow=flow)["num_steps"].values[ia, 0]) == int(solo.num_steps)


def test_one_compilation_per_structure():
    """New alpha/rho values and another method of the program reuse the compiled solve (the
    method is data of it, `samflow._engine.lanes.program_family`); a new grid shape compiles again."""
    data = sf.single_sample([1.0, 2.0, 3.0])
    ts = np.geomspace(0.1, 10.0, 7)
    traces = []
    original = solve_mod.solve_lanes

    def counting(*args, **kwargs):
        traces.append(1)
        return original(*args, **kwargs)

    W0 = np.full((6, 2, 3), 0.5)
    try:
        solve_mod.solve_lanes = counting
        both = ("usam", "l2")  # the program's methods, as a sweep of both names them
        solve_grid("usam", data, W0, np.full(6, 0.3), ts, chunk_size=4, program_methods=both)
        n_first = len(traces)
        solve_grid("usam", data, W0 * 1.7, np.full(6, 0.05), ts * 2, chunk_size=4, program_methods=both)
        assert len(traces) == n_first  # same structure: no new trace
        solve_grid("l2", data, W0, np.full(6, 0.3), ts, chunk_size=4, program_methods=both)
        assert len(traces) == n_first  # another method of the program: data of the same program
        solve_grid("usam", data, W0[:3], np.full(3, 0.3), ts, chunk_size=3, program_methods=both)
        assert len(traces) == n_first + 1  # new chunk shape: one new trace
    finally:
        solve_mod.solve_lanes = original
    assert n_first == 1


def test_results_file_round_trip_and_metadata(small_ds, tmp_path):
    from samflow.store import write_results

    path = write_results(small_ds, tmp_path / "r.nc")
    back = read_results(path)
    for v in ("beta", "loss", "status", "event_time", "slide_time", "num_steps"):
        np.testing.assert_array_equal(back[v].values, small_ds[v].values)
    cfg = json.loads(back.attrs["config"])
    assert cfg["methods"] == ["gd", "l2", "linf"] and cfg["grid"]["rho"] == [0.01]
    versions = json.loads(back.attrs["versions"])
    assert {"jax", "diffrax", "samflow"} <= set(versions)
    assert back["status"].attrs["flag_meanings"].split()[:3] == ["finished", "collapsed", "slid"]
    assert list(back["flow"].values) == ["gd", "l2", "linf"]
    assert not list(tmp_path.glob("*.tmp"))


def _write(tmp_path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


TINY = """
name = "tiny"
methods = ["gd", "l2"]
[data]
mu = [1.0, 2.0]
[grid]
alpha = [0.3, 0.7, 1.5]
rho = [1.0]
[time]
t1 = 20.0
num = 12
"""


def test_cli_end_to_end(tmp_path, capsys):
    cfg = _write(tmp_path, TINY)
    out = tmp_path / "out"
    assert main([str(cfg), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert str(out / "results.nc") in printed and "dominant_heatmap.png" in printed
    assert (out / "results.nc").is_file()
    assert (out / "dominant_heatmap.png").stat().st_size > 10_000
    assert (out / "dominant_heatmap.pdf").is_file() and (out / "trajectories.png").is_file()
    ds = xr.open_dataset(out / "results.nc")
    assert ds["beta"].shape == (2, 3, 1, 12, 2)
    ds.close()
    # A second run refuses to overwrite, naming the flag.
    assert main([str(cfg), "--out", str(out), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, field",
    [
        (TINY.replace('methods = ["gd", "l2"]', 'methods = ["gd", "sam"]'), "methods"),
        (TINY.replace("rho = [1.0]", "rho = [-1.0]"), "grid.rho"),
        (TINY.replace("rho = [1.0]", "rho = []"), "grid.rho"),
        (TINY.replace("t1 = 20.0", "t1 = -5.0"), "time"),
        (TINY.replace("name =", "nmae ="), "did you mean 'name'"),
        (TINY.replace("t1 = 20.0", 't1 = "20"'), "time.t1"),
        (TINY.replace("[data]\nmu = [1.0, 2.0]", '[data]\nfile = "nope.npz"'), "data.file"),
        (TINY.replace('name = "tiny"', 'name = "tiny"\ndepth = 0'), "depth"),
        (TINY.replace("[data]\nmu = [1.0, 2.0]", "[data]\nX = [[1.0, 2.0], [2.0, 1.0]]\ny = [1.0, 3.0]"), "data"),
    ],
)
def test_cli_bad_config_one_line_exit_2_no_output(tmp_path, capsys, text, field):
    cfg = _write(tmp_path, text)
    out = tmp_path / "out"
    assert main([str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not (out / "results.nc").exists()


def test_missing_config_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.toml")]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_missing_data_file_names_the_config_and_the_folders_searched(tmp_path, monkeypatch, capsys):
    """"data file not found: mydata.npz" named neither the config nor where it looked."""
    from samflow.sweep import build_data

    (tmp_path / "conf").mkdir()
    (tmp_path / "work").mkdir()
    cfg = tmp_path / "conf" / "c.toml"
    cfg.write_text('methods = ["gd"]\n[data]\nfile = "mydata.npz"\n[grid]\nalpha = [0.5]\nrho = [0.05]\n'
                   "[time]\nt1 = 10.0\nnum = 3\n")
    monkeypatch.chdir(tmp_path / "work")
    assert main([str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {cfg}: data.file: data file not found: mydata.npz (looked for "
                   f"{tmp_path / 'conf' / 'mydata.npz'} beside the config and {tmp_path / 'work' / 'mydata.npz'} "
                   "in the working directory); give it relative to the config's folder, or as an absolute path\n")
    assert not (tmp_path / "out").exists()
    # Found in the working directory when it is not beside the config; a bad file names the config too.
    np.savez(tmp_path / "work" / "mydata.npz", X=np.array([[0.3, 1.0]]), y=np.ones(1))
    np.testing.assert_array_equal(build_data(load_config(cfg), cfg.parent, str(cfg)).X, [[0.3, 1.0]])
    np.savez(tmp_path / "conf" / "mydata.npz", X=np.array([[0.3, 1.0]]))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(cfg))}: data.file: .*lacks the array\(s\) y$"):
        build_data(load_config(cfg), cfg.parent, str(cfg))
