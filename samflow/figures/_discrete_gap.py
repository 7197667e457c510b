"""Figure 7: discrete SAM against its flow as eta shrinks (discrete_gap)."""

from __future__ import annotations

import jax
import matplotlib.pyplot as plt
import numpy as np
from pydantic import Field

from ..discrete import flow_gap, run_discrete
from ..plots import feature_colors
from ..solver import solve
from ._context import Context, MethodName, _Strict
from ._report import Check, FigureResult, _finish, _start
from ._draw import _label, _label_plain, _layout_with_legend, _save


# --- figure 7: discrete SAM against its flow ---------------------------------------


class _GapRun(_Strict):
    method: MethodName
    """The method whose iteration is compared with its flow."""
    alpha_over_rho: list[float]  # per-coordinate init alpha_j / rho
    """Per-coordinate init alpha_j / rho."""
    rho: float = Field(gt=0)
    """SAM radius (fixed as eta shrinks)."""


class DiscreteGapConfig(_Strict):
    """Schema of `configs/figures/discrete_gap.toml`; see that file for its keys."""

    runs: list[_GapRun] = Field(min_length=1)
    """One panel per run (`[[runs]]`)."""
    save_every: float = Field(gt=0)  # save times are multiples of this (and of every eta)
    """Save times are multiples of this (and of every eta)."""
    n_times: int = Field(ge=2)
    """Number of save times."""
    eta_max: float = Field(gt=0)
    """The largest step size."""
    n_eta: int = Field(ge=2)  # eta = eta_max / 2^k, k = 0 .. n_eta - 1
    """Step sizes eta = eta_max / 2^k, k = 0 .. n_eta - 1."""
    shown_etas: list[float]  # drawn as markers over the flow
    """Step sizes drawn as markers over the flow."""
    slope_range: tuple[float, float]
    """Pass: the log-log slope of the gap against eta lies in [lo, hi]."""
    gap_tol: float = Field(gt=0)  # pass: gap at the smallest eta below this
    """Pass: the gap at the smallest eta is below this."""


def discrete_gap(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 7: discrete SAM (step size eta) against its flow as eta shrinks.

    `samflow.discrete.flow_gap`: max over the save times of ||beta_eta(t) -
    beta_flow(t)|| / ||beta_flow(t)||, at fixed rho; the iteration is a first-order
    method for the flow, so the gap should fall like eta (docs/theory.md s.2).
    Where the linf iterates of some step size land on the absorbing w = 0 by
    rounding (`DiscreteTrajectory.absorbed_t`, docs/theory.md s.2), every step
    size of that run is compared over the same save times, those before the
    first landing; the check row says so and fails when fewer than half of the
    save times are left.

    **Returns:** a `FigureResult`.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("discrete_gap", DiscreteGapConfig)
    d = ctx.d
    data = ctx.single_tau()
    ts = cfg.save_every * np.arange(1, cfg.n_times + 1)
    etas = cfg.eta_max / 2.0 ** np.arange(cfg.n_eta)
    cols = feature_colors(d)
    R = len(cfg.runs)
    fig, axes = plt.subplots(1, R + 1, figsize=(4.6 * (R + 1), 4.4))
    colors = {"gd": "k", "l2": "tab:blue", "linf": "tab:orange", "usam": "tab:green"}
    checks = []
    markers = ["o", "^", "s", "D"]
    cut_notes = []
    for k, run in enumerate(cfg.runs):
        alpha = np.asarray(run.alpha_over_rho) * run.rho
        landed = np.array([float(run_discrete(run.method, data, alpha, run.rho, eta, ts).absorbed_t) for eta in etas])
        horizon = ts[ts < np.nanmin(landed)] if np.any(np.isfinite(landed)) else ts
        enough = horizon.size >= max(1, ts.size // 2)
        gaps = (np.array([float(flow_gap(run.method, data, alpha, run.rho, eta, horizon)) for eta in etas])
                if enough else np.full(etas.size, np.nan))
        finite = bool(np.all(np.isfinite(gaps)) and np.all(gaps > 0))
        slope = float(np.polyfit(np.log(etas), np.log(gaps), 1)[0]) if finite else float("nan")
        ok = bool(enough and finite and cfg.slope_range[0] <= slope <= cfg.slope_range[1] and gaps[-1] < cfg.gap_tol)
        checks.append(Check("discrete_gap", f"discrete {_label_plain(run.method)} -> its flow as eta -> 0 (rho = {run.rho:g} fixed)",
                            f"gap = O(eta): log-log slope in [{cfg.slope_range[0]:g}, {cfg.slope_range[1]:g}], gap < {cfg.gap_tol:g} at eta = {etas[-1]:g}"
                            ", over the save times before any landing on the absorbing w = 0 (at least half of them)",
                            f"slope {slope:.3f}; gap {gaps[0]:.2e} at eta = {etas[0]:g} down to {gaps[-1]:.2e} at {etas[-1]:g}"
                            + _landing_text(etas, landed, horizon, ts), ok))
        if np.any(np.isfinite(landed)):
            cut_notes.append(f" {_label_plain(run.method)}:" + _landing_text(etas, landed, horizon, ts)[1:] + ".")
        ax = axes[k]
        flow = jax.tree_util.tree_map(np.asarray, _flow_dense(run.method, data, alpha, run.rho, ts))
        for j in range(d):
            ax.plot(flow[0], flow[1][:, j], color=cols[j], lw=1.5, label=rf"$\beta_{{{j + 1}}}$" if k == 0 else None)
        for mi, eta in enumerate(cfg.shown_etas):
            disc = run_discrete(run.method, data, alpha, run.rho, eta, ts)
            for j in range(d):
                ax.plot(np.asarray(disc.t), np.asarray(disc.beta)[:, j], markers[mi % 4], ms=3.2, mfc="none",
                        color=cols[j], alpha=0.9)
        ax.set_xlabel("real time $t$ ($= k\\eta$ for the iterates)")
        ax.set_ylabel(r"$\beta_j$")
        inits = ", ".join(f"{v:g}" for v in run.alpha_over_rho)
        ax.set_title(f"{_label(run.method)}, $\\rho={run.rho:g}$, $\\alpha/\\rho = ({inits})$\n"
                     "lines: flow; markers: " + ", ".join(f"{markers[i % 4]} $\\eta={e:g}$" for i, e in enumerate(cfg.shown_etas)), fontsize=9)
        ax.grid(True, alpha=0.3)
        cut = f", $t \\leq {horizon[-1]:g}$" if horizon.size < ts.size and horizon.size else ""
        axes[-1].loglog(etas, gaps, "o-", color=colors[run.method], label=f"{_label(run.method)} (slope {slope:.2f}{cut})")
    ax = axes[-1]
    ref = np.array([etas[-1], etas[0]])
    g0 = ax.get_lines()[0].get_ydata()[-1]
    ax.loglog(ref, g0 * ref / etas[-1], "k--", lw=1, label=r"$\propto \eta$")
    ax.set_xlabel(r"step size $\eta$")
    ax.set_ylabel(r"$\max_t \|\beta_\eta(t) - \beta_{\rm flow}(t)\| / \|\beta_{\rm flow}(t)\|$")
    ax.set_title(f"gap to the flow over $t \\leq {ts[-1]:g}$", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Discrete SAM $\\theta_{k+1} = \\theta_k - \\eta \\nabla L(\\theta_k + \\epsilon_k)$ against its flow, depth 2, one sample", fontsize=12)
    handles, labels = axes[0].get_legend_handles_labels()
    _layout_with_legend(fig, handles, ncol=d, inches=0.4, top=1 - 0.3 / fig.get_figheight())
    png = _save(fig, ctx, "discrete_gap")
    caption = (
        "The discrete algorithms theta_{k+1} = theta_k - eta grad L(theta_k + eps(theta_k)) (samflow.discrete) against "
        f"the flows they come from (eta -> 0 at fixed rho), depth 2, one sample {{(mu, +1)}}, real time t = k eta. Left "
        "panels: beta_j(t) of the flow (lines) and of the iterates (markers) at the larger step sizes; the linf-SAM run "
        "has coordinates below rho that reach 0 and slide in the flow, while the iterates, with sign(0) = 0 and no sign "
        "memory, chatter around 0 within O(eta). Right: the gap samflow.discrete.flow_gap, the largest relative "
        f"distance ||beta_eta(t) - beta_flow(t)|| / ||beta_flow(t)|| over the save times t <= {ts[-1]:g}, against eta "
        "on log axes: it falls like eta (the dashed line), the order of a one-step method. Where the linf-SAM iterates "
        "of a step size land on exactly w = 0 in both layers of a coordinate (a rounding artifact of the chatter: with "
        "sign(0) = 0 that state never moves again, while the flow slides as the limit of the chatter; "
        "samflow.discrete.DiscreteTrajectory.absorbed_t), every step size of that run is compared over the save times "
        "before the first landing (the legend gives that horizon)." + "".join(cut_notes)
    )
    return _finish(ctx, FigureResult("discrete_gap", "Figure 7: discrete SAM against its flow as eta shrinks", [png], caption,
                                     [ctx.config_ref("discrete_gap"), ctx.config_ref("common")], checks), t0)


def _landing_text(etas, landed, horizon, ts) -> str:
    """The check row's note on the step sizes whose iterates landed on the
    absorbing w = 0 (`absorbed_t` `landed`, NaN where none) and the save times
    compared; empty when none landed."""
    hit = np.isfinite(landed)
    if not np.any(hit):
        return ""
    where = ", ".join(f"eta = {e:g} at t = {t:.4g}" for e, t in zip(etas[hit], landed[hit]))
    upto = f"compared over t <= {horizon[-1]:g} of {ts[-1]:g}" if horizon.size else "no save time before it"
    return (f"; {int(hit.sum())} of {etas.size} step sizes landed on the absorbing w = 0 of sign(0) = 0 by rounding "
            f"({where}): {upto}")


def _flow_dense(method, data, alpha, rho, ts):
    """The flow on a fine grid for drawing (one cell; the same save count as
    `flow_gap` uses, so the compilation is shared)."""
    fine = np.linspace(ts[-1] / ts.size, ts[-1], ts.size)
    tr = solve(method, data, alpha, rho, fine, depth=2, clock="t")
    return fine, tr.beta
