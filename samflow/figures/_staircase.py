"""Figure 4: dominant feature over (t, alpha), GD / l2 / linf (staircase)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from pydantic import Field, model_validator

from ..analysis import regime_label, visited_sequence
from ..plots import BLOWN_UP
from ..status import Status
from ._context import Context, MethodName, _Strict, _init, _solve, time_pair_problem
from ._report import Check, FigureResult, _finish, _start, mu_text
from ._draw import _heatmap_panel, _label, _layout_with_legend, _save, _staircase_cmap, _staircase_handles
from ._measure import MISSING, _dominant_with_ties, staircase_ok


# --- figure 4: the staircase heat maps -------------------------------------------


class _StairData(_Strict):
    rho: dict[str, float]  # SAM radius per depth
    """SAM radius per depth, e.g. { "2" = 0.01 }."""
    t1: dict[str, float]  # real-time horizon per depth
    """Real-time horizon per depth."""
    alpha_over_rho: tuple[float, float]  # log grid of alpha / rho
    """The log grid of alpha / rho: [lo, hi]."""


class StaircaseConfig(_Strict):
    """Schema of `configs/figures/staircase.toml`; see that file for its keys."""

    methods: list[MethodName]
    """The methods drawn (one row each)."""
    depths: list[int] = Field(min_length=1)
    """The depths drawn (one column each)."""
    num_alpha: int = Field(ge=2)
    """Rows of each heat map (alpha / rho values)."""
    t_min: float = Field(gt=0)
    """First save time (real time)."""
    single: _StairData
    """The one-sample maps (`[single]`)."""
    multi: _StairData
    """The multi-sample maps (`[multi]`)."""

    @model_validator(mode="after")
    def _t_min_below_horizons(self):
        for part in ("single", "multi"):
            problem = time_pair_problem("t_min", self.t_min, f"{part}.t1", getattr(self, part).t1)
            if problem:
                raise ValueError(problem)
        return self


def staircase(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 4: dominant feature over (real time t, alpha/rho) for GD, l2-SAM and
    linf-SAM, depths 2, 3 and 4 (rows), one sample and 4 samples (two PNGs).

    GD is flat at the major feature d; l2-SAM climbs a staircase from a minor
    feature to d for intermediate alpha/rho (docs/theory.md s.3, s.6).

    **Returns:** a `FigureResult` with two PNGs.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("staircase", StaircaseConfig)
    d = ctx.d
    checks, pngs = [], []
    for key, dname, data in (("single", "one sample", ctx.single_rows()), ("multi", f"{ctx.common.multi_sample.n} samples", ctx.multi())):
        spec: _StairData = getattr(cfg, key)
        a_rel = np.geomspace(*spec.alpha_over_rho, cfg.num_alpha)
        fig, axes = plt.subplots(len(cfg.depths), len(cfg.methods), figsize=(4.3 * len(cfg.methods) + 0.5, 3.3 * len(cfg.depths) + 0.9),
                                 squeeze=False, sharey=True)
        gd_cells = gd_major = 0
        missing: list[int] = []
        blew_up = False  # a row with a pixel after its blow-up (its own colour, not "no value")
        stair, coll, linf_bad, linf_n = [], [], 0, 0
        for i, L in enumerate(cfg.depths):
            rho, t1 = spec.rho[str(L)], spec.t1[str(L)]
            ts = ctx.log_times(cfg.t_min, t1)
            for j, m in enumerate(cfg.methods):
                tr = _solve(ctx, m, data, _init(a_rel * rho, L, d), rho, ts, clock="t")
                dom = _dominant_with_ties(tr.beta)
                ax = axes[i, j]
                img = _heatmap_panel(ax, ts, a_rel, dom, d, tr.status)
                missing += np.asarray(tr.status)[np.any(img == MISSING, axis=-1)].tolist()
                blew_up = blew_up or bool(np.any(img == BLOWN_UP))
                reg = regime_label(tr.beta, tr.status)
                n2 = int(np.sum(reg == 2))
                ax.set_title(f"{_label(m)}, depth $L={L}$, $\\rho={rho:g}$" + (f"\n{n2} rows in regime 2 (staircase)" if m == "l2" else ""), fontsize=9.5)
                if i == len(cfg.depths) - 1:
                    ax.set_xlabel("real time $t$")
                if j == 0:
                    ax.set_ylabel(r"init scale $\alpha/\rho$")
                if m == "gd":
                    info = dom > 0
                    gd_cells += int(info.sum())
                    gd_major += int(np.sum(dom[info] == d))
                elif m == "l2":
                    seqs = [visited_sequence(np.where(r > 0, r, 0)) for r in dom[reg == 2]]
                    n_ok = sum(staircase_ok(s, d) for s in seqs)
                    bad = [s for s in seqs if not staircase_ok(s, d)]
                    stair.append((L, n2, n_ok, bad[:2]))
                    coll.append((L, int(np.sum(tr.status == int(Status.COLLAPSED)))))
                elif m == "linf":
                    above = a_rel > 1.0
                    linf_n += int(above.sum())
                    linf_bad += int(np.sum(reg[above] != 3))
        fig.suptitle(f"Dominant feature over real time, {dname}" + (r" $\{(\mu, +1)\}$, $\mu = (" + f"{ctx.mu[0]:g}, \\ldots, {ctx.mu[-1]:g})$" if key == "single" else " of increasing feature scale")
                     + ": GD flat at the major feature, $\\ell_2$-SAM climbs a staircase", fontsize=11.5)
        _layout_with_legend(fig, _staircase_handles(d, _staircase_cmap(d)[2], missing, blew_up=blew_up), ncol=d + 3,
                            title=r"dominant feature $\arg\max_j |\beta_j(t)|$", top=1 - 0.45 / fig.get_figheight())
        pngs.append(_save(fig, ctx, f"staircase_{key}"))
        checks += _staircase_checks(dname, d, cfg.depths, cfg.methods, (gd_major, gd_cells), stair, coll, (linf_n, linf_bad))
    caption = (
        "Dominant feature argmax_j |beta_j(t)| (colour) over real time t (log) and init scale alpha/rho (log), "
        "w(0) = alpha 1, for GD, l2-SAM and linf-SAM (columns) at depths " + ", ".join(str(L) for L in cfg.depths)
        + f" (rows). staircase_single: one sample {{(mu, +1)}}, mu = {mu_text(ctx.mu)}; staircase_multi: {ctx.common.multi_sample.n} samples "
        f"of increasing feature scale (samflow.datasets.increasing_scale, seed {ctx.common.multi_sample.seed}). rho is small (per depth, in the "
        "panel titles) so that the loss is still about log 2 while the features switch, which keeps the staircase "
        f"at moderate t. GD is flat at the major feature {d}. l2-SAM shows the three regimes: collapse to beta = 0 (grey; "
        f"depths 2 and 4 only, depth 3 never collapses), the staircase 1 -> 2 -> ... -> {d} (minor first, major last) "
        "for intermediate alpha/rho, and major first for large alpha/rho. linf-SAM: coordinates below rho fall to 0 "
        "(even depth) or rise towards rho (odd depth); above rho the major feature wins. White: all |beta_j| tied (a "
        "cell that has not moved from the symmetric init)."
    )
    return _finish(ctx, FigureResult("staircase", f"Figure 4: staircase heat maps (GD, l2-SAM, linf-SAM; depths 2-4; 1 and {ctx.common.multi_sample.n} samples)",
                                     pngs, caption, [ctx.config_ref("staircase"), ctx.config_ref("common")], checks), t0)


def _staircase_checks(dname: str, d: int, depths: list[int], methods: list[str], gd: tuple[int, int],
                      stair: list, coll: list, linf: tuple[int, int]) -> list[Check]:
    """The four checks of one staircase figure from what its panels measured:
    `gd` (cells at d, cells judged), `stair` [(L, regime-2 rows, rows that climb,
    bad sequences)], `coll` [(L, collapsed rows)], `linf` (rows with alpha > rho,
    those not in regime 3). A method not in `methods`, or a claim with nothing to
    judge, gives a check not made (passed None, with a note), never a pass."""
    depths_txt = ", ".join(str(L) for L in depths)
    checks = []
    gd_major, gd_cells = gd
    claim = f"{dname}, GD, depths {depths_txt}: flat at the major feature"
    pred = f"dominant feature = {d} at every (t, alpha) (ties excluded)"
    if "gd" in methods:
        checks.append(Check("staircase", claim, pred, f"{gd_major}/{gd_cells} cells", gd_major == gd_cells and gd_cells > 0))
    else:
        checks.append(Check("staircase", claim, pred, "not run", None, "gd is not in methods"))
    claim = f"{dname}, l2-SAM, depths {depths_txt}: minor first, major last"
    pred = "some alpha/rho in regime 2 at every depth; their dominant feature climbs to d (after a possible initial step-down)"
    claim_c = f"{dname}, l2-SAM: collapse by depth"
    pred_c = "depth 2 and 4 collapse for small alpha/rho; depth 3 never does (dw/dtau = mu w_hat^2 >= 0)"
    if "l2" in methods:
        n_rows = sum(s[1] for s in stair)
        n_good = sum(s[2] for s in stair)
        bad_txt = "; ".join(f"L={s[0]}: {s[3]}" for s in stair if s[3])
        checks.append(Check("staircase", claim, pred,
                            ", ".join(f"L={s[0]}: {s[2]}/{s[1]} rows" for s in stair) + (f" (not monotone: {bad_txt})" if bad_txt else ""),
                            bool(stair) and all(s[1] > 0 for s in stair) and n_good == n_rows))
        exp = {2: True, 3: False, 4: True}
        judged = [(L, c) for L, c in coll if L in exp]
        measured = ", ".join(f"L={L}: {c} collapsed rows" for L, c in coll)
        if judged:
            checks.append(Check("staircase", claim_c, pred_c, measured, all((c > 0) == exp[L] for L, c in judged),
                                "" if set(depths) >= {2, 3, 4} else f"depths {depths_txt} only"))
        else:
            checks.append(Check("staircase", claim_c, pred_c, measured, None, "no depth 2, 3 or 4 in depths"))
    else:
        checks.append(Check("staircase", claim, pred, "not run", None, "l2 is not in methods"))
        checks.append(Check("staircase", claim_c, pred_c, "not run", None, "l2 is not in methods"))
    linf_n, linf_bad = linf
    claim = f"{dname}, linf-SAM: alpha > rho gives the major feature first"
    pred = "regime 3 (rule j* = argmax mu_j (alpha - rho)^(L-2) = d for equal alpha_j)"
    if "linf" not in methods:
        checks.append(Check("staircase", claim, pred, "not run", None, "linf is not in methods"))
    elif linf_n == 0:
        checks.append(Check("staircase", claim, pred, "0 rows with alpha > rho", None, "alpha_over_rho has no value above 1"))
    else:
        checks.append(Check("staircase", claim, pred, f"{linf_n - linf_bad}/{linf_n} rows with alpha > rho", linf_bad == 0))
    return checks
