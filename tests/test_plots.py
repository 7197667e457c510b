"""Figures of a sweep (samflow.plots): cell edges on log axes, rho = 0, failed cells, overflow.

Issue 12, cases 9 (the regime chart on log grids) and 12 (a figure that
overflows), and their siblings (every heat map / chart / line plot on log axes).
The datasets are built by hand (no solve), in the layout of `samflow.store`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from matplotlib.collections import QuadMesh
from matplotlib.colors import to_rgba

from samflow import plots
from samflow.status import Status

CASE9_RHO = np.array([0.0, 1e-3, 1e-2, 0.1, 1.0])
CASE9_ALPHA = np.logspace(-3, 1, 5)
BLACK = to_rgba(plots.MISSING_COLOR)


def make_ds(beta, status, *, alpha, rho, times, flows=("gd", "l2"), relative=False, event_time=None):
    """A results Dataset with the variables the figures read; beta (flow, alpha, rho, time, d)."""
    beta = np.asarray(beta, dtype=float)
    F, A, R, T, d = beta.shape
    alpha_abs = np.outer(alpha, rho) if relative else np.repeat(np.asarray(alpha, float)[:, None], R, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        loss = np.where(np.all(np.isfinite(beta), axis=-1), np.log(2.0), np.nan)
    et = np.full((F, A, R), np.nan) if event_time is None else np.asarray(event_time, float)
    return xr.Dataset(
        {
            "beta": (("flow", "alpha", "rho", "time", "coord"), beta),
            "loss": (("flow", "alpha", "rho", "time"), loss),
            "status": (("flow", "alpha", "rho"), np.asarray(status, dtype=np.int8)),
            "event_time": (("flow", "alpha", "rho"), et),
            "alpha_init": (("alpha", "rho"), alpha_abs),
        },
        coords={"flow": list(flows), "alpha": np.asarray(alpha, float), "rho": np.asarray(rho, float),
                "time": np.asarray(times, float), "coord": np.arange(1, d + 1)},
        attrs={"depth": 2, "clock": "tau", "alpha_relative_to_rho": int(relative)},
    )


def major_first_beta(F, A, R, T, d=3):
    """beta_j = j at every time: dominant index d throughout, regime 3."""
    return np.broadcast_to(np.arange(1.0, d + 1), (F, A, R, T, d)).copy()


@pytest.fixture
def kept_figures(monkeypatch):
    """The figures a plot function draws, kept open (plots.* close them after saving)."""
    figs, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    yield figs
    for f in figs:
        close(f)


def meshes(fig):
    return [c for ax in fig.axes if ax.get_label() != "<colorbar>" for c in ax.collections if isinstance(c, QuadMesh)]


def mesh_x_edges(mesh):
    return mesh.get_coordinates()[0, :, 0]


def mesh_y_edges(mesh):
    return mesh.get_coordinates()[:, 0, 1]


# ---------------------------------------------------------------- cell edges (case 9)


def test_cell_edges_on_a_log_axis_are_geometric_midpoints():
    a = CASE9_ALPHA
    e = plots.cell_edges(a, "log")
    np.testing.assert_allclose(e[1:-1], np.sqrt(a[1:] * a[:-1]), rtol=1e-12)
    np.testing.assert_allclose(e[[0, -1]], [a[0] / np.sqrt(10.0), a[-1] * np.sqrt(10.0)], rtol=1e-12)
    # Linear midpoints (the old edges) put each boundary 1.74x higher: (1 + 10) / 2 / sqrt(10).
    assert not np.allclose(e[1:-1], (a[1:] + a[:-1]) / 2)


def test_cell_edges_linear_and_one_centre():
    np.testing.assert_allclose(plots.cell_edges([0.0, 1.0, 3.0]), [-0.5, 0.5, 2.0, 4.0])
    np.testing.assert_allclose(plots.cell_edges([2.0], "log"), [2.0 / 1.5, 3.0])
    np.testing.assert_allclose(plots.cell_edges([2.0]), [1.5, 2.5])


@pytest.mark.parametrize("x, scale", [([1.0, 1.0, 2.0], "linear"), ([0.0, 1.0], "log"), ([1.0, np.nan], "log"), ([1.0, 2.0], "loglog")])
def test_cell_edges_refuses_bad_centres(x, scale):
    with pytest.raises(ValueError):
        plots.cell_edges(x, scale)


def test_axis_scale_of_grids_with_zero():
    assert plots.axis_scale(CASE9_RHO) == ("symlog", 1e-3)
    assert plots.axis_scale(CASE9_ALPHA) == ("log", None)
    assert plots.axis_scale(np.linspace(0.0, 100.0, 11)) == ("linear", None)  # linear time from 0 stays linear
    assert plots.axis_scale(np.r_[0.0, np.logspace(-2, 4, 7)]) == ("symlog", 1e-2)
    assert plots.axis_scale([0.0, 0.1]) == ("linear", None)


def test_regime_chart_edges_of_the_case9_grid():
    """rho = [0, 1e-3, 1e-2, 0.1, 1] x alpha = logspace(-3, 1, 5): rho = 0 its own cell, geometric edges."""
    alpha_abs = np.repeat(CASE9_ALPHA[:, None], 5, axis=1)
    xs, ys, rho_e, alpha_e = plots.regime_chart_edges(CASE9_RHO, alpha_abs)
    assert xs == ("symlog", 1e-3) and ys == ("log", None)
    # Before: linear midpoints [-0.0035, 0.0055, 0.055, 0.55, 1.45] on a linear axis.
    np.testing.assert_allclose(rho_e, [-5e-4, 5e-4, np.sqrt(1e-5), np.sqrt(1e-3), np.sqrt(1e-1), np.sqrt(10.0)], rtol=1e-12)
    for e in alpha_e:
        np.testing.assert_allclose(e[1:-1], np.sqrt(CASE9_ALPHA[1:] * CASE9_ALPHA[:-1]), rtol=1e-12)


# ---------------------------------------------------------------- the regime chart (case 9)


def test_regime_chart_case9_grid_draws_geometric_cells_and_rho_zero(tmp_path, kept_figures):
    F, A, R, T = 2, 5, 5, 6
    beta = major_first_beta(F, A, R, T)
    status = np.zeros((F, A, R), dtype=int)
    # l2 cell (alpha 1e-2, rho 1e-3) hit max_steps at once: no value, not "undetermined".
    beta[1, 1, 1] = np.nan
    status[1, 1, 1] = Status.MAX_STEPS
    ds = make_ds(beta, status, alpha=CASE9_ALPHA, rho=CASE9_RHO, times=np.logspace(-2, 2, T))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.plot_regime_chart(ds, tmp_path / "regime.png")
    assert (tmp_path / "regime.png").stat().st_size > 0 and (tmp_path / "regime.pdf").exists()
    fig = kept_figures[-1]
    (mesh,) = meshes(fig)
    ax = mesh.axes
    assert ax.get_xscale() == "symlog" and ax.get_yscale() == "log"
    assert "symlog" in ax.get_xlabel() and r"$\rho$ = 0" in ax.get_xlabel()
    np.testing.assert_allclose(mesh_x_edges(mesh), [-5e-4, 5e-4, np.sqrt(1e-5), np.sqrt(1e-3), np.sqrt(1e-1), np.sqrt(10.0)], rtol=1e-12)
    np.testing.assert_allclose(mesh_y_edges(mesh)[1:-1], np.sqrt(CASE9_ALPHA[1:] * CASE9_ALPHA[:-1]), rtol=1e-12)
    img = np.asarray(mesh.get_array()).reshape(A, R)
    assert img[1, 1] == plots.NO_VALUE and np.sum(img == plots.NO_VALUE) == 1
    assert np.all(img[img != plots.NO_VALUE] == 3)
    assert mesh.cmap(mesh.norm(plots.NO_VALUE)) == BLACK
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "no value (MAX_STEPS: step limit, solver.max_steps)" in labels
    assert fig._suptitle.get_text() == "Regimes over (alpha, rho), depth 2"


def test_all_failed_regime_chart_says_so_in_its_title(tmp_path, kept_figures):
    """max_steps = 1: every cell MAX_STEPS with NaN beta; before: all drawn 'undetermined'."""
    F, A, R, T = 2, 5, 5, 4
    beta = np.full((F, A, R, T, 3), np.nan)
    status = np.full((F, A, R), int(Status.MAX_STEPS))
    ds = make_ds(beta, status, alpha=CASE9_ALPHA, rho=CASE9_RHO, times=np.logspace(-2, 2, T))
    plots.plot_regime_chart(ds, tmp_path / "regime.png")
    fig = kept_figures[-1]
    (mesh,) = meshes(fig)
    assert np.all(np.asarray(mesh.get_array()) == plots.NO_VALUE)
    assert fig._suptitle.get_text() == (
        "Regimes over (alpha, rho), depth 2: every cell failed, no regime (MAX_STEPS: step limit, solver.max_steps)"
    )
    assert mesh.axes.get_title() == "$\\ell_2$-SAM\nno value in any cell (MAX_STEPS)"


def test_regime_chart_relative_alpha_columns_have_their_own_geometric_edges(tmp_path, kept_figures):
    rho = np.array([1e-2, 1e-1, 1.0])
    a_rel = np.array([0.1, 1.0, 10.0])
    F, A, R, T = 1, 3, 3, 4
    ds = make_ds(major_first_beta(F, A, R, T), np.zeros((F, A, R)), alpha=a_rel, rho=rho,
                 times=np.logspace(-2, 2, T), flows=("l2",), relative=True)
    plots.plot_regime_chart(ds, tmp_path / "regime.png")
    ms = meshes(kept_figures[-1])
    assert len(ms) == 3
    for j, m in enumerate(ms):
        a = a_rel * rho[j]
        np.testing.assert_allclose(mesh_y_edges(m)[1:-1], np.sqrt(a[1:] * a[:-1]), rtol=1e-12)
        np.testing.assert_allclose(mesh_x_edges(m), plots.cell_edges(rho, "log")[j : j + 2], rtol=1e-12)


def test_regime_image_unknown_status_is_no_value():
    """A status this module does not know (here 42) is drawn 'no value', not a crash;
    CRITICAL (held at a critical point of the loss) keeps its value like FINISHED."""
    reg = np.array([0, 0, 0, 2, 0, 0, 0])
    st = np.array([Status.FINISHED, Status.SLID, Status.BLEW_UP, Status.BLEW_UP, 42, Status.NONFINITE_INPUT,
                   Status.CRITICAL])
    np.testing.assert_array_equal(plots.regime_image(reg, st), [0, 0, -1, 2, -1, -1, 0])
    assert plots.status_text(42) == "status 42 (unknown)"
    assert plots.no_value_label([42, 4, 4]) == "no value (MAX_STEPS: step limit, solver.max_steps; status 42 (unknown))"
    assert plots.no_value_label([]) == r"no value (non-finite $\beta$)"


def test_regime_chart_with_an_unknown_status(tmp_path, kept_figures):
    F, A, R, T = 1, 2, 2, 3
    beta = np.full((F, A, R, T, 3), np.nan)
    ds = make_ds(beta, np.full((F, A, R), 42), alpha=[0.1, 1.0], rho=[0.1, 1.0], times=[0.1, 1.0, 10.0], flows=("l2",))
    plots.plot_regime_chart(ds, tmp_path / "regime.png")
    fig = kept_figures[-1]
    assert "status 42 (unknown)" in fig._suptitle.get_text()


# ---------------------------------------------------------------- the heat map (sibling)


def test_heatmap_edges_and_no_value_legend_name_the_status(tmp_path, kept_figures):
    F, A, R, T = 2, 5, 1, 6
    times = np.logspace(-2, 3, T)
    beta = major_first_beta(F, A, R, T)
    status = np.zeros((F, A, R), dtype=int)
    beta[1, 2, 0, 3:] = np.nan  # l2, alpha index 2 blew up after the third save time
    status[1, 2, 0] = Status.BLEW_UP
    ds = make_ds(beta, status, alpha=CASE9_ALPHA, rho=[0.1], times=times)
    plots.plot_dominant_heatmap(ds, tmp_path / "heat.png")
    fig = kept_figures[-1]
    ms = meshes(fig)
    assert len(ms) == 2
    np.testing.assert_allclose(mesh_x_edges(ms[0])[1:-1], np.sqrt(times[1:] * times[:-1]), rtol=1e-12)
    np.testing.assert_allclose(mesh_y_edges(ms[0])[1:-1], np.sqrt(CASE9_ALPHA[1:] * CASE9_ALPHA[:-1]), rtol=1e-12)
    dom = np.asarray(ms[1].get_array()).reshape(A, T)
    # Issue 35: a blow-up is its own labelled colour, not a black "no value" strip.
    assert np.all(dom[2, 3:] == plots.BLOWN_UP) and np.all(dom[2, :3] == 3) and not np.any(dom == plots.NO_VALUE)
    assert ms[1].cmap(ms[1].norm(plots.BLOWN_UP)) == to_rgba(plots.BLEW_UP_COLOR) != BLACK
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [plots.blow_up_label(ds)]  # no cell at beta = 0, none without a value: one entry
    assert labels[0].startswith("blew up") and r"10^{200}" in labels[0]


def test_heatmap_and_regime_chart_show_blow_up_beside_other_failures(tmp_path, kept_figures):
    """Issue 35: configs/lp_family.toml's heat map had a black strip in every panel, labelled
    "no value (BLEW_UP: blew up)" together with real failures. A blow-up (the tau clock's
    growth past 10^blowup_log10, read from the stored config) has its own colour and legend
    entry in both heat maps; a cell that failed otherwise stays black "no value"."""
    import json

    F, A, R, T = 2, 3, 2, 5
    times = np.logspace(-2, 2, T)
    beta = major_first_beta(F, A, R, T)
    beta[:, :, :, :, :] = 1.0  # tied everywhere: no leader, regime 0 unless a status says more
    beta[..., -1] = 2.0  # ... then the major feature leads: regime 3
    status = np.zeros((F, A, R), dtype=int)
    beta[0, 2, 0, 2:] = np.nan  # gd blew up after two saves
    status[0, 2, 0] = Status.BLEW_UP
    beta[1, 0, :, :] = np.nan  # l2 blew up at once (regime 0 without a value) at both rhos ...
    status[1, 0, :] = Status.BLEW_UP
    beta[1, 1, 1, :] = np.nan  # ... and stalled at the step limit at once in another cell
    status[1, 1, 1] = Status.MAX_STEPS
    ds = make_ds(beta, status, alpha=[0.1, 1.0, 10.0], rho=[0.1, 1.0], times=times)
    ds.attrs["config"] = json.dumps({"solver": {"blowup_log10": 150.0}})
    plots.plot_dominant_heatmap(ds, tmp_path / "heat.png")
    fig = kept_figures[-1]
    gd, l2 = (np.asarray(m.get_array()).reshape(A, T) for m in meshes(fig))
    assert np.all(gd[2, 2:] == plots.BLOWN_UP) and np.all(l2[0] == plots.BLOWN_UP)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [plots.blow_up_label(ds)] and r"10^{150}" in labels[0]  # rho = 0.1: no step-limit cell
    colours = [h.get_facecolor() for h in fig.legends[0].legend_handles]
    assert colours == [to_rgba(plots.BLEW_UP_COLOR)]

    plots.plot_regime_chart(ds, tmp_path / "regime.png")
    fig = kept_figures[-1]
    (l2,) = [np.asarray(m.get_array()).reshape(A, R) for m in meshes(fig)]  # gd is not drawn
    assert list(l2[0]) == [plots.BLOWN_UP] * 2 and l2[1, 1] == plots.NO_VALUE
    mesh = meshes(fig)[0]
    assert mesh.cmap(mesh.norm(plots.BLOWN_UP)) == to_rgba(plots.BLEW_UP_COLOR)
    assert mesh.cmap(mesh.norm(plots.NO_VALUE)) == BLACK
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[-2:] == [plots.blow_up_label(ds), "no value (MAX_STEPS: step limit, solver.max_steps)"]
    assert fig._suptitle.get_text() == "Regimes over (alpha, rho), depth 2"


def test_heatmap_legend_names_each_colour_by_its_cells(tmp_path, kept_figures):
    """Grey (beta = 0) says "collapsed" for l2-SAM and "slid to 0" for linf-SAM; black names the
    statuses of its cells (step limit, not "blow-up / failed"); a colour that is not drawn has
    no legend entry."""
    F, A, R, T = 3, 3, 1, 4
    beta = major_first_beta(F, A, R, T)
    status = np.zeros((F, A, R), dtype=int)
    beta[1, 0, 0, 2:] = 0.0  # l2 collapsed
    status[1, 0, 0] = Status.COLLAPSED
    beta[2, 0, 0, 1:] = 0.0  # linf slid to 0
    status[2, 0, 0] = Status.SLID
    beta[2, 1, 0, 3:] = np.nan  # linf stalled at the step limit
    status[2, 1, 0] = Status.MAX_STEPS
    ds = make_ds(beta, status, alpha=[0.1, 1.0, 10.0], rho=[0.1], times=np.logspace(-2, 1, T), flows=("gd", "l2", "linf"))
    plots.plot_dominant_heatmap(ds, tmp_path / "heat.png")
    labels = [t.get_text() for t in kept_figures[-1].legends[0].get_texts()]
    assert labels == [r"$\beta = 0$: collapsed ($\ell_2$-SAM); slid to 0 ($\ell_\infty$-SAM)",
                      "no value (MAX_STEPS: step limit, solver.max_steps)"]
    # Nothing missing, nothing at 0: no legend at all.
    ok = make_ds(major_first_beta(1, 2, 1, T), np.zeros((1, 2, 1)), alpha=[0.1, 1.0], rho=[0.1],
                 times=np.logspace(-2, 1, T), flows=("gd",))
    plots.plot_dominant_heatmap(ok, tmp_path / "heat2.png")
    assert kept_figures[-1].legends == []


def test_heatmap_time_axis_with_zero_is_symlog_and_keeps_t0(tmp_path, kept_figures):
    times = np.r_[0.0, np.logspace(-2, 2, 5)]
    F, A, R, T = 1, 3, 1, times.size
    ds = make_ds(major_first_beta(F, A, R, T), np.zeros((F, A, R)), alpha=[0.1, 1.0, 10.0], rho=[0.1], times=times, flows=("l2",))
    plots.plot_dominant_heatmap(ds, tmp_path / "heat.png")
    (mesh,) = meshes(kept_figures[-1])
    assert mesh.axes.get_xscale() == "symlog"
    te = mesh_x_edges(mesh)
    assert te[0] < 0.0 < te[1] == pytest.approx(5e-3)  # t = 0 has its own cell
    np.testing.assert_allclose(te[2:-1], np.sqrt(times[2:] * times[1:-1]), rtol=1e-12)


# ---------------------------------------------------------------- overflow (case 12)


def test_normalized_beta_without_overflow():
    beta = np.array([[1e-300, 1e-100, 1.0, 1e100, 5e177], [0.0, 0.0, 0.0, 0.0, 0.0], [1.0, np.nan, 0, 0, 0], [3.0, 4.0, 0, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        u = plots.normalized_beta(beta)
    assert abs(u[0, 4] - 1.0) <= 1e-12 and np.all(np.abs(u[0, :4]) <= 1e-12)
    assert np.all(np.isnan(u[1])) and np.all(np.isnan(u[2]))
    np.testing.assert_allclose(u[3], [0.6, 0.8, 0, 0, 0], rtol=1e-15)


def test_trajectories_draw_beta_up_to_5e177_on_a_log_axis(tmp_path, kept_figures):
    """configs/rescaled_tau.toml: beta_5 grows to 5e177 by tau = 200 (its square overflows);
    the panel draws |beta_j| itself on a log axis, without a warning."""
    T, d = 8, 5
    times = np.logspace(-2, np.log10(200.0), T)
    b5 = np.logspace(0, np.log10(5e177), T)
    beta = np.zeros((1, 1, 1, T, d))
    beta[..., 4] = b5
    beta[..., 0] = 1e-300
    beta[..., 3] = b5 * 1e-3
    ds = make_ds(beta, np.zeros((1, 1, 1)), alpha=[1.0], rho=[1.0], times=times, flows=("gd",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[1.0])
    ax = kept_figures[-1].axes[0]
    assert ax.get_yscale() == "log"
    y5 = next(line for line in ax.get_lines() if line.get_label() == r"$|\beta_{5}|$").get_ydata()
    np.testing.assert_array_equal(y5, b5)
    y2 = next(line for line in ax.get_lines() if line.get_label() == r"$|\beta_{2}|$").get_ydata()
    assert np.all(np.isnan(y2))  # beta_2 = 0: no point on a log axis
    assert ax.get_ylim()[1] >= 5e177


def test_log_axes_are_labelled_in_plain_text_with_matplotlibs_ticks_and_numbers(tmp_path, kept_figures):
    """`plain_log_labels`: the saved figures' log axes label the ticks matplotlib's
    default labels (the same ticks, the same numbers), written with Unicode
    superscripts, not mathtext (whose parse was a tenth of a warm sweep's time)."""
    from matplotlib.ticker import LogFormatterSciNotation

    from samflow.plots._common import PlainLogFormatter, plain_log_labels

    fig, ax = plt.subplots()
    ax.loglog([1e-3, 1e3], [0.02, 0.09])
    fig.canvas.draw()
    default = [[t.get_text() for t in axis.get_majorticklabels() + axis.get_minorticklabels()]
               for axis in (ax.xaxis, ax.yaxis)]
    plain_log_labels(fig)
    assert isinstance(ax.xaxis.get_major_formatter(), PlainLogFormatter)
    assert isinstance(ax.yaxis.get_minor_formatter(), PlainLogFormatter)
    fig.canvas.draw()
    plain = [[t.get_text() for t in axis.get_majorticklabels() + axis.get_minorticklabels()]
             for axis in (ax.xaxis, ax.yaxis)]
    plt.close(fig)
    sup = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")
    assert default[0][:3] == ["$\\mathdefault{10^{-4}}$", "$\\mathdefault{10^{-3}}$", "$\\mathdefault{10^{-2}}$"]
    assert plain[0][:3] == ["10\u207b\u2074", "10\u207b\u00b3", "10\u207b\u00b2"]
    for d_axis, p_axis in zip(default, plain):  # label for label: the same ticks labelled, the same number
        assert len(d_axis) == len(p_axis)
        for d_label, p_label in zip(d_axis, p_axis):
            expect = (d_label.replace("$\\mathdefault{", "").replace("}$", "").replace("\\times", "\u00d7"))
            if "^{" in expect:
                base, exponent = expect.split("^{")
                expect = base + exponent.rstrip("}").translate(sup)
            assert p_label == expect
    assert "2\u00d710\u207b\u00b2" in plain[1]  # a minor label with its coefficient
    # a formatter the figure chose itself is left alone
    fig, ax = plt.subplots()
    ax.set_xscale("log")
    own = LogFormatterSciNotation(labelOnlyBase=True)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.yaxis.set_major_formatter(own)
    plain_log_labels(fig)
    assert not isinstance(ax.xaxis.get_major_formatter(), LogFormatterSciNotation)
    assert isinstance(ax.yaxis.get_major_formatter(), PlainLogFormatter)
    plt.close(fig)
    # the sweep's figures: no mathtext left on a log axis' ticks
    T, d = 6, 5
    times = np.logspace(-2, 2, T)
    beta = np.broadcast_to(np.logspace(-3, 1, T)[:, None] * np.arange(1.0, d + 1), (1, 1, 1, T, d)).copy()
    ds = make_ds(beta, np.zeros((1, 1, 1)), alpha=[1.0], rho=[1.0], times=times, flows=("gd",))
    plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[1.0])
    log_axis = kept_figures[-1].axes[0].yaxis
    labels = [t.get_text() for t in log_axis.get_majorticklabels() if t.get_text()]
    assert labels and not any("$" in t for t in labels)


def test_trajectories_with_t0_keep_it(tmp_path, kept_figures):
    times = np.r_[0.0, np.logspace(-2, 1, 4)]
    beta = major_first_beta(1, 1, 1, times.size)
    ds = make_ds(beta, np.zeros((1, 1, 1)), alpha=[1.0], rho=[1.0], times=times, flows=("l2",))
    plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[1.0])
    ax = kept_figures[-1].axes[0]
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] <= 0.0


def test_trajectory_title_sits_right_above_the_panels(tmp_path, kept_figures):
    """The two-line title hangs from the figure's top and the top row's panel titles follow
    it at tight_layout's padding: the title at y = 1.02 with tight_layout's rect ending at
    0.97 kept its height free twice, a blank band of 0.7 in (77 px at 110 dpi) under it."""
    T = 8
    times = np.linspace(0.5, 4.0, T)
    beta = np.broadcast_to(_staircase(), (3, 3, 1, T, 3)).copy()
    ds = make_ds(beta, np.zeros((3, 3, 1)), alpha=[0.1, 0.5, 2.0], rho=[1.0], times=times,
                 flows=("gd", "l2", "linf"))
    plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[0.1, 0.5, 2.0])
    fig = kept_figures[-1]
    renderer = fig.canvas.get_renderer()
    sup = fig._suptitle.get_window_extent(renderer)
    tops = [ax.title.get_window_extent(renderer).y1 for ax in fig.axes if ax.get_title()]
    gap_in = (sup.y0 - max(tops)) / fig.dpi
    assert sup.y1 <= fig.bbox.y1 + 1e-6, gap_in  # the title inside the figure
    assert 0.0 < gap_in < 0.4, gap_in  # tight_layout's two pads (0.15 in each) and the rows' alignment


LEAD = np.array([0, 0, 0, 1, 1, 2, 2, 2])  # the dominant feature (0-based) at each of 8 save times


def _staircase(lead=LEAD, d: int = 3) -> np.ndarray:
    """|beta_j| (T, d): 2e-3 for the leading feature, 1e-3 for the others (minor first, major last)."""
    beta = np.full((lead.size, d), 1e-3)
    beta[np.arange(lead.size), lead] = 2e-3
    return beta


def test_trajectories_mark_switches_and_name_regimes_only_for_l2(tmp_path, kept_figures):
    """Every switch of the dominant feature gets a dotted line at its save time with "a -> b"; the
    title gives the visited order; "regime" appears on l2-SAM panels only (an l2-SAM notion)."""
    T = 8
    times = np.linspace(0.5, 4.0, T)
    beta = np.broadcast_to(_staircase(), (3, 1, 1, T, 3)).copy()
    ds = make_ds(beta, np.zeros((3, 1, 1)), alpha=[0.5], rho=[1.0], times=times, flows=("gd", "l2", "linf"))
    plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[0.5])
    axes = [ax for ax in kept_figures[-1].axes if ax.get_ylabel() != "loss (grey, dashed)" and ax.get_title()]
    titles = [ax.get_title() for ax in axes]
    assert "regime" not in titles[0] and "regime" not in titles[2]
    assert titles[1].startswith(r"$\ell_2$-SAM, $\alpha$ = 0.5: regime 2")
    assert all(r"dominant 1 $\to$ 2 $\to$ 3" in t for t in titles)
    # |beta_2| passes |beta_1| between t index 2 and 3, |beta_3| passes |beta_2| between 4 and 5.
    switch_at = times[[3, 5]]  # dated at the first save time with the new lead
    dotted = [line.get_xdata()[0] for line in axes[1].get_lines() if line.get_linestyle() == ":"]
    np.testing.assert_allclose(dotted, switch_at)
    texts = [t.get_text().strip() for t in axes[1].texts]
    assert texts == [r"1$\to$2", r"2$\to$3"]


def test_trajectories_pick_the_longest_staircase_of_regime_2():
    """Default columns: one alpha per l2-SAM regime; in regime 2 the init visiting the most features."""
    T = 8
    times = np.linspace(0.5, 4.0, T)
    A = 4
    beta = np.broadcast_to(np.arange(1.0, 4.0), (1, A, 1, T, 3)).copy()  # regime 3 everywhere ...
    beta[0, 1, 0] = _staircase(np.array([1, 1, 1, 1, 2, 2, 2, 2]))  # alpha index 1: 2 -> 3
    beta[0, 2, 0] = _staircase()  # alpha index 2: 1 -> 2 -> 3, the longest staircase
    ds = make_ds(beta, np.zeros((1, A, 1)), alpha=[0.1, 0.2, 0.3, 0.4], rho=[1.0], times=times, flows=("l2",))
    from samflow.analysis import regime_label
    reg = regime_label(beta[0, :, 0], np.zeros(A, int))
    np.testing.assert_array_equal(reg, [3, 2, 2, 3])
    picks = plots._representative_alphas(ds, 0)
    assert 2 in picks and 1 not in picks and 3 in picks  # regime 2: index 2, not the shorter 1


def test_minor_share_legend_is_below_the_panels(tmp_path, kept_figures):
    """Issue 17: the legend of minor_share.png sat inside a panel and hid points."""
    from samflow.experiments.cnn_plots import plot_minor_share

    rng = np.random.default_rng(0)
    ds = xr.Dataset(
        {"minor_share": (("task", "optimizer", "alpha", "epoch"), rng.uniform(0.6, 0.9, (2, 2, 2, 4))),
         "uniform_minor_share": (("task",), [0.7, 0.75])},
        coords={"task": ["3v8", "10class"], "optimizer": ["gd", "sam_l2"], "alpha": [2.0, 3.0], "epoch": np.arange(4)},
        attrs={"threshold": 0.5},
    )
    plot_minor_share(ds, tmp_path / "minor_share.png")
    fig = kept_figures[-1]
    fig.canvas.draw()
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 2 * 2 + 1  # method x alpha, and the uniform map, once
    box = legend.get_window_extent()
    assert all(box.y1 <= ax.get_window_extent().y0 for ax in fig.axes)


def _small_sweep(mu: list[float], save: str = "full"):
    from samflow.config import SweepConfig, read_toml
    from samflow.sweep import run_sweep

    raw = read_toml(Path(__file__).parent.parent / "configs" / "default.toml")
    raw["methods"] = ["l2"]
    raw["data"] = {"mu": mu}
    raw["grid"]["alpha"] = [0.1, 0.75, 5.0]  # alpha / rho: one cell per l2-SAM regime (1, 2, 3)
    raw["time"]["num"] = 40
    raw["output"]["save"] = save
    raw["output"]["switch_times"] = False
    return run_sweep(SweepConfig.model_validate(raw), progress=False)


def _sweep_regimes(mu: list[float], save: str) -> tuple[np.ndarray, int]:
    from samflow.plots._common import _regimes, major_feature

    ds = _small_sweep(mu, save)
    return _regimes(ds, "l2")[:, 0], major_feature(ds)


@pytest.mark.parametrize("save", ["full", "summary"])
def test_regimes_of_a_sweep_do_not_depend_on_the_order_of_the_features(save):
    """The flows act coordinate by coordinate, so listing mu in another order only
    renames the features: the regimes must stay. They were labelled against the
    last coordinate, so mu = [1.0, 0.6, 0.2] gave (1, 0, 0) for (1, 2, 3)."""
    inc, major_inc = _sweep_regimes([0.2, 0.6, 1.0], save)
    dec, major_dec = _sweep_regimes([1.0, 0.6, 0.2], save)
    mid, major_mid = _sweep_regimes([0.6, 1.0, 0.2], save)
    assert (major_inc, major_dec, major_mid) == (3, 1, 2)
    np.testing.assert_array_equal(inc, [1, 2, 3])
    np.testing.assert_array_equal(dec, inc)
    np.testing.assert_array_equal(mid, inc)


def test_figures_name_the_minor_and_major_features_by_the_data(tmp_path, kept_figures):
    """The heat map's colour bar said "1 (minor)" and "3 (major)", and the trajectory
    panels "feature 1 is the most minor, 3 the major one", whatever the data."""
    from samflow.plots import plot_dominant_heatmap, plot_trajectories

    ds = _small_sweep([0.6, 1.0, 0.2])
    plot_dominant_heatmap(ds, tmp_path / "h.png")
    cbar = next(ax for ax in kept_figures[-1].axes if ax.get_label() == "<colorbar>")
    assert [t.get_text() for t in cbar.get_yticklabels()] == ["1", "2 (major)", "3 (minor)"]
    plot_trajectories(ds, tmp_path / "t.png")
    assert "feature 3 is the most minor, 2 the major one" in kept_figures[-1]._suptitle.get_text()


# ---------------------------------------------------------------- figures at any d (issue 28)


def _many_features_ds(d: int = 50, minor: int = 1, major: int = 50):
    """One l2-SAM cell whose lead climbs through 40 of d features (the staircase at large d),
    with data whose most minor / major features are `minor` / `major`."""
    lead = np.round(np.linspace(0, d - 1, 40)).astype(int)
    beta = _staircase(lead, d)[None, None, None]
    ds = make_ds(beta, np.zeros((1, 1, 1)), alpha=[0.5], rho=[1.0], times=np.linspace(0.5, 20.0, 40), flows=("l2",))
    mu = np.linspace(0.1, 0.9, d)
    mu[[minor - 1, major - 1]] = 0.01, 1.0
    ds["data_X"] = (("sample", "coord"), mu[None])
    ds["data_y"] = (("sample",), np.ones(1))
    return ds


@pytest.mark.parametrize("minor, major", [(1, 50), (12, 37)])
def test_heatmap_colour_bar_labels_a_readable_subset_at_large_d(tmp_path, kept_figures, minor, major):
    """At d = 50 the colour bar printed all 50 labels over each other; it now labels at
    most 12 features, always 1 and d, and the minor and major ones by name."""
    plots.plot_dominant_heatmap(_many_features_ds(50, minor, major), tmp_path / "h.png")
    cbar = next(ax for ax in kept_figures[-1].axes if ax.get_label() == "<colorbar>")
    labels = [t.get_text() for t in cbar.get_yticklabels()]
    ticks = [int(v) for v in cbar.get_yticks()]
    assert len(labels) == len(ticks) <= 12
    assert ticks == sorted(ticks) and {1, 50, minor, major} <= set(ticks)
    assert f"{minor} (minor)" in labels and f"{major} (major)" in labels
    assert all(label.split()[0] == str(t) for label, t in zip(labels, ticks))
    assert min(np.diff(ticks)) >= 2  # no two labels on neighbouring colours


def test_trajectory_legend_and_titles_stay_readable_at_large_d(tmp_path, kept_figures):
    """At d = 50 the legend listed 53 entries and the title 40 leaders; now the legend
    names the minor and major features and some leaders (at most ~10 entries in all)
    and the title abbreviates the sequence, giving the number of switches."""
    ds = _many_features_ds(50, 12, 37)
    plots.plot_trajectories(ds, tmp_path / "t.png", alphas=[0.5])
    fig = kept_figures[-1]
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) <= 10
    assert r"$|\beta_{12}|$" in texts and r"$|\beta_{37}|$" in texts
    assert any(t.startswith("the other ") for t in texts)
    (title,) = [ax.get_title() for ax in fig.axes if ax.get_title()]
    seq = plots.visited_sequence(plots._sequence(ds["beta"].values[0, 0, 0]))
    assert len(seq) > 30
    assert f"dominant {seq[0]} $\\to$ {seq[1]} $\\to$ ... $\\to$ {seq[-1]} ({len(seq) - 1} switches)" in title
    # d <= 10: every feature is named, as before.
    small = make_ds(np.broadcast_to(_staircase(), (1, 1, 1, 8, 3)).copy(), np.zeros((1, 1, 1)), alpha=[0.5],
                    rho=[1.0], times=np.linspace(0.5, 4.0, 8), flows=("l2",))
    plots.plot_trajectories(small, tmp_path / "s.png", alphas=[0.5])
    texts = [t.get_text() for t in kept_figures[-1].legends[0].get_texts()]
    assert texts[:3] == [r"$|\beta_{1}|$", r"$|\beta_{2}|$", r"$|\beta_{3}|$"] and len(texts) == 6


def test_feature_selections():
    from samflow.plots._common import feature_ticks, legend_features, sequence_text

    assert feature_ticks(10, 1, 10) == list(range(1, 11))
    ticks = feature_ticks(200, 7, 150)
    assert {1, 7, 150, 200} <= set(ticks) and len(ticks) <= 12
    assert legend_features(8, 1, 8, []) == list(range(1, 9))
    assert legend_features(50, 1, 50, [1, 50]) == [1, 50]
    assert legend_features(50, 1, 50, range(1, 51)) == [1, 2, 18, 33, 49, 50]  # thinned evenly to 6
    assert sequence_text([1, 2, 3]) == r"1 $\to$ 2 $\to$ 3"
    assert sequence_text(range(1, 51), arrow=" -> ") == "1 -> 2 -> ... -> 50 (49 switches)"
