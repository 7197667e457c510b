"""Figure 6: USAM against l2-SAM (usam_ablation)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from pydantic import Field

from .. import theory
from ..analysis import regime_label
from ..plots import (
    BLOWN_UP,
    MISSING_COLOR,
    NO_VALUE,
    no_value_label,
)
from ._context import Context, _LogAxis, _Strict, _init, _solve
from ._report import Check, FigureResult, _finish, _start
from ._draw import (
    _heatmap_panel,
    _label,
    _layout_with_legend,
    _log_edges,
    _regime_handles,
    _regime_panel,
    _save,
    _staircase_cmap,
    _staircase_handles,
)
from ._measure import MISSING, _dominant_with_ties, _first_informative_dominant


# --- figure 6: the USAM ablation ---------------------------------------------------


class UsamConfig(_Strict):
    """Schema of `configs/figures/usam_ablation.toml`; see that file for its keys."""

    rho: float = Field(gt=0)  # heat maps
    """SAM radius of the heat maps."""
    alpha_over_rho: _LogAxis
    """The heat maps' alpha / rho axis."""
    t_min: float = Field(gt=0)
    """First save time (real time)."""
    t1: float = Field(gt=0)
    """Real-time horizon."""
    chart_rho: _LogAxis  # the (alpha/rho, rho) charts
    """The rho axis of the (alpha/rho, rho) charts."""


def usam_ablation(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 6: unnormalized SAM (USAM) against l2-SAM, depth 2, one sample, real time.

    The two flows differ only in the normalization G/||G||_2 of the perturbation.
    Top: dominant feature over (t, alpha/rho) for GD, USAM and l2-SAM at one rho.
    Bottom: regimes over (rho, alpha/rho) for USAM and l2-SAM, and the first
    dominant feature against `theory.l2_first_dominant`.

    **Returns:** a `FigureResult`.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("usam_ablation", UsamConfig)
    d = ctx.d
    data = ctx.single_rows()
    a_rel = cfg.alpha_over_rho.values()
    ts = ctx.log_times(cfg.t_min, cfg.t1)
    first, top = {}, {}
    for m in ["gd", "usam", "l2"]:
        tr = _solve(ctx, m, data, _init(a_rel * cfg.rho, 2, d), cfg.rho, ts, clock="t")
        top[m] = (_dominant_with_ties(tr.beta), np.asarray(tr.status))
        first[m] = _first_informative_dominant(tr.beta)
    # Regimes over (rho, alpha/rho).
    rr = cfg.chart_rho.values()
    AA, RR = np.meshgrid(a_rel, rr, indexing="ij")
    regs, bottom = {}, {}
    for m in ["usam", "l2"]:
        tr = _solve(ctx, m, data, _init((AA * RR).ravel(), 2, d), RR.ravel(), ts, clock="t")
        reg = regime_label(tr.beta, tr.status).reshape(AA.shape)
        regs[m] = reg
        bottom[m] = (reg, np.asarray(tr.status).reshape(AA.shape))
    png = _draw_usam(ctx, cfg.rho, ts, a_rel, rr, top, bottom, first)
    checks = []
    u = regs["usam"]
    checks.append(Check("usam_ablation", "USAM, depth 2: no minor-first phase (normalization removed)",
                        f"major first (regime 3) at every (alpha/rho, rho) with rho in [{rr[0]:g}, {rr[-1]:g}], like GD",
                        f"{int(np.sum(u == 3))}/{u.size} cells in regime 3; first dominant = {d} for {int(np.sum(first['usam'] == d))}/{a_rel.size} alphas at rho = {cfg.rho:g}",
                        bool(np.all(u == 3) and np.all(first["usam"] == d))))
    l2r = regs["l2"]
    band = [(a_rel[l2r[:, k] == 2].min(), a_rel[l2r[:, k] == 2].max()) if np.any(l2r[:, k] == 2) else (np.nan, np.nan) for k in range(rr.size)]
    lo_b, hi_b = np.array(band).T
    checks.append(Check("usam_ablation", "l2-SAM at the same radii: minor first, major last",
                        "regime 2 at every rho, in a band of alpha/rho whose upper edge (the major-first mark) does not depend on rho",
                        f"regime 2 at {int(np.sum(np.isfinite(lo_b)))}/{rr.size} radii; upper edge alpha/rho {np.nanmin(hi_b):.3f} to {np.nanmax(hi_b):.3f}; "
                        f"lower edge {np.nanmin(lo_b):.3f} to {np.nanmax(lo_b):.3f} (real time: next to the collapse edge the "
                        "staircase is not finished by the horizon, more so at large rho where the loss falls sooner)",
                        bool(np.all(np.isfinite(lo_b)) and np.ptp(np.log(hi_b)) < 0.05)))
    caption = (
        "USAM, dtheta/dt = -grad L(theta + rho grad L(theta)), differs from l2-SAM only by the missing normalization "
        f"of the perturbation (docs/theory.md s.2). Depth 2, one sample {{(mu, +1)}}, real time. Top: dominant feature over "
        f"(t, alpha/rho) at rho = {cfg.rho:g} for GD, USAM and l2-SAM: USAM is flat at the major feature like GD, l2-SAM "
        "collapses, climbs the staircase or goes major first depending on alpha/rho. Bottom left and centre: regime over "
        f"(rho, alpha/rho), rho from {rr[0]:g} to {rr[-1]:g}: USAM is major first everywhere; l2-SAM has the same three "
        "regimes at every rho (the band depends on alpha/rho only; white: the staircase is not finished within the "
        "horizon, next to the collapse edge). Bottom right: the first dominant feature against alpha/rho; the l2-SAM "
        "prediction argmax_j mu_j (1 - mu_j / (sqrt 2 a ||mu||)) in grey. (With a radius far above these, rho > "
        "1/mu_d, USAM's perturbation rho sigma(-z) mu_j w_j overshoots the major coordinate and it can put a minor "
        "feature first too, by another mechanism: a fixed, scale-free penalty, not a normalization that fades as the "
        "weights grow.)"
    )
    return _finish(ctx, FigureResult("usam_ablation", "Figure 6: USAM vs l2-SAM, the normalization ablation", [png], caption,
                                     [ctx.config_ref("usam_ablation"), ctx.config_ref("common")], checks), t0)


def _draw_usam(ctx, rho: float, ts, a_rel, rr, top: dict, bottom: dict, first: dict) -> str:
    """The USAM ablation figure; returns the PNG name. `rho`: the radius of the top row and
    of the first dominant feature; `top`: method ("gd", "usam", "l2")
    -> (dominant feature (alpha, time) with ties, `_dominant_with_ties`; status (alpha,)),
    drawn over (t, alpha/rho); `bottom`: method ("usam", "l2") -> (regime (alpha, rho),
    status (alpha, rho)), drawn over (rho, alpha/rho); `first`: method -> the first
    dominant feature (alpha,). A cell that blew up is drawn in the blow-up colour (one
    legend entry for both rows), other failures black "no value" (one entry per row)."""
    mu, d = ctx.mu, ctx.d
    fig, axes = plt.subplots(2, 3, figsize=(14, 9.4))
    missing: list[int] = []
    blew_up = False
    for j, m in enumerate(["gd", "usam", "l2"]):
        dom, st = top[m]
        ax = axes[0, j]
        img = _heatmap_panel(ax, ts, a_rel, dom, d, st)
        missing += st[np.any(img == MISSING, axis=-1)].tolist()
        blew_up = blew_up or bool(np.any(img == BLOWN_UP))
        ax.set_title(f"{_label(m)}, $\\rho = {rho:g}$", fontsize=10)
        ax.set_xlabel("real time $t$")
        ax.set_ylabel(r"init scale $\alpha/\rho$")
    reg_missing: list[int] = []
    for j, m in enumerate(["usam", "l2"]):
        reg, st = bottom[m]
        ax = axes[1, j]
        img = _regime_panel(ax, _log_edges(rr), _log_edges(a_rel), reg, st)  # failed cells: not "undetermined"
        reg_missing += st[img == NO_VALUE].tolist()
        blew_up = blew_up or bool(np.any(img == BLOWN_UP))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"SAM radius $\rho$")
        ax.set_ylabel(r"init scale $\alpha/\rho$")
        ax.set_title(f"{_label(m)}: regime over $(\\rho, \\alpha/\\rho)$", fontsize=10)
    ax = axes[1, 2]
    pred = theory.l2_first_dominant(mu, a=a_rel)
    ax.step(a_rel, pred, where="mid", color="k", lw=2.5, alpha=0.35, label=_label("l2") + r", predicted: $\arg\max_j \mu_j(1 - \mu_j/(\sqrt{2} a \|\mu\|))$")
    ax.plot(a_rel, first["l2"], "o", ms=3.5, color="tab:blue", label=f"{_label('l2')}, measured")
    ax.plot(a_rel, first["usam"], "s", ms=3.5, mfc="none", color="tab:green", label=f"{_label('usam')}, measured")
    ax.plot(a_rel, first["gd"], "x", ms=3.5, color="k", label="GD, measured")
    ax.set_xscale("log")
    ax.set_ylim(0.5, d + 2.6)  # room for the legend above the top feature
    ax.set_yticks(range(1, d + 1))
    ax.set_xlabel(r"init scale $\alpha/\rho$")
    ax.set_ylabel("first dominant feature (1 = minor)")
    ax.set_title(f"first dominant feature, $\\rho = {rho:g}$", fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.grid(True, alpha=0.3)
    handles = _staircase_handles(d, _staircase_cmap(d)[2])[: d + 2]
    if missing:
        handles.append(Patch(facecolor=MISSING_COLOR, label="top: " + no_value_label(missing)))
    handles += _regime_handles(reg_missing, blew_up=blew_up, missing_prefix="bottom: ")
    fig.suptitle("Ablation: USAM (perturbation $\\rho G$) vs $\\ell_2$-SAM ($\\rho G/\\|G\\|_2$), depth 2, one sample: "
                 "the normalization causes minor first", fontsize=12)
    _layout_with_legend(fig, handles, ncol=6, inches=0.8, top=1 - 0.35 / fig.get_figheight(),
                        title=r"top: dominant feature $\arg\max_j|\beta_j|$;  bottom: regime")
    return _save(fig, ctx, "usam_ablation")
