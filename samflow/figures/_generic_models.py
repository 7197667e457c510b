"""Figure 9: autodiff flows against the hand-written diagonal net (generic_models)."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from pydantic import Field

from ..plots import feature_colors
from ..status import Status
from ._context import Context, _Strict
from ._report import Check, FigureResult, _finish, _start
from ._draw import _label, _layout_with_legend, _save
from ._banded import BandedConfig, _BandedPlan, _banded_plan, _solve_banded


# --- figure 9: any differentiable model, autodiff against the hand-written net -----


class GenericModelsConfig(_Strict):
    """configs/figures/generic_models.toml (data, rho, times and models from banded.toml)."""

    alpha_over_rho: list[float] = Field(min_length=1)  # one column each
    """alpha / rho of each column."""
    beta_tol: float = Field(gt=0)  # pass: autodiff vs hand-written beta, relative
    """Pass: autodiff vs hand-written beta, relative."""
    time_tol: float = Field(gt=0)  # pass: collapse times, relative
    """Pass: collapse times, relative."""
    critical_tol: float = Field(gt=0)  # pass: two-layer collapse point, relative
    """Pass: the two-layer collapse point, relative."""


def _band_means(beta, band) -> np.ndarray:
    a = np.abs(np.asarray(beta))
    return np.stack([a[..., band == k].mean(axis=-1) for k in range(int(band.max()) + 1)], axis=-1)


def generic_models(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 9: flows of any differentiable model (`samflow.models`, autodiff gradient).

    Top row: the depth-2 diagonal network solved by `solve_model` (autodiff)
    against `samflow.solve` (hand-written gradient, docs/theory.md s.1-2), GD and
    l2-SAM, one column per alpha/rho: the same trajectories and collapse times.
    Below: the two-layer linear net and the two-layer linear conv net on the same
    data (configs/figures/banded.toml), with the collapse event of `solve_model`.

    **Returns:** a `FigureResult` (`generic_models.png`).

    **Raises:** `ValueError` for a bad config file.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    plan = _plan(ctx, ctx.config("banded", BandedConfig), ctx.config("generic_models", GenericModelsConfig))
    run = _measure_generic(ctx, plan)
    checks = _check_generic(run)
    png = _draw_generic(ctx, run)
    caption = _generic_caption(run)
    return _finish(ctx, FigureResult("generic_models", "Figure 9: any differentiable model: autodiff flows, two-layer and conv nets",
                                     [png], caption, [ctx.config_ref("generic_models"), ctx.config_ref("banded"), ctx.config_ref("common")], checks), t0)


@dataclasses.dataclass(frozen=True)
class _GenericPlan:
    """generic_models.toml and banded.toml resolved (`_plan`): banded's data, rho, save
    times and nets, the columns alpha/rho and the checks' tolerances."""

    banded: _BandedPlan
    a_rel: np.ndarray  # (m,) alpha/rho, one column each
    alphas: np.ndarray  # (2m,) alpha of each cell: GD (cells 0..m-1), l2-SAM (m..2m-1)
    rhos: np.ndarray  # (2m,) rho of each cell (0: GD)
    beta_tol: float
    time_tol: float
    critical_tol: float


def _plan(ctx: Context, bcfg: BandedConfig, cfg: GenericModelsConfig) -> _GenericPlan:
    """The two configs read once: banded's plan and the columns, cells and tolerances of this figure."""
    banded = _banded_plan(ctx, bcfg)
    a_rel = np.asarray(cfg.alpha_over_rho, dtype=np.float64)
    m = a_rel.size
    alphas = np.concatenate([a_rel, a_rel]) * banded.rho
    rhos = np.concatenate([np.zeros(m), np.full(m, banded.rho)])
    return _GenericPlan(banded, a_rel, alphas, rhos, cfg.beta_tol, cfg.time_tol, cfg.critical_tol)


@dataclasses.dataclass(frozen=True)
class _GenericRun:
    """What `generic_models` measured: GD (cells 0..m-1) and l2-SAM (m..2m-1) per model."""

    plan: _GenericPlan
    sols: dict  # model name -> _solve_banded's arrays


def _measure_generic(ctx: Context, plan: _GenericPlan) -> _GenericRun:
    """Solve the hand-written and the autodiff diagonal net, the two-layer and the conv net, GD and l2-SAM."""
    bp = plan.banded
    names = ["diagonal", "diagonal_autodiff", "two_layer", "conv"]
    sols = {n: _solve_banded(ctx, bp.nets, n, bp.data, plan.alphas, plan.rhos, bp.ts) for n in names}
    return _GenericRun(plan, sols)


def _check_generic(run: _GenericRun) -> list[Check]:
    """Autodiff against hand-written (trajectories, collapse times); the two-layer net's collapse point."""
    plan = run.plan
    data, ts, alphas, sols = plan.banded.data, plan.banded.ts, plan.alphas, run.sols
    m = plan.a_rel.size
    hand, auto = sols["diagonal"], sols["diagonal_autodiff"]
    checks = []
    # Before the collapse, relative to the largest |beta_j| at each time; after it the
    # hand-written state is exactly 0 and the autodiff one within O(capture^2 rho^2).
    before = ~((hand["status"] == int(Status.COLLAPSED))[:, None] & (ts[None, :] >= hand["event_time"][:, None]))
    scale = np.max(np.abs(hand["beta"]), axis=-1)
    rel = np.max(np.abs(auto["beta"] - hand["beta"]), axis=-1) / np.where(scale > 0, scale, 1.0)
    rel_max = float(np.max(np.where(before, rel, 0.0)))
    after_max = float(np.max(np.where(before[..., None], 0.0, np.abs(auto["beta"]))))
    same_status = bool(np.array_equal(hand["status"], auto["status"]))
    checks.append(Check("generic_models", "any model by autodiff: the diagonal network solved by solve_model equals samflow.solve (hand-written gradient)",
                        f"the same trajectories: max_t |beta_auto - beta_hand| / max_j |beta_hand| < {plan.beta_tol:g}, the same statuses",
                        f"{rel_max:.1e} over {2 * m} cells (GD and l2-SAM) x {ts.size} times; |beta_auto| <= {after_max:.0e} after the collapses; "
                        f"statuses {'equal' if same_status else 'differ'}",
                        bool(rel_max < plan.beta_tol and same_status)))
    both = (hand["status"] == int(Status.COLLAPSED)) & (auto["status"] == int(Status.COLLAPSED))
    if both.any():
        trel = np.abs(auto["event_time"][both] - hand["event_time"][both]) / hand["event_time"][both]
        checks.append(Check("generic_models", "l2-SAM collapse of the diagonal network: solve_model's collapse event against samflow.solve's",
                            f"the same collapse time, relative difference < {plan.time_tol:g}",
                            f"t = {', '.join(f'{t:.6g}' for t in hand['event_time'][both])} (hand-written); max relative difference {np.max(trel):.1e}",
                            bool(np.max(trel) < plan.time_tol)))
    else:
        checks.append(Check("generic_models", "l2-SAM collapse of the diagonal network: solve_model's collapse event against samflow.solve's",
                            "the same collapse time", "no alpha/rho of the config collapses", None, "add an alpha/rho below the collapse edge"))
    # The two-layer net does not collapse to theta = 0: dU = v_hat r^T keeps the part of
    # U orthogonal to r (r ~ r(0) while beta is small), so it stops at v = 0, U r = 0,
    # with ||U||_F = alpha sqrt(d - 1) from U(0) = alpha I.
    tl = sols["two_layer"]
    c2 = tl["status"] == int(Status.COLLAPSED)
    if c2.any():
        U, v = tl["theta"]
        Uend, vend = U[c2, -1], v[c2, -1]
        pred = alphas[c2] * np.sqrt(data.d - 1)
        errU = float(np.max(np.abs(np.linalg.norm(Uend, axis=(1, 2)) / pred - 1)))
        vmax = float(np.max(np.linalg.norm(vend, axis=1) / alphas[c2]))
        loss_gap = float(np.max(np.abs(tl["loss"][c2, -1] - np.log(2))))
        checks.append(Check("generic_models", "two-layer linear net, l2-SAM collapse: the flow stops at a critical point of L that is not 0",
                            "v -> 0 and U r -> 0 with ||U||_F = alpha sqrt(d - 1) (the part of U(0) = alpha I orthogonal to r), loss log 2",
                            f"{int(c2.sum())} collapsing inits: ||U||_F / (alpha sqrt(d - 1)) - 1 up to {errU:.1e}, ||v|| / alpha up to {vmax:.0e}, "
                            f"|loss - log 2| up to {loss_gap:.0e}",
                            bool(errU < plan.critical_tol and vmax < plan.critical_tol and loss_gap < 1e-9)))
    return checks


def _draw_generic(ctx: Context, run: _GenericRun) -> str:
    """Band means of |beta_j(t)|, one row per model and one column per alpha/rho; returns the PNG name."""
    bp = run.plan.banded
    band, nb, a_rel, ts, sols = bp.band, bp.nb, run.plan.a_rel, bp.ts, run.sols
    m = a_rel.size
    auto = sols["diagonal_autodiff"]
    rows = [("diagonal", "diagonal net $L=2$\nsamflow.solve (lines),\nsolve_model (markers)"),
            ("two_layer", "two-layer linear net\nsolve_model"), ("conv", "two-layer linear conv net\nsolve_model")]

    def shown(sol, cell, beta):
        # Band means up to the collapse time (after it beta is 0, or within O(capture^2) of it).
        bm = _band_means(beta, band)
        gone = (sol["status"][cell] == int(Status.COLLAPSED)) & (ts > sol["event_time"][cell])
        return np.where(gone[:, None] | (bm <= 0), np.nan, bm)

    fig, axes = plt.subplots(len(rows), m, figsize=(4.3 * m, 3.2 * len(rows)), sharex=True, squeeze=False)
    cols = feature_colors(nb)
    for i, (name, title) in enumerate(rows):
        sol = sols[name]
        for k in range(m):
            ax = axes[i, k]
            for j, (lab, ls, lw) in enumerate((("GD", ":", 1.2), ("l2", "-", 1.7))):
                cell = j * m + k
                bm = shown(sol, cell, sol["beta"][cell])
                for b in range(nb):
                    ax.plot(ts, bm[:, b], ls, color=cols[b], lw=lw)
                if name == "diagonal":
                    am = shown(auto, cell, auto["beta"][cell])
                    every = max(1, ts.size // 16)
                    for b in range(nb):
                        ax.plot(ts[::every], am[::every, b], "o", ms=3.5, mfc="none", color=cols[b])
                if sol["status"][cell] == int(Status.COLLAPSED):
                    ax.axvline(sol["event_time"][cell], color="k", ls="--", lw=0.9)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, alpha=0.25)
            if i == 0:
                ax.set_title(f"$\\alpha/\\rho = {a_rel[k]:g}$", fontsize=10)
            if k == 0:
                ax.set_ylabel(title + "\n" + r"band mean of $|\beta_j(t)|$", fontsize=9)
            if i == len(rows) - 1:
                ax.set_xlabel("real time $t$")
    handles = [Line2D([], [], color=cols[b], lw=1.7, label=f"band {b + 1}" + (" (minor)" if b == 0 else " (major)" if b == nb - 1 else ""))
               for b in range(nb)]
    handles += [Line2D([], [], color="0.3", lw=1.7, label=_label("l2")), Line2D([], [], color="0.3", ls=":", lw=1.2, label=_label("gd")),
                Line2D([], [], color="0.3", ls="none", marker="o", mfc="none", label="solve_model (autodiff), diagonal net"),
                Line2D([], [], color="k", ls="--", lw=0.9, label=f"{_label('l2')} collapse time")]
    fig.suptitle(f"Flows of any differentiable model (autodiff gradient) on banded data, $\\rho = {bp.rho:g}$", fontsize=11.5)
    _layout_with_legend(fig, handles, ncol=4, inches=0.7, top=1 - 0.3 / fig.get_figheight())
    png = _save(fig, ctx, "generic_models")
    return png


def _generic_caption(run: _GenericRun) -> str:
    """The caption, from banded.toml's rho."""
    caption = (
        "samflow.models.solve_model integrates the GD and SAM flows of any model f(theta, x) with the gradient from "
        "autodiff (docs/theory.md s.2), with an l2-SAM collapse event at any critical point of the loss. Data and "
        f"models as in the banded figure (configs/figures/banded.toml, rho = {run.plan.banded.rho:g}); each panel shows the "
        "band means of |beta_j(t)| for GD (dotted) and l2-SAM (solid) at one alpha/rho, a dashed line at the "
        "collapse time. Top row: the depth-2 diagonal network solved by samflow.solve (hand-written gradient, "
        "lines) and by solve_model (autodiff, markers): the same curves and collapse times. Middle: the two-layer "
        "linear net f = <v, U x> from U = alpha I, v = alpha 1: l2-SAM shrinks every band alike and collapses to "
        "v = 0, U r = 0 (not to theta = 0), or follows the major band like GD. Bottom: the two-layer linear conv "
        "net (effective predictor grad_x f): l2-SAM lets the minor band lead before the major one."
    )
    return caption
