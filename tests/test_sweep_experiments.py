"""Every experiment from a config (issue 15 part 1): the shipped configs
discrete_sam, banded, two_layer, conv and per_coordinate_init, each run through
`python -m samflow.sweep` (grids shrunk as test_sweep does), checked against an
independent computation; and the refusals of the new keys, one line each."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

import samflow as sf
from samflow import datasets, models
from samflow.config import ConfigError, parse_config
from samflow.discrete import run_discrete
from samflow.merge import merge_slices
from samflow.store import read_results
from samflow.sweep import main, run_sweep

ROOT = Path(__file__).resolve().parents[1]
MU = [0.2, 0.4, 0.6, 0.8, 1.0]


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _dump(raw: dict) -> str:
    """A TOML text of `raw` (tables one level deep, as the sweep configs)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for k, v in raw.items():
        if isinstance(v, dict):
            lines += [f"[{k}]"] + [f"{kk} = {_toml_value(x)}" for kk, x in v.items()]
    return "\n".join(lines) + "\n"


def _shipped(name: str, **tables) -> dict:
    """The shipped config `configs/<name>.toml` with some tables' keys replaced
    (`[init]` and `[time]` replaced whole: a shipped t_min has no effect beside
    linear spacing and is refused there)."""
    raw = tomllib.loads((ROOT / "configs" / f"{name}.toml").read_text())
    for key, value in tables.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict) and key not in ("init", "time"):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def _run_cli(tmp_path: Path, raw: dict, capsys=None):
    """Run `python -m samflow.sweep` (in process) on `raw`; return the results."""
    path = tmp_path / "config.toml"
    path.write_text(_dump(raw))
    out = tmp_path / "out"
    code = main([str(path), "--out", str(out), "--quiet", "--no-figures"])
    assert code == 0, capsys.readouterr().err if capsys else code
    return read_results(out / "results.nc")


def _rel(a, b):
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.slow
def test_discrete_sam_config_iterations_approach_the_flow(tmp_path, capsys):
    """configs/discrete_sam.toml: GD and l2-SAM iterations sit on the flows' time axis
    (real_time = time for save times that are multiples of eta); their distance to the
    flow is O(eta) (docs/theory.md s.2: a one-step method of order 1); a cell equals
    `run_discrete` on its own."""
    raw = _shipped(
        "discrete_sam",
        grid={"alpha": [0.3, 3.0]},
        time={"t1": 4.0, "num": 4, "spacing": "linear"},
        discrete={"eta": [0.01, 0.001]},
    )
    ds = _run_cli(tmp_path, raw, capsys)
    flows = list(ds["flow"].values)
    assert flows == ["gd", "l2", "discrete_gd eta=0.01", "discrete_gd eta=0.001",
                     "discrete_l2 eta=0.01", "discrete_l2 eta=0.001"]
    np.testing.assert_array_equal(ds["eta"].values, [np.nan, np.nan, 0.01, 0.001, 0.01, 0.001])
    np.testing.assert_allclose(ds["real_time"].sel(flow="discrete_l2 eta=0.01").values[0, 0], [1, 2, 3, 4],
                               rtol=1e-14)
    assert np.all(ds["status"].values == int(sf.Status.FINISHED))
    np.testing.assert_array_equal(ds["num_steps"].sel(flow="discrete_gd eta=0.001").values, 4000)
    for m in ("gd", "l2"):
        flow = ds["beta"].sel(flow=m).values
        coarse = _rel(ds["beta"].sel(flow=f"discrete_{m} eta=0.01").values, flow).max()
        fine = _rel(ds["beta"].sel(flow=f"discrete_{m} eta=0.001").values, flow).max()
        assert fine < 1e-3, (m, fine)
        assert 5 < coarse / fine < 20, (m, coarse, fine)  # first order in eta
    # The sweep's cell equals an independent run of the same iteration.
    alpha = ds["alpha_init"].values[:, 0]
    solo = run_discrete("l2", sf.single_sample(MU), alpha, np.full(2, 0.01), 0.01, [1.0, 2.0, 3.0, 4.0],
                        alpha_batched=True)
    np.testing.assert_allclose(ds["beta"].sel(flow="discrete_l2 eta=0.01").values[:, 0], solo.beta,
                               rtol=1e-13, atol=0)


def test_discrete_slices_merge_to_the_whole_run():
    """--num-slices works for discrete methods: two slices merge to the whole run, bit for bit."""
    cfg = parse_config({
        "methods": ["discrete_l2"], "discrete": {"eta": 0.05}, "data": {"mu": [0.5, 1.0]},
        "grid": {"alpha": [0.2, 0.6, 1.5], "rho": [0.1], "alpha_relative_to_rho": True},
        "time": {"t1": 5.0, "num": 5, "spacing": "linear"}, "solver": {"batch_size": 2},
    })
    whole = run_sweep(cfg, progress=False)
    parts = [run_sweep(cfg, progress=False, grid_slice=(i, 2)) for i in range(2)]
    merged = merge_slices(parts)
    for name in ("beta", "loss", "real_time", "status", "num_steps"):
        np.testing.assert_array_equal(merged[name].values, whole[name].values, err_msg=name)


def test_banded_config_draws_the_generators_data(tmp_path, capsys):
    """configs/banded.toml: the results hold exactly samflow.datasets.banded(...) of
    the config's keys, and GD's final dominant feature lies in the major band (run as
    discrete GD, eta = 0.1, to stay a default-suite test: no flow compilation)."""
    raw = _shipped("banded", methods=["discrete_gd"], discrete={"eta": 0.1}, grid={"alpha": [1.0, 10.0]},
                   time={"t1": 1e3, "num": 5, "t_min": 1.0})
    ds = _run_cli(tmp_path, raw, capsys)
    want, band = datasets.banded(40, 9, 0, n_bands=3, intensities=[0.2, 0.5, 1.0], spread=0.3, noise=0.0)
    np.testing.assert_array_equal(ds["data_X"].values, np.asarray(want.X))
    np.testing.assert_array_equal(ds["data_y"].values, np.asarray(want.y))
    assert ds.attrs["data_generator"] == "banded"
    dom = np.argmax(np.abs(ds["beta"].sel(flow="discrete_gd").values[:, 0, -1]), axis=-1)
    assert np.all(band[dom] == 2), dom


@pytest.mark.slow
def test_two_layer_config_gd_aligns_with_mu_and_l2_collapses(tmp_path, capsys):
    """configs/two_layer.toml: GD on the two-layer linear net from a small init turns
    beta toward mu / ||mu|| (the l2 max-margin direction of a fully connected linear
    net, not the diagonal net's major feature), l2-SAM with alpha << rho collapses
    (status COLLAPSED, beta = 0 after), and a cell equals samflow.models.solve_model."""
    raw = _shipped("two_layer", grid={"alpha": [0.05, 3.0]}, time={"t1": 1e4, "num": 6, "t_min": 1.0})
    ds = _run_cli(tmp_path, raw, capsys)
    assert ds.attrs["model"] == "two_layer_linear"
    mu = np.asarray(MU)
    b = ds["beta"].sel(flow="gd").values[0, 0, -1]
    assert b @ mu / (np.linalg.norm(b) * np.linalg.norm(mu)) > 0.999
    l2 = ds.sel(flow="l2")
    assert int(l2["status"].values[0, 0]) == int(sf.Status.COLLAPSED)
    t_c = float(l2["event_time"].values[0, 0])
    after = ds["time"].values > t_c
    assert after.any() and np.all(np.abs(l2["beta"].values[0, 0][after]) < 1e-12)
    m = models.two_layer_linear(5, 5)
    solo = models.solve_model("gd", m, m.init(3.0 * 0.01), 0.01, sf.single_sample(MU), ds["time"].values,
                              sf.SolverSettings(rtol=1e-8, atol=1e-12, max_steps=65536))
    np.testing.assert_allclose(ds["beta"].sel(flow="gd").values[1, 0], solo.beta, rtol=1e-9)
    # Slices of a generic model's grid merge to the whole run, bit for bit.
    cfg = parse_config({**raw, "methods": ["gd"]})
    merged = merge_slices([run_sweep(cfg, progress=False, grid_slice=(i, 2)) for i in range(2)])
    np.testing.assert_array_equal(merged["beta"].values, ds["beta"].sel(flow=["gd"]).values)


@pytest.mark.slow
def test_conv_config_equals_solve_model(tmp_path, capsys):
    """configs/conv.toml: the linear conv net's cells equal samflow.models.solve_model on
    samflow.datasets.increasing_scale(8, 6, 1), from the seeded init times alpha; GD's loss falls."""
    raw = _shipped("conv", grid={"alpha": [0.5, 5.0]}, time={"t1": 100.0, "num": 5, "t_min": 1.0})
    ds = _run_cli(tmp_path, raw, capsys)
    data = datasets.increasing_scale(8, 6, 1, spread=0.25)
    np.testing.assert_array_equal(ds["data_X"].values, np.asarray(data.X))
    m = models.linear_conv(2, 3, 6)
    for flow in ("gd", "l2"):
        solo = models.solve_model(flow, m, m.init(5.0 * 0.01, 0), 0.01, data, ds["time"].values,
                                  sf.SolverSettings(max_steps=65536))
        np.testing.assert_allclose(ds["beta"].sel(flow=flow).values[1, 0], solo.beta, rtol=1e-9)
    loss = ds["loss"].sel(flow="gd").values
    assert np.all(np.diff(loss, axis=-1) < 0)


@pytest.mark.slow
def test_per_coordinate_init_config(tmp_path, capsys):
    """configs/per_coordinate_init.toml: a cell starts at alpha * alpha_j in every layer
    (equal to samflow.solve from that (L, d) init); alpha_j all 1 equals the plain grid
    bit for bit; init.W0 per layer equals samflow.solve from alpha * W0."""
    small = {"grid": {"alpha": [0.3, 3.0]}, "time": {"t1": 100.0, "num": 5, "t_min": 1.0}, "methods": ["l2"]}
    ds = _run_cli(tmp_path, _shipped("per_coordinate_init", **small), capsys)
    assert ds.attrs["init"] == "alpha_j"
    pattern = np.array([4.0, 1.0, 1.0, 1.0, 1.0])
    data, ts = sf.single_sample(MU), ds["time"].values
    solo = sf.solve("l2", data, np.stack([0.03 * pattern] * 2), 0.01, ts)
    np.testing.assert_allclose(ds["beta"].sel(flow="l2").values[1, 0], solo.beta, rtol=1e-12)

    ones = run_sweep(parse_config(_shipped("per_coordinate_init", init={"alpha_j": [1.0] * 5}, **small)),
                     progress=False)
    plain_raw = _shipped("per_coordinate_init", **small)
    del plain_raw["init"]
    plain = run_sweep(parse_config(plain_raw), progress=False)
    for name in ("beta", "loss", "status", "event_time", "num_steps"):
        np.testing.assert_array_equal(ones[name].values, plain[name].values, err_msg=name)

    W0 = [[1.0, 2.0, 1.0, 0.5, 1.0], [0.5, 1.0, 2.0, 1.0, 1.0]]
    per_layer = run_sweep(parse_config(_shipped("per_coordinate_init", init={"W0": W0}, **small)), progress=False)
    solo = sf.solve("l2", data, 0.003 * np.asarray(W0), 0.01, ts)
    np.testing.assert_allclose(per_layer["beta"].values[0, 0, 0], solo.beta, rtol=1e-12)


TINY = {
    "methods": ["gd", "l2"], "data": {"mu": [0.5, 1.0]},
    "grid": {"alpha": [0.5, 2.0], "rho": [0.1]}, "time": {"t1": 1.0, "num": 4},
}


def _with(**tables):
    raw = json.loads(json.dumps(TINY))
    for k, v in tables.items():
        if v is None:
            raw.pop(k, None)
        elif isinstance(v, dict) and isinstance(raw.get(k), dict) and k != "data":
            raw[k] = {**raw[k], **v}
        else:
            raw[k] = v
    return raw


BAD = [
    (_with(model="resnet"), "model.name: Input should be 'diagonal', 'two_layer_linear' or 'linear_conv'"),
    (_with(methods=["discrete_l2"], discrete={"eta": -0.1}), "discrete.eta: must be > 0 (a step size), got -0.1"),
    (_with(methods=["discrete_l2"], discrete={"eta": 0.0}), "discrete.eta: must be > 0"),
    (_with(methods=["discrete_l2"], discrete={"eta": math.nan}), "discrete.eta.0: non-finite value"),
    (_with(methods=["discrete_l2"], discrete={"eta": 5.0}), "discrete.eta: 5.0 is larger than the horizon 1.0"),
    (_with(methods=["discrete_l2"]), "methods: discrete_l2 needs its step size: add [discrete] eta"),
    (_with(discrete={"eta": 0.1}), "discrete.eta: no discrete method in methods"),
    (_with(methods=["discrete_l2"], discrete={"eta": 0.1}, clock="tau"), "clock: discrete methods run in real time t"),
    (_with(init={"W0": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}), "init.W0: has shape (2, 3); it must be (depth, d) = (2, 2)"),
    (_with(init={"W0": [[1.0, 1.0]]}), "init.W0: has shape (1, 2); it must be (depth, d) = (2, 2)"),
    (_with(init={"alpha_j": [1.0, 2.0, 3.0]}), "init.alpha_j: has 3 numbers; the data have d = 2"),
    (_with(init={"alpha_j": [1.0, math.inf]}), "init.alpha_j.1: non-finite value"),
    (_with(init={"alpha_j": [0.0, 0.0]}), "init: every entry is 0"),
    # Not all 0, yet stuck: at depth 3 two zero layers make every gradient entry
    # (a product of the other two layers) 0. Before: solved to a meaningless
    # "finished" at the init.
    (_with(depth=3, init={"W0": [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]}), "init: every gradient entry is 0"),
    # Stuck only once scaled: the other layers' products 1e-100 x 1e-300 underflow
    # (the check on alpha x max|pattern| cannot see it; solve_grid raised mid-run).
    (_with(depth=3, grid={"alpha": [1e-100]}, init={"W0": [[0.0, 0.0], [1.0, 1.0], [1e-200, 1e-200]]}),
     "grid.alpha: the init 1e-100 x init pattern leaves every gradient entry 0"),
    (_with(model={"name": "two_layer_linear", "width": 4, "kernel": 3}),
     "model.kernel: a key of model linear_conv, not of model two_layer_linear; remove it"),
    (_with(model={"name": "linear_conv", "channels": 2}), "model.kernel: required by model linear_conv"),
    (_with(model={"name": "diagonal", "width": 3}), "model.width: a key of model two_layer_linear"),
    (_with(model={"name": "two_layer_linear", "width": 2}, depth=3), "depth: model two_layer_linear has two layers"),
    (_with(model={"name": "two_layer_linear", "width": 2}, init={"alpha_j": [1.0, 1.0]}),
     "init: per-layer inits are for model diagonal"),
    (_with(model={"name": "two_layer_linear", "width": 2}, output={"save_weights": True}),
     "output.save_weights: model two_layer_linear has no (layer, coord) weights"),
    (_with(data={"generator": "banded", "n": 10, "d": 6, "seed": 0, "scales": [1.0]}),
     'data.scales: not a key of data.generator = "banded"'),
    (_with(data={"generator": "increasing_scale", "n": 10, "seed": 0}), 'data.d: required by data.generator'),
    (_with(data={"generator": "banded", "n": 10, "d": 2, "seed": 0}),
     'data.generator = "banded": d = 2 is less than n_bands = 3'),
    (_with(data={"mu": [1.0, 2.0], "seed": 3}), "data.seed: a key of data.generator"),
]


@pytest.mark.parametrize("raw, line", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_experiment_keys_one_line(raw, line):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "c.toml")
    text = str(err.value)
    assert line in text, text
    assert len(text.splitlines()) == 1, text


@pytest.mark.parametrize("raw, line", [BAD[1], BAD[8], BAD[13], BAD[4]], ids=["eta", "W0", "model_key", "horizon"])
def test_cli_refuses_with_one_line_and_writes_nothing(tmp_path, capsys, raw, line):
    path = tmp_path / "bad.toml"
    path.write_text(_dump(raw))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert line in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() or not any(out.rglob("*.nc"))


DATA_FILE_BAD = [
    # An [init] that does not fit a data file's d is refused once the file is read.
    ([[1.0, 2.0, 3.0]], {"init": {"alpha_j": [1.0, 2.0]}}, "init.alpha_j: has 2 numbers; the data have d = 3"),
    # The stuck-init rule of BAD for a data file (checked once the file is read).
    ([[1.0, 2.0]], {"depth": 3, "grid": {"alpha": [1e-100]}, "init": {"W0": [[0.0, 0.0], [1.0, 1.0], [1e-200, 1e-200]]}},
     "grid.alpha: the init 1e-100 x init pattern"),
]


@pytest.mark.parametrize("X, tables, line", DATA_FILE_BAD, ids=["init_shape", "init_stuck"])
def test_data_file_refusals_before_any_folder(tmp_path, capsys, X, tables, line):
    """Rules that need the data's d are checked once a data file is read: one line
    naming the key and the file, exit 2, no output folder."""
    np.savez(tmp_path / "data.npz", X=np.array(X), y=np.array([1.0]))
    raw = _with(data={"file": str(tmp_path / "data.npz")}, **tables)
    path = tmp_path / "c.toml"
    path.write_text(_dump(raw))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and line in err and "data.npz" in err, err
    assert not out.exists()


@pytest.mark.slow
def test_discrete_with_figures_summary_and_resume(tmp_path, capsys):
    """A flow beside its iteration: the CLI draws the figures; output.save = "summary"
    holds the dominant index of the full run's beta; a rerun over the checkpoint
    folder (flow chunks reused, iterations recomputed) gives the same numbers."""
    from samflow.analysis import dominant_index

    raw = {
        "methods": ["l2", "discrete_l2"], "discrete": {"eta": 0.01}, "data": {"mu": [0.5, 1.0]},
        "grid": {"alpha": [0.2, 2.0], "rho": [0.1], "alpha_relative_to_rho": True},
        "time": {"t1": 3.0, "num": 3, "spacing": "linear"},
    }
    path = tmp_path / "c.toml"
    path.write_text(_dump(raw))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 0
    assert (out / "dominant_heatmap.png").stat().st_size > 10_000 and (out / "trajectories.png").is_file()
    full = read_results(out / "results.nc")
    summary = run_sweep(parse_config({**raw, "output": {"save": "summary"}}), progress=False)
    np.testing.assert_array_equal(summary["dominant"].values, dominant_index(full["beta"].values))
    cfg = parse_config(raw)
    first = run_sweep(cfg, progress=False, checkpoint_dir=tmp_path / "partial")
    again = run_sweep(cfg, progress=False, checkpoint_dir=tmp_path / "partial")
    for name in ("beta", "loss", "status", "num_steps"):
        np.testing.assert_array_equal(again[name].values, first[name].values, err_msg=name)
        np.testing.assert_array_equal(again[name].values, full[name].values, err_msg=name)


def test_two_layer_and_per_coordinate_configs_as_iterations(tmp_path, capsys):
    """The default-suite counterpart of the slow tests above (no flow compilation):
    two_layer.toml run as discrete GD equals samflow.models.run_model_discrete from
    alpha * the model's init; per_coordinate_init.toml as discrete l2-SAM starts
    every layer at alpha * alpha_j, so alpha_j = c (all equal) is the plain grid at
    alpha * c, bit for bit."""
    small = {"grid": {"alpha": [0.5, 3.0]}, "time": {"t1": 2.0, "num": 2, "spacing": "linear"},
             "discrete": {"eta": 0.01}}
    ds = _run_cli(tmp_path, _shipped("two_layer", methods=["discrete_gd"], **small), capsys)
    m = models.two_layer_linear(5, 5)
    alpha = ds["alpha_init"].values[:, 0]
    theta0 = tuple(a[None] * alpha.reshape((-1,) + (1,) * a.ndim) for a in m.init(1.0))
    solo = models.run_model_discrete("gd", m, theta0, np.full(2, 0.01), 0.01, [1.0, 2.0], sf.single_sample(MU),
                                     theta0_batched=True)
    np.testing.assert_allclose(ds["beta"].values[0, :, 0], solo.beta, rtol=1e-13)

    def l2_iterations(init, alphas):
        raw = _shipped("per_coordinate_init", methods=["discrete_l2"], **{**small, "grid": {"alpha": alphas}})
        if init is None:
            raw.pop("init")
        else:
            raw["init"] = init
        return run_sweep(parse_config(raw), progress=False)["beta"].values

    np.testing.assert_array_equal(l2_iterations({"alpha_j": [2.0] * 5}, [0.5, 3.0]), l2_iterations(None, [1.0, 6.0]))
