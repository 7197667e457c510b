"""Figure 1: direction of GD, l2-SAM, linf-SAM against the max-margin directions (depth1_directions)."""

from __future__ import annotations

from typing import Literal

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from pydantic import Field

from ..analysis import direction_distance, max_margin_direction
from ._context import Context, MethodName, _Strict, _init, _solve
from ._report import Check, FigureResult, _finish, _start, mu_text
from ._draw import _label, _label_plain, _layout_with_legend, _save


# --- figure 1: directions against the max-margin predictors ---------------------


class _DirectionRow(_Strict):
    depth: int = Field(ge=1)
    """Depth L of this row."""
    alpha: float = Field(gt=0)
    """Init scale."""
    rho: float = Field(ge=0)
    """SAM radius."""
    t_min: float = Field(gt=0)
    """First save time (real time)."""
    t1: float = Field(gt=0)
    """Real-time horizon."""
    reference: Literal["l1", "l2"]  # the max-margin direction the flows should tend to
    """The max-margin direction the flows should tend to."""
    tol: float = Field(gt=0)
    """Pass: distance to the reference below this at t1, and falling."""


class DirectionsConfig(_Strict):
    """Schema of `configs/figures/depth1_directions.toml`; see that file for its keys."""

    methods: list[MethodName]
    """The methods drawn."""
    rows: list[_DirectionRow] = Field(min_length=1)
    """One row of panels per entry (`[[rows]]`)."""


def depth1_directions(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 1: distance of beta(t)/||beta|| to the max-margin directions over real time.

    Row 1, depth 1: GD, l2-SAM and linf-SAM tend to the l2 max-margin direction
    (docs/theory.md s.5). Row 2, depth 2: they tend to the l1 max-margin direction (GD;
    l2-SAM as the loss goes to 0). Columns: the single sample and the 4-sample data.

    **Returns:** a `FigureResult` (PNG and PDF written to `out_dir`).
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("depth1_directions", DirectionsConfig)
    n_multi = ctx.common.multi_sample.n
    datasets = [("one sample $\\{(\\mu, +1)\\}$", ctx.single_rows()), (f"{n_multi} samples", ctx.multi())]
    colors = {"gd": "k", "l2": "tab:blue", "linf": "tab:orange", "usam": "tab:green"}
    checks = []
    fig, axes = plt.subplots(len(cfg.rows), 2, figsize=(11, 3.6 * len(cfg.rows)), squeeze=False)
    for i, row in enumerate(cfg.rows):
        ts = ctx.log_times(row.t_min, row.t1)
        other = "l1" if row.reference == "l2" else "l2"
        for j, (dname, data) in enumerate(datasets):
            X, y = np.asarray(data.X), np.asarray(data.y)
            ref = max_margin_direction(X, y, 1 if row.reference == "l1" else 2)
            ref_other = max_margin_direction(X, y, 1 if other == "l1" else 2)
            ax = axes[i, j]
            for m in cfg.methods:
                tr = _solve(ctx, m, data, _init([row.alpha], row.depth, ctx.d), row.rho, ts, clock="t")
                beta = tr.beta[0]
                dist = direction_distance(beta, ref)
                ax.plot(ts, dist, color=colors[m], lw=1.6)
                d_other = direction_distance(beta, ref_other)
                ax.plot(ts, d_other, color=colors[m], lw=0.9, ls=":", alpha=0.8)
                # The claim: the distance falls to the end of the horizon and is small there.
                half = ts >= np.sqrt(ts[0] * ts[-1])
                tail = dist[half]
                falling = bool(np.all(np.diff(tail) <= 1e-12))
                final = float(dist[-1])
                ok = bool(np.isfinite(final) and final < row.tol and falling and final < float(d_other[-1]))
                checks.append(Check(
                    "depth1_directions",
                    f"depth {row.depth}, {_label_plain(m)}, {'one sample' if j == 0 else str(n_multi) + ' samples'}: direction -> l{row.reference[1]} max-margin",
                    f"distance -> 0 (< {row.tol:g} at t = {row.t1:g}, falling)",
                    f"{final:.3g} at t = {row.t1:g} (to l{other[1]}: {float(d_other[-1]):.2f}); "
                    + ("falling" if falling else "not monotone") + " over the last half of log t",
                    ok,
                ))
                if row.depth == 1 and j == 0:
                    # One sample, depth 1: every flow moves beta along mu only, so the
                    # part of beta orthogonal to mu stays alpha * (1 - proj): exact.
                    u = ctx.mu / np.linalg.norm(ctx.mu)
                    perp = beta - (beta @ u)[:, None] * u
                    perp0 = row.alpha * (np.ones(ctx.d) - u.sum() * u)
                    err = float(np.max(np.linalg.norm(perp - perp0, axis=-1)) / np.linalg.norm(perp0))
                    checks.append(Check(
                        "depth1_directions",
                        f"depth 1, one sample, {_label_plain(m)}: beta moves along mu only",
                        "component of beta orthogonal to mu conserved",
                        f"max relative change {err:.1e}",
                        bool(err < 1e-6),
                    ))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("real time $t$")
            ax.set_ylabel(r"$\| \beta/\|\beta\| - \beta^*/\|\beta^*\| \|_2$")
            ax.set_title(f"depth $L={row.depth}$, {dname}" + (f", $\\alpha={row.alpha:g}$, $\\rho={row.rho:g}$"), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            if row.depth == 1:
                # Implicit bias of a linear model is slow: distance ~ c / log t.
                late = ts > 1e2
                c = dist[-1] * np.log(ts[-1])
                ax.plot(ts[late], c / np.log(ts[late]), color="0.5", lw=1.0, ls="--")
            ax.text(0.02, 0.04, f"solid: to $\\ell_{row.reference[1]}$ max-margin, dotted: to $\\ell_{other[1]}$",
                    transform=ax.transAxes, ha="left", va="bottom", fontsize=8.5, color="0.25")
    handles = [Line2D([], [], color=colors[m], lw=1.6, label=_label(m)) for m in cfg.methods]
    handles.append(Line2D([], [], color="0.5", lw=1.0, ls="--", label=r"$c/\log t$ (depth 1)"))
    fig.suptitle("Direction of the predictor against the max-margin directions: "
                 r"depth 1 $\to \ell_2$, depth 2 $\to \ell_1$", fontsize=12)
    _layout_with_legend(fig, handles, ncol=len(handles), inches=0.4, top=1 - 0.35 / fig.get_figheight())
    png = _save(fig, ctx, "depth1_directions")
    caption = (
        "Distance of the normalized predictor beta(t)/||beta(t)|| to the max-margin directions "
        "beta* = argmin ||beta||_p s.t. y_i <beta, x_i> >= 1 (solid: the one the theory predicts; "
        "dotted: the other one), in real time t, for GD, l2-SAM and linf-SAM from w(0) = alpha 1. "
        "Top: depth 1, every flow tends to the l2 max-margin direction (for one sample mu/||mu||), at the slow "
        "rate ~1/log t of implicit bias. Bottom: depth 2, the flows tend to the l1 max-margin direction "
        f"(for one sample e_d, the major feature; for these {n_multi} samples also e_5). Left: one sample "
        f"{{(mu, +1)}}, mu = {mu_text(ctx.mu)}; right: {n_multi} samples of increasing feature scale. "
        f"The one sample is stored as {n_multi} identical rows (same loss) so that both columns share one compilation."
    )
    return _finish(ctx, FigureResult("depth1_directions", "Figure 1: limit directions (depth 1 -> l2, depth 2 -> l1)",
                                     [png], caption, [ctx.config_ref("depth1_directions"), ctx.config_ref("common")], checks), t0)
