"""Figure 3: l2-SAM regimes over (alpha, rho) and their boundaries (regime_chart)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import patheffects
from matplotlib.lines import Line2D
from pydantic import Field

from .. import theory
from ..analysis import dominant_index, regime_label, tied, visited_sequence
from ..plots import BLOWN_UP, NO_VALUE, UNDETERMINED_NOTE
from ..solver import Trajectory
from ._context import Context, _LogAxis, _Strict, _init, _solve
from ._report import Check, FigureResult, _planned_figure, mu_text
from ._draw import _log_edges, _regime_handles, _regime_panel, _save
from ._measure import staircase_ok


class RegimeChartConfig(_Strict):
    """Schema of `configs/figures/regime_chart.toml`; see that file for its keys."""

    alpha: _LogAxis
    """The chart's alpha axis."""
    rho: _LogAxis
    """The chart's rho axis."""
    tau_min: float = Field(gt=0)
    """First save time (tau)."""
    tau1: float = Field(gt=0)
    """Horizon (tau)."""
    edge_rho: _LogAxis
    """The rhos at which the regime edges are located."""
    edge_points: int = Field(ge=1)
    """Points per edge search."""
    edge_passes: int = Field(ge=1)
    """Refinement passes of the edge search."""
    slope_tol: float = Field(gt=0)
    """Pass: the edges' log-log slope is 1 within this."""
    mark_tol: float = Field(gt=0)
    """Pass: the measured edges lie within this relative distance of the theory's marks."""
    order_sweep: _LogAxis  # alpha / rho (at rho = 1) of the switching-order check
    """alpha / rho (at rho = 1) of the switching-order check."""
    example_mu: list[float]  # docs/theory.md s.3's worked example (mu = (1, 2), rho = 1)
    """docs/theory.md s.3's worked example (mu = (1, 2), rho = 1)."""
    example_edges: tuple[float, float, float, float]  # its stated ranges: 1/2 edge in [a, b], 2/3 edge in [c, e]
    """Its stated ranges: the 1/2 edge in [a, b], the 2/3 edge in [c, e]."""


def _l2_regimes(ctx: Context, alpha, rho, ts) -> tuple[np.ndarray, Trajectory]:
    """Regime labels of depth-2 l2-SAM (tau clock, one sample) for cells alpha (B,), rho (B,)."""
    tr = _solve(ctx, "l2", ctx.single_tau(), _init(alpha, 2, ctx.d), rho, ts, clock="tau")
    return regime_label(tr.beta, tr.status), tr


def regime_edges(label: Callable[[np.ndarray, np.ndarray], np.ndarray], mu, rhos, points: int, passes: int):
    """The regime 1/2 and 2/3 edges of depth-2 l2-SAM at each rho, as alpha values.

    `label(alpha, rho)` gives the regime label (`samflow.analysis.regime_label`:
    1, 2, 3, or 0 for not yet at d) of the cells alpha (B,), rho (B,), as an array
    (B,); `mu` (d,) gives the start brackets (`samflow.theory.l2_alpha_marks`).

    Multisection on a log scale: each pass labels `points` + 2 inits between the
    current brackets of every (rho, edge) in one batch and keeps the sub-interval
    where the label changes (1 -> not 1 for the 1/2 edge, not 3 -> 3 for the 2/3
    edge). Start brackets: [all-shrink mark, major-first mark] for the 1/2 edge
    (everything collapses below the first, the major feature leads above the
    second) and [mark / 1.5, 1.5 mark] around the major-first mark for the 2/3 edge.

    **Returns:** (edge12, edge23, half): the edges, each (R,) in units of alpha (NaN
    where the start bracket did not bracket a change), and the relative half-width
    of the final brackets, (R, 2).
    """
    rhos = np.asarray(rhos, dtype=np.float64)
    R = rhos.size
    marks = theory.l2_alpha_marks(mu, rho=rhos)
    lo = np.stack([marks.all_shrink, marks.major_first / 1.5], axis=1)  # (R, 2)
    hi = np.stack([marks.major_first, marks.major_first * 1.5], axis=1)
    # Jitter the brackets per rho, so that the grids of inits are not exact
    # multiples of rho and the fitted slope is a measurement, not a consequence
    # of scaling the same grid.
    jit = np.random.default_rng(0).uniform(0.0, 0.1, size=(2, R, 2))
    lo, hi = lo * np.exp(-jit[0]), hi * np.exp(jit[1])
    valid = np.ones((R, 2), bool)
    for p in range(passes):
        k = np.linspace(0.0, 1.0, points + 2)
        pts = np.exp(np.log(lo)[..., None] + (np.log(hi) - np.log(lo))[..., None] * k)  # (R, 2, K)
        rr = np.broadcast_to(rhos[:, None, None], pts.shape)
        lab = np.asarray(label(pts.ravel(), rr.ravel())).reshape(pts.shape)
        for e, P in enumerate((lab[:, 0] == 1, lab[:, 1] != 3)):
            # P holds below the edge: the first index where it fails ends the bracket.
            first_fail = np.argmax(~P, axis=-1)
            ok = P[:, 0] & ~P.all(axis=-1)
            if p == 0:
                valid[:, e] &= ok
            i = np.clip(first_fail, 1, points + 1)
            lo[:, e] = np.where(ok, pts[np.arange(R), e, i - 1], lo[:, e])
            hi[:, e] = np.where(ok, pts[np.arange(R), e, i], hi[:, e])
    edge = np.where(valid, np.sqrt(lo * hi), np.nan)
    half = np.where(valid, np.sqrt(hi / lo) - 1.0, np.nan)  # relative half-width of the bracket
    return edge[:, 0], edge[:, 1], half


def regime_chart(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 3: l2-SAM regimes over (alpha, rho), depth 2, log axes, marks as lines.

    In the tau clock the flow is invariant under (w, rho) -> (c w, c rho)
    (docs/theory.md s.3), so every regime boundary is a line alpha = const * rho: slope
    1 on log axes. The edges are measured by multisection at several rho and
    fitted; the predicted all-shrink and major-first marks are drawn as lines.

    **Returns:** a `FigureResult`.
    """
    return _planned_figure("regime_chart", "Figure 3: l2-SAM regime chart over (alpha, rho)", RegimeChartConfig,
                           out_dir, quick, config_dir, plan=_plan, measure=_measure_regime_chart,
                           check=_check_regime_chart, draw=_draw_regime_chart, caption=_caption_regime_chart)


@dataclasses.dataclass(frozen=True)
class _ChartPlan:
    """regime_chart.toml resolved (`_plan`): the chart's axes and save times, the edge
    search, the switching-order sweep, the worked example and the checks' tolerances."""

    mu: np.ndarray  # (d,)
    d: int
    ts: np.ndarray  # (n_save,) tau save times of every solve
    tau1: float
    a_ax: np.ndarray  # (A,) the chart's alphas
    r_ax: np.ndarray  # (R,) the chart's rhos
    er: np.ndarray  # the rhos at which the edges are located
    edge_points: int
    edge_passes: int
    slope_tol: float
    mark_tol: float
    sa: np.ndarray  # alpha / rho (at rho = 1) of the switching-order check
    example_mu: tuple  # docs/theory.md s.3's worked example
    example_edges: tuple  # its stated ranges (1/2 edge in [a, b], 2/3 edge in [c, e])


def _plan(ctx: Context, cfg: RegimeChartConfig) -> _ChartPlan:
    """The config read once: axes, save times, edge search, sweep, worked example, tolerances."""
    return _ChartPlan(ctx.mu, ctx.d, ctx.log_times(cfg.tau_min, cfg.tau1), cfg.tau1, cfg.alpha.values(), cfg.rho.values(),
                      cfg.edge_rho.values(), cfg.edge_points, cfg.edge_passes, cfg.slope_tol, cfg.mark_tol,
                      cfg.order_sweep.values(), tuple(cfg.example_mu), tuple(cfg.example_edges))


@dataclasses.dataclass(frozen=True)
class _ChartRun:
    """What `regime_chart` measured: the chart, the edges and their fits, the worked
    example's edges and the switching order of the sweep."""

    plan: _ChartPlan
    AA: np.ndarray  # (A, R) alpha of each chart cell
    RR: np.ndarray  # (A, R) rho of each chart cell
    reg: np.ndarray  # (A, R) regime
    st_chart: np.ndarray  # (A, R) status
    e12: np.ndarray  # the 1/2 edge (alpha) at each plan.er
    e23: np.ndarray  # the 2/3 edge
    res: float  # the largest relative half-width of the final brackets
    fits: dict  # "1/2", "2/3" -> (slope, intercept) of the log-log fit
    c_shrink: float  # all-shrink mark, alpha/rho
    c_major: float  # major-first mark, alpha/rho
    x12: float  # the worked example's 1/2 edge (rho = 1)
    x23: float  # its 2/3 edge
    seqs: dict  # regime-2 cell of the sweep -> visited dominant features


def _edge_fit(er: np.ndarray, e: np.ndarray) -> tuple:
    """(slope, intercept) of the log-log fit of an edge `e` measured at the radii `er`;
    NaN, NaN with fewer than two measured."""
    ok = np.isfinite(e)
    if ok.sum() >= 2:
        slope, icpt = np.polyfit(np.log(er[ok]), np.log(e[ok]), 1)
    else:
        slope, icpt = np.nan, np.nan
    return slope, icpt


def _measure_regime_chart(ctx: Context, plan: _ChartPlan) -> _ChartRun:
    """The chart's regimes over the (alpha, rho) grid, the measured 1/2 and 2/3 edges and
    their fits, the worked example's edges and the switching order over the sweep."""
    ts, a_ax, r_ax, er = plan.ts, plan.a_ax, plan.r_ax, plan.er
    AA, RR = np.meshgrid(a_ax, r_ax, indexing="ij")
    reg, tr = _l2_regimes(ctx, AA.ravel(), RR.ravel(), ts)
    reg = reg.reshape(AA.shape)
    st_chart = np.asarray(tr.status).reshape(AA.shape)
    e12, e23, half = regime_edges(lambda a, r: _l2_regimes(ctx, a, r, ts)[0], plan.mu, er, plan.edge_points, plan.edge_passes)
    res = float(np.nanmax(half))
    fits = {name: _edge_fit(er, e) for name, e in (("1/2", e12), ("2/3", e23))}
    marks = theory.l2_alpha_marks(plan.mu, rho=1.0)
    c_shrink, c_major = float(marks.all_shrink), float(marks.major_first)

    # docs/theory.md s.3's worked example: mu = (1, 2), rho = 1, "collapse for alpha up to
    # about 0.5, minor first then major for about 0.55 to 0.9, major first from
    # about 0.95".
    ex = dataclasses.replace(ctx, common=ctx.common.model_copy(update={"mu": list(plan.example_mu)}))
    x12, x23, _ = regime_edges(lambda a, r: _l2_regimes(ex, a, r, ts)[0], ex.mu, [1.0], plan.edge_points, plan.edge_passes)

    # Switching order in the tau clock, where the staircase completes even next to
    # the 1/2 edge (in real time its late switches come after the loss has fallen).
    sa = plan.sa
    reg_o, tr_o = _l2_regimes(ctx, sa, np.ones_like(sa), ts)
    dom_o = np.where(tied(tr_o.beta, 1e-9), 0, dominant_index(tr_o.beta))
    seqs = {i: visited_sequence(dom_o[i]) for i in np.flatnonzero(reg_o == 2)}
    return _ChartRun(plan, AA, RR, reg, st_chart, e12, e23, res, fits, c_shrink, c_major, x12[0], x23[0], seqs)


def _check_regime_chart(run: _ChartRun) -> list[Check]:
    """The checks of Figure 3: slope-1 edges, the marks, the chart cells, the worked
    example, the switching order."""
    plan = run.plan
    er, e12, e23, res, c_shrink, c_major = plan.er, run.e12, run.e23, run.res, run.c_shrink, run.c_major
    checks = []
    for name, e in (("1/2", e12), ("2/3", e23)):
        ok = np.isfinite(e)
        slope = run.fits[name][0]
        ratio = e[ok] / er[ok]
        spread = float(np.ptp(ratio) / np.mean(ratio)) if ok.any() else np.nan
        checks.append(Check("regime_chart", f"l2-SAM depth 2: the regime {name} boundary is a line alpha = c rho",
                            f"slope 1 +- {plan.slope_tol:g} in log alpha vs log rho",
                            f"slope {slope:.4f} over {int(ok.sum())} rho in [{er[0]:g}, {er[-1]:g}]; alpha/rho = {np.mean(ratio):.4f} "
                        f"(spread {spread:.1e}, bracket +-{res:.0e})",
                            bool(ok.all() and abs(slope - 1) <= plan.slope_tol)))
    r23 = float(np.nanmean(e23 / er))
    checks.append(Check("regime_chart", "l2-SAM depth 2: the 2/3 edge is the major-first mark",
                        f"alpha/rho = (mu_(d-1) + mu_d) / (sqrt 2 ||mu||) = {c_major:.4f}",
                        f"{r23:.4f} +- {res * r23:.0e} (rel. diff {abs(r23 / c_major - 1):.1e})", bool(abs(r23 / c_major - 1) <= plan.mark_tol)))
    r12 = float(np.nanmean(e12 / er))
    checks.append(Check("regime_chart", "l2-SAM depth 2: the 1/2 edge lies above the all-shrink mark (stable manifold of a saddle)",
                        f"alpha/rho > mu_1 / (sqrt 2 ||mu||) = {c_shrink:.4f}, found by simulation",
                        f"{r12:.4f} = {r12 / c_shrink:.2f} x the mark", bool(c_shrink < r12 < c_major)))
    checks.append(_chart_cells_check(run.AA / run.RR, run.reg, r12, r23))

    x12, x23 = run.x12, run.x23
    lo12, hi12, lo23, hi23 = plan.example_edges
    checks.append(Check("regime_chart", f"docs/theory.md s.3 example, mu = {tuple(plan.example_mu)}, rho = 1: the three regimes",
                        f"collapse up to alpha ~ 0.5, minor first for ~0.55 to 0.9, major first from ~0.95: "
                        f"1/2 edge in [{lo12:g}, {hi12:g}], 2/3 edge in [{lo23:g}, {hi23:g}]",
                        f"1/2 edge {x12:.4f}, 2/3 edge {x23:.4f} (major-first mark {float(theory.l2_alpha_marks(list(plan.example_mu), rho=1.0).major_first):.4f})",
                        bool(lo12 <= x12 <= hi12 and lo23 <= x23 <= hi23)))

    sa, seqs = plan.sa, run.seqs
    good = [i for i, q in seqs.items() if staircase_ok(q, plan.d)]
    stepped = [(sa[i], q) for i, q in seqs.items() if len(q) > 1 and q[1] < q[0]]
    bad = [(round(float(sa[i]), 3), q) for i, q in seqs.items() if not staircase_ok(q, plan.d)]
    checks.append(Check("regime_chart", "l2-SAM depth 2, regime 2, tau clock: features become dominant in increasing order of mu",
                        "visited dominant features strictly increase to d, after a possible initial step-down just above the 1/2 edge",
                        f"{len(good)}/{len(seqs)} regime-2 inits of {sa.size} (alpha/rho in [{sa[0]:g}, {sa[-1]:g}]); "
                        + (f"{len(stepped)} step down first (alpha/rho {min(x for x, _ in stepped):.3f} to {max(x for x, _ in stepped):.3f}), e.g. {stepped[0][1]}"
                           if stepped else "none steps down")
                        + (f"; not monotone: {bad[:3]}" if bad else ""),
                        bool(seqs) and len(good) == len(seqs)))
    return checks


def _chart_cells_check(ratio: np.ndarray, reg: np.ndarray, r12: float, r23: float) -> Check:
    """Collapse below the 1/2 edge, major first above the 2/3 edge, on the chart grid
    (`ratio` alpha/rho and `reg` the regime of each cell; `r12`, `r23` the edges in
    alpha/rho). It passes only when cells on each side of both edges were judged:
    with no edge measured (NaN) or a grid that misses a regime it fails, never
    passing on nothing."""
    below, above = ratio < 0.98 * r12, ratio > 1.02 * r23
    between = (ratio > 1.02 * r12) & (ratio < 0.98 * r23)
    n_bad = int(np.sum(reg[below] != 1) + np.sum(reg[above] != 3) + np.sum(reg[between] == 3) + np.sum(reg[between] == 1))
    judged = (int(below.sum()), int(between.sum()), int(above.sum()))
    return Check("regime_chart", "l2-SAM depth 2: chart cells away (2%) from the fitted edges",
                 "regime 1 below the 1/2 edge, 3 above the 2/3 edge, 2 (or not yet at d) between",
                 f"{n_bad} of {sum(judged)} cells disagree ({judged[0]} below the 1/2 edge, {judged[1]} between, "
                 f"{judged[2]} above the 2/3 edge)",
                 bool(n_bad == 0 and min(judged) > 0))


def _draw_regime_chart(ctx: Context, run: _ChartRun) -> str:
    """The regime chart with the marks, the measured edges and their fits; the PNG path."""
    a_ax, r_ax, er = run.plan.a_ax, run.plan.r_ax, run.plan.er
    reg, st_chart, e12, e23, c_shrink, c_major, fits = run.reg, run.st_chart, run.e12, run.e23, run.c_shrink, run.c_major, run.fits
    fig, ax = plt.subplots(figsize=(11.5, 6.4))
    # Failed cells: "no value", not "undetermined"; blown-up ones in the blow-up colour.
    img = _regime_panel(ax, _log_edges(r_ax), _log_edges(a_ax), reg, st_chart)
    rr = np.geomspace(r_ax[0] / 1.5, r_ax[-1] * 1.5, 50)
    ax.plot(rr, c_shrink * rr, "k--", lw=1.5, label=rf"predicted all-shrink mark $\alpha = {c_shrink:.3f}\,\rho$")
    ax.plot(rr, c_major * rr, "k-.", lw=1.5, label=rf"predicted major-first mark $\alpha = {c_major:.3f}\,\rho$")
    for name, e, mk in (("1/2", e12, "o"), ("2/3", e23, "s")):
        slope, icpt = fits[name]
        ax.plot(er, e, mk, ms=6, mfc="w", mec="k", label=f"measured {name} edge (fit: slope {slope:.3f})")
        if np.isfinite(slope):
            ax.plot(rr, np.exp(icpt) * rr**slope, color="w", lw=0.8, label=f"fit of the {name} edge" if name == "1/2" else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(_log_edges(r_ax)[[0, -1]])
    ax.set_ylim(_log_edges(a_ax)[[0, -1]])
    ax.set_xlabel(r"SAM radius $\rho$")
    ax.set_ylabel(r"init scale $\alpha$ ($w(0) = \alpha \mathbf{1}$)")
    handles, labels = ax.get_legend_handles_labels()
    for i, lab in enumerate(labels):
        if lab.startswith("fit of"):
            # The fits are drawn in white over the chart; outline the legend sample.
            handles[i] = Line2D([], [], color="w", lw=1.5, path_effects=[patheffects.withStroke(linewidth=3, foreground="0.3")])
            labels[i] = "white lines: log-log fits of the measured edges"
    regimes = _regime_handles(st_chart[img == NO_VALUE], blew_up=bool(np.any(img == BLOWN_UP)),
                              undetermined=UNDETERMINED_NOTE)
    handles += regimes
    labels += [h.get_label() for h in regimes]
    # Outside the axes, to the right: inside it covered the top-left cells (issue 17).
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              frameon=False)
    ax.set_title(r"$\ell_2$-SAM, depth 2, one sample: regimes over $(\alpha, \rho)$" "\n"
                 r"boundaries are lines $\alpha \propto \rho$ (slope 1 on log axes)", fontsize=11)
    png = _save(fig, ctx, "regime_chart")
    return png


def _caption_regime_chart(run: _ChartRun) -> str:
    """The caption, from the plan's values it describes."""
    plan = run.plan
    caption = (
        f"Regime of depth-2 l2-SAM (rescaled clock tau up to {plan.tau1:g}, one sample, mu = {mu_text(plan.mu, short=True)}, "
        f"w(0) = alpha 1) over a {plan.a_ax.size} x {plan.r_ax.size} log grid of (alpha, rho): 1 collapse (weights reach 0), "
        "2 minor first, major last (a minor feature leads before d leads at the end), 3 major first (d leads throughout). The dashed "
        "and dash-dotted lines are the predicted marks of docs/theory.md s.3 (every coordinate shrinks below the first, "
        "the major feature outgrows all others from the start above the second); circles and squares are the "
        f"1/2 and 2/3 edges measured by multisection at {plan.er.size} radii ({plan.edge_passes} passes of "
        f"{plan.edge_points} points), with their log-log fits (white). The 2/3 edge is the major-first mark; the "
        "1/2 edge, the stable manifold of the saddle (rho/sqrt 2) e_1, lies well above the all-shrink mark. "
        "Both are lines of slope 1: the regime depends on alpha/rho only."
    )
    return caption

