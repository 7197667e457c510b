"""Figure 5: beta_j and the loss, one panel per regime (trajectories)."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import jax
import numpy as np
from pydantic import Field

from .. import theory
from ..analysis import Plateau, dominant_index, plateau, regime_label, switching_times, tied, visited_sequence
from ..plots import feature_colors
from ..solver import Trajectory
from ..status import Status
from ..switches import SwitchTimes, locate_switches
from ._context import SETTINGS, Context, _LogAxis, _Strict, _init, _solve
from ._report import Check, FigureResult, _planned_figure, mu_text
from ._draw import _layout_with_legend, _save
from ._measure import _first_informative_dominant, staircase_ok


# --- figure 5: trajectories and the plateau, one panel per regime ----------------


class TrajectoriesConfig(_Strict):
    """Schema of `configs/figures/trajectories.toml`; see that file for its keys."""

    rho: float = Field(gt=0)
    """SAM radius of the panels."""
    alphas: list[float] = Field(min_length=1)  # alpha / rho, one per regime, in order 1, 2, 3
    """alpha / rho of the panels, one per regime, in order 1, 2, 3."""
    t1: float = Field(gt=0)  # real-time horizon of the panels (linear save times)
    """Real-time horizon of the panels (linear save times)."""
    sweep: _LogAxis  # alpha / rho of the switching-order statistics
    """alpha / rho of the switching-order statistics."""
    sweep_t_min: float = Field(gt=0)
    """First save time of those solves."""
    sweep_t1: float = Field(gt=0)
    """Horizon of those solves."""
    rel_band: float = Field(gt=0)
    """Plateau detection (`samflow.analysis.plateau`): the loss stays within this relative band on a plateau."""
    rel_drop: float = Field(gt=0, lt=1)
    """Plateau detection: a plateau must be followed by a fall of the loss by this relative amount."""


def trajectories(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 5: |beta_j(t)| and the loss of depth-2 l2-SAM in real time, one column
    per regime, with the loss plateau (`samflow.analysis.plateau`) and the switches
    of the dominant feature marked.

    Also measures, over a sweep of alpha/rho: the order in which features become
    dominant in regime 2 (increasing mu, after a possible initial step-down), the
    first dominant feature against `theory.l2_first_dominant`, and the time to
    reach the major feature.

    **Returns:** a `FigureResult`.
    """
    return _planned_figure(
        "trajectories", "Figure 5: trajectories and the loss plateau, one panel per regime", TrajectoriesConfig,
        out_dir, quick, config_dir, plan=_plan, measure=_measure_trajectories, draw=_draw_trajectories,
        check=lambda run: _check_sweep_order(run) + _check_plateau(run) + _check_major_time(run),
        caption=_trajectories_caption)


@dataclasses.dataclass(frozen=True)
class _TrajectoriesPlan:
    """trajectories.toml resolved (`_plan`): the panels' and the sweep's inits and save
    times, rho and the plateau detection."""

    mu: np.ndarray  # (d,)
    d: int
    rho: float
    ts: np.ndarray  # (n_save,) linear real times of the panels and of the plateau sweep
    a: np.ndarray  # (P,) alpha/rho of the panels
    sa: np.ndarray  # (S,) alpha/rho of the sweep
    ts2: np.ndarray  # (n_save,) log real times of the sweep
    rel_band: float  # samflow.analysis.plateau's relative band
    rel_drop: float  # and the fall that must follow


def _plan(ctx: Context, cfg: TrajectoriesConfig) -> _TrajectoriesPlan:
    """The config read once: inits, save times, rho and the plateau detection."""
    n = ctx.common.n_save
    return _TrajectoriesPlan(ctx.mu, ctx.d, cfg.rho, np.linspace(cfg.t1 / n, cfg.t1, n), np.asarray(cfg.alphas),
                             cfg.sweep.values(), ctx.log_times(cfg.sweep_t_min, cfg.sweep_t1), cfg.rel_band, cfg.rel_drop)


@dataclasses.dataclass(frozen=True)
class _TrajectoriesRun:
    """What `trajectories` measured: the panels (linear times `plan.ts`) and the sweep of alpha/rho."""

    plan: _TrajectoriesPlan
    tr: Trajectory  # the panels
    reg: np.ndarray  # (P,) regime of each panel
    pl: Plateau  # loss plateau of each panel
    tr2: Trajectory  # the sweep on plan.ts2
    reg2: np.ndarray  # (S,) regime of each sweep cell
    dom2: np.ndarray  # (S, n_save) dominant feature, 0 where tied
    seqs: dict  # regime-2 sweep cell -> visited dominant features (exact switches)
    sw2: SwitchTimes  # (S, K) exact switch times of the sweep (samflow.switches)
    regp: np.ndarray  # (S,) regime of the sweep on ts
    plp: Plateau  # loss plateau of the sweep on ts


def _measure_trajectories(ctx: Context, plan: _TrajectoriesPlan) -> _TrajectoriesRun:
    """Solve the panels, then the sweep of alpha/rho on log times (switches) and on the panels' times (plateau)."""
    d, rho, ts, sa, ts2 = plan.d, plan.rho, plan.ts, plan.sa, plan.ts2
    data = ctx.single_rows()
    tr = _solve(ctx, "l2", data, _init(plan.a * rho, 2, d), rho, ts, clock="t")
    reg = regime_label(tr.beta, tr.status)
    pl = plateau(tr.loss, ts, plan.rel_band, plan.rel_drop, log_time=False)

    # Statistics over a sweep of alpha/rho (log save times: the first dominant
    # feature is read at the first untied save, right after t = 0).
    tr2 = _solve(ctx, "l2", data, _init(sa * rho, 2, d), rho, ts2, clock="t")
    reg2 = regime_label(tr2.beta, tr2.status)
    dom2 = np.where(tied(tr2.beta, 1e-9), 0, dominant_index(tr2.beta))
    # The order and the timing checks read the exact switches (event-located),
    # not the save grid; a refused record (`ok` False) gives no sequence.
    W2 = _init(sa * rho, 2, d)
    c = ctx.common.chunk
    idx = np.minimum(np.arange(sa.size + (-sa.size) % c), sa.size - 1)
    sw2 = locate_switches("l2", data, W2[idx], np.full(idx.size, rho), ts2, clock="t", settings=SETTINGS,
                          chunk=c)
    sw2 = jax.tree_util.tree_map(lambda x: np.asarray(x)[: sa.size], sw2)
    seqs = {i: ([int(sw2.first[i])] + [int(v) for v in sw2.to[i, : sw2.count[i]]]) if sw2.ok[i] else []
            for i in np.flatnonzero(reg2 == 2)}
    # The plateau over the sweep, on the panels' linear time grid.
    trp = _solve(ctx, "l2", data, _init(sa * rho, 2, d), rho, ts, clock="t")
    regp = regime_label(trp.beta, trp.status)
    plp = plateau(trp.loss, ts, plan.rel_band, plan.rel_drop, log_time=False)
    return _TrajectoriesRun(plan, tr, reg, pl, tr2, reg2, dom2, seqs, sw2, regp, plp)


def _draw_trajectories(ctx: Context, run: _TrajectoriesRun) -> str:
    """|beta_j(t)| (top) and the loss with its plateau (bottom), one column per panel; returns the PNG name."""
    mu, d, ts, a, tr, reg, pl = run.plan.mu, run.plan.d, run.plan.ts, run.plan.a, run.tr, run.reg, run.pl
    cols = feature_colors(d)
    fig, axes = plt.subplots(2, len(a), figsize=(4.5 * len(a), 6.6), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [1.6, 1]})
    for k in range(len(a)):
        ax, axl = axes[0, k], axes[1, k]
        beta = np.abs(tr.beta[k])
        for j in range(d):
            ax.plot(ts, np.where(beta[:, j] > 0, beta[:, j], np.nan), color=cols[j], lw=1.6,
                    label=rf"$|\beta_{{{j + 1}}}|$, $\mu_{{{j + 1}}}={mu[j]:g}$")
        ax.set_yscale("log")
        pos = beta[np.isfinite(beta) & (beta > 0)]
        if pos.size:
            ax.set_ylim(max(pos.min() / 3, pos.max() * 1e-12), pos.max() * 3)
        dom = np.where(tied(tr.beta[k], 1e-9), 0, dominant_index(tr.beta[k]))
        for tsw, f, to in switching_times(dom, ts):
            ax.axvline(tsw, color="0.5", lw=0.7, ls=":")
            ax.text(tsw, 0.02, f" {f}$\\to${to}", transform=ax.get_xaxis_transform(), fontsize=8, rotation=90,
                    ha="right", va="bottom", color="0.25")
        if tr.status[k] == int(Status.COLLAPSED):
            for axx in (ax, axl):
                axx.axvline(tr.event_time[k], color="k", lw=1.0, ls="--")
            ax.text(tr.event_time[k], 0.5, " collapse", transform=ax.get_xaxis_transform(), fontsize=8)
        seq = visited_sequence(dom)
        ax.set_title(f"$\\alpha/\\rho = {a[k]:g}$: regime {reg[k]}\n"
                     + ("dominant feature " + " $\\to$ ".join(map(str, seq)) if seq else ""), fontsize=10)
        axl.plot(ts, tr.loss[k], "k", lw=1.4, label="loss")
        if np.isfinite(pl.start[k]):
            axl.axvspan(pl.start[k], pl.end[k], color="tab:orange", alpha=0.3,
                        label=f"plateau, $t$ = {pl.start[k]:.0f} to {pl.end[k]:.0f}")
        axl.axhline(np.log(2), color="0.5", lw=0.7, ls="--")
        axl.text(ts[-1], np.log(2), r"$\log 2$", ha="right", va="bottom", fontsize=8, color="0.4")
        axl.set_ylim(0, 0.78)
        axl.set_xlabel("real time $t$")
        axl.legend(fontsize=8, loc="lower left")
        if k == 0:
            ax.set_ylabel(r"$|\beta_j(t)|$")
            axl.set_ylabel("loss")
        ax.grid(True, alpha=0.25)
        axl.grid(True, alpha=0.25)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(rf"$\ell_2$-SAM, depth 2, one sample, $\rho = {run.plan.rho:g}$: one column per regime", fontsize=12)
    _layout_with_legend(fig, handles, ncol=d, inches=0.45, top=1 - 0.35 / fig.get_figheight())
    png = _save(fig, ctx, "trajectories")
    return png


def _check_sweep_order(run: _TrajectoriesRun) -> list[Check]:
    """Regime 2 climbs in increasing order of mu; the first dominant feature against theory."""
    mu, d, sa, tr2, reg2, seqs = run.plan.mu, run.plan.d, run.plan.sa, run.tr2, run.reg2, run.seqs
    checks = []
    good = [i for i, s in seqs.items() if staircase_ok(s, d)]
    stepped = [(sa[i], s) for i, s in seqs.items() if len(s) > 1 and s[1] < s[0]]
    bad = [(round(float(sa[i]), 3), s) for i, s in seqs.items() if not staircase_ok(s, d)]
    checks.append(Check("trajectories", "l2-SAM depth 2, regime 2: features become dominant in increasing order of mu",
                        "visited dominant features strictly increase to d, after a possible initial step-down near the 1/2 edge",
                        f"{len(good)}/{len(seqs)} regime-2 inits of {sa.size} (alpha/rho in [{sa[0]:g}, {sa[-1]:g}]); "
                        + (f"{len(stepped)} step down first, e.g. alpha/rho = {stepped[0][0]:.3f}: {stepped[0][1]}" if stepped else "none steps down")
                        + (f"; not monotone: {bad[:3]}" if bad else ""),
                        bool(seqs) and len(good) == len(seqs)))
    first_pred = theory.l2_first_dominant(mu, a=sa)
    first_meas = _first_informative_dominant(tr2.beta)
    live = reg2 != 1
    n_eq = int(np.sum(first_pred[live] == first_meas[live]))
    checks.append(Check("trajectories", "l2-SAM depth 2: the first dominant feature (inits that do not collapse)",
                        "argmax_j mu_j (1 - mu_j / (sqrt 2 a ||mu||)), a = alpha/rho",
                        f"{n_eq}/{int(live.sum())} inits match", bool(live.any() and n_eq == int(live.sum()))))
    return checks


def _check_plateau(run: _TrajectoriesRun) -> list[Check]:
    """The loss plateau over the sweep: longer in regime 2 than in 3, none in regime 1."""
    ts, regp, plp = run.plan.ts, run.regp, run.plp
    checks = []
    durp = plp.end - plp.start
    step = ts[1] - ts[0]
    live_p = regp != 1
    fin_p = live_p & np.isfinite(durp)
    mono_p = bool(np.all(np.diff(durp[fin_p]) <= step + 1e-12))
    r2, r3 = durp[regp == 2], durp[regp == 3]
    longer = bool(r2.size and r3.size and np.nanmin(r2) >= np.nanmax(r3) - step)
    none1 = bool(np.all(~np.isfinite(durp[regp == 1])))
    checks.append(Check("trajectories", "l2-SAM depth 2: the loss plateau of regime 2",
                        "longer than in regime 3, lengthening without bound towards the 1/2 edge; no plateau in regime 1 (the loss never falls)",
                        (f"regime 2: {np.nanmin(r2):.1f} to {np.nanmax(r2):.1f}, regime 3: {np.nanmin(r3):.1f} to {np.nanmax(r3):.1f} (real time, grid step {step:.2f}); "
                         if r2.size and r3.size else "")
                        + ("non-increasing" if mono_p else "not monotone") + f" in alpha/rho over {int(fin_p.sum())} inits; "
                        + f"{int(np.sum(regp == 1))} collapsing inits " + ("without" if none1 else "with") + " a plateau",
                        bool(mono_p and longer and none1)))
    return checks


def _check_major_time(run: _TrajectoriesRun) -> list[Check]:
    """The time at which the major feature takes the lead falls with alpha/rho in regime 2."""
    d, sa, sw2, seqs = run.plan.d, run.plan.sa, run.sw2, run.seqs
    checks = []
    idx = sorted(seqs)
    # The exact time (event-located, samflow.switches) of the first switch to d.
    t_d = np.array([next((t for t, to in zip(sw2.time[i], sw2.to[i]) if to == d), np.nan) for i in idx])
    a_d = sa[idx]
    fin = np.isfinite(t_d)
    mono = bool(fin.sum() >= 2 and np.all(np.diff(t_d[fin]) <= 0))
    checks.append(Check("trajectories", "l2-SAM depth 2, regime 2: time at which the major feature takes the lead",
                        "decreases with alpha/rho, without bound towards the 1/2 edge",
                        (f"t = {t_d[fin][0]:.3g} at alpha/rho = {a_d[fin][0]:.3f} down to {t_d[fin][-1]:.3g} at {a_d[fin][-1]:.3f}; " if fin.any() else "")
                        + ("monotone" if mono else "not monotone"), mono))
    return checks


def _trajectories_caption(run: _TrajectoriesRun) -> str:
    """The caption, from the plan's mu, rho and plateau thresholds."""
    plan = run.plan
    caption = (
        f"Depth-2 l2-SAM in real time t, one sample {{(mu, +1)}}, mu = {mu_text(plan.mu, short=True)}, rho = {plan.rho:g}, "
        "w(0) = alpha 1. Top: |beta_j(t)| (log), with the switches of the dominant feature dotted; bottom: the loss, "
        f"with the plateau found by samflow.analysis.plateau (the longest stretch within a {plan.rel_band:g} relative "
        f"band that is followed by a fall by {plan.rel_drop:g}) shaded. Columns: regime 1 (every weight shrinks and "
        "collapses to 0 in finite time; the loss rises to log 2 and stays), regime 2 (minor first, major last: the "
        "features take the lead in increasing order of mu while the loss sits on a plateau near log 2, and it falls "
        "once the major feature leads), regime 3 (major first: the plateau is short). With rho small the weights "
        "are of order rho while the features switch, so the loss is still about log 2 then."
    )
    return caption
