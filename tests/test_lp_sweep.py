"""lp-SAM in the sweep (issue 27): `[lp] p` runs "lp" once per exponent, one entry
of the flow axis each ("lp p=3"), with the coordinate p; the refusals of the new
keys, one line each; resume and slices+merge like any other method."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import samflow as sf
from samflow.config import ConfigError, load_config, parse_config
from samflow.merge import merge_slices
from samflow.sweep import main, run_sweep

from helpers import toml_text

MU = [0.2, 0.6, 1.0]
BASE = {
    "methods": ["gd", "l2", "lp", "linf"], "lp": {"p": [1.5, 3]}, "clock": "tau", "data": {"mu": MU},
    "grid": {"alpha": [0.3, 0.9, 2.0], "rho": [1.0], "alpha_relative_to_rho": True},
    "time": {"t1": 20.0, "num": 4, "spacing": "linear"}, "solver": {"chunk_size": 2, "batch_size": 2},
    "output": {"figures": False, "switch_times": False},
}


def _cfg(**over):
    return parse_config({**BASE, **over})


def test_flow_entries_and_labels():
    cfg = _cfg()
    assert [e.label for e in cfg.flow_entries()] == ["gd", "l2", "lp p=1.5", "lp p=3", "linf"]
    assert [e.p for e in cfg.flow_entries()] == [None, None, 1.5, 3.0, None]
    one = _cfg(lp={"p": 3})  # a single p keeps its label
    assert [e.label for e in one.flow_entries()] == ["gd", "l2", "lp p=3", "linf"]
    disc = _cfg(methods=["discrete_lp"], lp={"p": [3, 8]}, discrete={"eta": [0.1, 0.05]}, clock="t")
    assert [e.label for e in disc.flow_entries()] == [
        "discrete_lp p=3 eta=0.1", "discrete_lp p=3 eta=0.05", "discrete_lp p=8 eta=0.1", "discrete_lp p=8 eta=0.05"]
    assert [(e.method, e.eta, e.p) for e in disc.flow_entries()][1] == ("lp", 0.05, 3.0)
    assert [e.label for e in _cfg(methods=["discrete_lp"], lp={"p": 3}, discrete={"eta": 0.1}, clock="t")
            .flow_entries()] == ["discrete_lp p=3"]


@pytest.mark.parametrize("over, line", [
    ({"lp": {"p": 1.0}}, "config: lp.p: must be a number with 1 < p < inf (the lp ball's exponent; \"linf\" is p = inf), "
                         "got 1.0"),
    ({"lp": {"p": [3, 0.5]}}, "config: lp.p: must be a number with 1 < p < inf (the lp ball's exponent; \"linf\" is "
                              "p = inf), got 0.5"),
    ({"lp": {"p": float("inf")}}, "config: lp.p.0: non-finite value: give a finite number (nan and inf are not allowed); "
                                  "lp-SAM with p = inf is the method \"linf\": list \"linf\" in methods (got inf)"),
    ({"lp": {"p": float("nan")}}, "config: lp.p.0: non-finite value"),
    ({"lp": {"p": "3"}}, "config: lp.p: Input should be a valid list; a number is written without quotes (got '3')"),
    ({"lp": {"p": True}}, "config: lp.p: Input should be a valid list (got True)"),
    ({"lp": {"p": []}}, "config: lp.p: is empty: give at least one exponent p in (1, inf) (got [])"),
    ({"lp": {"p": [3, 3]}}, "config: lp.p: must not repeat an exponent, got [3.0, 3.0]"),
    ({"methods": ["gd", "l2"]}, 'config: lp.p: no lp method in methods (p is the exponent of "lp" and "discrete_lp"); '
                                "add one to methods or remove [lp]"),
    ({"lp": None}, "config: methods: lp needs its exponent: add [lp] p = [...] (each 1 < p < inf)"),
])
def test_bad_lp_keys_are_refused_in_one_line(over, line):
    raw = {**BASE, **over}
    if raw.get("lp") is None:
        raw.pop("lp")
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), str(err.value)


def test_config_key_and_lp():
    """A config without [lp] keeps the config_key it had before the key existed (its
    partial results and slices stay resumable); the exponents are part of the key."""
    from samflow.config._experiments import drop_unset_experiment_keys
    from samflow.sweep import config_key

    raw = dict(BASE, methods=["l2"])
    raw.pop("lp")
    assert "lp" not in drop_unset_experiment_keys(parse_config(raw).model_dump(mode="json"))
    key = lambda cfg: config_key(cfg.model_dump(mode="json"))
    assert key(_cfg(lp={"p": [1.5, 3]})) != key(_cfg(lp={"p": [1.5, 4]}))


@pytest.mark.slow
def test_lp_sweep_equals_solve_and_carries_p(tmp_path):
    """Each lp entry is `samflow.solve("lp", ..., p=p)` of its cells, bit for bit
    (batches of one cell, the width of a solo solve: the last bits depend on it)."""
    cfg = _cfg(solver={"chunk_size": 2, "batch_size": 1})
    ds = run_sweep(cfg, progress=False)
    assert list(ds["flow"].values) == ["gd", "l2", "lp p=1.5", "lp p=3", "linf"]
    np.testing.assert_array_equal(ds["p"].values, [np.nan, 2.0, 1.5, 3.0, np.inf])
    alpha = ds["alpha_init"].values[:, 0]
    ts = ds["time"].values
    for p in (1.5, 3.0):
        label = f"lp p={p:g}"
        for ia, a in enumerate(alpha):
            solo = sf.solve("lp", sf.single_sample(MU), float(a), 1.0, ts, clock="tau", p=p)
            np.testing.assert_array_equal(ds["beta"].sel(flow=label).values[ia, 0], np.asarray(solo.beta))
            assert int(ds["status"].sel(flow=label).values[ia, 0]) == int(solo.status)
            assert int(ds["num_steps"].sel(flow=label).values[ia, 0]) == int(solo.num_steps)
    # p = 1.5 and p = 3 are different flows (not one entry written twice)
    assert not np.array_equal(ds["beta"].sel(flow="lp p=1.5").values, ds["beta"].sel(flow="lp p=3").values)
    # the dominant-feature heat map has one lp panel per p, titled by samflow._labels
    import matplotlib.pyplot as plt

    from samflow import plots

    figs = []
    close = plt.close
    plt.close = lambda fig=None: figs.append(fig)
    try:
        plots.plot_dominant_heatmap(ds, tmp_path / "heat.png")
    finally:
        plt.close = close
    titles = [ax.get_title() for ax in figs[-1].axes if ax.get_title()]
    assert titles == ["GD", r"$\ell_2$-SAM", r"$\ell_p$-SAM ($p=1.5$)", r"$\ell_p$-SAM ($p=3$)", r"$\ell_\infty$-SAM"]
    close(figs[-1])


@pytest.mark.slow
def test_lp_slices_merge_to_the_whole_run():
    """Two slices merge to the whole run bit for bit, switch times (located with
    each entry's own p) included."""
    cfg = _cfg(methods=["lp"], output={"figures": False, "switch_times": True})
    whole = run_sweep(cfg, progress=False)
    merged = merge_slices([run_sweep(cfg, progress=False, grid_slice=(i, 2)) for i in range(2)])
    for name in ("beta", "loss", "real_time", "status", "num_steps", "slide_time", "switch_time", "switch_first",
                 "switch_ok"):
        np.testing.assert_array_equal(merged[name].values, whole[name].values, err_msg=name)
    np.testing.assert_array_equal(merged["p"].values, [1.5, 3.0])
    # the switch records are each p's own: the first leader is lp_first_dominant of that p
    from samflow import theory

    ok = whole["switch_ok"].values
    assert ok.any()
    for k, p in enumerate((1.5, 3.0)):
        a = whole["alpha_init"].values[:, 0]
        first = theory.lp_first_dominant(MU, a=a, p=p)
        sel = ok[k, :, 0]
        np.testing.assert_array_equal(whole["switch_first"].values[k, sel, 0], first[sel])


@pytest.mark.slow
def test_lp_resume_keeps_each_p_apart_and_is_bit_identical(tmp_path):
    """Checkpoints are kept per (method, p): a resumed run whose partial folder
    holds only the chunks of "lp p=1.5" recomputes those of "lp p=3" (it must not
    read p = 1.5's chunks as p = 3's) and gives the uninterrupted results bit for
    bit."""
    raw = dict(BASE, methods=["lp"])
    cfg = parse_config(raw)
    whole = run_sweep(cfg, progress=False)
    ck = tmp_path / "ck"
    run_sweep(cfg, progress=False, checkpoint_dir=ck)
    names = sorted(x.name for x in ck.glob("*.npz"))
    p15, p3 = [x for x in names if "p=1.5" in x], [x for x in names if "p=3" in x]
    assert p15 and p3 and len(p15) == len(p3) and len(p15) + len(p3) == len(names), names
    for x in p3:
        (ck / x).unlink()
    ds = run_sweep(cfg, progress=False, checkpoint_dir=ck)
    for v in ("beta", "status", "event_time", "slide_time", "num_steps"):
        np.testing.assert_array_equal(ds[v].values, whole[v].values, err_msg=v)
    assert not np.array_equal(ds["beta"].sel(flow="lp p=1.5").values, ds["beta"].sel(flow="lp p=3").values)
    # the command line writes the same numbers and the coordinate p
    path = tmp_path / "c.toml"
    path.write_text(_toml(raw))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 0
    with xr.open_dataset(out / "results.nc") as ref:
        for v in ("beta", "status", "num_steps"):
            np.testing.assert_array_equal(ref[v].values, whole[v].values, err_msg=v)
        np.testing.assert_array_equal(ref["p"].values, [1.5, 3.0])


def _toml(raw: dict) -> str:
    import json
    import math

    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v) if math.isfinite(v) else "inf"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return "{" + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + "}"

    lines = [f"{k} = {val(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for k, v in raw.items():
        if isinstance(v, dict):
            lines += [f"[{k}]"] + [f"{kk} = {val(x)}" for kk, x in v.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_discrete_lp_entries_run_their_p_and_eta():
    """"discrete_lp" runs once per (p, eta): each entry is `run_discrete("lp", ..., p=p)`
    of its cells bit for bit, its coordinates p and eta say which, and its gap to
    the lp flow halves with eta (first order, docs/theory.md s.2)."""
    from samflow.discrete import run_discrete

    cfg = parse_config({
        "methods": ["lp", "discrete_lp"], "lp": {"p": [3.0]}, "discrete": {"eta": [0.1, 0.05]}, "data": {"mu": [0.5, 1.0]},
        "grid": {"alpha": [0.5, 2.0], "rho": [0.1], "alpha_relative_to_rho": True},
        "time": {"t1": 5.0, "num": 5, "spacing": "linear"}, "output": {"figures": False, "switch_times": False},
    })
    ds = run_sweep(cfg, progress=False)
    assert list(ds["flow"].values) == ["lp p=3", "discrete_lp p=3 eta=0.1", "discrete_lp p=3 eta=0.05"]
    np.testing.assert_array_equal(ds["p"].values, [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(ds["eta"].values, [np.nan, 0.1, 0.05])
    a = ds["alpha_init"].values[:, 0]
    solo = run_discrete("lp", sf.single_sample([0.5, 1.0]), a, np.full(2, 0.1), 0.1, ds["time"].values,
                        alpha_batched=True, p=3.0)
    np.testing.assert_array_equal(ds["beta"].sel(flow="discrete_lp p=3 eta=0.1").values[:, 0], np.asarray(solo.beta))
    flow = ds["beta"].sel(flow="lp p=3").values[:, 0]
    gaps = [np.abs(ds["beta"].sel(flow=f"discrete_lp p=3 eta={e}").values[:, 0] - flow).max() for e in (0.1, 0.05)]
    assert 1.8 < gaps[0] / gaps[1] < 2.2, gaps


# Issue 35, fault 1: "lp" with p > 2 on two samples (or from unequal layers, or in
# log coordinates) passed the config and failed inside the run: a 29-line traceback
# and a .partial/ folder that made the rerun ask for --resume. The config now applies
# the engine's rule (samflow._engine.settings.problems) for each exponent, before anything
# is written.
def _two_samples(data: dict, extra: dict, p=(1.5, 3, 4)) -> str:
    """The config of these cases: "lp" at the exponents `p` on `data`, with the `extra` tables."""
    return toml_text({"name": "lp3", "methods": ["lp"], "lp": {"p": list(p)}, "data": data,
                      "grid": {"alpha": [0.5, 1.0], "rho": [0.1]}, "time": {"t1": 10.0, "num": 5}, **extra,
                      "output": {"figures": False}})


def test_cli_reads_lp_p_above_2_in_log_coordinates(tmp_path):
    """Issue 36: log coordinates with p > 2 were the last refusal of lp's exponent
    ("solver.coords = 'log' does not apply to lp-SAM with p > 2"); such a config is
    read now and the engine's rule finds nothing against it, while a cell that log
    coordinates cannot hold (signs against mu) is still refused in one line."""
    from samflow.config._sweep import rule_problems

    cfg = tmp_path / "lp3.toml"
    cfg.write_text(_two_samples({"mu": [0.5, 1.0]}, {"solver": {"coords": "log"}}))
    loaded = load_config(cfg)
    assert rule_problems(loaded, sf.single_sample(np.array([0.5, 1.0]))) == []
    bad = rule_problems(loaded, sf.single_sample(np.array([0.5, -1.0])))
    assert bad and all("sign(prod_l w_lj(0)) = sign(mu_j)" in line for line in bad), bad


def test_lp_p_above_2_on_two_samples_is_accepted(tmp_path):
    """Issue 36: lp with p > 2 on several samples runs, from equal and from unequal
    layers, so such configs are read without a problem (before: refused, "needs one
    sample", then "needs balanced inits")."""
    from samflow.config._sweep import rule_problems

    import tomllib

    data = sf.Dataset.from_arrays(np.array([[1.0, 0.5], [0.3, 1.0]]), np.array([1.0, -1.0]))
    two = {"X": [[1.0, 0.5], [0.3, 1.0]], "y": [1, -1]}
    cfg = parse_config(tomllib.loads(_two_samples(two, {})))
    assert rule_problems(cfg, data) == []
    cfg = parse_config(tomllib.loads(_two_samples(two, {"init": {"W0": [[1.0, 1.0], [0.5, 1.0]]}})))
    assert rule_problems(cfg, data) == []
