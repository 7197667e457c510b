"""Figure 8: dominant band on banded data, diagonal, two-layer and conv nets (banded_heatmaps)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
import jax.numpy as jnp
from pydantic import Field, model_validator

from .. import theory
from ..analysis import band_dominance, visited_sequence
from ..datasets import Dataset, banded
from ..models import Model, diagonal_network, linear_conv, solve_model, two_layer_linear
from ..plots import BLEW_UP_COLOR, BLOWN_UP, MISSING_COLOR, feature_colors, no_value_label, with_blow_up
from ..status import FAILED_STATUSES, Status
from ._context import Context, SETTINGS, _LogAxis, _Strict, _init, _solve
from ._report import Check, FigureResult, _planned_figure
from ._draw import _blow_up_handle, _label, _layout_with_legend, _log_edges, _save


# --- figure 8: banded data, the diagonal net and two non-diagonal nets --------------


class _BandedDataSpec(_Strict):
    """`samflow.datasets.banded(n, d, seed, n_bands=..., spread=...)`."""

    n: int = Field(ge=1)
    """Number of samples."""
    d: int = Field(ge=2)
    """Number of coordinates."""
    seed: int
    """Seed of the data."""
    n_bands: int = Field(ge=2)
    """Number of bands of features."""
    spread: float = Field(ge=0)
    """Log-spread of the magnitudes."""


class BandedConfig(_Strict):
    """configs/figures/banded.toml (also read by `generic_models`)."""

    data: _BandedDataSpec
    """The banded data (`samflow.datasets.banded`)."""
    rho: float = Field(gt=0)
    """The SAM radius of the heat maps."""
    alpha_over_rho: _LogAxis  # rows of the heat maps
    """Rows of the heat maps: alpha / rho, log-spaced."""
    t_min: float = Field(gt=0)
    """First save time (real time)."""
    t1: float = Field(gt=0)
    """Real-time horizon."""
    mark_tol: float = Field(gt=0)  # rows within this relative distance of the band-first mark may start either way
    """Rows within this relative distance of the band-first mark may start either way."""
    two_layer_width: int = Field(ge=1)  # k: U is (k, d); k >= d so that U(0) = alpha I gives beta(0) = alpha^2 1
    """Width k of the two-layer net (k >= d, so that U(0) = alpha I gives beta(0) = alpha^2 1)."""
    conv_channels: int = Field(ge=1)
    """Channels of the linear conv net."""
    conv_kernel: int = Field(ge=1)
    """Kernel size of the linear conv net."""

    @model_validator(mode="after")
    def _check(self):
        if self.two_layer_width < self.data.d:
            raise ValueError(f"two_layer_width must be >= data.d = {self.data.d} (U(0) = alpha I), got {self.two_layer_width}")
        if self.conv_kernel > self.data.d:
            raise ValueError(f"conv_kernel must be <= data.d = {self.data.d}, got {self.conv_kernel}")
        return self


# The models of the banded figures, all from inits with beta(0) proportional to 1
# (every band equal at the start, as the diagonal net's alpha^2 1), so that the
# dominant band measures what was learned, not the draw of a random init.
BANDED_MODELS = ("diagonal", "two_layer", "conv")
_MODEL_TITLES = {
    "diagonal": "diagonal net $L=2$",
    "diagonal_autodiff": "diagonal net $L=2$ (autodiff)",
    "two_layer": "two-layer linear net",
    "conv": "two-layer linear conv net",
}


@dataclasses.dataclass(frozen=True)
class _Nets:
    """The sizes of the two non-diagonal nets (banded.toml)."""

    two_layer_width: int  # k: U is (k, d)
    conv_channels: int
    conv_kernel: int


@dataclasses.dataclass(frozen=True)
class _BandedPlan:
    """banded.toml resolved (`_banded_plan`; `generic_models` reads it too): the data and
    its bands, rho, the rows and save times of the maps, the nets' sizes, the checks' tolerance."""

    data: Dataset
    band: np.ndarray  # (d,) 0-based band of each coordinate
    nb: int  # number of bands
    mu: np.ndarray  # (d,) mean_i y_i x_i
    seed: int  # of the data
    spread: float  # of the data
    rho: float
    a_rel: np.ndarray  # (na,) alpha / rho, the rows of the maps
    t1: float
    ts: np.ndarray  # (n_save,) real save times
    mark_tol: float
    nets: _Nets


def _banded_plan(ctx: Context, cfg: BandedConfig) -> _BandedPlan:
    """The config read once: the banded data (`samflow.datasets.banded`), the grid, the save times, the nets."""
    s = cfg.data
    data, band = banded(s.n, s.d, s.seed, n_bands=s.n_bands, spread=s.spread)
    nb = int(band.max()) + 1
    mu = np.mean(np.asarray(data.y)[:, None] * np.asarray(data.X), axis=0)  # r(beta = 0) / ell'(0)
    return _BandedPlan(data, band, nb, mu, s.seed, s.spread, cfg.rho, cfg.alpha_over_rho.values(), cfg.t1,
                       ctx.log_times(cfg.t_min, cfg.t1), cfg.mark_tol,
                       _Nets(cfg.two_layer_width, cfg.conv_channels, cfg.conv_kernel))


def _generic_model(name: str, d: int, nets: _Nets) -> tuple[Model, Callable]:
    """The `samflow.models` model on d coordinates and its init alpha -> theta(0) (deterministic)."""
    if name == "diagonal_autodiff":
        m = diagonal_network(2, d)
        return m, lambda a: m.init(a)
    if name == "two_layer":
        m = two_layer_linear(d, nets.two_layer_width)
        return m, lambda a: m.init(a, seed=None)  # U = alpha I, v = alpha 1
    if name == "conv":
        m = linear_conv(nets.conv_channels, nets.conv_kernel, d)
        return m, lambda a: m.init(a, seed=None)  # w = alpha 1, v = alpha 1
    raise ValueError(f"internal: no generic model {name!r}")


def _solve_banded(ctx: Context, nets: _Nets, name: str, data: Dataset, alpha, rho, ts) -> dict:
    """l2-SAM (GD where rho = 0: eps = 0 * G/||G|| = 0 exactly) for cells alpha (B,), rho (B,).

    `diagonal` is the hand-written `samflow.solve` (via `_solve`); the others are
    `samflow.models.solve_model` (autodiff), in chunks of `chunk` cells so that
    every call of a run shares one compilation per model.

    **Returns:** NumPy arrays: beta (B, n_save, d), loss (B, n_save), status (B,),
    event_time (B,), and theta (a pytree with leading (B, n_save), generic only).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    rho = np.broadcast_to(np.asarray(rho, dtype=np.float64), alpha.shape)
    if name == "diagonal":
        tr = _solve(ctx, "l2", data, _init(alpha, 2, data.d), rho, ts, clock="t")
        return {"beta": tr.beta, "loss": tr.loss, "status": tr.status, "event_time": tr.event_time, "theta": None}
    model, init = _generic_model(name, data.d, nets)
    B, c = alpha.size, ctx.common.chunk
    idx = np.minimum(np.arange(B + (-B) % c), B - 1)
    parts = []
    for k in range(0, idx.size, c):
        sel = idx[k:k + c]
        theta0 = jax.vmap(init)(jnp.asarray(alpha[sel]))
        tr = solve_model("l2", model, theta0, rho[sel], data, ts, SETTINGS, theta0_batched=True)
        parts.append(jax.tree_util.tree_map(np.asarray, (tr.beta, tr.loss, tr.status, tr.event_time, tr.theta)))
    beta, loss, status, event_time, theta = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs)[:B], *parts)
    return {"beta": beta, "loss": loss, "status": status, "event_time": event_time, "theta": theta}


def _band_map(sol: dict, ts, band) -> np.ndarray:
    """Dominant band (alpha, time): 1..n_bands, 0 from the collapse time on, `BLOWN_UP`
    (-2) after a blow-up (status BLEW_UP, `with_blow_up`), -1 without a value."""
    dom = band_dominance(sol["beta"], band)
    status = np.asarray(sol["status"])
    gone = (status == int(Status.COLLAPSED))[:, None] & (np.asarray(ts)[None, :] >= sol["event_time"][:, None])
    return with_blow_up(np.where(gone, 0, dom), status)


def _band_cmap(nb: int):
    colors = [BLEW_UP_COLOR, MISSING_COLOR, "#bdbdbd"] + feature_colors(nb)  # blew up, no value, collapsed, bands 1..nb
    return ListedColormap(colors), BoundaryNorm(np.arange(-2.5, nb + 1.5), len(colors)), colors


def _range_text(x) -> str:
    x = np.asarray(x)
    return f"[{x.min():.3f}, {x.max():.3f}]" if x.size else "none"


def banded_heatmaps(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 8: dominant band of the learned predictor over (real time t, alpha/rho) on
    banded data, GD against l2-SAM, for the diagonal net and two non-diagonal nets.

    Data `samflow.datasets.banded` (bands of increasing intensity, band 1 minor).
    Models (`samflow.models`): the depth-2 diagonal network (hand-written
    `samflow.solve`), the two-layer linear net f = <v, U x> and the two-layer
    linear conv net (autodiff `solve_model`, its effective predictor beta =
    grad_x f), all from inits with beta(0) proportional to 1. Each pixel is
    `samflow.analysis.band_dominance` of beta(t) (docs/theory.md s.5, s.6); grey from
    the collapse time on. Checks: GD is flat at the major band; the diagonal
    net's first band is `theory.l2_first_band` and its band climbs in order
    between the collapse edge and `theory.l2_major_band_mark`; what the two
    non-diagonal nets do.

    **Returns:** a `FigureResult` (one PNG and PDF, `banded.png`).

    **Raises:** `ValueError` for a bad config file.
    """
    return _planned_figure("banded", "Figure 8: banded data, dominant band over time, three models", BandedConfig,
                           out_dir, quick, config_dir, plan=_banded_plan, measure=_measure_banded, check=_check_banded,
                           draw=_draw_banded, caption=_banded_caption)


@dataclasses.dataclass(frozen=True)
class _BandedRun:
    """What `banded_heatmaps` measured: its plan and the dominant-band maps."""

    plan: _BandedPlan
    maps: dict  # model -> (GD, l2-SAM) dominant band (na, n_save), see _band_map
    sols: dict  # model -> the l2-SAM rows of _solve_banded (no theta)
    band_missing: list  # statuses of the rows with a cell without a value
    mark: float  # theory.l2_major_band_mark
    shrink: float  # the all-shrink alpha/rho mark


def _measure_banded(ctx: Context, plan: _BandedPlan) -> _BandedRun:
    """Solve every model of BANDED_MODELS for GD and l2-SAM over alpha/rho; the dominant-band maps."""
    data, band, mu, a_rel, ts = plan.data, plan.band, plan.mu, plan.a_rel, plan.ts
    na = a_rel.size
    # One batch per model: rows 0..na-1 GD (rho = 0), na.. l2-SAM at rho.
    alphas = np.concatenate([a_rel, a_rel]) * plan.rho
    rhos = np.concatenate([np.zeros(na), np.full(na, plan.rho)])
    maps, sols = {}, {}
    band_missing: list[int] = []
    for name in BANDED_MODELS:
        sol = _solve_banded(ctx, plan.nets, name, data, alphas, rhos, ts)
        dom = _band_map(sol, ts, band)
        band_missing += np.asarray(sol["status"])[np.any(dom == -1, axis=-1)].tolist()
        maps[name] = (dom[:na], dom[na:])
        sols[name] = {k: (None if v is None else v[na:]) for k, v in sol.items() if k != "theta"}
    mark = theory.l2_major_band_mark(mu, band=band)
    shrink = float(theory.l2_alpha_marks(np.sort(mu), rho=1.0).all_shrink)
    return _BandedRun(plan, maps, sols, band_missing, mark, shrink)


def _draw_banded(ctx: Context, run: _BandedRun) -> str:
    """The 2 x 3 heat maps (GD top, l2-SAM bottom), the mark and the legend; returns the PNG name."""
    plan = run.plan
    data, nb, a_rel, ts, maps, band_missing, mark = plan.data, plan.nb, plan.a_rel, plan.ts, run.maps, run.band_missing, run.mark
    fig, axes = plt.subplots(2, len(BANDED_MODELS), figsize=(4.6 * len(BANDED_MODELS), 7.6), sharex=True, sharey=True,
                             squeeze=False)
    cmap, norm, colors = _band_cmap(nb)
    for j, name in enumerate(BANDED_MODELS):
        for i, (mname, dom) in enumerate(zip(("gd", "l2"), maps[name])):
            ax = axes[i, j]
            ax.pcolormesh(_log_edges(ts), _log_edges(a_rel), dom, cmap=cmap, norm=norm, rasterized=True)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{_label(mname)}, {_MODEL_TITLES[name]}", fontsize=10)
            if i == 1:
                ax.set_xlabel("real time $t$")
            if j == 0:
                ax.set_ylabel(r"init scale $\alpha/\rho$")
            if name == "diagonal" and mname == "l2":
                ax.axhline(mark, color="k", ls="--", lw=1.3)
                ax.text(ts[-1] / 1.5, mark * 1.04, f"band-{nb}-first mark {mark:.3f}", color="k", fontsize=8, va="bottom", ha="right",
                        bbox=dict(boxstyle="round,pad=0.15", fc="w", ec="none", alpha=0.8))
    handles = [Patch(facecolor=colors[3 + b], label=f"band {b + 1}" + (" (minor)" if b == 0 else " (major)" if b == nb - 1 else ""))
               for b in range(nb)]
    handles.append(Patch(facecolor=colors[2], label="collapsed (critical point of $L$, $\\beta = 0$)"))
    if any(np.any(dom == BLOWN_UP) for pair in maps.values() for dom in pair):
        handles.append(_blow_up_handle())
    handles += [Patch(facecolor=colors[1], label=no_value_label(band_missing)),
                Line2D([], [], color="k", ls="--", label=r"theory: band-$%d$-first mark (l2_major_band_mark)" % nb)]
    fig.suptitle(f"Dominant band of the predictor on banded data (n = {data.n}, d = {data.d}, {nb} bands), "
                 f"$\\rho = {plan.rho:g}$: GD (top) vs $\\ell_2$-SAM (bottom)", fontsize=11.5)
    _layout_with_legend(fig, handles, ncol=3, inches=0.75, top=1 - 0.35 / fig.get_figheight(),
                        title=r"dominant band: largest mean $|\beta_j|$ over the band")
    png = _save(fig, ctx, "banded")
    return png


def _check_banded(run: _BandedRun) -> list[Check]:
    """The checks of the banded figure: GD, the collapse edge, the diagonal net, the two other nets."""
    maps, sols = run.maps, run.sols
    # l2-SAM, row by row: collapsed, climbing (starts below the major band, ends at
    # it), still climbing at t1, or major first.
    rows = {}
    for name in BANDED_MODELS:
        dom, st = maps[name][1], sols[name]["status"]
        coll = st == int(Status.COLLAPSED)
        seqs = [visited_sequence(np.where(r > 0, r, 0)) for r in dom]
        rows[name] = (coll, seqs)
    return (_check_banded_gd(run) + _check_banded_collapse(run, rows) + _check_banded_diagonal(run, rows)
            + _check_banded_nondiagonal(run, rows))


def _check_banded_gd(run: _BandedRun) -> list[Check]:
    """GD: the major band leads at every (t, alpha/rho) for every model."""
    maps, nb = run.maps, run.plan.nb
    checks = []
    gd_txt, gd_ok = [], True
    for name in BANDED_MODELS:
        dom = maps[name][0]
        frac = float(np.mean(dom == nb))
        gd_ok &= frac == 1.0
        gd_txt.append(f"{name} {frac:.3f} ({int(np.sum(dom == nb))}/{dom.size})")
    checks.append(Check("banded", f"banded data, GD, all {len(BANDED_MODELS)} models: the major band dominates",
                        f"band {nb} at every (t, alpha/rho): fraction 1 of the cells",
                        "; ".join(gd_txt), gd_ok))
    return checks


def _check_banded_collapse(run: _BandedRun, rows: dict) -> list[Check]:
    """l2-SAM: no failed cell; collapse exactly for the smallest alpha/rho, in every model."""
    sols, a_rel = run.sols, run.plan.a_rel
    checks = []
    st_txt, st_ok = [], True
    for name in BANDED_MODELS:
        st = sols[name]["status"]
        coll = rows[name][0]
        # A cell that stopped at a nonzero critical point (CRITICAL) ended normally; only
        # the statuses of FAILED_STATUSES mean the solver lost the cell.
        bad = int(np.sum(np.isin(st, [int(s) for s in FAILED_STATUSES])))
        contiguous = bool(np.all(coll[: int(coll.sum())]))  # the collapsing rows are the smallest alphas
        st_ok &= bool(bad == 0 and coll.any() and contiguous)
        st_txt.append(f"{name}: {int(coll.sum())} collapse, alpha/rho <= {a_rel[coll].max() if coll.any() else float('nan'):.3f}"
                      + ("" if contiguous else " (not contiguous)") + (f", {bad} failed" if bad else ""))
    checks.append(Check("banded", "banded data, l2-SAM, every model: small inits collapse to a critical point of L (collapse event, also for the autodiff models)",
                        "each cell finished or collapsed (no max-steps); collapse exactly for alpha/rho below an edge",
                        "; ".join(st_txt), st_ok))
    return checks


def _check_banded_diagonal(run: _BandedRun, rows: dict) -> list[Check]:
    """l2-SAM, diagonal net: the first band (theory.l2_first_band) and the climb 1 -> nb below the major-first mark."""
    plan = run.plan
    band, nb, mu, a_rel, ts, maps, mark, shrink = plan.band, plan.nb, plan.mu, plan.a_rel, plan.ts, run.maps, run.mark, run.shrink
    na = a_rel.size
    checks = []
    # The diagonal net against the single-sample theory with mu = mean_i y_i x_i.
    coll, seqs = rows["diagonal"]
    live = ~coll
    # The marks hold at t -> 0; the first save is at t_min, so inits within mark_tol of
    # a mark (where two bands start at nearly the same rate) may show either band.
    m1 = np.array([mu[band == b].mean() for b in range(nb)])
    m2 = np.array([(mu[band == b] ** 2).mean() for b in range(nb)])
    ties = (m2[:, None] - m2[None, :]) / (np.sqrt(2.0) * np.linalg.norm(mu) * (m1[:, None] - m1[None, :] + np.eye(nb)))
    ties = ties[np.triu_indices(nb, 1)]
    near = np.any(np.abs(a_rel[:, None] / ties[None, :] - 1) < plan.mark_tol, axis=1)
    first = np.array([s[0] if s else 0 for s in seqs])
    pred_first = theory.l2_first_band(mu, a=a_rel, band=band)
    judged = live & ~near
    n_eq = int(np.sum(first[judged] == pred_first[judged]))
    checks.append(Check("banded", "banded data, l2-SAM, diagonal net: the first dominant band (inits that do not collapse)",
                        "argmax_b mean_{j in b} mu_j (1 - mu_j / (sqrt 2 a ||mu||)), mu = mean_i y_i x_i, a = alpha/rho (theory.l2_first_band)",
                        f"{n_eq}/{int(judged.sum())} inits match (first save t = {ts[0]:g}; {int((live & near).sum())} within "
                        f"{100 * plan.mark_tol:g}% of a mark not judged)", bool(n_eq == int(judged.sum()) and judged.any())))
    incr = [all(b > a for a, b in zip(s, s[1:])) for s in seqs]
    climb = np.array([live[i] and incr[i] and len(s) > 1 and s[-1] == nb for i, s in enumerate(seqs)])
    full = np.array([climb[i] and seqs[i] == list(range(1, nb + 1)) for i in range(na)])
    unfinished = np.array([live[i] and incr[i] and bool(s) and s[-1] < nb for i, s in enumerate(seqs)])
    major = np.array([live[i] and s == [nb] for i, s in enumerate(seqs)])
    edge_c = float(a_rel[coll].max()) if coll.any() else float("nan")
    edge_m = float(a_rel[major].min()) if major.any() else float("nan")
    order_ok = bool(np.all(coll | climb | unfinished | major))
    dm = maps["diagonal"][1]
    minor_cells = int(np.sum((dm >= 1) & (dm < nb)))
    below, above = a_rel < mark * (1 - plan.mark_tol), a_rel > mark * (1 + plan.mark_tol)
    between = (a_rel > edge_c) & below
    ok = bool(full.any() and order_ok and np.all((climb | unfinished)[between]) and np.all(major[above])
              and edge_c < a_rel[climb].min() and a_rel[climb].max() < mark * (1 + plan.mark_tol) and shrink < edge_c)
    checks.append(Check("banded", f"banded data, l2-SAM, diagonal net: the dominant band climbs minor -> major (1 -> ... -> {nb}) between the collapse edge and the major-first mark",
                        f"bands become dominant in increasing order for alpha/rho between the collapse edge (above the all-shrink mark {shrink:.3f}) "
                        f"and the band-{nb}-first mark {mark:.3f} (theory.l2_major_band_mark; +-{100 * plan.mark_tol:g}%); band {nb} from the start above it",
                        f"{int(climb.sum())}/{na} rows ({climb.mean():.2f}) climb to band {nb}, alpha/rho in {_range_text(a_rel[climb])}, "
                        f"{int(full.sum())} of them through every band 1 -> {nb}; {int(unfinished.sum())} still climbing at t = {plan.t1:g} "
                        f"(alpha/rho {_range_text(a_rel[unfinished])}); collapse up to {edge_c:.3f}, major first from {edge_m:.3f}; "
                        f"a minor band leads in {minor_cells}/{dm.size} ({minor_cells / dm.size:.2f}) of the (t, alpha) cells"
                        + ("" if order_ok else "; some rows not monotone"), ok))
    return checks


def _check_banded_nondiagonal(run: _BandedRun, rows: dict) -> list[Check]:
    """l2-SAM: no minor-first phase in the two-layer net; band 1 then band nb, no middle band, in the conv net."""
    nb, a_rel, maps = run.plan.nb, run.plan.a_rel, run.maps
    na = a_rel.size
    checks = []
    # The two-layer net f = <v, U x>: dbeta/dt = r (v_hat . v) + U^T U_hat r with a
    # shrinkage -rho |r|^2 beta / ||G|| equal for every coordinate: no minor first.
    coll2, _ = rows["two_layer"]
    d2 = maps["two_layer"][1]
    live_cells = d2[~coll2]
    f2 = float(np.mean(live_cells == nb)) if live_cells.size else float("nan")
    last = [s[-1] if s else 0 for s, c in zip(rows["two_layer"][1], coll2) if c]
    checks.append(Check("banded", "banded data, l2-SAM, two-layer linear net (not diagonal): no minor-first phase",
                        f"band {nb} at every (t, alpha) of the inits that do not collapse: the l2 perturbation shrinks beta by "
                        "-rho |r|^2 beta / ||G||, the same for every coordinate",
                        f"fraction {f2:.3f} of {live_cells.size} cells ({int((~coll2).sum())} inits, alpha/rho {_range_text(a_rel[~coll2])}); "
                        f"the collapsing inits end aligned with band {sorted(set(last))} before the collapse",
                        bool(live_cells.size and f2 == 1.0)))

    # The conv net: per-position weights v move by r_j times a common factor (the
    # shared kernel), so beta stays close to span{1, r}: the largest |beta_j| is at an
    # extreme band, minor while the kernel is pushed negative, then the major band.
    collc, seqc = rows["conv"]
    minor_then_major = np.array([not c and s == [1, nb] for c, s in zip(collc, seqc)])
    only = np.array([c or s in ([1, nb], [nb]) for c, s in zip(collc, seqc)])
    dc = maps["conv"][1][~collc]
    middle = int(np.sum((dc > 1) & (dc < nb)))
    checks.append(Check("banded", "banded data, l2-SAM, two-layer linear conv net: minor first, major last, without the middle bands",
                        f"band 1 then band {nb} for a range of alpha/rho above the collapse edge; no middle band leads "
                        "(the per-position weights move by r_j times the shared kernel's factor)",
                        f"{int(minor_then_major.sum())}/{na} rows go 1 -> {nb}, alpha/rho in {_range_text(a_rel[minor_then_major])}; "
                        f"{int(np.sum(~only))} other sequences; a middle band leads in {middle} of {dc.size} cells",
                        bool(minor_then_major.any() and only.all() and middle == 0)))
    return checks


def _banded_caption(run: _BandedRun) -> str:
    """The caption, from the plan's data, rho and model sizes."""
    plan = run.plan
    data, nb = plan.data, plan.nb
    caption = (
        f"Banded data: samflow.datasets.banded(n = {data.n}, d = {data.d}, seed {plan.seed}, {nb} bands of "
        f"{data.d // nb} coordinates, intensities 1/{nb} ... 1 from band 1 (minor) to band {nb} (major), spread "
        f"{plan.spread:g}). Each pixel: the band with the largest mean |beta_j| of the predictor beta(t) at "
        f"(real time t, alpha/rho), rho = {plan.rho:g}; top GD, bottom l2-SAM; grey from the collapse time on. Columns: "
        "the depth-2 diagonal network (w(0) = alpha 1, samflow.solve), the two-layer linear network f = <v, U x> "
        f"(k = {plan.nets.two_layer_width}, U(0) = alpha I, v(0) = alpha 1) and the two-layer linear convolutional network "
        f"({plan.nets.conv_channels} channels, kernel {plan.nets.conv_kernel}, circular, w(0) = alpha 1, v(0) = alpha 1; its "
        "effective linear predictor beta = grad_x f), both by samflow.models.solve_model (autodiff, with its collapse "
        "event). Every init has beta(0) proportional to 1, so the dominant band shows what was learned. GD is "
        "flat at the major band. l2-SAM on the diagonal net shows the single-sample picture: collapse for small "
        "alpha/rho, then the band climbs 1 -> 2 -> 3 (minor first, major last), and band 3 from the start above the "
        "mark of theory.l2_major_band_mark for mu = mean_i y_i x_i (dashed). The two non-diagonal nets differ: the "
        "fully connected two-layer net has no minor-first phase (its l2 shrinkage of beta is the same for every "
        "coordinate; only the collapse, which aligns beta with band 1 at the end, is left), while the conv net, whose "
        "per-position weights move like a diagonal layer, goes from band 1 straight to band 3."
    )
    return caption
