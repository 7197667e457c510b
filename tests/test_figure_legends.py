"""The regime legend shared by the regime chart and the USAM ablation
(`samflow.figures._draw._regime_handles`), and the blow-up colour and legend entry of
every heat map of `samflow.figures` (issue 35)."""

import numpy as np
from matplotlib.colors import to_rgba

from samflow.figures._draw import _regime_handles
from samflow.plots import MISSING_COLOR, REGIME_COLORS, no_value_label
from samflow.status import Status


def test_regime_handles_labels_and_colours():
    h = _regime_handles()
    assert [p.get_label() for p in h] == ["undetermined", "regime 1: collapse", "regime 2: minor first, major last",
                                          "regime 3: major first"]
    assert [p.get_facecolor() for p in h] == [to_rgba(c) for c in REGIME_COLORS]


def test_regime_handles_add_the_no_value_patch_only_when_cells_miss():
    chart = _regime_handles(np.array([], int), undetermined=" (not at $d$ by the horizon)")
    assert len(chart) == 4 and chart[0].get_label() == "undetermined (not at $d$ by the horizon)"
    missing = [int(Status.BLEW_UP)]
    h = _regime_handles(missing, missing_prefix="bottom: ")
    assert len(h) == 5
    assert h[-1].get_label() == "bottom: " + no_value_label(missing)
    assert h[-1].get_facecolor() == to_rgba(MISSING_COLOR)


# ------------------------------------------------- blow-ups in the figures' heat maps (issue 35)
#
# The sweep's heat maps (samflow.plots) draw the pixels of a cell that blew up (status BLEW_UP)
# in a colour of their own with a legend entry naming the threshold; the figures of
# samflow.figures drew them black "no value", the colour of a failure. Each test below draws
# one figure's heat map from small synthetic arrays with a BLEW_UP cell and another failure.

from types import SimpleNamespace  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402

from samflow import plots  # noqa: E402
from samflow.figures import _banded, _linf_limit, _lp_family, _regime_chart, _usam_ablation  # noqa: E402
from samflow.figures._context import SETTINGS  # noqa: E402
from samflow.figures._draw import _heatmap_panel, _staircase_cmap, _staircase_handles  # noqa: E402
from samflow.figures._measure import MISSING, TIED  # noqa: E402
from test_plots import BLACK, kept_figures, meshes  # noqa: E402,F401  (a fixture)

RED = to_rgba(plots.BLEW_UP_COLOR)
BLOW = plots.blow_up_label(blowup_log10=SETTINGS.blowup_log10)
FIN, BLEW, STEPS = int(Status.FINISHED), int(Status.BLEW_UP), int(Status.MAX_STEPS)


def colours(mesh, shape):
    """The RGBA colour of each cell of a pcolormesh, (rows, columns, 4)."""
    return mesh.to_rgba(np.asarray(mesh.get_array()).reshape(shape))


def entries(legend):
    """(label, face colour) of each legend entry."""
    return [(t.get_text(), tuple(h.get_facecolor()) if hasattr(h, "get_facecolor") else None)
            for t, h in zip(legend.get_texts(), legend.legend_handles)]


def test_blow_up_label_takes_the_threshold_of_the_figures():
    assert BLOW == plots.blow_up_label() and r"10^{200}" in BLOW and BLOW.startswith("blew up")
    assert r"10^{150}" in plots.blow_up_label(blowup_log10=150.0)


def test_regime_handles_add_the_blow_up_patch_before_no_value():
    h = _regime_handles([STEPS], blew_up=True, missing_prefix="bottom: ")
    assert [p.get_label() for p in h][-2:] == [BLOW, "bottom: " + no_value_label([STEPS])]
    assert h[-2].get_facecolor() == RED
    assert len(_regime_handles([STEPS])) == 5  # no blow-up: no entry


def test_dominant_map_panel_draws_a_blow_up_in_its_colour(kept_figures):
    """The staircase and USAM heat maps (`_heatmap_panel`, `_staircase_handles`)."""
    d, ts, a_rel = 3, np.geomspace(1e-2, 1e2, 4), np.geomspace(0.1, 10.0, 3)
    dom = np.array([[TIED, 1, 2, 3], [3, 3, MISSING, MISSING], [2, MISSING, MISSING, MISSING]])
    status = np.array([FIN, BLEW, STEPS])
    fig, ax = plt.subplots()
    img = _heatmap_panel(ax, ts, a_rel, dom, d, status)
    rgba = colours(meshes(fig)[0], dom.shape)
    assert np.all(img[1, 2:] == plots.BLOWN_UP) and np.all(img[2, 1:] == MISSING) and img[0, 0] == TIED
    assert all(tuple(c) == RED for c in rgba[1, 2:]) and all(tuple(c) == BLACK for c in rgba[2, 1:])
    assert tuple(rgba[0, 0]) == to_rgba("#ffffff") and tuple(rgba[1, 0]) != RED  # tied stays white
    missing = status[np.any(img == MISSING, axis=-1)]
    hs = _staircase_handles(d, _staircase_cmap(d)[2], missing, blew_up=True)
    found = [(h.get_label(), tuple(h.get_facecolor())) for h in hs]
    assert found[-2:] == [(BLOW, RED), (no_value_label([STEPS]), BLACK)]
    assert BLOW not in [h.get_label() for h in _staircase_handles(d, _staircase_cmap(d)[2], missing)]


def test_regime_chart_draws_a_blow_up_in_its_colour(tmp_path, kept_figures):
    a_ax, r_ax = np.array([0.01, 0.1, 1.0]), np.array([0.1, 1.0])
    reg = np.array([[1, 1], [2, 0], [0, 3]])
    st = np.array([[FIN, FIN], [FIN, BLEW], [STEPS, BLEW]])  # (2, 1) blew up with a regime: keeps it
    fits = {"1/2": (1.0, np.log(0.05)), "2/3": (1.0, np.log(0.5))}
    run = SimpleNamespace(plan=SimpleNamespace(a_ax=a_ax, r_ax=r_ax, er=r_ax), reg=reg, st_chart=st, e12=0.05 * r_ax,
                          e23=0.5 * r_ax, c_shrink=0.03, c_major=0.5, fits=fits)
    _regime_chart._draw_regime_chart(SimpleNamespace(out_dir=tmp_path), run)
    fig = kept_figures[-1]
    (mesh,) = meshes(fig)
    rgba = colours(mesh, reg.shape)
    assert tuple(rgba[1, 1]) == RED and tuple(rgba[2, 0]) == BLACK and tuple(rgba[2, 1]) == to_rgba(REGIME_COLORS[3])
    found = entries(fig.axes[0].get_legend())
    assert (BLOW, RED) in found and found[-1] == (no_value_label([STEPS]), BLACK)


def test_usam_ablation_draws_a_blow_up_in_its_colour(tmp_path, kept_figures):
    d, ts, a_rel, rr = 3, np.geomspace(1e-2, 1e2, 4), np.array([0.5, 1.0, 2.0]), np.array([0.1, 1.0])
    flat = np.full((3, 4), 3)
    l2 = np.array([[1, 1, 0, 0], [1, 3, MISSING, MISSING], [3, MISSING, MISSING, MISSING]])
    top = {"gd": (flat, np.full(3, FIN)), "usam": (flat, np.full(3, FIN)), "l2": (l2, np.array([FIN, BLEW, STEPS]))}
    bottom = {"usam": (np.full((3, 2), 3), np.full((3, 2), FIN)),
              "l2": (np.array([[1, 1], [0, 2], [0, 3]]), np.array([[FIN, FIN], [BLEW, FIN], [STEPS, FIN]]))}
    first = {m: np.full(3, 3) for m in ("gd", "usam", "l2")}
    ctx = SimpleNamespace(out_dir=tmp_path, mu=np.array([0.2, 0.6, 1.0]), d=d)
    _usam_ablation._draw_usam(ctx, 0.1, ts, a_rel, rr, top, bottom, first)
    fig = kept_figures[-1]
    ms = meshes(fig)
    assert len(ms) == 5  # GD, USAM, l2-SAM over time; USAM, l2-SAM over (rho, alpha/rho)
    heat, chart = colours(ms[2], l2.shape), colours(ms[4], (3, 2))
    assert all(tuple(c) == RED for c in heat[1, 2:]) and all(tuple(c) == BLACK for c in heat[2, 1:])
    assert tuple(chart[1, 0]) == RED and tuple(chart[2, 0]) == BLACK
    found = entries(fig.legends[0])
    assert found.count((BLOW, RED)) == 1  # one entry for both rows
    assert ("top: " + no_value_label([STEPS]), BLACK) in found and ("bottom: " + no_value_label([STEPS]), BLACK) in found


def test_lp_family_draws_a_blow_up_in_its_colour(tmp_path, kept_figures):
    ps, a_ax = np.array([1.5, 2.0, 3.0]), np.array([0.1, 0.5, 2.0])
    lab = np.array([[1, 1, 1], [0, 2, _lp_family.MAJOR_DIES], [3, 0, 3]])
    st = np.array([[FIN, FIN, FIN], [BLEW, FIN, FIN], [FIN, STEPS, FIN]])
    img = np.where(lab == _lp_family.MAJOR_DIES, lab, plots.regime_image(np.where(lab == 4, 0, lab), st))
    pc = np.geomspace(1.5, 3.0, 8)
    edge = SimpleNamespace
    plan = SimpleNamespace(ps=ps, a_ax=a_ax, pc=pc, mu=np.array([0.2, 0.6, 1.0]))
    m = SimpleNamespace(plan=plan, img=img, status=st, shrink_c=0.1 * pc, major_c=0.9 + 0 * pc, mshrink_c=0.4 * pc,
                        ce=edge(edge=np.array([0.25, 0.35, 0.48])), me=edge(edge=np.array([1.0, 0.86, 0.83])),
                        death=np.array([np.nan, np.nan, 0.54]), l2c=edge(edge=0.35), l2m=edge(edge=0.86))
    _lp_family._draw(SimpleNamespace(out_dir=tmp_path), m)
    fig = kept_figures[-1]
    (mesh,) = meshes(fig)
    rgba = colours(mesh, img.shape)
    assert tuple(rgba[1, 0]) == RED and tuple(rgba[2, 1]) == BLACK
    assert tuple(rgba[1, 2]) == to_rgba(_lp_family.MAJOR_DIES_COLOR) != RED  # "major dies" is not a blow-up
    found = entries(fig.axes[0].get_legend())
    assert (BLOW, RED) in found and ("no value", BLACK) in found


def test_linf_limit_draws_a_depth_2_blow_up_in_its_colour(tmp_path, kept_figures):
    """Depth 2: a cell that blew up before any finite save has no limit feature: the blow-up
    colour. Depth 3: every measured cell blew up (that is the measurement); one that is not
    measured failed in the second pass and stays black "not measured"."""
    n, d = 2, 3
    g = (np.arange(n) + 0.5) * 2.5 / n
    A1, _ = np.meshgrid(g, g, indexing="xy")
    meas = np.array([3, -1, 0, 3])
    rand = np.array([3, 3, 0, 1])
    dep = [_linf_limit._LinfDepth(2, meas, SimpleNamespace(status=np.array([FIN, BLEW, FIN, FIN])), meas, rand, None,
                                  np.full(4, np.nan), rand),
           _linf_limit._LinfDepth(3, meas, SimpleNamespace(status=np.array([BLEW, BLEW, FIN, BLEW])), meas, rand, None,
                                  np.ones(4), rand)]
    plan = SimpleNamespace(mu=np.array([0.2, 0.6, 1.0]), d=d, ia=0, ib=2, g=g, A1=A1, depths=[2, 3], others=0.5, rho=1.0,
                           grid_max=2.5, axes=(1, 3), n_random=4)
    run = _linf_limit._LinfRun(plan, dep)
    _linf_limit._draw_linf(SimpleNamespace(out_dir=tmp_path), run)
    fig = kept_figures[-1]
    two, three = (colours(mm, A1.shape).reshape(-1, 4) for mm in meshes(fig))
    assert tuple(two[1]) == RED and tuple(three[1]) == BLACK
    found = entries(fig.legends[0])
    assert (BLOW, RED) in found
    assert ("no value: not measured (depth 3: the rescaled second pass did not reach the blow-up)", BLACK) in found


def test_banded_draws_a_blow_up_in_its_colour(tmp_path, kept_figures):
    band = np.array([0, 0, 1, 1, 2, 2])
    ts, a_rel = np.geomspace(1e-2, 1e2, 4), np.array([0.5, 1.0, 2.0])
    beta = np.broadcast_to(np.arange(1.0, 7.0), (3, 4, 6)).copy()  # band 3 leads
    beta[1, 2:] = np.nan  # blew up after two saves
    beta[2, 1:] = np.nan  # stalled at the step limit after one
    sol = {"beta": beta, "status": np.array([FIN, BLEW, STEPS]), "event_time": np.array([np.nan, 50.0, 0.05])}
    dom = _banded._band_map(sol, ts, band)
    assert np.all(dom[1, 2:] == plots.BLOWN_UP) and np.all(dom[2, 1:] == -1)
    plan = SimpleNamespace(data=SimpleNamespace(n=4, d=6), nb=3, a_rel=a_rel, ts=ts, rho=0.1)
    run = SimpleNamespace(plan=plan, maps={name: (np.full((3, 4), 3), dom) for name in _banded.BANDED_MODELS},
                          band_missing=[STEPS], mark=1.5)
    _banded._draw_banded(SimpleNamespace(out_dir=tmp_path), run)
    fig = kept_figures[-1]
    rgba = colours(meshes(fig)[3], dom.shape)  # l2-SAM, diagonal net
    assert all(tuple(c) == RED for c in rgba[1, 2:]) and all(tuple(c) == BLACK for c in rgba[2, 1:])
    found = entries(fig.legends[0])
    assert (BLOW, RED) in found and (no_value_label([STEPS]), BLACK) in found
