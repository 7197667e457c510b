"""The lp-SAM family on several samples: regimes over (alpha/rho, p) at depth 2, real time (lp_family_multi)."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter
from pydantic import Field, field_validator

from .. import theory
from ..analysis import regime_label
from ..datasets import Dataset
from ..edges import EdgeResult, EdgeSearch, collapse_edge, major_first_edge
from ..plots import BLEW_UP_COLOR, MISSING_COLOR, REGIME_COLORS, REGIME_NAMES, blow_up_label, regime_image, with_blow_up
from ._context import SETTINGS, Context, _LogAxis, _Strict, _init, _solve
from ._draw import _log_edges, _save
from ._lp_family import MAJOR_DIES, MAJOR_DIES_COLOR, chart_exponents
from ._report import Check, FigureResult, _planned_figure, mu_text

NAME = "lp_family_multi"


class LpFamilyMultiConfig(_Strict):
    """Schema of `configs/figures/lp_family_multi.toml`; see that file for its keys."""

    p: list[float] = Field(min_length=2)
    """The chart's exponents p, increasing, each in (1, inf), containing 2: its columns."""
    a: _LogAxis
    """The chart's alpha / rho axis (its rows)."""
    rho: float = Field(gt=0)
    """The SAM radius of every solve (several samples: no scale invariance, one rho)."""
    t_min: float = Field(gt=0)
    """First save time (real time t)."""
    t1: float = Field(gt=0)
    """Horizon (real time t)."""
    curve_points: int = Field(ge=2)
    """Points in p of the theory curves."""
    edge_rtol: float = Field(gt=0, lt=0.5)
    """Relative half-width of the collapse edges' final brackets (`samflow.edges.EdgeSearch`)."""
    mark_tol: float = Field(gt=0)
    """Pass: the measured major-first edge equals the closed form with mu = mean_i y_i x_i to this relative distance."""
    edge_tol: float = Field(gt=0)
    """Pass: at p = 2 the lp edges equal l2-SAM's to this relative distance."""
    beta_tol: float = Field(gt=0)
    """Pass: at p = 2 every cell's beta equals l2-SAM's to this, relative to the cell's max |beta|."""
    linf_tol: float = Field(gt=0)
    """Pass: at the largest p every edge lies within this relative distance of linf's a = 1."""

    @field_validator("p")
    @classmethod
    def _exponents(cls, v):
        return chart_exponents(v)


def lp_family_multi(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """`lp_family` on several samples: lp-SAM's regimes over (alpha/rho, p), depth 2, real time.

    Data: the multi-sample set of `configs/figures/common.toml` (`[multi_sample]`,
    4 samples, d = 5); equal layers w(0) = alpha 1 (the paper's init; from unequal
    layers a column reaching 0 stops with SURFACE, docs/theory.md s.4.3); real time t (the tau clock needs one sample), one radius
    rho of `configs/figures/lp_family_multi.toml` (no scale invariance on several
    samples). docs/theory.md s.2 and s.3.1 (lp-SAM, "Several samples"), s.5.

    Left panel: columns p, rows alpha/rho. Cells: regime 1 collapse, 2 minor first
    then major, 3 major first, 0 not at the major feature by the horizon, and for
    p > 2 "the major feature dies" (its weight reached 0, no collapse). Curves in p:
    the one-sample marks (`samflow.theory.lp_alpha_marks`, `lp_major_shrink_mark`)
    with mu = mean_i y_i x_i; markers: the collapse and major-first edges measured
    at every p by `samflow.edges` (method "lp", real time at rho). Right panel:
    l2-SAM, lp at p = 2, lp at the largest p and linf-SAM on the same rows
    (`solve("l2")`, `solve("linf")`): the checks' columns.

    **Returns:** a `FigureResult`.

    **Raises:** `samflow.config.ConfigError` for a bad config; `ValueError` when
    mean_i y_i x_i of the data is not positive and increasing (the marks need it).
    """
    return _planned_figure(NAME, "Figure 11: lp-SAM family on 4 samples, regimes over (alpha/rho, p), depth 2",
                           LpFamilyMultiConfig, out_dir, quick, config_dir, plan=_plan, measure=_measure,
                           check=_check, draw=_draw, caption=_caption)


@dataclasses.dataclass(frozen=True)
class _MultiPlan:
    """lp_family_multi.toml resolved (`_plan`): the data, the chart's axes and save
    times, the points of the theory curves, the edge search's and the checks' tolerances."""

    data: Dataset  # (n, d)
    mu_bar: np.ndarray  # (d,) mean_i y_i x_i, positive and increasing
    d: int
    ps: np.ndarray  # (P,) the exponents, the chart's columns
    a_ax: np.ndarray  # (A,) alpha/rho, the chart's rows
    rho: float
    ts: np.ndarray  # (n_save,) real save times
    t1: float
    pc: np.ndarray  # the exponents of the theory curves
    edge_rtol: float
    mark_tol: float
    edge_tol: float
    beta_tol: float
    linf_tol: float


def _plan(ctx: Context, cfg: LpFamilyMultiConfig) -> _MultiPlan:
    """The config read once: the data and mu_bar, the axes, save times and curve points, the tolerances."""
    data = ctx.multi()
    mu_bar = np.mean(np.asarray(data.y)[:, None] * np.asarray(data.X), axis=0)
    if not (np.all(mu_bar > 0) and np.all(np.diff(mu_bar) > 0)):
        raise ValueError(f"{NAME}: mean_i y_i x_i of the multi-sample data must be positive and increasing "
                         f"(the major feature last), got {np.round(mu_bar, 4).tolist()}")
    ps = np.asarray(cfg.p, dtype=np.float64)
    return _MultiPlan(data, mu_bar, ctx.d, ps, cfg.a.values(), cfg.rho, ctx.log_times(cfg.t_min, cfg.t1), cfg.t1,
                      np.geomspace(ps[0], ps[-1], cfg.curve_points), cfg.edge_rtol, cfg.mark_tol, cfg.edge_tol,
                      cfg.beta_tol, cfg.linf_tol)


@dataclasses.dataclass(frozen=True)
class _MultiRun:
    """What `lp_family_multi` measured: the chart (A, P), the l2 and linf columns (A,),
    the edges at each p and l2's, and the theory's marks with mu_bar."""

    plan: _MultiPlan
    reg: np.ndarray  # (A, P) regime, or MAJOR_DIES
    img: np.ndarray  # (A, P) the codes drawn (regime_image, or MAJOR_DIES)
    status: np.ndarray  # (A, P)
    beta2: np.ndarray  # (A, n_save, d) beta of the p = 2 column
    l2_reg: np.ndarray  # (A,) l2-SAM's regimes
    l2_img: np.ndarray
    l2_status: np.ndarray
    l2_beta: np.ndarray  # (A, n_save, d)
    linf_reg: np.ndarray  # (A,) linf-SAM's regimes
    linf_img: np.ndarray
    linf_status: np.ndarray
    ce: EdgeResult  # collapse edge at each p
    me: EdgeResult  # major-first edge at each p
    l2c: EdgeResult  # l2-SAM's collapse edge
    l2m: EdgeResult  # l2-SAM's major-first edge
    shrink_c: np.ndarray  # the curves over plan.pc, mu = mu_bar: all-shrink mark
    major_c: np.ndarray  # major-first mark
    mshrink_c: np.ndarray  # major-shrink mark
    major_th: np.ndarray  # (P,) the marks at plan.ps
    shrink_th: np.ndarray


def _labels(tr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(regime or MAJOR_DIES, drawn code, status) of each cell of a solve, (B,) each.

    "Major dies": the major feature's weight reached 0 (`slide_time` finite, or beta_d
    exactly 0 at the end) and the cell did not collapse: only p > 2 (and linf) can."""
    beta, st = np.asarray(tr.beta), np.asarray(tr.status)
    lab = regime_label(beta, st)
    major_dead = np.any(np.isfinite(np.asarray(tr.slide_time)[:, :, -1]), axis=1) | (beta[:, -1, -1] == 0)
    dies = major_dead & (lab != 1)
    return np.where(dies, MAJOR_DIES, lab), np.where(dies, MAJOR_DIES, regime_image(lab, st)), st


def _measure(ctx: Context, plan: _MultiPlan) -> _MultiRun:
    ps, a_ax, rho, ts, data = plan.ps, plan.a_ax, plan.rho, plan.ts, plan.data
    W0 = _init(a_ax * rho, 2, plan.d)
    rhos = np.full(a_ax.size, rho)
    reg = np.zeros((a_ax.size, ps.size), np.int64)
    img = np.zeros_like(reg)
    status = np.zeros_like(reg)
    beta2 = None
    for k, p in enumerate(ps):  # p is traced: one compiled program serves every column
        tr = _solve(ctx, "lp", data, W0, rhos, ts, clock="t", p=float(p))
        reg[:, k], img[:, k], status[:, k] = _labels(tr)
        if p == 2.0:
            beta2 = np.asarray(tr.beta)
    tr2 = _solve(ctx, "l2", data, W0, rhos, ts, clock="t")
    l2_reg, l2_img, l2_status = _labels(tr2)
    linf_reg, linf_img, linf_status = _labels(_solve(ctx, "linf", data, W0, rhos, ts, clock="t"))
    search = EdgeSearch(rtol=plan.edge_rtol)
    ce = collapse_edge(data, 2, "lp", rho=rho, p=list(ps), search=search)
    me = major_first_edge(data, 2, "lp", rho=rho, p=list(ps))
    l2c = collapse_edge(data, 2, "l2", rho=rho, search=search)
    l2m = major_first_edge(data, 2, "l2", rho=rho)
    mu, pc = plan.mu_bar, plan.pc
    marks_c, marks = theory.lp_alpha_marks(mu, p=pc), theory.lp_alpha_marks(mu, p=ps)
    return _MultiRun(plan, reg=reg, img=img, status=status, beta2=beta2, l2_reg=l2_reg, l2_img=l2_img,
                     l2_status=l2_status, l2_beta=np.asarray(tr2.beta), linf_reg=linf_reg, linf_img=linf_img,
                     linf_status=linf_status, ce=ce, me=me, l2c=l2c, l2m=l2m,
                     shrink_c=np.asarray(marks_c.all_shrink), major_c=np.asarray(marks_c.major_first),
                     mshrink_c=np.asarray(theory.lp_major_shrink_mark(mu, p=pc)),
                     major_th=np.asarray(marks.major_first), shrink_th=np.asarray(marks.all_shrink))


def beta_gap(b: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(B,) max over saves and features of |b - ref| / max |ref| of each cell, for
    b, ref (B, n_save, d); 0 where both are 0 at every save, inf where one is not
    finite where the other is (NaN at the same saves count as equal)."""
    b, ref = np.asarray(b, np.float64), np.asarray(ref, np.float64)
    both_nan = np.isnan(b) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(b - ref))
    diff = np.where(np.isnan(diff), np.inf, diff)
    scale = np.nanmax(np.where(both_nan, 0.0, np.abs(ref)), axis=(1, 2))
    top = diff.max(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(top == 0, 0.0, top / scale)


def _check(m: _MultiRun) -> list[Check]:
    plan = m.plan
    ps, ce, me = plan.ps, m.ce, m.me
    checks = []
    rel = np.abs(me.edge / m.major_th - 1.0)
    checks.append(Check(
        NAME, f"lp-SAM depth 2, {plan.data.X.shape[0]} samples, rho = {plan.rho:g}: the major-first edge (first "
        "leader read off the field) is the one-sample closed form c_q (mu_d^q - mu_(d-1)^q) / (mu_d - mu_(d-1)) "
        "with mu = mean_i y_i x_i",
        f"relative distance <= {plan.mark_tol:g} at each of the {ps.size} p in [{ps[0]:g}, {ps[-1]:g}]",
        f"max {np.nanmax(rel):.1e}; e.g. p = {ps[0]:g}: {me.edge[0]:.6f} vs {m.major_th[0]:.6f}, "
        f"p = {ps[-1]:g}: {me.edge[-1]:.6f} vs {m.major_th[-1]:.6f}",
        bool(np.all(np.isfinite(me.edge)) and np.all(rel <= plan.mark_tol))))
    k2 = int(np.flatnonzero(ps == 2.0)[0])
    gap = beta_gap(m.beta2, m.l2_beta)
    same = m.reg[:, k2] == m.l2_reg
    checks.append(Check(
        NAME, "lp-SAM at p = 2 is l2-SAM on several samples: every cell of the p = 2 column is l2-SAM's cell",
        f"the same regime in each of the {same.size} rows, beta within {plan.beta_tol:g} of l2's at every save "
        "(relative to the cell's max |beta|)",
        f"{int(same.sum())}/{same.size} regimes equal; beta: max {np.max(gap):.1e} (median {np.median(gap):.1e})",
        bool(same.all() and np.all(gap <= plan.beta_tol))))
    d_c = abs(float(ce.edge[k2]) / float(m.l2c.edge) - 1.0)
    d_m = abs(float(me.edge[k2]) / float(m.l2m.edge) - 1.0)
    checks.append(Check(
        NAME, "lp-SAM at p = 2 is l2-SAM on several samples: its collapse and major-first edges are l2's",
        f"relative distance <= {plan.edge_tol:g} (l2: collapse {float(m.l2c.edge):.6f}, major-first "
        f"{float(m.l2m.edge):.6f})",
        f"collapse {float(ce.edge[k2]):.6f} (rel. {d_c:.1e}), major-first {float(me.edge[k2]):.6f} (rel. {d_m:.1e})",
        bool(np.isfinite(d_c) and np.isfinite(d_m) and d_c <= plan.edge_tol and d_m <= plan.edge_tol)))
    ok = np.isfinite(ce.edge)
    inside = ok & (ce.edge > m.shrink_th) & (ce.edge < me.edge)
    checks.append(Check(
        NAME, "lp-SAM depth 2, several samples: the collapse edge lies above the all-shrink mark c_q mu_1^(q-1) "
        "(mu = mean_i y_i x_i) and below the major-first edge, at every p",
        "all-shrink mark < collapse edge < major-first edge",
        "collapse edge " + ", ".join(f"p={p:g}: {e:.4f}" for p, e in zip(ps, ce.edge)),
        bool(ok.all() and inside.all())))
    far = max(abs(float(ce.edge[-1]) - 1.0), abs(float(me.edge[-1]) - 1.0))
    checks.append(Check(
        NAME, f"lp-SAM tends to linf-SAM on several samples: at p = {ps[-1]:g} the collapse and major-first edges "
        "are near linf's a = 1 (alpha against rho)",
        f"|edge - 1| <= {plan.linf_tol:g}",
        f"collapse {float(ce.edge[-1]):.4f}, major-first {float(me.edge[-1]):.4f}",
        bool(np.isfinite(far) and far <= plan.linf_tol)))
    checks.append(_linf_cells_check(m))
    checks.append(_cells_check(m))
    return checks


def _linf_cells_check(m: _MultiRun) -> Check:
    """linf-SAM's column: collapse below a = 1, major first above (2% away); the largest p's
    column equals linf's in every row outside its own band (2% away from its edges)."""
    a = m.plan.a_ax
    below, above = a < 0.98, a > 1.02
    bad_linf = int(np.sum(m.linf_reg[below] != 1) + np.sum(m.linf_reg[above] != 3))
    outside = (a < 0.98 * m.ce.edge[-1]) | (a > 1.02 * m.me.edge[-1])
    top = m.reg[:, -1]
    bad_top = int(np.sum(top[outside] != m.linf_reg[outside]))
    return Check(NAME, f"linf-SAM on several samples: collapse below alpha = rho, major first above; lp-SAM at "
                 f"p = {m.plan.ps[-1]:g} has linf's cells outside its narrow band",
                 "linf: regime 1 below a = 1, 3 above (2% away); p = max: linf's regime in every row 2% outside "
                 "[collapse edge, major-first edge]",
                 f"linf: {bad_linf} of {int(below.sum() + above.sum())} cells disagree ({int(below.sum())} below, "
                 f"{int(above.sum())} above); p = {m.plan.ps[-1]:g}: {bad_top} of {int(outside.sum())} rows differ "
                 "from linf's",
                 bool(bad_linf == 0 and bad_top == 0 and below.any() and above.any() and outside.any()))


def _cells_check(m: _MultiRun) -> Check:
    """The chart's cells against the measured edges of their column, 2% away from each."""
    ratio = m.plan.a_ax[:, None]
    ce, me = m.ce.edge[None, :], m.me.edge[None, :]
    reg = m.reg
    below = ratio < 0.98 * ce
    above = ratio > 1.02 * me
    between = (ratio > 1.02 * ce) & (ratio < 0.98 * me)
    hi = np.broadcast_to(m.plan.ps[None, :] > 2, reg.shape)
    allowed = np.isin(reg, (0, 2)) | (hi & (reg == MAJOR_DIES))
    n_bad = int(np.sum(reg[below] != 1) + np.sum(reg[above] != 3) + np.sum(~allowed[between]))
    dies_low = int(np.sum((reg == MAJOR_DIES) & ~hi))
    judged = (int(below.sum()), int(between.sum()), int(above.sum()))
    return Check(NAME, "lp-SAM depth 2, several samples: chart cells away (2%) from their column's measured edges",
                 "1 below the collapse edge; 2 (or not yet at d, or for p > 2 'major dies') between the edges; "
                 "3 above the major-first edge; no 'major dies' at p <= 2",
                 f"{n_bad} of {sum(judged)} cells disagree ({judged[0]} below the collapse edge, {judged[1]} "
                 f"between, {judged[2]} above); 'major dies' at p <= 2: {dies_low}; 'major dies' at p > 2: "
                 f"{int(np.sum(reg == MAJOR_DIES))} cells",
                 bool(n_bad == 0 and dies_low == 0 and min(judged) > 0))


def dies_rows(m: _MultiRun) -> list[tuple[float, float, float]]:
    """(p, lowest, highest alpha/rho) of the chart's "major dies" cells at each p > 2 that has any."""
    out = []
    for k, p in enumerate(m.plan.ps):
        rows = m.plan.a_ax[m.reg[:, k] == MAJOR_DIES]
        if rows.size:
            out.append((float(p), float(rows.min()), float(rows.max())))
    return out


_COLORS = [BLEW_UP_COLOR, MISSING_COLOR] + REGIME_COLORS + [MAJOR_DIES_COLOR]


def _draw(ctx: Context, m: _MultiRun) -> str:
    from matplotlib.colors import BoundaryNorm, ListedColormap

    plan = m.plan
    ps, a_ax = plan.ps, plan.a_ax
    fig, (ax, axc) = plt.subplots(1, 2, figsize=(13.0, 6.4), sharey=True,
                                  gridspec_kw={"width_ratios": [3.2, 1.0], "wspace": 0.06})
    # -2 blew up, -1 no value (another failure), 0..3 the regimes, 4 the major feature dies.
    cmap, norm = ListedColormap(_COLORS), BoundaryNorm(np.arange(-2.5, 5.5, 1.0), len(_COLORS))
    img = with_blow_up(m.img, m.status)
    ax.pcolormesh(_log_edges(ps), _log_edges(a_ax), img, cmap=cmap, norm=norm, rasterized=True)
    pc = plan.pc
    ax.plot(pc, m.shrink_c, "k--", lw=1.3, label=r"all-shrink mark $c_q\bar\mu_1^{q-1}$ (one-sample theory)")
    ax.plot(pc, m.major_c, "k-.", lw=1.5,
            label=r"major-first mark $c_q(\bar\mu_d^q-\bar\mu_{d-1}^q)/(\bar\mu_d-\bar\mu_{d-1})$")
    hi = pc > 2
    ax.plot(pc[hi], m.mshrink_c[hi], ":", color="k", lw=1.5, label=r"major-shrink mark $c_q\bar\mu_d^{q-1}$ ($p>2$)")
    ax.plot(ps, m.ce.edge, "o-", color="0.15", mfc="w", ms=6, lw=1.0, label="collapse edge (measured)")
    ax.plot(ps, m.me.edge, "s", color="0.15", mfc="w", ms=6, label="major-first edge (measured)")
    ax.plot([2.0, 2.0], [float(m.l2c.edge), float(m.l2m.edge)], "*", color="gold", mec="k", ms=14,
            label=r"$\ell_2$-SAM: its collapse and major-first edges")
    ax.axvline(2.0, color="0.3", lw=0.8, ls=(0, (2, 3)))
    ax.axhline(1.0, color="#7b3294", lw=1.6, ls=(0, (5, 3)), label=r"$\ell_\infty$-SAM's threshold $\alpha = \rho$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(_log_edges(ps)[[0, -1]])
    ax.set_ylim(_log_edges(a_ax)[[0, -1]])
    ticks = [p for p in (1.25, 1.5, 2, 3, 4, 8, 16, 32, 64) if ps[0] <= p <= ps[-1]]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(r"exponent $p$ of the SAM ball $\|\varepsilon\|_p \leq \rho$ (log)")
    ax.set_ylabel(rf"$\alpha/\rho$ ($w(0) = \alpha\mathbf{{1}}$, $\rho = {plan.rho:g}$, log)")
    ax.set_title(r"$\ell_p$-SAM: regimes over $(\alpha/\rho, p)$", fontsize=10)

    # The check columns: l2-SAM, lp at p = 2, lp at the largest p, linf-SAM, on the same rows.
    k2 = int(np.flatnonzero(ps == 2.0)[0])
    cols = np.stack([m.l2_img, m.img[:, k2], m.img[:, -1], m.linf_img], axis=1)
    sts = np.stack([m.l2_status, m.status[:, k2], m.status[:, -1], m.linf_status], axis=1)
    cimg = with_blow_up(cols, sts)
    axc.pcolormesh(np.arange(5.0), _log_edges(a_ax), cimg, cmap=cmap, norm=norm, rasterized=True)
    axc.set_yscale("log")
    for x, lo, hi_ in ((0, m.l2c.edge, m.l2m.edge), (1, m.ce.edge[k2], m.me.edge[k2]), (2, m.ce.edge[-1], m.me.edge[-1])):
        axc.plot([x + 0.5] * 2, [float(lo), float(hi_)], "*", color="gold" if x < 2 else "w", mec="k", ms=11)
    axc.plot([3.0, 4.0], [1.0, 1.0], color="#7b3294", lw=1.6, ls=(0, (5, 3)))
    axc.set_xticks(np.arange(4) + 0.5)
    axc.set_xticklabels([r"$\ell_2$", r"$p = 2$", rf"$p = {ps[-1]:g}$", r"$\ell_\infty$"])
    axc.set_xlim(0, 4)
    axc.set_title("check columns (stars: edges)", fontsize=10)

    handles, labels = ax.get_legend_handles_labels()
    shown = set(np.unique(img).tolist()) | set(np.unique(cimg).tolist())
    names = [blow_up_label(blowup_log10=SETTINGS.blowup_log10), "no value"] + list(REGIME_NAMES) + ["major feature dies (p > 2)"]
    for v, c, n in zip(range(-2, 5), _COLORS, names):
        if v in shown:
            handles.append(Patch(facecolor=c, edgecolor="k", lw=0.3))
            labels.append(("regime " + n) if n[0].isdigit() else n + (" (not at $d$ by the horizon)" if v == 0 else ""))
    axc.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.05, 1.0), borderaxespad=0.0,
               frameon=False)
    n = plan.data.X.shape[0]
    fig.suptitle(rf"$\ell_p$-SAM, depth 2, {n} samples ($\bar\mu = $ mean $y_i x_i = $ "
                 + mu_text(np.round(plan.mu_bar, 2), short=True) + rf"), real time to $t = {_tex_number(plan.t1)}$" + "\n"
                 + r"between $\ell_2$ ($p = 2$) and $\ell_\infty$ ($\alpha = \rho$): marks of the one-sample theory "
                 r"with $\mu = \bar\mu$", fontsize=11)
    return _save(fig, ctx, NAME)


def _tex_number(x: float) -> str:
    """x in TeX: 10^k for a power of ten, else as %g (1e5 -> "10^{5}", 300 -> "300")."""
    k = np.log10(x)
    return f"10^{{{int(round(k))}}}" if abs(k - round(k)) < 1e-12 and abs(k) >= 3 else f"{x:g}"


def _caption(m: _MultiRun) -> str:
    plan = m.plan
    ps = plan.ps
    rows = "; ".join(f"p = {p:g}: collapse {c:.3f}, major-first {e:.3f}" for p, c, e in zip(ps, m.ce.edge, m.me.edge))
    dies = dies_rows(m)
    dies_txt = ("; ".join(f"p = {p:g}: {lo:.3f} to {hi:.3f}" for p, lo, hi in dies) if dies else "none on this grid")
    n = plan.data.X.shape[0]
    return (
        f"Regimes of depth-2 lp-SAM on {n} samples (common.toml's [multi_sample], mean_i y_i x_i = "
        f"{mu_text(np.round(plan.mu_bar, 4))}), real time t up to {plan.t1:g}, rho = {plan.rho:g}, w(0) = alpha 1 "
        f"in both layers, over {plan.a_ax.size} values of alpha/rho and the exponents p = "
        f"{', '.join(f'{p:g}' for p in ps)}: 1 collapse, 2 minor first then major, 3 major first, 0 not at the major "
        "feature by the horizon, and for p > 2 the major feature dies (its weight reaches 0 and stays, docs/theory.md "
        "s.3.1 lp-SAM and s.4.3). Lines: the closed-form marks of the one-sample theory (s.3.1) with mu = mean_i "
        "y_i x_i (s.5: at beta ~ 0 every margin is ~0 and the gradient is s(0) mu_bar * w); markers: the collapse "
        "and major-first edges measured by samflow.edges at this rho (collapse by bisection on the flow's outcome, "
        "major-first from the field's first leader); stars at p = 2: l2-SAM's edges; dashed purple: linf-SAM's "
        "threshold alpha = rho. Right: l2-SAM, lp-SAM at p = 2 and at the largest p, and linf-SAM solved on the "
        f"same rows. Edges in alpha/rho: {rows}. Rows where the major feature dies: {dies_txt}."
    )
