"""The lp-SAM family chart: regimes over (alpha/rho, p) at depth 2 and their edges (lp_family)."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter
from pydantic import Field, field_validator

from .. import theory
from ..analysis import regime_label
from ..edges import EdgeResult, EdgeSearch, collapse_edge, major_death_edge, major_first_edge
from ..plots import BLEW_UP_COLOR, MISSING_COLOR, REGIME_COLORS, REGIME_NAMES, blow_up_label, regime_image, with_blow_up
from ._context import SETTINGS, Context, _LogAxis, _Strict, _init, _solve
from ._draw import _log_edges, _save
from ._report import Check, FigureResult, _planned_figure, mu_text

#: The chart's label of a cell whose major feature died (p > 2) without a collapse.
MAJOR_DIES = 4
#: Green: the red it had is the blow-up colour of every heat map (`samflow.plots.BLEW_UP_COLOR`).
MAJOR_DIES_COLOR = "#1a9641"


class LpFamilyConfig(_Strict):
    """Schema of `configs/figures/lp_family.toml`; see that file for its keys."""

    p: list[float] = Field(min_length=2)
    """The chart's exponents p, increasing, each in (1, inf): its columns, and where the edges are measured."""
    a: _LogAxis
    """The chart's alpha / rho axis (rho = 1, tau clock)."""
    tau_min: float = Field(gt=0)
    """First save time (tau) of the chart's solves."""
    tau1: float = Field(gt=0)
    """Horizon (tau) of the chart's solves."""
    curve_points: int = Field(ge=2)
    """Points in p of the theory curves."""
    edge_rtol: float = Field(gt=0, lt=0.5)
    """Relative half-width of the collapse and major-death edges' final brackets (`samflow.edges.EdgeSearch`)."""
    mark_tol: float = Field(gt=0)
    """Pass: the measured major-first edge equals the closed form to this relative distance."""
    l2_tol: float = Field(gt=0)
    """Pass: at p = 2 the lp edges equal l2-SAM's to this relative distance."""
    linf_tol: float = Field(gt=0)
    """Pass: at the largest p every edge lies within this relative distance of linf's a = 1."""

    @field_validator("p")
    @classmethod
    def _exponents(cls, v):
        return chart_exponents(v)


def chart_exponents(v: list[float]) -> list[float]:
    """The p axis of an lp family chart (`lp_family`, `lp_family_multi`), checked:
    increasing exponents in (1, inf) containing 2 (the column checked against l2-SAM).

    **Raises:** `ValueError` (pydantic's message for the config key `p`)."""
    if any(not 1 < x < float("inf") for x in v) or any(b <= a for a, b in zip(v, v[1:])):
        raise ValueError(f"p must be increasing exponents in (1, inf), got {v}")
    if 2.0 not in v:
        raise ValueError(f"p must contain 2 (the l2 column the chart checks against l2-SAM), got {v}")
    return v


def lp_family(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """The l2-SAM regime chart's analogue over (alpha/rho, p), depth 2, one sample.

    Columns p of `configs/figures/lp_family.toml`, rows alpha/rho (rho = 1, tau
    clock: scale invariance, docs/theory.md s.3.1 (lp-SAM)). Cells: regime 1
    collapse, 2 minor first then major, 3 major first, and for p > 2 "the
    major feature dies" (its weight reached 0, no collapse). Curves in p: the
    closed-form all-shrink, major-first and major-shrink marks
    (`samflow.theory.lp_alpha_marks`, `lp_major_shrink_mark`), and the edges
    measured at every column by `samflow.edges` (`collapse_edge`,
    `major_first_edge`, `major_death_edge` with method "lp"); l2-SAM (p = 2,
    method "l2") and linf-SAM (a = 1) marked.

    **Returns:** a `FigureResult`.
    """
    return _planned_figure("lp_family", "Figure 10: lp-SAM family, regimes over (alpha/rho, p), depth 2", LpFamilyConfig,
                           out_dir, quick, config_dir, plan=_plan, measure=_measure, check=_check, draw=_draw,
                           caption=_caption)


@dataclasses.dataclass(frozen=True)
class _LpPlan:
    """lp_family.toml resolved (`_plan`): the chart's axes and save times, the points of the
    theory curves, the edge search's tolerance and the checks' tolerances."""

    mu: np.ndarray  # (d,)
    d: int
    ps: np.ndarray  # (P,) the exponents, the chart's columns
    a_ax: np.ndarray  # (A,) alpha/rho, the chart's rows
    ts: np.ndarray  # (n_save,) tau save times
    tau1: float
    pc: np.ndarray  # the exponents of the theory curves
    edge_rtol: float
    mark_tol: float
    l2_tol: float
    linf_tol: float


def _plan(ctx: Context, cfg: LpFamilyConfig) -> _LpPlan:
    """The config read once: the chart's axes, save times and curve points, the tolerances."""
    ps = np.asarray(cfg.p, dtype=np.float64)
    return _LpPlan(ctx.mu, ctx.d, ps, cfg.a.values(), ctx.log_times(cfg.tau_min, cfg.tau1), cfg.tau1,
                   np.geomspace(ps[0], ps[-1], cfg.curve_points), cfg.edge_rtol, cfg.mark_tol, cfg.l2_tol, cfg.linf_tol)


@dataclasses.dataclass(frozen=True)
class _LpRun:
    """What `lp_family` measured: the chart (A, P), the edges at each p and the theory's marks."""

    plan: _LpPlan
    reg: np.ndarray  # (A, P) regime, or MAJOR_DIES
    img: np.ndarray  # (A, P) the codes drawn (regime_image, or MAJOR_DIES)
    status: np.ndarray  # (A, P)
    ce: EdgeResult  # collapse edge at each p
    me: EdgeResult  # major-first edge at each p
    death: np.ndarray  # (P,) major-death edge, NaN for p <= 2
    de: "EdgeResult | None"  # major-death edges of the p > 2
    l2c: EdgeResult  # l2-SAM's collapse edge
    l2m: EdgeResult  # l2-SAM's major-first edge
    shrink_c: np.ndarray  # the curves over plan.pc: all-shrink mark
    major_c: np.ndarray  # major-first mark
    mshrink_c: np.ndarray  # major-shrink mark
    major_th: np.ndarray  # (P,) the marks at plan.ps
    shrink_th: np.ndarray
    mshrink_th: np.ndarray


def _measure(ctx: Context, plan: _LpPlan) -> _LpRun:
    mu, ps, a_ax, ts = plan.mu, plan.ps, plan.a_ax, plan.ts
    data = ctx.single_tau()
    W0 = _init(a_ax, 2, plan.d)
    reg = np.zeros((a_ax.size, ps.size), np.int64)
    img = np.zeros_like(reg)
    status = np.zeros_like(reg)
    for k, p in enumerate(ps):
        tr = _solve(ctx, "lp", data, W0, np.ones(a_ax.size), ts, clock="tau", p=float(p))
        beta, st = np.asarray(tr.beta), np.asarray(tr.status)
        lab = regime_label(beta, st)
        major_dead = np.any(np.isfinite(np.asarray(tr.slide_time)[:, :, -1]), axis=1) | (beta[:, -1, -1] == 0)
        dies = major_dead & (lab != 1)
        reg[:, k] = np.where(dies, MAJOR_DIES, lab)
        img[:, k] = np.where(dies, MAJOR_DIES, regime_image(lab, st))
        status[:, k] = st
    search = EdgeSearch(rtol=plan.edge_rtol)
    ce = collapse_edge(mu, 2, "lp", p=list(ps), search=search)
    me = major_first_edge(mu, 2, "lp", p=list(ps))
    hi = ps[ps > 2]
    de = major_death_edge(mu, 2, p=list(hi), search=search) if hi.size else None
    l2c = collapse_edge(mu, 2, "l2", search=search)
    l2m = major_first_edge(mu, 2, "l2")
    pc = plan.pc
    marks = theory.lp_alpha_marks(mu, p=pc)
    death = np.full(ps.size, np.nan)
    if de is not None:
        death[ps > 2] = de.edge
    return _LpRun(plan, reg=reg, img=img, status=status, ce=ce, me=me, death=death, de=de, l2c=l2c, l2m=l2m,
                  shrink_c=np.asarray(marks.all_shrink), major_c=np.asarray(marks.major_first),
                  mshrink_c=np.asarray(theory.lp_major_shrink_mark(mu, p=pc)),
                  major_th=np.asarray(theory.lp_alpha_marks(mu, p=ps).major_first),
                  shrink_th=np.asarray(theory.lp_alpha_marks(mu, p=ps).all_shrink),
                  mshrink_th=np.asarray(theory.lp_major_shrink_mark(mu, p=ps)))


def band(m: _LpRun) -> tuple[np.ndarray, np.ndarray]:
    """The regime-2 band at each column p: (lower edge, upper edge) in alpha/rho.

    Its upper edge is the major-first edge; its lower edge the collapse edge,
    or for p > 2 the major-death edge where that lies higher (between the two,
    the major feature dies before it could lead)."""
    lower = np.fmax(m.ce.edge, np.where(np.isfinite(m.death), m.death, -np.inf))
    return lower, m.me.edge


def _check(m: _LpRun) -> list[Check]:
    plan = m.plan
    ps, ce, me, death = plan.ps, m.ce, m.me, m.death
    checks = []
    rel = np.abs(me.edge / m.major_th - 1.0)
    checks.append(Check(
        "lp_family", "lp-SAM depth 2: the major-first edge (first leader read off the field) is the closed form "
        "c_q (mu_d^q - mu_(d-1)^q) / (mu_d - mu_(d-1))",
        f"relative distance <= {plan.mark_tol:g} at each of the {ps.size} p in [{ps[0]:g}, {ps[-1]:g}]",
        f"max {np.nanmax(rel):.1e}; e.g. p = {ps[0]:g}: {me.edge[0]:.6f} vs {m.major_th[0]:.6f}, "
        f"p = {ps[-1]:g}: {me.edge[-1]:.6f} vs {m.major_th[-1]:.6f}",
        bool(np.all(np.isfinite(me.edge)) and np.all(rel <= plan.mark_tol))))
    k2 = int(np.flatnonzero(ps == 2.0)[0])
    d_c = abs(float(ce.edge[k2]) / float(m.l2c.edge) - 1.0)
    d_m = abs(float(me.edge[k2]) / float(m.l2m.edge) - 1.0)
    checks.append(Check(
        "lp_family", "lp-SAM at p = 2 is l2-SAM: its collapse and major-first edges are l2's",
        f"relative distance <= {plan.l2_tol:g} (l2: collapse {float(m.l2c.edge):.6f}, major-first "
        f"{float(m.l2m.edge):.6f} = (mu_4 + mu_5) / (sqrt 2 ||mu||))",
        f"collapse {float(ce.edge[k2]):.6f} (rel. {d_c:.1e}), major-first {float(me.edge[k2]):.6f} (rel. {d_m:.1e})",
        bool(np.isfinite(d_c) and np.isfinite(d_m) and d_c <= plan.l2_tol and d_m <= plan.l2_tol)))
    ok = np.isfinite(ce.edge)
    inside = ok & (ce.edge > m.shrink_th) & (ce.edge < me.edge)
    checks.append(Check(
        "lp_family", "lp-SAM depth 2: the collapse edge lies above the all-shrink mark c_q mu_1^(q-1) and below the "
        "major-first edge, at every p",
        "all-shrink mark < collapse edge < major-first edge (the edge itself has no closed form)",
        "collapse edge " + ", ".join(f"p={p:g}: {e:.4f}" for p, e in zip(ps, ce.edge)),
        bool(ok.all() and inside.all())))
    hi = ps > 2
    if hi.any():
        dd, mark, col = death[hi], m.mshrink_th[hi], ce.edge[hi]
        gap = 1.0 - dd / mark
        checks.append(Check(
            "lp_family", "lp-SAM depth 2, p > 2: the major feature dies below an edge between the collapse edge and "
            "its shrink mark c_q mu_d^(q-1) (below the mark it starts shrinking, yet the growing minor features can "
            "rescue it), closer to the mark as p grows",
            "collapse edge < major-death edge < major-shrink mark at every p > 2; the relative gap to the mark "
            "decreases with p",
            ", ".join(f"p={p:g}: {e:.4f} (mark {t:.4f}, gap {g:.1e})" for p, e, t, g in zip(ps[hi], dd, mark, gap)),
            bool(np.all(np.isfinite(dd)) and np.all((col < dd) & (dd < mark)) and np.all(np.diff(gap) < 0))))
    top = [("collapse", ce.edge[-1]), ("major-first", me.edge[-1])] + ([("major-death", death[-1])] if hi[-1] else [])
    far = max(abs(e - 1.0) for _, e in top)
    checks.append(Check(
        "lp_family", f"lp-SAM tends to linf-SAM as p grows: at p = {ps[-1]:g} every edge is near linf's a = 1 "
        "(alpha_j against rho)",
        f"|edge - 1| <= {plan.linf_tol:g}",
        ", ".join(f"{n} {e:.4f}" for n, e in top),
        bool(np.isfinite(far) and far <= plan.linf_tol)))
    checks.append(_cells_check(m))
    return checks


def _cells_check(m: _LpRun) -> Check:
    """The chart's cells against the measured edges of their column, 2% away from each."""
    ratio = m.plan.a_ax[:, None]
    lower, upper = band(m)
    ce = m.ce.edge[None, :]
    death = m.death[None, :]
    reg = m.reg
    below = ratio < 0.98 * ce
    above = ratio > 1.02 * upper[None, :]
    between = (ratio > 1.02 * lower[None, :]) & (ratio < 0.98 * upper[None, :])
    dying = np.isfinite(death) & (ratio > 1.02 * ce) & (ratio < 0.98 * death)
    n_bad = int(np.sum(reg[below] != 1) + np.sum(reg[above] != 3) + np.sum(~np.isin(reg[between], (0, 2)))
                + np.sum(reg[dying] != MAJOR_DIES))
    judged = (int(below.sum()), int(dying.sum()), int(between.sum()), int(above.sum()))
    return Check("lp_family", "lp-SAM depth 2: chart cells away (2%) from their column's measured edges",
                 "1 below the collapse edge; for p > 2 'major dies' below the major-death edge; 2 (or not yet at d) "
                 "in the band; 3 above the major-first edge",
                 f"{n_bad} of {sum(judged)} cells disagree ({judged[0]} below the collapse edge, {judged[1]} major "
                 f"dies, {judged[2]} in the band, {judged[3]} above)",
                 bool(n_bad == 0 and judged[0] > 0 and judged[2] > 0 and judged[3] > 0))


def _draw(ctx: Context, m: _LpRun) -> str:
    from matplotlib.colors import BoundaryNorm, ListedColormap

    ps, a_ax = m.plan.ps, m.plan.a_ax
    fig, ax = plt.subplots(figsize=(11.5, 6.4))
    # -2 blew up (`with_blow_up`: a cell without a regime whose status is BLEW_UP), -1 no
    # value (another failure), 0..3 the regimes, 4 the major feature dies.
    img = with_blow_up(m.img, m.status)
    colors = [BLEW_UP_COLOR, MISSING_COLOR] + REGIME_COLORS + [MAJOR_DIES_COLOR]
    cmap, norm = ListedColormap(colors), BoundaryNorm(np.arange(-2.5, 5.5, 1.0), len(colors))
    ax.pcolormesh(_log_edges(ps), _log_edges(a_ax), img, cmap=cmap, norm=norm, rasterized=True)
    pc = m.plan.pc
    ax.plot(pc, m.shrink_c, "k--", lw=1.3, label=r"all-shrink mark $c_q\mu_1^{q-1}$ (theory)")
    ax.plot(pc, m.major_c, "k-.", lw=1.5,
            label=r"major-first mark $c_q(\mu_d^q-\mu_{d-1}^q)/(\mu_d-\mu_{d-1})$ (theory)")
    hi = pc > 2
    ax.plot(pc[hi], m.mshrink_c[hi], ":", color="k", lw=1.5, label=r"major-shrink mark $c_q\mu_d^{q-1}$ (theory, $p>2$)")
    ax.plot(ps, m.ce.edge, "o-", color="0.15", mfc="w", ms=6, lw=1.0, label="collapse edge (measured)")
    ax.plot(ps, m.me.edge, "s", color="0.15", mfc="w", ms=6, label="major-first edge (measured)")
    ph = ps > 2
    if ph.any():
        ax.plot(ps[ph], m.death[ph], "v-", color=MAJOR_DIES_COLOR, mec="k", ms=7, lw=1.0,
                label="edge below which the major feature dies (measured)")
    ax.plot([2.0, 2.0], [float(m.l2c.edge), float(m.l2m.edge)], "*", color="gold", mec="k", ms=14,
            label=r"$\ell_2$-SAM ($p = 2$): its collapse and major-first edges")
    ax.axvline(2.0, color="0.3", lw=0.8, ls=(0, (2, 3)))
    ax.axhline(1.0, color="#7b3294", lw=1.6, ls=(0, (5, 3)),
               label=r"$\ell_\infty$-SAM ($p\to\infty$): every edge at $\alpha = \rho$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(_log_edges(ps)[[0, -1]])
    ax.set_ylim(_log_edges(a_ax)[[0, -1]])
    ticks = [p for p in (1.25, 1.5, 2, 3, 4, 8, 16, 32, 64) if ps[0] <= p <= ps[-1]]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(r"exponent $p$ of the SAM ball $\|\varepsilon\|_p \leq \rho$ (log)")
    ax.set_ylabel(r"$\alpha/\rho$ ($w(0) = \alpha\mathbf{1}$, log)")
    handles, labels = ax.get_legend_handles_labels()
    shown = set(np.unique(img).tolist())
    names = [blow_up_label(blowup_log10=SETTINGS.blowup_log10), "no value"] + list(REGIME_NAMES) + ["major feature dies (p > 2)"]
    for v, c, n in zip(range(-2, 5), colors, names):
        if v in shown:
            handles.append(Patch(facecolor=c, edgecolor="k", lw=0.3))
            labels.append(("regime " + n) if n[0].isdigit() else n + (" (not at $d$ by the horizon)" if v == 0 else ""))
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              frameon=False)
    ax.set_title(r"$\ell_p$-SAM, depth 2, one sample $\mu = $" + mu_text(m.plan.mu, short=True)
                 + r": regimes over $(\alpha/\rho, p)$" + "\n" + r"between $\ell_2$'s staircase ($p=2$) and "
                 r"$\ell_\infty$'s threshold $\alpha = \rho$", fontsize=11)
    return _save(fig, ctx, "lp_family")


def _caption(m: _LpRun) -> str:
    ps = m.plan.ps
    lower, upper = band(m)
    rows = "; ".join(f"p = {p:g}: collapse {c:.3f}, band [{lo:.3f}, {hi:.3f}] (width {hi - lo:.3f})"
                     for p, c, lo, hi in zip(ps, m.ce.edge, lower, upper))
    return (
        f"Regimes of depth-2 lp-SAM (rescaled clock tau up to {m.plan.tau1:g}, one sample, mu = {mu_text(m.plan.mu)}, "
        f"w(0) = alpha 1, rho = 1) over {m.plan.a_ax.size} values of alpha/rho and the exponents p = "
        f"{', '.join(f'{p:g}' for p in ps)}: 1 collapse, 2 minor first then major, 3 major first, and for p > 2 "
        "the major feature dies (its weight reaches 0 and stays: for q < 2 the perturbation's |g_j|^(q-1) beats w_j). "
        "Lines: the closed-form marks of docs/theory.md s.3.1 (lp-SAM); markers: the edges measured by samflow.edges "
        "at each p (collapse and major-death edges by bisection on the flow's outcome, the major-first edge from the "
        "field's first leader); stars: l2-SAM's edges at p = 2; dashed purple: linf-SAM's threshold alpha = rho, "
        f"the limit p -> inf. Edges in alpha/rho: {rows}."
    )
