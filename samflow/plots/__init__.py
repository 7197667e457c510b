"""Figures of a sweep, drawn from its results `xarray.Dataset` (matplotlib; the command lines choose Agg).

- `plot_dominant_heatmap`: dominant feature index argmax_j |beta_j| over
  (time, alpha) at one rho, one panel per method (docs/theory.md section 6). Discrete
  colours 1 (minor) .. d (major); cells at beta = 0 (grey), cells after a blow-up
  (red: status BLEW_UP, the tau clock's growth past 10**blowup_log10 or a pole) and
  cells without a value (black) have colours of their own, each in the legend only
  when drawn and named by its cells' statuses ("collapsed" for l2-SAM, "slid to 0"
  for linf-SAM; "step limit", "solver failed", ... for black).
- `plot_trajectories`: |beta_j| on a log axis with the switches of the dominant
  feature marked, and the loss, for a few alphas (one per l2-SAM regime), per method.
- `plot_regime_chart`: regime 1/2/3 over (alpha, rho), per method; cells that
  failed are drawn "no value" (not "undetermined"), naming their status, and
  blown-up cells without a regime in the blow-up colour.
- `plot_sweep`: all of the above that the sweep's grid allows (`figure_names`); returns the
  paths. `python -m samflow.plot RESULTS.nc` draws them from a results file alone.

Cells are drawn with explicit edges (`cell_edges`): geometric midpoints on a log
axis. A grid holding 0 (rho = 0, t = 0) whose other values are a log grid gets a
symlog axis (`axis_scale`), noted in the axis label, so 0 is its own cell rather
than turning the axis linear or vanishing. Any status value this module does not
know is drawn as "no value" and named by its number.

A results file saved with `output.save = "summary"` has no beta: the heat map
and the regime chart are drawn from its `dominant` and `tied` variables (the
same pictures as from the full run), and the trajectories are not drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Patch

from ..analysis import (
    dominant_index,
    regime_label,
    switching_times,
    tied,
    visited_sequence,
)
from ..status import Status
from ._common import (  # noqa: F401  (moved there; this module keeps the names)
    COLLAPSED_COLOR as COLLAPSED_COLOR,
    MISSING_COLOR as MISSING_COLOR,
    BLEW_UP_COLOR as BLEW_UP_COLOR,
    BLOWN_UP as BLOWN_UP,
    blow_up_label as blow_up_label,
    with_blow_up as with_blow_up,
    REGIME_COLORS as REGIME_COLORS,
    REGIME_NAMES as REGIME_NAMES,
    UNDETERMINED_NOTE as UNDETERMINED_NOTE,
    NO_VALUE as NO_VALUE,
    _COMPLETED as _COMPLETED,
    _STATUS_WORDS as _STATUS_WORDS,
    feature_colors as feature_colors,
    _method_label as _method_label,
    _time_label as _time_label,
    _alpha_label as _alpha_label,
    _is_log as _is_log,
    axis_scale as axis_scale,
    _transform as _transform,
    cell_edges as cell_edges,
    _set_scale as _set_scale,
    _scale_note as _scale_note,
    status_text as status_text,
    _status_name as _status_name,
    no_value_label as no_value_label,
    _ZERO_WORDS as _ZERO_WORDS,
    zero_label as zero_label,
    regime_image as regime_image,
    regime_cmap as regime_cmap,
    normalized_beta as normalized_beta,
    _nearest as _nearest,
    is_summary as is_summary,
    _dominant as _dominant,
    _regimes as _regimes,
    major_feature as major_feature,
    minor_feature as minor_feature,
    save_png_pdf,
    plain_log_labels,
    feature_ticks,
    legend_features,
    sequence_text,
)

__all__ = [
    "plot_dominant_heatmap",
    "plot_trajectories",
    "plot_regime_chart",
    "plot_sweep",
    "feature_colors",
    "is_summary",
    "axis_scale",
    "cell_edges",
    "normalized_beta",
    "regime_image",
    "status_text",
    "no_value_label",
    "zero_label",
    "regime_cmap",
    "with_blow_up",
    "blow_up_label",
    "regime_chart_edges",
    "FIGURES",
    "figure_names",
]


def plot_dominant_heatmap(ds, path: "str | Path", rho: float | None = None, methods=None) -> Path:
    """Heat map of the dominant feature index over (time, alpha) at one rho.

    The colour bar labels every feature up to d = 10, and beyond a subset
    (`feature_ticks`: 1, d, the minor and the major feature, evenly spaced ones).

    **Arguments:** `ds` the results of a sweep; `path` the PNG to write (a PDF is
    written next to it); `rho` (default the first) picks the nearest grid rho;
    `methods` a subset of the sweep's methods.

    **Returns:** the PNG path.
    """
    path = Path(path)
    methods = list(methods or ds["flow"].values)
    ir = 0 if rho is None else _nearest(ds["rho"].values, rho)
    rho_v = float(ds["rho"].values[ir])
    d = ds.sizes["coord"]
    times = ds["time"].values
    alphas = ds["alpha"].values
    colors = [BLEW_UP_COLOR, MISSING_COLOR, COLLAPSED_COLOR] + feature_colors(d)
    cmap = ListedColormap(colors)
    norm = BoundaryNorm(np.arange(-2.5, d + 1.5, 1.0), cmap.N)
    (t_sc, t_lt), (a_sc, a_lt) = axis_scale(times), axis_scale(alphas)
    te, ae = cell_edges(times, t_sc, t_lt), cell_edges(alphas, a_sc, a_lt)
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods) + 1.2, 4.2), sharey=True, squeeze=False)
    axes = axes[0]
    mesh = None
    missing = []  # statuses of the cells with a "no value" pixel
    blew_up = False  # a cell with a pixel after its blow-up
    zero = {}  # method -> statuses of the cells with a beta = 0 pixel
    for ax, m in zip(axes, methods):
        st = np.asarray(ds["status"].sel(flow=m).isel(rho=ir).values)
        dom = with_blow_up(_dominant(ds, m, ir), st)
        missing += st[np.any(dom == NO_VALUE, axis=-1)].tolist()
        blew_up = blew_up or bool(np.any(dom == BLOWN_UP))
        if np.any(dom == 0):
            zero[m] = st[np.any(dom == 0, axis=-1)].tolist()
        mesh = ax.pcolormesh(te, ae, dom, cmap=cmap, norm=norm, shading="flat", rasterized=True)
        _set_scale(ax, "x", t_sc, t_lt)
        _set_scale(ax, "y", a_sc, a_lt)
        ax.set_xlim(te[0], te[-1])
        ax.set_ylim(ae[0], ae[-1])
        none = bool(np.all(dom < 0))  # NO_VALUE or BLOWN_UP
        ax.set_title(_method_label(m) + (f"\nno value in any cell ({', '.join(sorted({_status_name(v) for v in st.ravel()}))})" if none else ""))
        ax.set_xlabel(_time_label(ds) + _scale_note(t_sc, t_lt, "t"))
    axes[0].set_ylabel(_alpha_label(ds) + _scale_note(a_sc, a_lt, r"$\alpha$"))
    ticks = feature_ticks(d, minor_feature(ds), major_feature(ds))  # all of them up to d = 10
    cbar = fig.colorbar(mesh, ax=list(axes), ticks=ticks, boundaries=np.arange(0.5, d + 1.5, 1.0), values=np.arange(1, d + 1), fraction=0.03, pad=0.02)
    labels = {j: str(j) for j in ticks}
    if d > 1:  # by the data's mean y x, not the position (major_feature)
        labels[minor_feature(ds)] += " (minor)"
        labels[major_feature(ds)] += " (major)"
    cbar.ax.set_yticklabels([labels[j] for j in ticks])
    cbar.set_label(r"dominant feature $\arg\max_j |\beta_j|$")
    # Only the colours that appear, each named by what its cells did.
    handles = []
    if zero:
        handles.append(Patch(color=COLLAPSED_COLOR, label=zero_label(zero)))
    if blew_up:
        handles.append(Patch(color=BLEW_UP_COLOR, label=blow_up_label(ds)))
    if missing:
        handles.append(Patch(color=MISSING_COLOR, label=no_value_label(missing)))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.45, -0.02))
    depth = ds.attrs.get("depth", "?")
    fig.suptitle(rf"Dominant feature over time, depth $L={depth}$, $\rho={rho_v:g}$, $d={d}$")
    fig.subplots_adjust(bottom=0.2, top=0.85, right=0.86)
    plain_log_labels(fig)
    save_png_pdf(fig, path, dpi=130)
    plt.close(fig)
    return path


def _sequence(beta: np.ndarray) -> np.ndarray:
    """Dominant index (time,) of one trajectory, 0 where the lead is tied (rel. 1e-9) or beta = 0."""
    return np.where(tied(beta, 1e-9), 0, dominant_index(beta))


def _representative_alphas(ds, ir: int, k: int = 3) -> list[int]:
    """Indices of alphas showing each regime of l2-SAM (regimes are an l2-SAM notion), or spread.

    In regime 2 the init that visits the most dominant features is taken (the middle
    one of those): it shows "minor first, major last" best.
    """
    picks = []
    if "l2" in ds["flow"].values:
        beta = ds["beta"].sel(flow="l2").isel(rho=ir).values
        status = ds["status"].sel(flow="l2").isel(rho=ir).values
        reg = regime_label(beta, status, major_feature(ds))
        for r in (1, 2, 3):
            idx = np.flatnonzero(reg == r)
            if r == 2 and idx.size:
                n_seen = np.array([len(visited_sequence(_sequence(beta[i]))) for i in idx])
                idx = idx[n_seen == n_seen.max()]
            if idx.size:
                picks.append(int(idx[idx.size // 2]))
    if len(picks) < min(k, ds.sizes["alpha"]):
        spread = np.linspace(0, ds.sizes["alpha"] - 1, k).round().astype(int)
        picks = sorted(set(picks) | set(spread.tolist()))[: max(k, len(picks))]
    return sorted(set(picks))


def _end_text(m: str, status: int, t_ev: float) -> str:
    """How a trajectory ended, in words (empty when it ran to the horizon untouched)."""
    if status == int(Status.COLLAPSED):
        return f"collapsed to 0 at t = {t_ev:.3g}"
    if status == int(Status.SLID):
        return "slid to 0" if m == "linf" else "some weights slid to 0"
    if status == int(Status.NONUNIQUE):
        return f"not unique at t = {t_ev:.3g}: one solution followed"
    if status in _COMPLETED:
        return "at a critical point" if status == int(Status.CRITICAL) else ""
    word = _STATUS_WORDS.get(_status_name(status), _status_name(status).lower())
    return f"{word} at t = {t_ev:.3g}" if np.isfinite(t_ev) else word


def _time_window(times, dom, loss, t_ev, slides) -> tuple[float, float]:
    """The x range of one trajectory panel: from the first save time to 1.6 x the time of its
    last change (last switch of the dominant feature, event, last slide to 0, or the loss
    falling to half its start), within the save times and holding at least 8 of them."""
    times = np.asarray(times, dtype=float)
    marks = [t for t, _, _ in switching_times(dom, times)]
    if np.isfinite(t_ev):
        marks.append(float(t_ev))
    slides = np.asarray(slides, dtype=float)
    if np.any(np.isfinite(slides)):
        marks.append(float(np.nanmax(slides)))
    loss = np.asarray(loss, dtype=float)
    if loss.size and np.isfinite(loss[0]) and loss[0] > 0:
        fell = np.flatnonzero(loss <= loss[0] / 2)
        if fell.size:
            marks.append(float(times[fell[0]]))
    lo = min(0.0, float(times[0]))
    hi = 1.6 * max(marks) if marks else float(times[-1])
    hi = float(np.clip(hi, times[min(7, times.size - 1)], times[-1]))
    return lo, hi if hi > lo else lo + 1.0


def _cell_switches(ds, m, ir, ia, dom, times) -> list[tuple[float, int, int]]:
    """(time, from, to) of one cell: the exact switch times of the results file
    (`switch_time`, `samflow.switches`) where it has a kept record, else the
    save-grid dating (`switching_times`)."""
    if "switch_time" in ds and bool(ds["switch_ok"].sel(flow=m).isel(rho=ir, alpha=ia).values):
        sel = lambda v: ds[v].sel(flow=m).isel(rho=ir, alpha=ia).values
        t, f, to = sel("switch_time"), sel("switch_from"), sel("switch_to")
        return [(float(t[k]), int(f[k]), int(to[k])) for k in range(t.size) if np.isfinite(t[k])]
    return switching_times(dom, times)


#: A switch's "a -> b" label is left out when it is closer than this share of the panel's
#: width to the last one labelled (its dotted line stays): at large d the labels of a
#: fast staircase printed over each other.
_LABEL_GAP = 0.045


def plot_trajectories(ds, path: "str | Path", rho: float | None = None, alphas=None) -> Path:
    """|beta_j| (log scale) and the loss over time for a few alphas: rows methods, columns alphas.

    Each panel draws |beta_j(t)| of every feature on a log axis (so features that
    start equal, as with w(0) = alpha 1, separate visibly), a dotted line with
    "a->b" at every switch of the dominant feature argmax_j |beta_j| (leads tied
    to 1e-9 are not switches; at its exact time where the file has `switch_time`,
    else at the first save time after it), a dashed line at an event (a collapse,
    blow-up, stall, or a decision that is not unique; `event_time`), and the loss on a second, linear axis (grey, dashed). Its
    title names the method and alpha, the order of the dominant features
    (docs/theory.md s.5) and how the trajectory ended; only l2-SAM panels name a
    regime (regimes 1/2/3 are defined for l2-SAM, docs/theory.md s.3).

    At d > 10 the figure stays readable: the legend names the minor and major
    features and at most four others that lead at some time (`legend_features`;
    the other features are drawn thin), a sequence of more than six leaders is
    shortened in the title ("1 -> 2 -> ... -> 50 (29 switches)",
    `sequence_text`), and a switch label closer than `_LABEL_GAP` of the panel
    to the previous one is left out (its line stays).

    **Arguments:** `alphas` values on the sweep's alpha axis (nearest grid points
    are used); default one per regime of l2-SAM (in regime 2 the init that
    visits the most features), or three spread alphas.

    **Returns:** the PNG path (a PDF is written next to it).

    **Raises:** `ValueError` for a results file saved with `output.save =
    "summary"` (it has no beta).
    """
    if is_summary(ds):
        raise ValueError(
            'the trajectory figure needs beta over time: rerun the sweep with output.save = "full" '
            "(this results file is a summary)"
        )
    path = Path(path)
    ir = 0 if rho is None else _nearest(ds["rho"].values, rho)
    rho_v = float(ds["rho"].values[ir])
    if alphas is None:
        ia = _representative_alphas(ds, ir)
    else:
        ia = sorted({_nearest(ds["alpha"].values, a) for a in alphas})
    methods = list(ds["flow"].values)
    d = ds.sizes["coord"]
    cols = feature_colors(d)
    relative = bool(int(ds.attrs.get("alpha_relative_to_rho", 0)))
    leaders = {j for m in methods for a in ia
               for j in visited_sequence(_sequence(ds["beta"].sel(flow=m).isel(rho=ir, alpha=a).values))}
    named = legend_features(d, minor_feature(ds), major_feature(ds), leaders)  # all of them up to d = 10
    fig, axes = plt.subplots(len(methods), len(ia), figsize=(3.9 * len(ia) + 0.9, 2.9 * len(methods)), squeeze=False)
    for i, m in enumerate(methods):
        for j, a in enumerate(ia):
            _trajectory_panel(axes[i, j], ds, m, ir, a, named, cols, relative,
                              first_col=j == 0, last_col=j == len(ia) - 1, last_row=i == len(methods) - 1)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if len(named) < d:
        handles.append(plt.Line2D([], [], color="0.5", lw=0.7))
        labels.append(f"the other {d - len(named)} features (thin; colour by index)")
    handles += [plt.Line2D([], [], color="0.45", ls="--"), plt.Line2D([], [], color="0.55", ls=":"),
                plt.Line2D([], [], color="k", ls="--")]
    labels += ["loss", r"switch of the dominant feature $a \to b$", "event: collapse, blow-up, stall, a decision not unique"]
    fig.suptitle(
        rf"$|\beta_j(t)|$ at $\rho={rho_v:g}$, depth {ds.attrs.get('depth', '?')}: feature {minor_feature(ds)} is the "
        f"most minor, {major_feature(ds)} the major one\n(linear time, each panel up to 1.6 x the time of its last change: "
        "switch, collapse, slide or the fall of the loss)",
        y=1.0, fontsize=11,
    )
    plain_log_labels(fig)  # before the layout: it lays out the tick labels
    # The title hangs from the figure's top (y = 1, its top edge), and tight_layout keeps its
    # height free under the top of `rect`: with the title above the figure (y = 1.02) and the
    # rect ending at 0.97, the height was kept free twice, a blank band under the title.
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=min(len(handles), 5), frameon=False,
               bbox_to_anchor=(0.5, 0.0), fontsize=8.5)
    save_png_pdf(fig, path, dpi=110)
    plt.close(fig)
    return path


def _trajectory_panel(ax, ds, m, ir, a, named, cols, relative, *, first_col, last_col, last_row) -> None:
    """One panel of `plot_trajectories`: flow `m` at rho index `ir` and alpha index `a`
    (|beta_j| with its switches and events, the loss on a second axis, the title)."""
    d = ds.sizes["coord"]
    times = ds["time"].values
    beta = np.asarray(ds["beta"].sel(flow=m).isel(rho=ir, alpha=a).values, dtype=float)
    loss = ds["loss"].sel(flow=m).isel(rho=ir, alpha=a).values
    mag = np.abs(beta)
    with np.errstate(invalid="ignore"):
        shown = np.where(np.isfinite(mag) & (mag > 0), mag, np.nan)
    for k in range(d):
        if k + 1 in named:
            ax.plot(times, shown[:, k], color=cols[k], lw=1.5, label=rf"$|\beta_{{{k + 1}}}|$")
        else:  # thin and unnamed: at large d a legend of every feature would hide the panels
            ax.plot(times, shown[:, k], color=cols[k], lw=0.7, alpha=0.7)
    ax.set_yscale("log")
    pos = shown[np.isfinite(shown)]
    if pos.size:  # at most 12 decades below the largest value: a collapse dives to 1e-300
        ax.set_ylim(max(pos.min() / 3, pos.max() * 1e-12), pos.max() * 3)
    dom = _sequence(beta)
    status = int(ds["status"].sel(flow=m).isel(rho=ir, alpha=a).values)
    t_ev = float(ds["event_time"].sel(flow=m).isel(rho=ir, alpha=a).values)
    slides = ds["slide_time"].sel(flow=m).isel(rho=ir, alpha=a).values if "slide_time" in ds else np.array([])
    lo, hi = _time_window(times, dom, loss, t_ev, slides)
    labelled = -np.inf
    for t_sw, f, to in _cell_switches(ds, m, ir, a, dom, times):
        ax.axvline(t_sw, color="0.55", lw=0.7, ls=":")
        if t_sw - labelled >= _LABEL_GAP * (hi - lo):  # every switch has its line; labels do not overlap
            labelled = t_sw
            ax.text(t_sw, 0.03, f"{f}$\\to${to} ", transform=ax.get_xaxis_transform(), fontsize=7, rotation=90,
                    ha="right", va="bottom", color="0.3")
    if np.isfinite(t_ev) and status != int(Status.SLID):
        ax.axvline(t_ev, color="k", lw=0.9, ls="--")
    ax.set_xlim(lo, hi)
    ax2 = ax.twinx()
    ax2.plot(times, loss, color="0.45", ls="--", lw=1.0)
    ax2.set_ylim(0, 1.05 * max(float(np.nanmax(loss, initial=0.0)), 1e-12))
    ax2.tick_params(axis="y", colors="0.45", labelsize=8)
    if last_col:
        ax2.set_ylabel("loss (grey, dashed)", color="0.45")
    a_v = float(ds["alpha"].values[a])
    head = f"{_method_label(m)}, " + (rf"$\alpha/\rho$ = {a_v:.3g}" if relative else rf"$\alpha$ = {a_v:.3g}")
    if m == "l2":
        reg = int(regime_label(beta[None], np.asarray([status]), major_feature(ds))[0])
        head += f": regime {reg}" if reg else ": regime undetermined"
    seq = visited_sequence(dom)
    lines = [head] + (["dominant " + sequence_text(seq)] if seq else [])
    end = _end_text(m, status, t_ev)
    if end:
        lines.append(end)
    ax.set_title("\n".join(lines), fontsize=8.5)
    ax.grid(True, which="major", alpha=0.2)
    if first_col:
        ax.set_ylabel(r"$|\beta_j(t)|$ (log)")
    if last_row:
        ax.set_xlabel(_time_label(ds))


def regime_chart_edges(rhos, alpha_abs):
    """Cell geometry of the regime chart: axis scales and cell edges of every rho column.

    **Arguments:** `rhos` (R,) the grid's rho; `alpha_abs` (A, R) the absolute init
    scale of each cell (`ds["alpha_init"]`; with `alpha_relative_to_rho` each
    column is alpha/rho times its rho).

    **Returns:** `(x_scale, y_scale, rho_edges, alpha_edges)`: `x_scale` and
    `y_scale` are `axis_scale` tuples; `rho_edges` (R + 1,) as `cell_edges` of
    the rhos on x_scale (rho = 0 gets its own cell on a symlog axis);
    `alpha_edges` a list of R arrays (A + 1,), the edges of each column on
    y_scale, or None for a column whose alphas are not strictly monotone (e.g.
    all 0 at rho = 0 with alpha relative to rho), which is left undrawn.

    **Raises:** `ValueError` for rhos that are not strictly monotone.
    """
    rhos = np.asarray(rhos, dtype=float)
    alpha_abs = np.asarray(alpha_abs, dtype=float)
    xs = axis_scale(rhos)
    a_all = alpha_abs[np.isfinite(alpha_abs)]
    ys = ("log", None) if a_all.size and np.all(a_all > 0) else axis_scale(a_all)
    rho_edges = cell_edges(rhos, *xs)
    cols = []
    for j in range(alpha_abs.shape[1]):
        try:
            cols.append(cell_edges(alpha_abs[:, j], *ys))
        except ValueError:
            cols.append(None)
    return xs, ys, rho_edges, cols


def plot_regime_chart(ds, path: "str | Path", methods=None) -> Path:
    """Regime label (1 collapse, 2 minor first, 3 major first) over (alpha, rho).

    The y axis is the absolute init scale alpha. Each cell spans the midpoints to
    its neighbours in the axis's coordinate (`regime_chart_edges`): geometric
    midpoints on a log axis; a grid with rho = 0 gets a symlog rho axis (noted in
    its label) so that rho = 0 is its own column. A cell whose regime is 0 because
    it has no value is drawn in the blow-up colour when it blew up (BLEW_UP,
    `with_blow_up`, legend `blow_up_label`), else black (MAX_STEPS,
    NONFINITE_INPUT, FAILED, SURFACE or unknown: `regime_image`) with a legend
    entry naming those statuses; a panel (and the chart) with no value in any
    cell says so in its title.

    **Returns:** the PNG path (a PDF is written next to it).
    """
    path = Path(path)
    methods = list(methods or [m for m in ds["flow"].values if m != "gd"] or ds["flow"].values)
    rhos = np.asarray(ds["rho"].values, dtype=float)
    alpha_abs = np.asarray(ds["alpha_init"].values, dtype=float)  # (alpha, rho)
    (x_sc, x_lt), (y_sc, y_lt), rho_e, alpha_e = regime_chart_edges(rhos, alpha_abs)
    cmap, norm, colors = regime_cmap()
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods) + 0.5, 4.0), squeeze=False, sharey=True)
    missing, failed, all_missing, blew_up = [], [], [], False
    y_lo = min(e[0] for e in alpha_e if e is not None) if any(e is not None for e in alpha_e) else None
    y_hi = max(e[-1] for e in alpha_e if e is not None) if any(e is not None for e in alpha_e) else None
    for ax, m in zip(axes[0], methods):
        status = np.asarray(ds["status"].sel(flow=m).values)
        img = with_blow_up(regime_image(_regimes(ds, m), status), status)  # (alpha, rho)
        missing += status[img == NO_VALUE].tolist()
        failed += status[img < 0].tolist()
        blew_up = blew_up or bool(np.any(img == BLOWN_UP))
        if alpha_e[0] is not None and all(e is not None and np.array_equal(e, alpha_e[0]) for e in alpha_e):
            ax.pcolormesh(rho_e, alpha_e[0], img, cmap=cmap, norm=norm, shading="flat", rasterized=True)
        else:  # alpha relative to rho: each column has its own alphas
            for j, ae in enumerate(alpha_e):
                if ae is None:
                    ax.text(rhos[j], 0.5, f"alpha = {alpha_abs[0, j]:g}\nfor every cell", transform=ax.get_xaxis_transform(),
                            rotation=90, ha="center", va="center", fontsize=7)
                    continue
                ax.pcolormesh(rho_e[j : j + 2], ae, img[:, j : j + 1], cmap=cmap, norm=norm, shading="flat", rasterized=True)
        _set_scale(ax, "x", x_sc, x_lt)
        _set_scale(ax, "y", y_sc, y_lt)
        ax.set_xlim(rho_e[0], rho_e[-1])
        if y_lo is not None:
            ax.set_ylim(y_lo, y_hi)
        ax.set_xlabel(r"SAM radius $\rho$" + _scale_note(x_sc, x_lt, r"$\rho$"))
        none = bool(np.all(img < 0))  # NO_VALUE or BLOWN_UP
        all_missing.append(none)
        ax.set_title(_method_label(m) + (f"\nno value in any cell ({', '.join(sorted({_status_name(v) for v in status.ravel()}))})" if none else ""))
    axes[0, 0].set_ylabel(r"init scale $\alpha$" + _scale_note(y_sc, y_lt, r"$\alpha$"))
    names = [REGIME_NAMES[0] + UNDETERMINED_NOTE] + REGIME_NAMES[1:]
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.3, label=n) for c, n in zip(REGIME_COLORS, names)]
    if blew_up:
        handles.append(Patch(facecolor=BLEW_UP_COLOR, edgecolor="k", lw=0.3, label=blow_up_label(ds)))
    if missing:
        handles.append(Patch(facecolor=MISSING_COLOR, edgecolor="k", lw=0.3, label=no_value_label(missing)))
    more = blew_up or bool(missing)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3 if more else 4), frameon=False, bbox_to_anchor=(0.5, -0.06 - 0.05 * more))
    title = f"Regimes over (alpha, rho), depth {ds.attrs.get('depth', '?')}"
    if all(all_missing):
        title += f": every cell failed, no regime ({no_value_label(failed)[len('no value ('):-1]})"
    fig.suptitle(title)
    plain_log_labels(fig)  # before the layout: it lays out the tick labels
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_png_pdf(fig, path, dpi=130)
    plt.close(fig)
    return path


#: The figures of a sweep, by name (the PNG is `<name>.png`, a PDF beside it), in the order drawn.
FIGURES = ("dominant_heatmap", "trajectories", "regime_chart")


def figure_names(ds) -> list[str]:
    """The figures `plot_sweep` draws for these results: the heat map always, the
    trajectories unless the file is a summary (`output.save = "summary"`, no beta),
    the regime chart when the grid has more than one rho."""
    return [n for n in FIGURES if not (n == "trajectories" and is_summary(ds)) and not (n == "regime_chart" and ds.sizes["rho"] < 2)]


def _stored_output(ds) -> dict:
    """The `[output]` table of the config stored in the results file (attribute
    `config`, JSON), or {} for a file without one."""
    import json

    try:
        return dict(json.loads(ds.attrs["config"]).get("output") or {})
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}


def plot_sweep(ds, out_dir: "str | Path", output=None, names=None) -> list[Path]:
    """Draw every figure the sweep's grid supports into `out_dir`; return the PNG paths.

    **Arguments:** `ds` the results of a sweep (`samflow.store.read_results`);
    `output` the `[output]` section of its config (`SweepConfig.output`), for
    `plot_rho` and `trajectory_alphas` (default: the section stored in the results
    file, so a redraw from the file alone, `python -m samflow.plot`, draws the
    sweep's figures); `names` a subset of `figure_names(ds)` (default all).

    For a summary file (`output.save = "summary"`) the trajectory figure is
    skipped, with a one-line note on stderr.

    **Raises:** `TypeError` (one line), before any folder is made, for a whole
    `SweepConfig` as `output` (0.2's argument: pass its `.output`) or an `output`
    without `plot_rho` and `trajectory_alphas` (a dict, say).
    """
    if output is not None and hasattr(output, "output"):
        raise TypeError("plot_sweep takes the config's [output] section since samflow 0.3.0: pass cfg.output, not cfg")
    if output is not None and not (hasattr(output, "plot_rho") and hasattr(output, "trajectory_alphas")):
        raise TypeError("plot_sweep's output is the config's [output] section (cfg.output, with plot_rho and "
                        f"trajectory_alphas) or None, not a {type(output).__name__}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if output is not None:
        plot_rho, traj_alphas = output.plot_rho, output.trajectory_alphas
    else:
        stored = _stored_output(ds)
        plot_rho, traj_alphas = stored.get("plot_rho"), stored.get("trajectory_alphas")
    wanted = FIGURES if names is None else tuple(names)
    paths = []
    if "dominant_heatmap" in wanted:
        paths.append(plot_dominant_heatmap(ds, out_dir / "dominant_heatmap.png", rho=plot_rho))
    if "trajectories" in wanted:
        if is_summary(ds):
            print(
                'note: no trajectory figure: the results are a summary without beta over time; '
                'it needs output.save = "full"',
                file=sys.stderr,
            )
        else:
            paths.append(plot_trajectories(ds, out_dir / "trajectories.png", rho=plot_rho, alphas=traj_alphas))
    if "regime_chart" in wanted and ds.sizes["rho"] > 1:
        paths.append(plot_regime_chart(ds, out_dir / "regime_chart.png"))
    return paths
