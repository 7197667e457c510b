"""`python -m samflow.plot RESULTS.nc`: a sweep's figures from its results file
alone (issue 28), the refusals of bad input, and `--resume` drawing the figures
that a Ctrl-C during the figures left out (it said "already complete" and only
`--overwrite`, a full recompute, brought them back)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from samflow import plots
from samflow.plot import main as plot_main
from samflow.store import write_results
from samflow.sweep import main as sweep_main

from helpers import sweep_toml
from test_plots import kept_figures, major_first_beta, make_ds  # noqa: F401  (a fixture)

CONFIG = sweep_toml("redraw", ["l2"], alpha=[0.1, 0.75, 5.0], rho=[0.05, 0.1], t1=300.0, num=12,
                    output={"figures": True, "switch_times": False})
FIGURE_FILES = sorted(f"{n}.{x}" for n in plots.FIGURES for x in ("png", "pdf"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error_line(capsys) -> str:
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in cap.err, cap.err
    return lines[0]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(config, out folder) of one small sweep with its figures: one l2-SAM cell per regime, two rhos."""
    root = tmp_path_factory.mktemp("redraw")
    cfg = root / "c.toml"
    cfg.write_text(CONFIG)
    out = root / "out"
    assert sweep_main([str(cfg), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(["results.nc", *FIGURE_FILES])
    return cfg, out


def _copy(swept, tmp_path) -> tuple[Path, Path]:
    cfg, out = swept
    shutil.copytree(out, tmp_path / "out")
    return cfg, tmp_path / "out"


def test_resume_draws_the_figures_a_ctrl_c_left_out(swept, tmp_path, capsys):
    cfg, out = _copy(swept, tmp_path)
    results, kept = _digest(out / "results.nc"), _digest(out / "dominant_heatmap.png")
    (out / "trajectories.png").unlink()
    (out / "regime_chart.pdf").unlink()
    capsys.readouterr()
    assert sweep_main([str(cfg), "--out", str(out), "--quiet", "--resume"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"already complete: {out / 'results.nc'} (same config and code); drew the missing figures"
    assert set(printed[1:]) == {f"figure: {out / n}" for n in
                                ("trajectories.png", "trajectories.pdf", "regime_chart.png", "regime_chart.pdf")}
    assert sorted(p.name for p in out.iterdir()) == sorted(["results.nc", *FIGURE_FILES])
    assert _digest(out / "results.nc") == results and _digest(out / "dominant_heatmap.png") == kept
    # Every figure there: nothing to do, as before.
    assert sweep_main([str(cfg), "--out", str(out), "--quiet", "--resume"]) == 0
    assert capsys.readouterr().out.strip().endswith("nothing to do")
    # --no-figures: the figures are not asked for, so none is drawn.
    (out / "trajectories.png").unlink()
    assert sweep_main([str(cfg), "--out", str(out), "--quiet", "--resume", "--no-figures"]) == 0
    assert capsys.readouterr().out.strip().endswith("nothing to do")
    assert not (out / "trajectories.png").exists()


def test_a_ctrl_c_during_the_figures_names_the_redraw_command(swept, tmp_path, capsys, monkeypatch):
    cfg, _ = swept
    out = tmp_path / "out"

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "plot_trajectories", ctrl_c)
    assert sweep_main([str(cfg), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    results = out / "results.nc"
    assert err == [f"interrupted after the results were written ({results}); some figures may be missing: "
                   f"draw them with python -m samflow.plot {results}"]
    assert (out / "dominant_heatmap.png").exists() and not (out / "trajectories.png").exists()
    monkeypatch.undo()
    assert plot_main([str(results)]) == 0  # the command the line names draws them all
    assert sorted(p.name for p in out.iterdir()) == sorted(["results.nc", *FIGURE_FILES])


def test_the_command_draws_what_the_sweep_drew(swept, tmp_path, capsys):
    """Same code, same file: the redrawn PNGs are the sweep's, byte for byte; --only one."""
    _, out = swept
    redraw = tmp_path / "redraw"
    assert plot_main([str(out / "results.nc"), "--out", str(redraw)]) == 0
    assert sorted(p.name for p in redraw.iterdir()) == FIGURE_FILES
    for name in plots.FIGURES:
        assert _digest(redraw / f"{name}.png") == _digest(out / f"{name}.png"), name
    assert capsys.readouterr().out.splitlines()[0] == f"figure: {redraw / 'dominant_heatmap.png'}"
    only = tmp_path / "only"
    assert plot_main([str(out / "results.nc"), "--out", str(only), "--only", "regime_chart"]) == 0
    assert sorted(p.name for p in only.iterdir()) == ["regime_chart.pdf", "regime_chart.png"]


def test_the_stored_output_settings_choose_the_rho(tmp_path, kept_figures):  # noqa: F811
    """Without a config, plot_sweep reads output.plot_rho from the file's config attribute."""
    beta = major_first_beta(1, 2, 2, 4)
    ds = make_ds(beta, np.zeros((1, 2, 2)), alpha=[0.5, 1.0], rho=[0.05, 0.1], times=[1.0, 2.0, 3.0, 4.0], flows=("l2",))
    ds.attrs["config"] = json.dumps({"output": {"plot_rho": 0.1, "trajectory_alphas": [1.0]}})
    plots.plot_sweep(ds, tmp_path, names=["dominant_heatmap", "trajectories"])
    heat, traj = kept_figures
    assert r"$\rho=0.1$" in heat._suptitle.get_text()
    titles = [ax.get_title() for ax in traj.axes if ax.get_title()]
    assert len(titles) == 1 and r"$\alpha$ = 1" in titles[0]


def test_the_given_output_section_wins_and_a_whole_config_is_refused(tmp_path, kept_figures):  # noqa: F811
    """plot_sweep(ds, out, output) takes the config's [output] section (0.3.0; it took the
    whole config): its plot_rho and trajectory_alphas win over the stored ones."""
    from types import SimpleNamespace

    beta = major_first_beta(1, 2, 2, 4)
    ds = make_ds(beta, np.zeros((1, 2, 2)), alpha=[0.5, 1.0], rho=[0.05, 0.1], times=[1.0, 2.0, 3.0, 4.0], flows=("l2",))
    ds.attrs["config"] = json.dumps({"output": {"plot_rho": 0.1, "trajectory_alphas": [1.0]}})
    plots.plot_sweep(ds, tmp_path, SimpleNamespace(plot_rho=0.05, trajectory_alphas=[0.5]),
                     names=["dominant_heatmap", "trajectories"])
    heat, traj = kept_figures
    assert r"$\rho=0.05$" in heat._suptitle.get_text()
    titles = [ax.get_title() for ax in traj.axes if ax.get_title()]
    assert len(titles) == 1 and r"$\alpha$ = 0.5" in titles[0]
    with pytest.raises(TypeError, match=r"^plot_sweep takes the config's \[output\] section since samflow 0\.3\.0: "
                                        r"pass cfg\.output, not cfg$"):
        plots.plot_sweep(ds, tmp_path, SimpleNamespace(output=SimpleNamespace(plot_rho=0.1)))
    # A dict as output made out_dir, then failed with AttributeError: one line, and no folder.
    with pytest.raises(TypeError, match=r"^plot_sweep's output is the config's \[output\] section \(cfg\.output, with "
                                        r"plot_rho and trajectory_alphas\) or None, not a dict$"):
        plots.plot_sweep(ds, tmp_path / "figs", {"plot_rho": 0.1, "trajectory_alphas": [1.0]})
    assert not (tmp_path / "figs").exists()


def test_bad_input_is_one_line_exit_2(swept, tmp_path, capsys):
    _, out = swept
    results = out / "results.nc"
    assert plot_main([str(tmp_path / "nowhere.nc")]) == 2
    assert "nowhere.nc: no such results file" in _one_error_line(capsys)
    toml = tmp_path / "c.nc"
    toml.write_text(CONFIG)
    assert plot_main([str(toml)]) == 2
    assert "is not a results file of python -m samflow.sweep (netCDF cannot read it" in _one_error_line(capsys)
    other = tmp_path / "other.nc"
    write_results(xr.Dataset({"x": ("a", np.arange(3.0))}), other)
    assert plot_main([str(other)]) == 2
    assert _one_error_line(capsys).endswith(
        "is not a results file of python -m samflow.sweep (it lacks flow, alpha, rho, time, coord, status, loss, "
        "event_time, alpha_init, beta (or dominant))")
    assert plot_main([str(results), "--only", "heatmap"]) == 2
    assert _one_error_line(capsys) == (
        "error: --only 'heatmap': no such figure; choose one of dominant_heatmap, trajectories, regime_chart")
    one_rho = tmp_path / "one_rho.nc"
    write_results(xr.open_dataset(results, engine="h5netcdf").load().isel(rho=[0]), one_rho)
    assert plot_main([str(one_rho), "--only", "regime_chart"]) == 2
    assert _one_error_line(capsys) == (
        "error: --only regime_chart: this file has no such figure: the grid has one rho (0.05); "
        "it has dominant_heatmap, trajectories")
    assert not any(p.suffix == ".png" for p in tmp_path.iterdir())


def test_a_slice_is_refused_with_the_merge_command(tmp_path, capsys):
    ds = xr.Dataset({"status": ("cell", np.zeros(2, np.int8))}, coords={"cell": [0, 1]})
    path = write_results(ds, tmp_path / "out" / "slices" / "slice-0000-of-0002.nc")
    assert plot_main([str(path)]) == 2
    assert _one_error_line(capsys) == (
        f"error: {path} is one slice of a sweep; merge the slices first (python -m samflow.merge "
        f"{tmp_path / 'out'}) and draw the merged results.nc")


# Issue 35, fault 2: a results file of an older samflow that lacks a variable the
# figures read gave a 40-line KeyError (switch_ok, switch_from, switch_to) or a line
# that did not say which samflow wrote it (loss, status, ...).
SWITCHES = CONFIG.replace("switch_times = false\n", "").replace("figures = true", "figures = false").replace(
    "rho = [0.05, 0.1]", "rho = [0.1]")


@pytest.fixture(scope="module")
def with_switches(tmp_path_factory):
    """The results of a tiny sweep that stores the exact switch times (read by the trajectory figure)."""
    root = tmp_path_factory.mktemp("switches")
    cfg = root / "c.toml"
    cfg.write_text(SWITCHES)
    assert sweep_main([str(cfg), "--out", str(root / "out"), "--quiet"]) == 0
    ds = xr.open_dataset(root / "out" / "results.nc", engine="h5netcdf").load()
    assert "switch_ok" in ds and "switch_from" in ds
    return ds


@pytest.mark.parametrize("drop", ["switch_ok", "switch_from", "loss"])
def test_a_file_lacking_a_variable_is_one_line_naming_it_and_the_version(with_switches, tmp_path, capsys, drop):
    old = with_switches.drop_vars(drop)
    old.attrs["versions"] = json.dumps({"samflow": "0.1.0", "jax": "0.4.30"})
    path = write_results(old, tmp_path / "old.nc")
    assert plot_main([str(path), "--out", str(tmp_path / "figs")]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {path} lacks the variable '{drop}'"), line
    assert "written by samflow 0.1.0" in line and "rerun its sweep" in line, line
    assert not (tmp_path / "figs").exists() or not any((tmp_path / "figs").glob("*.png"))


def test_a_file_lacking_a_variable_and_the_versions_says_so(with_switches, tmp_path, capsys):
    old = with_switches.drop_vars("switch_to")
    for key in ("versions", "code_stamp"):
        old.attrs.pop(key, None)
    path = write_results(old, tmp_path / "old.nc")
    assert plot_main([str(path), "--out", str(tmp_path / "figs")]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {path} lacks the variable 'switch_to'") and "an unknown samflow version" in line, line
    # The version is also read from the code stamp alone.
    old.attrs["code_stamp"] = "samflow 0.1.5 git abc src def jax 0.4.30"
    write_results(old, path)
    assert plot_main([str(path), "--out", str(tmp_path / "figs")]) == 2
    assert "written by samflow 0.1.5" in _one_error_line(capsys)


def test_any_variable_a_figure_reads_and_the_file_lacks_is_one_line(with_switches, tmp_path, capsys, monkeypatch):
    """The net under the checks of read_sweep_results: a figure that reads a variable the
    file lacks (one a later samflow adds) ends in the same line; a KeyError that is not
    about the file's variables is a bug, and keeps its traceback."""
    path = write_results(with_switches, tmp_path / "r.nc")
    monkeypatch.setattr(plots, "plot_dominant_heatmap", lambda ds, *a, **k: ds["added_later"])
    assert plot_main([str(path), "--out", str(tmp_path / "figs"), "--only", "dominant_heatmap"]) == 2
    assert _one_error_line(capsys).startswith(f"error: {path} lacks the variable 'added_later' that the figures of")

    def bug(ds, *a, **k):
        raise KeyError("beta")

    monkeypatch.setattr(plots, "plot_dominant_heatmap", bug)
    with pytest.raises(KeyError):
        plot_main([str(path), "--out", str(tmp_path / "figs"), "--only", "dominant_heatmap"])
