"""Figure 2: the linf-SAM limit direction over per-coordinate inits (linf_limit)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from pydantic import Field

from .. import theory
from ..analysis import dominant_index, limit_direction
from ..plots import BLEW_UP_COLOR, BLOWN_UP, MISSING_COLOR, feature_colors, no_value_label, with_blow_up
from ..plots._common import plain_log_labels
from ..solver import Trajectory
from ..status import Status
from ._context import Context, _Strict, _init, _solve
from ._report import Check, FigureResult, _planned_figure
from ._draw import _blow_up_handle, _lin_edges, _save


# --- figure 2: linf-SAM limit direction over per-coordinate inits ---------------


class LinfConfig(_Strict):
    """Schema of `configs/figures/linf_limit.toml`; see that file for its keys."""

    depths: list[int] = Field(min_length=1)
    """Depths of the maps."""
    rho: float = Field(gt=0)
    """The map's radius (the tau flow is scale invariant)."""
    axes: tuple[int, int]  # the two features varied on the map (1-based)
    """The two features varied on the map (1-based)."""
    others: float = Field(ge=0)  # alpha_j / rho of the other features on the map
    """alpha_j / rho of the other features on the map."""
    grid_num: int = Field(ge=2)
    """Map cells per axis."""
    grid_max: float = Field(gt=0)  # alpha_j / rho from 0 to grid_max (cell centres)
    """The map's alpha_j / rho run from 0 to grid_max (cell centres)."""
    tau_min: float = Field(gt=0)
    """First save time (tau)."""
    tau1: dict[str, float]  # horizon per depth (first pass for depth >= 3)
    """Horizon in tau per depth, e.g. { "2" = 60.0, "3" = 1e6 } (first pass for depth >= 3)."""
    approach: float = Field(gt=0, lt=1)  # depth >= 3: last save at 1 - approach of the blow-up time
    """Depth >= 3: the last save at 1 - approach of the blow-up time."""
    n_random: int = Field(ge=1)
    """Random inits on which the limit rule is checked."""
    random_alpha: tuple[float, float]  # alpha_j / rho ~ U(lo, hi)
    """alpha_j / rho of the random inits ~ U(lo, hi)."""
    random_rho: tuple[float, float]  # rho log-uniform in [lo, hi]
    """rho of the random inits, log-uniform in [lo, hi]."""
    seed: int
    """Seed of the random inits."""


def _linf_limit_measured(ctx: Context, alpha, rho, depth: int, ts, approach: float):
    """Measured limit feature of linf-SAM (tau clock) for inits alpha (B, d), radii rho (B,),
    saved at `ts` (the first pass).

    Depth 2: argmax_j |beta_j| at the horizon (0 when beta = 0: every weight slid to 0).
    Depth >= 3: the rescaled flow blows up in finite tau; the limit direction is the
    feature that blows up first. A first pass finds the blow-up time T of each cell;
    the flow is invariant under (w, rho, tau) -> (c w, c rho, tau / c^(L-2)), so a
    second pass from (c alpha, c rho) with c = T^(1/(L-2)) blows up at tau = 1 and is
    saved up to 1 - `approach`: the feature that dominates there is the one that blows
    up first, unless two blow-up times agree to about `approach`. 0 when nothing blows
    up within the horizon (no alpha_j > rho).

    **Returns:** (index (B,), first-pass Trajectory, blow-up time T (B,)).
    """
    data = ctx.single_tau()
    W0 = _init(alpha, depth, ctx.d)
    tr = _solve(ctx, "linf", data, W0, rho, ts, clock="tau")
    if depth == 2:
        ld = limit_direction(tr.beta)
        idx = np.where(np.any(ld != 0, axis=-1), np.argmax(np.abs(ld), axis=-1) + 1, 0)
        idx = np.where(np.all(np.isfinite(ld), axis=-1), idx, -1)
        return idx, tr, np.full(len(rho), np.nan)
    blown = tr.status == int(Status.BLEW_UP)
    T = np.where(blown, tr.event_time, np.nan)
    idx = np.where(blown, -1, 0)
    if blown.any():
        c = T[blown] ** (1.0 / (depth - 2))
        n = ctx.common.n_save
        ts2 = np.concatenate([1.0 - np.geomspace(1.0, approach, n - 1), [2.0]])
        tr2 = _solve(ctx, "linf", data, W0[blown] * c[:, None, None], np.asarray(rho)[blown] * c, ts2, clock="tau")
        dom = dominant_index(tr2.beta)  # -1 after the blow-up
        last = np.max(np.where(dom > 0, np.arange(n), -1), axis=-1)
        second_blew = tr2.status == int(Status.BLEW_UP)
        meas = np.where((last >= 0) & second_blew, np.take_along_axis(dom, np.maximum(last, 0)[:, None], 1)[:, 0], -1)
        idx[blown] = meas
    return idx, tr, T


def _linf_cmap(d: int):
    """(cmap, norm, colors) of the measured limit feature: -2 blew up without a finite save
    (`with_blow_up`, depth 2), -1 not measured (the "no value" colour; below the old norm's
    range it was drawn as 0), 0 none (grey), 1..d features; `colors` from 0."""
    colors = ["#d9d9d9"] + feature_colors(d)
    return (ListedColormap([BLEW_UP_COLOR, MISSING_COLOR] + colors), BoundaryNorm(np.arange(-2.5, d + 1.5), d + 3),
            colors)


def _linf_map_image(L: int, meas_map: np.ndarray, status) -> np.ndarray:
    """The codes a map of depth L draws: the measured limit feature, -1 not measured. At
    depth 2 a cell is measured at its last finite save, so one not measured that blew up
    (status BLEW_UP: before its first save) is drawn as a blow-up (`with_blow_up`). At
    depth >= 3 every measured cell blew up (the blow-up is the measurement): one not
    measured failed in the rescaled second pass and stays "not measured"."""
    return with_blow_up(meas_map, status) if L == 2 else np.asarray(meas_map)


def linf_limit(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 2: limit direction of linf-SAM over per-coordinate inits, depth 2 and 3.

    Top: the measured limit feature over (alpha_a/rho, alpha_b/rho) for two
    features a, b (the others at `others` rho), with the boundaries of the rule
    j* = argmax_{alpha_j > rho} mu_j (alpha_j - rho)^(L-2) (docs/theory.md s.3) drawn as
    dashed lines. Bottom: predicted against measured j* for random inits.

    **Returns:** a `FigureResult`.
    """
    return _planned_figure("linf_limit", "Figure 2: linf-SAM limit direction over per-coordinate inits", LinfConfig,
                           out_dir, quick, config_dir, plan=_plan, measure=_measure_linf, check=_check_linf,
                           draw=_draw_linf, caption=_linf_caption)


@dataclasses.dataclass(frozen=True)
class _LinfPlan:
    """linf_limit.toml resolved (`_plan`): the inits of the map and of the random draw,
    the save times per depth, and the values the checks, the figure and the caption name."""

    mu: np.ndarray  # (d,)
    d: int
    depths: tuple  # of int, the columns
    ts: tuple  # (n_save,) tau save times of the first pass, one array per depth
    approach: float  # depth >= 3: the second pass is saved up to 1 - approach
    rho: float  # the map's radius
    axes: tuple  # (a, b) 1-based features of the map's axes
    others: float  # alpha_j / rho of the other features on the map
    grid_max: float
    g: np.ndarray  # (grid_num,) alpha/rho of the cell centres
    A1: np.ndarray  # (grid_num, grid_num) the map's alpha_a/rho
    alpha_map: np.ndarray  # (G, d)
    n_random: int
    random_alpha: tuple  # alpha_j / rho ~ U(lo, hi)
    random_rho: tuple  # rho log-uniform in [lo, hi]
    rho_r: np.ndarray  # (R,)
    alpha_r: np.ndarray  # (R, d)

    @property
    def ia(self) -> int:
        """0-based feature of the map's first axis."""
        return self.axes[0] - 1

    @property
    def ib(self) -> int:
        """0-based feature of the map's second axis."""
        return self.axes[1] - 1


def _plan(ctx: Context, cfg: LinfConfig) -> _LinfPlan:
    """The config read once: the map's grid and inits, the random inits (seeded), the save times."""
    d = ctx.d
    ia, ib = cfg.axes[0] - 1, cfg.axes[1] - 1
    g = (np.arange(cfg.grid_num) + 0.5) * cfg.grid_max / cfg.grid_num
    A1, A2 = np.meshgrid(g, g, indexing="xy")  # rows: feature b, columns: feature a
    alpha_map = np.full((A1.size, d), cfg.others)
    alpha_map[:, ia] = A1.ravel()
    alpha_map[:, ib] = A2.ravel()
    alpha_map *= cfg.rho
    rng = np.random.default_rng(cfg.seed)
    rho_r = np.exp(rng.uniform(*np.log(cfg.random_rho), size=cfg.n_random))
    alpha_r = rng.uniform(*cfg.random_alpha, size=(cfg.n_random, d)) * rho_r[:, None]
    ts = tuple(ctx.log_times(cfg.tau_min, cfg.tau1[str(L)]) for L in cfg.depths)
    return _LinfPlan(ctx.mu, d, tuple(cfg.depths), ts, cfg.approach, cfg.rho, tuple(cfg.axes), cfg.others, cfg.grid_max,
                     g, A1, alpha_map, cfg.n_random, tuple(cfg.random_alpha), tuple(cfg.random_rho), rho_r, alpha_r)


class _LinfDepth(NamedTuple):
    """One depth of `linf_limit`: the map (G = grid_num^2 inits) and the random inits (R)."""

    L: int
    meas_map: np.ndarray  # (G,) measured limit feature, -1 not measured
    tr_map: Trajectory  # first pass of the map
    pred_map: np.ndarray  # (G,) theory.linf_limit_index
    meas_r: np.ndarray  # (R,)
    tr_r: Trajectory
    T_r: np.ndarray  # (R,) blow-up time of the first pass (nan for depth 2)
    pred_r: np.ndarray  # (R,)


@dataclasses.dataclass(frozen=True)
class _LinfRun:
    """What `linf_limit` measured: its plan and one `_LinfDepth` a depth."""

    plan: _LinfPlan
    depths: list  # of _LinfDepth, in the order of plan.depths


def _measure_linf(ctx: Context, plan: _LinfPlan) -> _LinfRun:
    """The map over (alpha_a, alpha_b) and the random inits, measured and predicted, per depth."""
    mu, alpha_map, alpha_r, rho_r = plan.mu, plan.alpha_map, plan.alpha_r, plan.rho_r
    depths = []
    for L, ts in zip(plan.depths, plan.ts):
        meas_map, tr_map, _ = _linf_limit_measured(ctx, alpha_map, np.full(len(alpha_map), plan.rho), L, ts, plan.approach)
        pred_map = theory.linf_limit_index(mu, alpha=alpha_map, rho=plan.rho, depth=L)
        meas_r, tr_r, T_r = _linf_limit_measured(ctx, alpha_r, rho_r, L, ts, plan.approach)
        pred_r = theory.linf_limit_index(mu, alpha=alpha_r, rho=rho_r[:, None], depth=L)
        depths.append(_LinfDepth(L, meas_map, tr_map, pred_map, meas_r, tr_r, T_r, pred_r))
    return _LinfRun(plan, depths)


def _check_linf(run: _LinfRun) -> list[Check]:
    """Per depth: the map and the random inits against the rule; the slide (depth 2) or blow-up times."""
    plan = run.plan
    mu, d, alpha_r, rho_r = plan.mu, plan.d, plan.alpha_r, plan.rho_r
    checks = []
    for dep in run.depths:
        L, meas_map, tr_map, pred_map, meas_r, tr_r, T_r, pred_r = dep
        agree = float(np.mean(meas_map == pred_map))
        checks.append(Check("linf_limit", f"linf-SAM depth {L}, map over (alpha_{plan.axes[0]}, alpha_{plan.axes[1]}): limit feature follows the rule",
                            "j* = argmax_{alpha_j > rho} mu_j (alpha_j - rho)^(L-2) at every init",
                            f"{int(np.sum(meas_map == pred_map))}/{meas_map.size} inits match", bool(agree == 1.0)))

        # Random per-coordinate inits, random rho.
        n_match = int(np.sum(meas_r == pred_r))
        n_minor = int(np.sum((pred_r > 0) & (pred_r < d)))
        checks.append(Check("linf_limit", f"linf-SAM depth {L}, {plan.n_random} random inits alpha_j/rho ~ U{tuple(plan.random_alpha)}, rho log-uniform in {tuple(plan.random_rho)}",
                            f"limit feature = rule j* ({n_minor} of them predict a feature other than {d}, {int(np.sum(pred_r == 0))} predict none)",
                            f"{n_match}/{plan.n_random} match", bool(n_match == plan.n_random)))
        if L == 2:
            # Weights below rho reach 0 at tau* = ln(rho / (rho - alpha_j)) / mu_j and slide.
            below = alpha_r < rho_r[:, None]
            tz = theory.linf_zero_time(mu, alpha=alpha_r, rho=rho_r[:, None], depth=2)
            st = tr_r.slide_time[:, 0, :]
            rel = np.abs(st[below] - tz[below]) / tz[below]
            slid = np.isfinite(st[below])
            # Judged on the weights below rho only: none drawn below rho is no evidence (not a pass).
            rel_max = float(np.max(rel)) if below.any() and slid.all() else float("nan")
            checks.append(Check("linf_limit", "linf-SAM depth 2: a weight below rho reaches 0 and slides (Filippov)",
                                "at tau* = ln(rho/(rho - alpha_j))/mu_j, then stays at 0",
                                f"{int(slid.sum())}/{int(below.sum())} weights slid; max rel. error of tau* {rel_max:.1e}",
                                bool(below.any() and slid.all() and rel_max < 1e-6)))
        else:
            tb = np.min(theory.linf_blowup_time(mu, alpha=alpha_r, rho=rho_r[:, None], depth=L), axis=-1)
            has = np.isfinite(tb)
            rel = np.abs(T_r[has] - tb[has]) / tb[has]
            no_blow_ok = bool(np.all(~np.isfinite(T_r[~has])))
            checks.append(Check("linf_limit", f"linf-SAM depth {L}: finite-time blow-up in tau",
                                "first blow-up at min_j (alpha_j - rho)^-(L-2) / ((L-2) mu_j); none if no alpha_j > rho",
                                f"max rel. error {np.max(rel) if has.any() else float('nan'):.1e} over {int(has.sum())} cells; "
                                + ("no blow-up where none predicted" if no_blow_ok else "blow-up where none predicted"),
                                bool(has.any() and np.max(rel) < 1e-5 and no_blow_ok)))
    return checks


def _draw_linf(ctx: Context, run: _LinfRun) -> str:
    """Top: the measured map with the rule's boundaries; bottom: the confusion of the random inits; returns the PNG name."""
    plan = run.plan
    mu, d, ia, ib, g, A1 = plan.mu, plan.d, plan.ia, plan.ib, plan.g, plan.A1
    cmap, norm, colors = _linf_cmap(d)
    unmeasured: list[str] = []
    fig, axes = plt.subplots(2, len(plan.depths), figsize=(5.6 * len(plan.depths), 10), squeeze=False,
                             gridspec_kw={"height_ratios": [1.15, 1]})
    fine = np.linspace(1e-3, plan.grid_max, 400)
    shown: set[int] = set()
    F1, F2 = np.meshgrid(fine, fine, indexing="xy")
    for k, dep in enumerate(run.depths):
        L, meas_map, tr_map, pred_map, meas_r, tr_r, T_r, pred_r = dep
        img = _linf_map_image(L, meas_map, tr_map.status)
        shown |= {int(v) for v in np.unique(img)}
        if np.any(img == -1):
            unmeasured.append(f"depth {L}: " + (no_value_label(np.asarray(tr_map.status)[img == -1])[len("no value ("):-1] if L == 2
                                                 else "the rescaled second pass did not reach the blow-up"))
        agree = float(np.mean(meas_map == pred_map))
        ax = axes[0, k]
        ax.pcolormesh(_lin_edges(g), _lin_edges(g), img.reshape(A1.shape), cmap=cmap, norm=norm, rasterized=True)
        fa = np.full((F1.size, d), plan.others * plan.rho)
        fa[:, ia], fa[:, ib] = F1.ravel() * plan.rho, F2.ravel() * plan.rho
        pred_fine = theory.linf_limit_index(mu, alpha=fa, rho=plan.rho, depth=L).reshape(F1.shape)
        ax.contour(F1, F2, pred_fine, levels=np.arange(0.5, d), colors="k", linestyles="--", linewidths=1.4)
        for lab in np.unique(pred_fine):
            ys, xs = np.nonzero(pred_fine == lab)
            if ys.size > 400:
                cy, cx = np.median(ys), np.median(xs)
                ax.text(fine[int(cx)], fine[int(cy)], "rule: " + ("0" if lab == 0 else f"$e_{{{lab}}}$"),
                        ha="center", va="center", fontsize=10, color="w" if lab in (1, 2) else "k",
                        bbox=dict(boxstyle="round", fc="none", ec="none"))
        ax.set_xlabel(rf"$\alpha_{{{plan.axes[0]}}}/\rho$ (init of feature {plan.axes[0]}, $\mu_{{{plan.axes[0]}}}={mu[ia]:g}$)")
        ax.set_ylabel(rf"$\alpha_{{{plan.axes[1]}}}/\rho$ (init of feature {plan.axes[1]}, $\mu_{{{plan.axes[1]}}}={mu[ib]:g}$)")
        ax.set_title(f"depth $L={L}$: measured limit feature (colour) vs rule (dashed)\n"
                     f"other $\\alpha_j = {plan.others:g}\\rho$; agreement {100 * agree:.1f}% of {meas_map.size} inits", fontsize=10)
        ax.set_aspect("equal")
        n_match = int(np.sum(meas_r == pred_r))
        # Confusion of predicted vs measured for the random inits.
        ax = axes[1, k]
        M = np.zeros((d + 1, d + 2), dtype=int)  # rows: predicted 0..d, cols: measured -1..d
        for p, m in zip(pred_r, meas_r):
            M[p, int(m) + 1] += 1
        ax.imshow(M[:, 1:], cmap="Blues", origin="lower", aspect="auto")
        for (i, j), v in np.ndenumerate(M[:, 1:]):
            if v:
                ax.text(j, i, str(v), ha="center", va="center", fontsize=9, color="k" if v < M.max() * 0.6 else "w")
        ax.set_xticks(range(d + 1), ["0"] + [str(j) for j in range(1, d + 1)])
        ax.set_yticks(range(d + 1), ["0"] + [str(j) for j in range(1, d + 1)])
        ax.set_xlabel("measured limit feature (0: none)")
        ax.set_ylabel(r"predicted $j^*$ (0: none)")
        extra = f", {int(M[:, 0].sum())} unmeasured" if M[:, 0].sum() else ""
        ax.set_title(f"depth $L={L}$, {plan.n_random} random inits: {n_match} on the diagonal{extra}", fontsize=10)
    handles = [Patch(color=colors[0], label="0: no limit feature (depth 2: $\\beta \\to 0$; depth 3: nothing blows up)")]
    handles += [Patch(color=colors[j], label=f"feature {j}" + (" (minor)" if j == 1 else " (major)" if j == d else ""))
                for j in range(1, d + 1) if j in shown]
    if BLOWN_UP in shown:
        handles.append(_blow_up_handle())
    if unmeasured:
        handles.append(Patch(color=MISSING_COLOR, label="no value: not measured (" + "; ".join(unmeasured) + ")"))
    handles.append(Line2D([], [], color="k", ls="--", label="boundaries of the rule"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=9, frameon=False, bbox_to_anchor=(0.5, -0.04))
    fig.suptitle(r"$\ell_\infty$-SAM: limit direction $e_{j^*}$, $j^* = \arg\max_{\alpha_j > \rho}\, \mu_j (\alpha_j - \rho)^{L-2}$"
                 f", $\\mu = ({', '.join(f'{m:g}' for m in mu)})$", fontsize=12)
    plain_log_labels(fig)  # before the layout: it lays out the tick labels
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    png = _save(fig, ctx, "linf_limit")
    return png


def _linf_caption(run: _LinfRun) -> str:
    """The caption, from the plan's axes, rho, approach and random draw."""
    plan = run.plan
    caption = (
        f"linf-SAM in the rescaled clock tau, one sample {{(mu, +1)}}, per-coordinate inits alpha_j. Top: the "
        f"measured limit feature (colour) over (alpha_{plan.axes[0]}/rho, alpha_{plan.axes[1]}/rho), the other "
        f"features starting at {plan.others:g} rho, rho = {plan.rho:g}; dashed lines are the boundaries of the rule "
        "j* = argmax over {j : alpha_j > rho} of mu_j (alpha_j - rho)^(L-2) (docs/theory.md s.3). Depth 2: the fastest "
        "exponential among the coordinates above rho wins (the major feature whenever alpha_d > rho); depth 3: the "
        "first coordinate to blow up wins, so a minor feature with a larger head start beats the major one. "
        "Measurement: depth 2, argmax |beta_j| at the horizon; depth 3, the dominant feature just before the "
        "blow-up (a second pass rescaled so that each cell blows up at tau = 1, saved up to 1 - "
        f"{plan.approach:g}). Bottom: predicted against measured j* for {plan.n_random} random inits "
        f"alpha_j/rho ~ U{tuple(plan.random_alpha)} with rho log-uniform in {tuple(plan.random_rho)}."
    )
    return caption
