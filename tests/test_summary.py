"""`output.save = "summary"`: the sweep keeps per save time only the dominant index,
the ties, ||beta||, the loss and t, and these equal what a full run gives.

The same tiny grid is run with `save = "full"` and `save = "summary"` through the
command line: the summary must be the analysis of the full run's beta (dominant
index exactly, ||beta|| to 1e-15 relative), everything else bit for bit, and the
heat map and regime chart the same pictures.
"""

from __future__ import annotations

import contextlib
import io

import matplotlib.image
import numpy as np
import pytest

from samflow.analysis import dominant_index, regime_label, regime_label_from_dominant, tied
from samflow.config import ConfigError, load_config
from samflow.merge import merge_slices, slice_file_name
from samflow.plots import plot_dominant_heatmap, plot_regime_chart, plot_trajectories
from samflow.store import read_results
from samflow.sweep import main

from helpers import sweep_toml


# 3 alphas x 2 rhos, 16 save times; l2 collapses at small alpha/rho.
def config(save: str) -> str:
    return sweep_toml("summ", ["gd", "l2"], alpha=[0.01, 0.5, 10.0], rho=[0.05, 0.2], t1=1e3, num=16,
                      output={"save": save})

# Every variable both kinds of file hold, compared bit for bit (NaNs in place).
SHARED = ("loss", "real_time", "status", "event_time", "event_real_time", "collapse_direction",
          "slide_time", "num_steps", "num_runs", "alpha_init", "data_X", "data_y")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The full run (results only), and the summary run with its figures and its
    (stdout, stderr)."""
    root = tmp_path_factory.mktemp("summary")
    for save in ("full", "summary"):
        (root / f"{save}.toml").write_text(config(save))
    assert main([str(root / "full.toml"), "--out", str(root / "full"), "--quiet", "--no-figures"]) == 0
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main([str(root / "summary.toml"), "--out", str(root / "summary"), "--quiet"]) == 0
    return root, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def pair(runs):
    root = runs[0]
    return read_results(root / "full" / "results.nc"), root


def test_cli_writes_summary_results_and_heatmap(runs):
    root, stdout, stderr = runs
    out = root / "summary"
    assert (out / "results.nc").is_file() and (out / "dominant_heatmap.png").is_file()
    assert (out / "regime_chart.png").is_file()  # 2 rhos: drawn from dominant + tied
    assert not (out / "trajectories.png").exists() and "trajectories" not in stdout
    notes = [line for line in stderr.splitlines() if "trajectory" in line]
    assert len(notes) == 1 and 'output.save = "full"' in notes[0]


def test_summary_equals_the_analysis_of_the_full_run(pair):
    full, root = pair
    summ = read_results(root / "summary" / "results.nc")
    assert "beta" not in summ and "weights" not in summ
    for name in ("dominant", "tied", "beta_norm", "loss", "real_time"):
        assert summ[name].dims == ("flow", "alpha", "rho", "time"), name
    assert summ["dominant"].dtype == np.int8 and summ["tied"].dtype == bool
    beta = full["beta"].values
    np.testing.assert_array_equal(summ["dominant"].values, dominant_index(beta))
    np.testing.assert_array_equal(summ["tied"].values, tied(beta, 1e-9))
    np.testing.assert_allclose(summ["beta_norm"].values, np.linalg.norm(beta, axis=-1), rtol=1e-15, atol=0)
    for name in SHARED:
        got, ref = summ[name], full[name]
        assert got.dims == ref.dims and got.dtype == ref.dtype, name
        assert np.array_equal(got.values, ref.values, equal_nan=ref.dtype.kind == "f"), name
    # Not vacuous: collapsed (dominant 0) and the major feature are there, NaN event times too.
    dom = summ["dominant"].values
    assert (dom == 0).any() and (dom == 3).any() and (summ["status"].values == 1).any()
    assert np.isnan(summ["event_time"].values).any()
    # Regime labels from the summary equal those from beta (and show more than one regime).
    labels = set()
    for m in full["flow"].values:
        ref = regime_label(full["beta"].sel(flow=m).values, full["status"].sel(flow=m).values)
        got = regime_label_from_dominant(
            summ["dominant"].sel(flow=m).values, summ["tied"].sel(flow=m).values,
            summ["status"].sel(flow=m).values, summ.sizes["coord"],
        )
        np.testing.assert_array_equal(got, ref)
        labels |= set(ref.ravel().tolist())
    assert {1, 3} <= labels


def test_figures_from_a_summary_are_the_full_run_s(pair, tmp_path):
    full, root = pair
    summ = read_results(root / "summary" / "results.nc")
    # The CLI's figures of the summary run, pixel for pixel those of the full run.
    for plot, name in ((plot_dominant_heatmap, "dominant_heatmap.png"), (plot_regime_chart, "regime_chart.png")):
        a = matplotlib.image.imread(plot(full, tmp_path / name))
        b = matplotlib.image.imread(root / "summary" / name)
        assert a.shape == b.shape and np.array_equal(a, b), name
    with pytest.raises(ValueError, match='output.save = "full"'):
        plot_trajectories(summ, tmp_path / "t.png")


def test_save_weights_with_summary_is_a_one_line_config_error(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(config("summary") + "save_weights = true\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert "\n" not in msg and "output.save_weights" in msg and "output.save =" in msg
    assert main([str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "output.save_weights" in capsys.readouterr().err and not (tmp_path / "o").exists()
    path.write_text(config("tiny"))
    with pytest.raises(ConfigError, match="output.save"):
        load_config(path)


def test_merged_summary_slices_equal_the_whole_summary_run(runs):
    # Here rather than in test_distributed.py: the slices reuse this file's compilation.
    root = runs[0]
    sliced = root / "sliced"
    K = 2
    for i in range(K):
        assert main([str(root / "summary.toml"), "--out", str(sliced), "--quiet",
                     "--num-slices", str(K), "--slice-index", str(i)]) == 0
    parts = [read_results(sliced / "slices" / slice_file_name(i, K)) for i in range(K)]
    assert parts[0]["dominant"].dims == ("flow", "cell", "time") and "beta" not in parts[0]
    merged, whole = merge_slices(parts), read_results(root / "summary" / "results.nc")
    assert list(merged.data_vars) == list(whole.data_vars)
    for name, var in whole.variables.items():
        got = merged[name]
        assert got.dims == var.dims and got.dtype == var.dtype, name
        assert np.array_equal(got.values, var.values, equal_nan=var.dtype.kind == "f"), name
    # A summary slice and a full run never mix: their config keys differ.
    full = read_results(root / "full" / "results.nc")
    assert full.attrs["config_key"] != whole.attrs["config_key"]


def test_summary_dominant_holds_an_index_past_int16():
    """`summarize` stored the dominant index as int16 for d > 127, so at
    d = 40,000 feature 40,000 came back as a negative number."""
    import jax.numpy as jnp

    import samflow as sf

    d, n = 40_000, 3
    beta = np.zeros((n, d))
    beta[0, 5] = 1.0  # feature 6
    beta[1, d - 1] = 2.0  # feature d
    # beta[2] stays 0: collapsed, dominant 0
    traj = sf.Trajectory(
        ts=jnp.arange(n, dtype=float), t=jnp.arange(n, dtype=float), W=jnp.zeros((n, 1, d)), beta=jnp.asarray(beta),
        loss=jnp.zeros(n), status=jnp.asarray(0), event_time=jnp.asarray(np.nan), event_t=jnp.asarray(np.nan),
        collapse_direction=jnp.zeros(d), slide_time=jnp.zeros((1, d)), num_steps=jnp.asarray(0), num_runs=jnp.asarray(1),
    )
    s = sf.summarize(traj)
    assert s.dominant.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(s.dominant), [6, d, 0])
    np.testing.assert_array_equal(np.asarray(s.dominant), dominant_index(beta))


@pytest.mark.parametrize("tie_tol", [float("nan"), 1.0, -0.1])
def test_summarize_refuses_a_tie_tolerance_outside_0_1(tie_tol):
    # NaN marked no time tied, 1.0 every time: regime labels from such a summary
    # were wrong without a word (analysis.tied refuses the same values).
    import jax.numpy as jnp

    import samflow as sf

    beta = jnp.asarray([[1.0, 1.0], [1.0, 2.0]])
    traj = sf.Trajectory(
        ts=jnp.arange(2.0), t=jnp.arange(2.0), W=jnp.zeros((2, 1, 2)), beta=beta, loss=jnp.zeros(2),
        status=jnp.asarray(0), event_time=jnp.asarray(np.nan), event_t=jnp.asarray(np.nan),
        collapse_direction=jnp.zeros(2), slide_time=jnp.zeros((1, 2)), num_steps=jnp.asarray(0), num_runs=jnp.asarray(1),
    )
    np.testing.assert_array_equal(np.asarray(sf.summarize(traj).tied), [True, False])
    with pytest.raises(ValueError, match="tie_tol"):
        sf.summarize(traj, tie_tol)
