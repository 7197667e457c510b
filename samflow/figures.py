"""Every figure of the paper's kind, with the theory drawn over the simulation, and a report.

    python scripts/reproduce_figures.py --out figures/ [--quick] [--only NAMES] [--jobs N]

regenerates the figures of THEORY.md sections 5 and 6 from the flows (one function
per figure, each taking `quick`), writes a caption file per figure, an index page
and a theory-vs-simulation report that checks each claim numerically:

| name | figure | what it checks |
|---|---|---|
| `depth1_directions` | direction of GD, l2-SAM, linf-SAM vs the max-margin directions over time | depth 1 -> l2 max-margin; depth 2 -> l1 |
| `linf_limit` | linf-SAM limit direction over per-coordinate inits, depth 2 and 3 | the rule j* = argmax mu_j (alpha_j - rho)^(L-2) |
| `regime_chart` | l2-SAM regimes over (alpha, rho), depth 2 | boundaries are lines alpha ~ rho; the predicted marks |
| `staircase` | dominant feature over (t, alpha), GD / l2 / linf, depths 2-4, one and four samples | GD flat at d; l2-SAM climbs |
| `trajectories` | beta_j and the loss, one panel per regime, plateau marked | switching order, first feature, plateau |
| `usam_ablation` | USAM vs l2-SAM | the normalization causes minor first |
| `discrete_gap` | discrete SAM vs its flow as eta shrinks | first-order gap |
| `banded` | dominant band over (t, alpha) on banded data, GD / l2-SAM, diagonal, two-layer and conv nets | GD flat at the major band; the diagonal net climbs bands; what the other nets do |
| `generic_models` | autodiff flows (`samflow.models`) against the hand-written diagonal net; two-layer and conv trajectories | same trajectories and collapse times; the two-layer collapse point |

Data flow: config (configs/figures/*.toml) -> batched solves (`samflow.sweep.solve_grid`)
-> measurements (`samflow.analysis`) and predictions (`samflow.theory`) -> figures
and `Check`s. Each figure function can be called on its own from Python.

Compilation of the solver dominates the run time (tens of seconds per (method,
clock, depth, data shape) on a loaded 2-core machine; the integrations themselves
take seconds), so every solve of a run uses the same chunk size and number of
save times, and `run_all` spreads the figures over worker processes in groups
that share compilations.
"""

from __future__ import annotations

import dataclasses
import os
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, Literal

import matplotlib

matplotlib.use("Agg")
import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator  # noqa: E402

from . import theory  # noqa: E402
from .analysis import (  # noqa: E402
    band_dominance,
    direction_distance,
    dominant_index,
    limit_direction,
    max_margin_direction,
    plateau,
    regime_label,
    switching_times,
    tied,
    visited_sequence,
)
from .config import ConfigError, ConfigModel, format_errors  # noqa: E402
from .data import Dataset, single_sample  # noqa: E402
from .datasets import banded, increasing_scale  # noqa: E402
from .discrete import flow_gap, run_discrete  # noqa: E402
from .flows import METHOD_LABELS, Method  # noqa: E402
from .models import Model, diagonal_network, linear_conv, solve_model, two_layer_linear  # noqa: E402
from .plots import MISSING_COLOR, NO_VALUE, REGIME_COLORS, REGIME_NAMES, feature_colors, no_value_label, regime_cmap, regime_image  # noqa: E402
from .solve import SolverSettings, Trajectory, solve  # noqa: E402
from .status import FAILED_STATUSES, Status  # noqa: E402
from .sweep import solve_grid  # noqa: E402

__all__ = [
    "Check",
    "FigureResult",
    "FIGURES",
    "CONFIG_DIR",
    "depth1_directions",
    "linf_limit",
    "regime_chart",
    "staircase",
    "trajectories",
    "usam_ablation",
    "discrete_gap",
    "banded_heatmaps",
    "generic_models",
    "run_all",
    "report_table",
    "write_index",
]

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "figures"
SETTINGS = SolverSettings()  # one settings value for every solve: shared compilations
DPI = 130


# --- results of a figure ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    """One numerical check of a claim: `passed` is True, False, or None (not
    checked in this mode; `note` says why)."""

    figure: str
    claim: str
    prediction: str
    measurement: str
    passed: bool | None
    note: str = ""


@dataclasses.dataclass
class FigureResult:
    """What a figure function wrote: file names (relative to the output folder),
    its caption, the configs it read, its checks and its wall time in seconds."""

    name: str
    title: str
    pngs: list[str]
    caption: str
    configs: list[str]
    checks: list[Check]
    seconds: float = float("nan")  # wall time
    cpu_seconds: float = float("nan")  # CPU time of the process (all its threads)


# --- configs ---------------------------------------------------------------------


class _Strict(ConfigModel):
    """Unknown keys and non-finite floats refused (`samflow.config.ConfigModel`);
    lax types (an integer where a float is expected is fine either way)."""

    model_config = ConfigDict(strict=False)


class MultiSampleSpec(_Strict):
    """`samflow.datasets.increasing_scale(n, d, seed, spread=...)`."""

    n: int = Field(ge=1)
    seed: int
    spread: float = Field(default=0.25, ge=0)


class CommonConfig(_Strict):
    """configs/figures/common.toml."""

    mu: list[float] = Field(min_length=2)
    n_save: int = Field(ge=8, le=2000)
    chunk: int = Field(ge=1, le=4096)
    multi_sample: MultiSampleSpec


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_figure_config(path: Path, model: type[BaseModel], quick: bool) -> Any:
    """Read a figure's TOML file, apply its `[quick]` table when `quick`, validate.

    Keys of the `[quick]` table override the top-level ones (tables are merged).

    **Raises:** `samflow.config.ConfigError` (a `ValueError`) naming the file and
    every bad or unknown key (of the full or the quick version), one line each;
    non-finite numbers are refused in every key.
    """
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    over = raw.pop("quick", {})
    quick_raw = _merge(raw, over)
    try:
        # Both versions are validated, so a typo in [quick] shows in a full run too.
        full_cfg = model.model_validate(raw)
        quick_cfg = model.model_validate(quick_raw)
    except ValidationError as err:
        raise ConfigError(format_errors(err, str(path), model)) from None
    return quick_cfg if quick else full_cfg


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a figure writes, which configs it reads, and the shared settings."""

    out_dir: Path
    config_dir: Path
    quick: bool
    common: CommonConfig

    @classmethod
    def make(cls, out_dir, quick: bool = False, config_dir=None) -> "Context":
        config_dir = Path(config_dir or CONFIG_DIR)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        common = load_figure_config(config_dir / "common.toml", CommonConfig, quick)
        return cls(out_dir, config_dir, quick, common)

    def config(self, name: str, model: type[BaseModel]) -> Any:
        return load_figure_config(self.config_dir / f"{name}.toml", model, self.quick)

    def config_ref(self, name: str) -> str:
        return f"configs/figures/{name}.toml" + (" [quick]" if self.quick else "")

    @property
    def mu(self) -> np.ndarray:
        return np.asarray(self.common.mu, dtype=np.float64)

    @property
    def d(self) -> int:
        return len(self.common.mu)

    def single_tau(self) -> Dataset:
        """{(mu, +1)} with one row (the rescaled clock needs one sample)."""
        return single_sample(self.mu)

    def single_rows(self) -> Dataset:
        """{(mu, +1)} as `multi_sample.n` identical rows: the same loss (a mean), and
        the same data shape as the multi-sample set, so one compilation serves both."""
        n = self.common.multi_sample.n
        return Dataset.from_arrays(np.tile(self.mu, (n, 1)), np.ones(n))

    def multi(self) -> Dataset:
        s = self.common.multi_sample
        return increasing_scale(s.n, self.d, s.seed, spread=s.spread)

    def log_times(self, t_min: float, t1: float) -> np.ndarray:
        ts = np.geomspace(t_min, t1, self.common.n_save)
        ts[-1] = t1
        return ts


def _init(alpha, depth: int, d: int) -> np.ndarray:
    """W(0) of shape (B, L, d): every layer at alpha, alpha (B,) or (B, d)."""
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 1:
        a = np.broadcast_to(a[:, None], (a.shape[0], d))
    return np.ascontiguousarray(np.broadcast_to(a[:, None, :], (a.shape[0], depth, d)))


def _solve(ctx: Context, method: str, data: Dataset, W0, rho, ts, *, clock: str) -> Trajectory:
    """`solve_grid` with the run's chunk size, the batch padded to whole chunks.

    Every call of a run has `n_save` save times and chunks of `chunk` cells, so
    the compilation is shared by all solves of a (method, clock, depth, data shape).
    """
    ts = np.asarray(ts, dtype=np.float64)
    if ts.shape != (ctx.common.n_save,):
        raise ValueError(f"internal: every solve saves {ctx.common.n_save} times, got {ts.shape}")
    W0 = np.asarray(W0, dtype=np.float64)
    B = W0.shape[0]
    rho = np.broadcast_to(np.asarray(rho, dtype=np.float64), (B,))
    c = ctx.common.chunk
    idx = np.minimum(np.arange(B + (-B) % c), B - 1)
    tr = solve_grid(method, data, W0[idx], rho[idx], ts, clock=clock, settings=SETTINGS, batch_size=c)
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:B], tr)


# --- drawing helpers -------------------------------------------------------------


def _label(method: str) -> str:
    return METHOD_LABELS[Method(method)]


def _save(fig, ctx: Context, stem: str) -> str:
    png = ctx.out_dir / f"{stem}.png"
    fig.savefig(png, dpi=DPI, bbox_inches="tight")
    fig.savefig(png.with_suffix(".pdf"), bbox_inches="tight")
    plt.close(fig)
    return png.name


def _log_edges(x: np.ndarray) -> np.ndarray:
    """Cell edges around log-spaced centres x."""
    lx = np.log(np.asarray(x, dtype=np.float64))
    if lx.size == 1:
        return np.exp([lx[0] - 0.5, lx[0] + 0.5])
    mid = (lx[1:] + lx[:-1]) / 2
    return np.exp(np.concatenate([[2 * lx[0] - mid[0]], mid, [2 * lx[-1] - mid[-1]]]))


def _lin_edges(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    mid = (x[1:] + x[:-1]) / 2
    return np.concatenate([[2 * x[0] - mid[0]], mid, [2 * x[-1] - mid[-1]]])


def _write_caption(ctx: Context, result: FigureResult) -> None:
    lines = [f"# {result.title}", "", result.caption.strip(), ""]
    lines.append("Made by `python scripts/reproduce_figures.py" + (" --quick" if ctx.quick else "") + "` from " + ", ".join(f"`{c}`" for c in result.configs) + ".")
    lines.append("")
    if result.checks:
        lines.append("Checks of this figure (see report.md):")
        lines.append("")
        for c in result.checks:
            lines.append(f"- {_verdict(c.passed)}: {c.claim} -- predicted {c.prediction}; measured {c.measurement}" + (f" ({c.note})" if c.note else ""))
        lines.append("")
    (ctx.out_dir / f"{result.name}.caption.md").write_text("\n".join(lines))


def _verdict(passed: bool | None) -> str:
    return "PASS" if passed is True else ("FAIL" if passed is False else "NOTE")


def _start() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _finish(ctx: Context, result: FigureResult, t0: tuple[float, float]) -> FigureResult:
    result.seconds = time.perf_counter() - t0[0]
    result.cpu_seconds = time.process_time() - t0[1]
    _write_caption(ctx, result)
    return result


# --- figure 1: directions against the max-margin predictors ---------------------


class _DirectionRow(_Strict):
    depth: int = Field(ge=1)
    alpha: float = Field(gt=0)
    rho: float = Field(ge=0)
    t_min: float = Field(gt=0)
    t1: float = Field(gt=0)
    reference: Literal["l1", "l2"]  # the max-margin direction the flows should tend to
    tol: float = Field(gt=0)


MethodName = Literal["gd", "l2", "linf", "usam"]


class DirectionsConfig(_Strict):
    methods: list[MethodName]
    rows: list[_DirectionRow] = Field(min_length=1)


def depth1_directions(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 1: distance of beta(t)/||beta|| to the max-margin directions over real time.

    Row 1, depth 1: GD, l2-SAM and linf-SAM tend to the l2 max-margin direction
    (THEORY.md s.5). Row 2, depth 2: they tend to the l1 max-margin direction (GD;
    l2-SAM as the loss goes to 0). Columns: the single sample and the 4-sample data.

    **Returns:** a `FigureResult` (PNG and PDF written to `out_dir`).
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("depth1_directions", DirectionsConfig)
    datasets = [("one sample $\\{(\\mu, +1)\\}$", ctx.single_rows()), ("4 samples", ctx.multi())]
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
                    f"depth {row.depth}, {_label_plain(m)}, {'one sample' if j == 0 else '4 samples'}: direction -> l{row.reference[1]} max-margin",
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
        "(for one sample e_d, the major feature; for these 4 samples also e_5). Left: one sample "
        "{(mu, +1)}, mu = (0.2, 0.4, 0.6, 0.8, 1.0); right: 4 samples of increasing feature scale. "
        "The one sample is stored as 4 identical rows (same loss) so that both columns share one compilation."
    )
    return _finish(ctx, FigureResult("depth1_directions", "Figure 1: limit directions (depth 1 -> l2, depth 2 -> l1)",
                                     [png], caption, [ctx.config_ref("depth1_directions"), ctx.config_ref("common")], checks), t0)


def _label_plain(method: str) -> str:
    return {"gd": "GD", "l2": "l2-SAM", "linf": "linf-SAM", "usam": "USAM"}[method]


# --- figure 2: linf-SAM limit direction over per-coordinate inits ---------------


class LinfConfig(_Strict):
    depths: list[int] = Field(min_length=1)
    rho: float = Field(gt=0)
    axes: tuple[int, int]  # the two features varied on the map (1-based)
    others: float = Field(ge=0)  # alpha_j / rho of the other features on the map
    grid_num: int = Field(ge=2)
    grid_max: float = Field(gt=0)  # alpha_j / rho from 0 to grid_max (cell centres)
    tau_min: float = Field(gt=0)
    tau1: dict[str, float]  # horizon per depth (first pass for depth >= 3)
    approach: float = Field(gt=0, lt=1)  # depth >= 3: last save at 1 - approach of the blow-up time
    n_random: int = Field(ge=1)
    random_alpha: tuple[float, float]  # alpha_j / rho ~ U(lo, hi)
    random_rho: tuple[float, float]  # rho log-uniform in [lo, hi]
    seed: int


def _linf_limit_measured(ctx: Context, alpha, rho, depth: int, cfg: LinfConfig):
    """Measured limit feature of linf-SAM (tau clock) for inits alpha (B, d), radii rho (B,).

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
    ts = ctx.log_times(cfg.tau_min, cfg.tau1[str(depth)])
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
        ts2 = np.concatenate([1.0 - np.geomspace(1.0, cfg.approach, n - 1), [2.0]])
        tr2 = _solve(ctx, "linf", data, W0[blown] * c[:, None, None], np.asarray(rho)[blown] * c, ts2, clock="tau")
        dom = dominant_index(tr2.beta)  # -1 after the blow-up
        last = np.max(np.where(dom > 0, np.arange(n), -1), axis=-1)
        second_blew = tr2.status == int(Status.BLEW_UP)
        meas = np.where((last >= 0) & second_blew, np.take_along_axis(dom, np.maximum(last, 0)[:, None], 1)[:, 0], -1)
        idx[blown] = meas
    return idx, tr, T


def _linf_cmap(d: int):
    """(cmap, norm, colors) of the measured limit feature: -1 not measured (the "no value" colour;
    below the old norm's range it was drawn as 0), 0 none (grey), 1..d features; `colors` from 0."""
    colors = ["#d9d9d9"] + feature_colors(d)
    return ListedColormap([MISSING_COLOR] + colors), BoundaryNorm(np.arange(-1.5, d + 1.5), d + 2), colors


def linf_limit(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 2: limit direction of linf-SAM over per-coordinate inits, depth 2 and 3.

    Top: the measured limit feature over (alpha_a/rho, alpha_b/rho) for two
    features a, b (the others at `others` rho), with the boundaries of the rule
    j* = argmax_{alpha_j > rho} mu_j (alpha_j - rho)^(L-2) (THEORY.md s.3) drawn as
    dashed lines. Bottom: predicted against measured j* for random inits.

    **Returns:** a `FigureResult`.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("linf_limit", LinfConfig)
    mu, d = ctx.mu, ctx.d
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

    cmap, norm, colors = _linf_cmap(d)
    unmeasured: list[str] = []
    fig, axes = plt.subplots(2, len(cfg.depths), figsize=(5.6 * len(cfg.depths), 10), squeeze=False,
                             gridspec_kw={"height_ratios": [1.15, 1]})
    checks = []
    fine = np.linspace(1e-3, cfg.grid_max, 400)
    shown: set[int] = set()
    F1, F2 = np.meshgrid(fine, fine, indexing="xy")
    for k, L in enumerate(cfg.depths):
        meas_map, tr_map, _ = _linf_limit_measured(ctx, alpha_map, np.full(len(alpha_map), cfg.rho), L, cfg)
        pred_map = theory.linf_limit_index(alpha_map, cfg.rho, mu, L)
        shown |= {int(v) for v in np.unique(meas_map)}
        if np.any(meas_map == -1):
            unmeasured.append(f"depth {L}: " + (no_value_label(tr_map.status[meas_map == -1])[len("no value ("):-1] if L == 2
                                                 else "the rescaled second pass did not reach the blow-up"))
        agree = float(np.mean(meas_map == pred_map))
        ax = axes[0, k]
        ax.pcolormesh(_lin_edges(g), _lin_edges(g), meas_map.reshape(A1.shape), cmap=cmap, norm=norm, rasterized=True)
        fa = np.full((F1.size, d), cfg.others * cfg.rho)
        fa[:, ia], fa[:, ib] = F1.ravel() * cfg.rho, F2.ravel() * cfg.rho
        pred_fine = theory.linf_limit_index(fa, cfg.rho, mu, L).reshape(F1.shape)
        ax.contour(F1, F2, pred_fine, levels=np.arange(0.5, d), colors="k", linestyles="--", linewidths=1.4)
        for lab in np.unique(pred_fine):
            ys, xs = np.nonzero(pred_fine == lab)
            if ys.size > 400:
                cy, cx = np.median(ys), np.median(xs)
                ax.text(fine[int(cx)], fine[int(cy)], "rule: " + ("0" if lab == 0 else f"$e_{{{lab}}}$"),
                        ha="center", va="center", fontsize=10, color="w" if lab in (1, 2) else "k",
                        bbox=dict(boxstyle="round", fc="none", ec="none"))
        ax.set_xlabel(rf"$\alpha_{{{cfg.axes[0]}}}/\rho$ (init of feature {cfg.axes[0]}, $\mu_{{{cfg.axes[0]}}}={mu[ia]:g}$)")
        ax.set_ylabel(rf"$\alpha_{{{cfg.axes[1]}}}/\rho$ (init of feature {cfg.axes[1]}, $\mu_{{{cfg.axes[1]}}}={mu[ib]:g}$)")
        ax.set_title(f"depth $L={L}$: measured limit feature (colour) vs rule (dashed)\n"
                     f"other $\\alpha_j = {cfg.others:g}\\rho$; agreement {100 * agree:.1f}% of {meas_map.size} inits", fontsize=10)
        ax.set_aspect("equal")
        checks.append(Check("linf_limit", f"linf-SAM depth {L}, map over (alpha_{cfg.axes[0]}, alpha_{cfg.axes[1]}): limit feature follows the rule",
                            "j* = argmax_{alpha_j > rho} mu_j (alpha_j - rho)^(L-2) at every init",
                            f"{int(np.sum(meas_map == pred_map))}/{meas_map.size} inits match", bool(agree == 1.0)))

        # Random per-coordinate inits, random rho.
        meas_r, tr_r, T_r = _linf_limit_measured(ctx, alpha_r, rho_r, L, cfg)
        pred_r = theory.linf_limit_index(alpha_r, rho_r[:, None], mu, L)
        n_match = int(np.sum(meas_r == pred_r))
        n_minor = int(np.sum((pred_r > 0) & (pred_r < d)))
        checks.append(Check("linf_limit", f"linf-SAM depth {L}, {cfg.n_random} random inits alpha_j/rho ~ U{tuple(cfg.random_alpha)}, rho log-uniform in {tuple(cfg.random_rho)}",
                            f"limit feature = rule j* ({n_minor} of them predict a feature other than {d}, {int(np.sum(pred_r == 0))} predict none)",
                            f"{n_match}/{cfg.n_random} match", bool(n_match == cfg.n_random)))
        if L == 2:
            # Weights below rho reach 0 at tau* = ln(rho / (rho - alpha_j)) / mu_j and slide.
            below = alpha_r < rho_r[:, None]
            tz = theory.linf_zero_time(alpha_r, rho_r[:, None], mu, 2)
            st = tr_r.slide_time[:, 0, :]
            rel = np.abs(st[below] - tz[below]) / tz[below]
            slid = np.isfinite(st[below])
            checks.append(Check("linf_limit", "linf-SAM depth 2: a weight below rho reaches 0 and slides (Filippov)",
                                "at tau* = ln(rho/(rho - alpha_j))/mu_j, then stays at 0",
                                f"{int(slid.sum())}/{below.sum()} weights slid; max rel. error of tau* {np.nanmax(rel):.1e}",
                                bool(slid.all() and np.nanmax(rel) < 1e-6)))
        else:
            tb = np.min(theory.linf_blowup_time(alpha_r, rho_r[:, None], mu, L), axis=-1)
            has = np.isfinite(tb)
            rel = np.abs(T_r[has] - tb[has]) / tb[has]
            no_blow_ok = bool(np.all(~np.isfinite(T_r[~has])))
            checks.append(Check("linf_limit", f"linf-SAM depth {L}: finite-time blow-up in tau",
                                "first blow-up at min_j (alpha_j - rho)^-(L-2) / ((L-2) mu_j); none if no alpha_j > rho",
                                f"max rel. error {np.max(rel) if has.any() else float('nan'):.1e} over {int(has.sum())} cells; "
                                + ("no blow-up where none predicted" if no_blow_ok else "blow-up where none predicted"),
                                bool(has.any() and np.max(rel) < 1e-5 and no_blow_ok)))
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
        ax.set_title(f"depth $L={L}$, {cfg.n_random} random inits: {n_match} on the diagonal{extra}", fontsize=10)
    handles = [Patch(color=colors[0], label="0: no limit feature (depth 2: $\\beta \\to 0$; depth 3: nothing blows up)")]
    handles += [Patch(color=colors[j], label=f"feature {j}" + (" (minor)" if j == 1 else " (major)" if j == d else ""))
                for j in range(1, d + 1) if j in shown]
    if unmeasured:
        handles.append(Patch(color=MISSING_COLOR, label="no value: not measured (" + "; ".join(unmeasured) + ")"))
    handles.append(Line2D([], [], color="k", ls="--", label="boundaries of the rule"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=9, frameon=False, bbox_to_anchor=(0.5, -0.04))
    fig.suptitle(r"$\ell_\infty$-SAM: limit direction $e_{j^*}$, $j^* = \arg\max_{\alpha_j > \rho}\, \mu_j (\alpha_j - \rho)^{L-2}$"
                 f", $\\mu = ({', '.join(f'{m:g}' for m in mu)})$", fontsize=12)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    png = _save(fig, ctx, "linf_limit")
    caption = (
        f"linf-SAM in the rescaled clock tau, one sample {{(mu, +1)}}, per-coordinate inits alpha_j. Top: the "
        f"measured limit feature (colour) over (alpha_{cfg.axes[0]}/rho, alpha_{cfg.axes[1]}/rho), the other "
        f"features starting at {cfg.others:g} rho, rho = {cfg.rho:g}; dashed lines are the boundaries of the rule "
        "j* = argmax over {j : alpha_j > rho} of mu_j (alpha_j - rho)^(L-2) (THEORY.md s.3). Depth 2: the fastest "
        "exponential among the coordinates above rho wins (the major feature whenever alpha_d > rho); depth 3: the "
        "first coordinate to blow up wins, so a minor feature with a larger head start beats the major one. "
        "Measurement: depth 2, argmax |beta_j| at the horizon; depth 3, the dominant feature just before the "
        "blow-up (a second pass rescaled so that each cell blows up at tau = 1, saved up to 1 - "
        f"{cfg.approach:g}). Bottom: predicted against measured j* for {cfg.n_random} random inits "
        f"alpha_j/rho ~ U{tuple(cfg.random_alpha)} with rho log-uniform in {tuple(cfg.random_rho)}."
    )
    return _finish(ctx, FigureResult("linf_limit", "Figure 2: linf-SAM limit direction over per-coordinate inits",
                                     [png], caption, [ctx.config_ref("linf_limit"), ctx.config_ref("common")], checks), t0)


# --- figure 3: l2-SAM regime chart over (alpha, rho) ----------------------------


class _LogAxis(_Strict):
    start: float = Field(gt=0)
    stop: float = Field(gt=0)
    num: int = Field(ge=1)

    def values(self) -> np.ndarray:
        return np.geomspace(self.start, self.stop, self.num)


class RegimeChartConfig(_Strict):
    alpha: _LogAxis
    rho: _LogAxis
    tau_min: float = Field(gt=0)
    tau1: float = Field(gt=0)
    edge_rho: _LogAxis
    edge_points: int = Field(ge=1)
    edge_passes: int = Field(ge=1)
    slope_tol: float = Field(gt=0)
    mark_tol: float = Field(gt=0)
    order_sweep: _LogAxis  # alpha / rho (at rho = 1) of the switching-order check
    example_mu: list[float]  # THEORY.md's worked example (mu = (1, 2), rho = 1)
    example_edges: tuple[float, float, float, float]  # its stated ranges: 1/2 edge in [a, b], 2/3 edge in [c, e]


def _l2_regimes(ctx: Context, alpha, rho, ts) -> tuple[np.ndarray, Trajectory]:
    """Regime labels of depth-2 l2-SAM (tau clock, one sample) for cells alpha (B,), rho (B,)."""
    tr = _solve(ctx, "l2", ctx.single_tau(), _init(alpha, 2, ctx.d), rho, ts, clock="tau")
    return regime_label(tr.beta, tr.status), tr


def regime_edges(ctx: Context, rhos, ts, points: int, passes: int):
    """The regime 1/2 and 2/3 edges of depth-2 l2-SAM at each rho, as alpha values.

    Multisection on a log scale: each pass labels `points` + 2 inits between the
    current brackets of every (rho, edge) in one batch and keeps the sub-interval
    where the label changes (1 -> not 1 for the 1/2 edge, not 3 -> 3 for the 2/3
    edge). Start brackets: [all-shrink mark, major-first mark] for the 1/2 edge
    (everything collapses below the first, the major feature leads above the
    second) and [mark / 1.5, 1.5 mark] around the major-first mark for the 2/3 edge.

    **Returns:** (edge12, edge23, half): the edges, each (R,) in units of alpha (NaN
    where the start bracket did not bracket a change), and the relative half-width
    of the final brackets, (R, 2).
    """
    rhos = np.asarray(rhos, dtype=np.float64)
    R = rhos.size
    marks = theory.l2_alpha_marks(ctx.mu, rhos)
    lo = np.stack([marks.all_shrink, marks.major_first / 1.5], axis=1)  # (R, 2)
    hi = np.stack([marks.major_first, marks.major_first * 1.5], axis=1)
    # Jitter the brackets per rho, so that the grids of inits are not exact
    # multiples of rho and the fitted slope is a measurement, not a consequence
    # of scaling the same grid.
    jit = np.random.default_rng(0).uniform(0.0, 0.1, size=(2, R, 2))
    lo, hi = lo * np.exp(-jit[0]), hi * np.exp(jit[1])
    valid = np.ones((R, 2), bool)
    for p in range(passes):
        k = np.linspace(0.0, 1.0, points + 2)
        pts = np.exp(np.log(lo)[..., None] + (np.log(hi) - np.log(lo))[..., None] * k)  # (R, 2, K)
        rr = np.broadcast_to(rhos[:, None, None], pts.shape)
        lab, _ = _l2_regimes(ctx, pts.ravel(), rr.ravel(), ts)
        lab = lab.reshape(pts.shape)
        for e, P in enumerate((lab[:, 0] == 1, lab[:, 1] != 3)):
            # P holds below the edge: the first index where it fails ends the bracket.
            first_fail = np.argmax(~P, axis=-1)
            ok = P[:, 0] & ~P.all(axis=-1)
            if p == 0:
                valid[:, e] &= ok
            i = np.clip(first_fail, 1, points + 1)
            lo[:, e] = np.where(ok, pts[np.arange(R), e, i - 1], lo[:, e])
            hi[:, e] = np.where(ok, pts[np.arange(R), e, i], hi[:, e])
    edge = np.where(valid, np.sqrt(lo * hi), np.nan)
    half = np.where(valid, np.sqrt(hi / lo) - 1.0, np.nan)  # relative half-width of the bracket
    return edge[:, 0], edge[:, 1], half


def regime_chart(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 3: l2-SAM regimes over (alpha, rho), depth 2, log axes, marks as lines.

    In the tau clock the flow is invariant under (w, rho) -> (c w, c rho)
    (THEORY.md s.3), so every regime boundary is a line alpha = const * rho: slope
    1 on log axes. The edges are measured by multisection at several rho and
    fitted; the predicted all-shrink and major-first marks are drawn as lines.

    **Returns:** a `FigureResult`.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("regime_chart", RegimeChartConfig)
    ts = ctx.log_times(cfg.tau_min, cfg.tau1)
    a_ax, r_ax = cfg.alpha.values(), cfg.rho.values()
    AA, RR = np.meshgrid(a_ax, r_ax, indexing="ij")
    reg, tr = _l2_regimes(ctx, AA.ravel(), RR.ravel(), ts)
    reg = reg.reshape(AA.shape)
    st_chart = np.asarray(tr.status).reshape(AA.shape)
    er = cfg.edge_rho.values()
    e12, e23, half = regime_edges(ctx, er, ts, cfg.edge_points, cfg.edge_passes)
    res = float(np.nanmax(half))
    marks = theory.l2_alpha_marks(ctx.mu, 1.0)
    c_shrink, c_major = float(marks.all_shrink), float(marks.major_first)
    checks = []
    fits = {}
    for name, e in (("1/2", e12), ("2/3", e23)):
        ok = np.isfinite(e)
        if ok.sum() >= 2:
            slope, icpt = np.polyfit(np.log(er[ok]), np.log(e[ok]), 1)
        else:
            slope, icpt = np.nan, np.nan
        fits[name] = (slope, icpt)
        ratio = e[ok] / er[ok]
        spread = float(np.ptp(ratio) / np.mean(ratio)) if ok.any() else np.nan
        checks.append(Check("regime_chart", f"l2-SAM depth 2: the regime {name} boundary is a line alpha = c rho",
                            f"slope 1 +- {cfg.slope_tol:g} in log alpha vs log rho",
                            f"slope {slope:.4f} over {int(ok.sum())} rho in [{er[0]:g}, {er[-1]:g}]; alpha/rho = {np.mean(ratio):.4f} "
                        f"(spread {spread:.1e}, bracket +-{res:.0e})",
                            bool(ok.all() and abs(slope - 1) <= cfg.slope_tol)))
    r23 = float(np.nanmean(e23 / er))
    checks.append(Check("regime_chart", "l2-SAM depth 2: the 2/3 edge is the major-first mark",
                        f"alpha/rho = (mu_(d-1) + mu_d) / (sqrt 2 ||mu||) = {c_major:.4f}",
                        f"{r23:.4f} +- {res * r23:.0e} (rel. diff {abs(r23 / c_major - 1):.1e})", bool(abs(r23 / c_major - 1) <= cfg.mark_tol)))
    r12 = float(np.nanmean(e12 / er))
    checks.append(Check("regime_chart", "l2-SAM depth 2: the 1/2 edge lies above the all-shrink mark (stable manifold of a saddle)",
                        f"alpha/rho > mu_1 / (sqrt 2 ||mu||) = {c_shrink:.4f}, found by simulation",
                        f"{r12:.4f} = {r12 / c_shrink:.2f} x the mark", bool(c_shrink < r12 < c_major)))
    # Collapse below the 1/2 edge, major first above the 2/3 edge, on the chart grid.
    ratio = AA / RR
    below, above = ratio < 0.98 * r12, ratio > 1.02 * r23
    between = (ratio > 1.02 * r12) & (ratio < 0.98 * r23)
    n_bad = int(np.sum(reg[below] != 1) + np.sum(reg[above] != 3) + np.sum(reg[between] == 3) + np.sum(reg[between] == 1))
    checks.append(Check("regime_chart", "l2-SAM depth 2: chart cells away (2%) from the fitted edges",
                        "regime 1 below the 1/2 edge, 3 above the 2/3 edge, 2 (or not yet at d) between",
                        f"{n_bad} of {int(below.sum() + above.sum() + between.sum())} cells disagree", n_bad == 0))

    # THEORY.md's worked example: mu = (1, 2), rho = 1, "collapse for alpha up to
    # about 0.5, minor first then major for about 0.55 to 0.9, major first from
    # about 0.95".
    ex = dataclasses.replace(ctx, common=ctx.common.model_copy(update={"mu": list(cfg.example_mu)}))
    x12, x23, _ = regime_edges(ex, [1.0], ts, cfg.edge_points, cfg.edge_passes)
    lo12, hi12, lo23, hi23 = cfg.example_edges
    checks.append(Check("regime_chart", f"THEORY.md example, mu = {tuple(cfg.example_mu)}, rho = 1: the three regimes",
                        f"collapse up to alpha ~ 0.5, minor first for ~0.55 to 0.9, major first from ~0.95: "
                        f"1/2 edge in [{lo12:g}, {hi12:g}], 2/3 edge in [{lo23:g}, {hi23:g}]",
                        f"1/2 edge {x12[0]:.4f}, 2/3 edge {x23[0]:.4f} (major-first mark {float(theory.l2_alpha_marks(cfg.example_mu, 1.0).major_first):.4f})",
                        bool(lo12 <= x12[0] <= hi12 and lo23 <= x23[0] <= hi23)))

    # Switching order in the tau clock, where the staircase completes even next to
    # the 1/2 edge (in real time its late switches come after the loss has fallen).
    sa = cfg.order_sweep.values()
    reg_o, tr_o = _l2_regimes(ctx, sa, np.ones_like(sa), ts)
    dom_o = np.where(tied(tr_o.beta, 1e-9), 0, dominant_index(tr_o.beta))
    seqs = {i: visited_sequence(dom_o[i]) for i in np.flatnonzero(reg_o == 2)}
    good = [i for i, q in seqs.items() if staircase_ok(q, ctx.d)]
    stepped = [(sa[i], q) for i, q in seqs.items() if len(q) > 1 and q[1] < q[0]]
    bad = [(round(float(sa[i]), 3), q) for i, q in seqs.items() if not staircase_ok(q, ctx.d)]
    checks.append(Check("regime_chart", "l2-SAM depth 2, regime 2, tau clock: features become dominant in increasing order of mu",
                        "visited dominant features strictly increase to d, after a possible initial step-down just above the 1/2 edge",
                        f"{len(good)}/{len(seqs)} regime-2 inits of {sa.size} (alpha/rho in [{sa[0]:g}, {sa[-1]:g}]); "
                        + (f"{len(stepped)} step down first (alpha/rho {min(x for x, _ in stepped):.3f} to {max(x for x, _ in stepped):.3f}), e.g. {stepped[0][1]}"
                           if stepped else "none steps down")
                        + (f"; not monotone: {bad[:3]}" if bad else ""),
                        bool(seqs) and len(good) == len(seqs)))

    fig, ax = plt.subplots(figsize=(8.2, 6.4))
    cmap, norm, _ = regime_cmap()
    img = regime_image(reg, st_chart)  # failed cells: "no value", not "undetermined"
    ax.pcolormesh(_log_edges(r_ax), _log_edges(a_ax), img, cmap=cmap, norm=norm, rasterized=True)
    rr = np.geomspace(r_ax[0] / 1.5, r_ax[-1] * 1.5, 50)
    ax.plot(rr, c_shrink * rr, "k--", lw=1.5, label=rf"predicted all-shrink mark $\alpha = {c_shrink:.3f}\,\rho$")
    ax.plot(rr, c_major * rr, "k-.", lw=1.5, label=rf"predicted major-first mark $\alpha = {c_major:.3f}\,\rho$")
    for name, e, mk in (("1/2", e12, "o"), ("2/3", e23, "s")):
        slope, icpt = fits[name]
        ax.plot(er, e, mk, ms=6, mfc="w", mec="k", label=f"measured {name} edge (fit: slope {slope:.3f})")
        if np.isfinite(slope):
            ax.plot(rr, np.exp(icpt) * rr**slope, color="w", lw=0.8, label=f"fit of the {name} edge" if name == "1/2" else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(_log_edges(r_ax)[[0, -1]])
    ax.set_ylim(_log_edges(a_ax)[[0, -1]])
    ax.set_xlabel(r"SAM radius $\rho$")
    ax.set_ylabel(r"init scale $\alpha$ ($w(0) = \alpha \mathbf{1}$)")
    handles, labels = ax.get_legend_handles_labels()
    for i, lab in enumerate(labels):
        if lab.startswith("fit of"):
            # The fits are drawn in white over the chart; outline the legend sample.
            handles[i] = Line2D([], [], color="w", lw=1.5, path_effects=[patheffects.withStroke(linewidth=3, foreground="0.3")])
            labels[i] = "white lines: log-log fits of the measured edges"
    handles += [Patch(facecolor=c, edgecolor="k", lw=0.3) for c in REGIME_COLORS]
    labels += ["regime " + n if n[0].isdigit() else n + " (not at $d$ by the horizon)" for n in REGIME_NAMES]
    if np.any(img == NO_VALUE):
        handles.append(Patch(facecolor=MISSING_COLOR, edgecolor="k", lw=0.3))
        labels.append(no_value_label(st_chart[img == NO_VALUE]))
    ax.legend(handles, labels, fontsize=8, loc="upper left", framealpha=0.9)
    ax.set_title(r"$\ell_2$-SAM, depth 2, one sample: regimes over $(\alpha, \rho)$" "\n"
                 r"boundaries are lines $\alpha \propto \rho$ (slope 1 on log axes)", fontsize=11)
    png = _save(fig, ctx, "regime_chart")
    caption = (
        f"Regime of depth-2 l2-SAM (rescaled clock tau up to {cfg.tau1:g}, one sample, mu = (0.2, ..., 1.0), "
        f"w(0) = alpha 1) over a {a_ax.size} x {r_ax.size} log grid of (alpha, rho): 1 collapse (weights reach 0), "
        "2 minor first, major last (the dominant feature starts below d and climbs to d), 3 major first. The dashed "
        "and dash-dotted lines are the predicted marks of THEORY.md s.3 (every coordinate shrinks below the first, "
        "the major feature outgrows all others from the start above the second); circles and squares are the "
        f"1/2 and 2/3 edges measured by multisection at {er.size} radii ({cfg.edge_passes} passes of "
        f"{cfg.edge_points} points), with their log-log fits (white). The 2/3 edge is the major-first mark; the "
        "1/2 edge, the stable manifold of the saddle (rho/sqrt 2) e_1, lies well above the all-shrink mark. "
        "Both are lines of slope 1: the regime depends on alpha/rho only."
    )
    return _finish(ctx, FigureResult("regime_chart", "Figure 3: l2-SAM regime chart over (alpha, rho)", [png], caption,
                                     [ctx.config_ref("regime_chart"), ctx.config_ref("common")], checks), t0)


# --- figure 4: the staircase heat maps -------------------------------------------


class _StairData(_Strict):
    rho: dict[str, float]  # SAM radius per depth
    t1: dict[str, float]  # real-time horizon per depth
    alpha_over_rho: tuple[float, float]  # log grid of alpha / rho


class StaircaseConfig(_Strict):
    methods: list[MethodName]
    depths: list[int] = Field(min_length=1)
    num_alpha: int = Field(ge=2)
    t_min: float = Field(gt=0)
    single: _StairData
    multi: _StairData


TIED, MISSING = -2, -1


def staircase_ok(seq: list[int], d: int) -> bool:
    """Whether a visited sequence is 'minor first, major last' (THEORY.md s.3).

    Allowed: an optional initial step-down (just above the regime 1/2 edge the
    first dominant feature can fall, e.g. 2 -> 1, before the climb), then a strictly
    increasing climb that ends at the major feature d, e.g. [2, 1, 2, 3, 4, 5] or
    [3, 4, 5].
    """
    if not seq or seq[-1] != d:
        return False
    k = 0
    while k + 1 < len(seq) and seq[k + 1] < seq[k]:
        k += 1
    climb = seq[k:]
    return all(b > a for a, b in zip(climb, climb[1:]))


def _dominant_with_ties(beta) -> np.ndarray:
    dom = dominant_index(beta)
    return np.where(tied(beta, 1e-9) & (dom > 0), TIED, dom)


def _staircase_cmap(d: int):
    colors = ["#ffffff", "#000000", "#bdbdbd"] + feature_colors(d)  # tied, missing, collapsed, 1..d
    return ListedColormap(colors), BoundaryNorm(np.arange(-2.5, d + 1.5), len(colors)), colors


def _staircase_handles(d, colors, missing=()):
    """Legend of the dominant-feature maps; `missing` the statuses of the cells with a "no value" pixel."""
    handles = [Patch(facecolor=colors[3 + j], label=f"{j + 1}" + (" (minor)" if j == 0 else " (major)" if j == d - 1 else "")) for j in range(d)]
    handles += [Patch(facecolor=colors[2], label=r"collapsed ($\beta = 0$)"),
                Patch(facecolor=colors[0], edgecolor="k", lw=0.4, label=r"tied ($|\beta_j|$ all equal)"),
                Patch(facecolor=colors[1], label=no_value_label(missing))]
    return handles


def _row_major(items: list, ncol: int) -> list:
    """Reorder legend entries so that they read left to right (matplotlib fills columns)."""
    nrow = -(-len(items) // ncol)
    return [items[r * ncol + c] for c in range(ncol) for r in range(nrow) if r * ncol + c < len(items)]


def _layout_with_legend(fig, handles, *, ncol, title=None, inches=0.75, top=0.95, labels=None):
    """tight_layout leaving `inches` at the bottom for a legend below the panels."""
    frac = inches / fig.get_figheight()
    fig.tight_layout(rect=(0, frac, 1, top))
    kw = dict(loc="lower center", ncol=ncol, frameon=False, fontsize=9, title=title, title_fontsize=9,
              bbox_to_anchor=(0.5, 0.0))
    if labels is None:
        fig.legend(handles=_row_major(handles, ncol), **kw)
    else:
        fig.legend(_row_major(handles, ncol), _row_major(labels, ncol), **kw)


def _heatmap_panel(ax, ts, a_rel, dom, d):
    cmap, norm, _ = _staircase_cmap(d)
    ax.pcolormesh(_log_edges(ts), _log_edges(a_rel), dom, cmap=cmap, norm=norm, rasterized=True)
    ax.set_xscale("log")
    ax.set_yscale("log")


def staircase(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 4: dominant feature over (real time t, alpha/rho) for GD, l2-SAM and
    linf-SAM, depths 2, 3 and 4 (rows), one sample and 4 samples (two PNGs).

    GD is flat at the major feature d; l2-SAM climbs a staircase from a minor
    feature to d for intermediate alpha/rho (THEORY.md s.3, s.6).

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
        stair, coll, linf_bad, linf_n = [], [], 0, 0
        for i, L in enumerate(cfg.depths):
            rho, t1 = spec.rho[str(L)], spec.t1[str(L)]
            ts = ctx.log_times(cfg.t_min, t1)
            for j, m in enumerate(cfg.methods):
                tr = _solve(ctx, m, data, _init(a_rel * rho, L, d), rho, ts, clock="t")
                dom = _dominant_with_ties(tr.beta)
                missing += np.asarray(tr.status)[np.any(dom == MISSING, axis=-1)].tolist()
                ax = axes[i, j]
                _heatmap_panel(ax, ts, a_rel, dom, d)
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
        fig.suptitle(f"Dominant feature over real time, {dname}" + (r" $\{(\mu, +1)\}$, $\mu = (0.2, \ldots, 1)$" if key == "single" else " of increasing feature scale")
                     + ": GD flat at the major feature, $\\ell_2$-SAM climbs a staircase", fontsize=11.5)
        _layout_with_legend(fig, _staircase_handles(d, _staircase_cmap(d)[2], missing), ncol=d + 3,
                            title=r"dominant feature $\arg\max_j |\beta_j(t)|$", top=1 - 0.45 / fig.get_figheight())
        pngs.append(_save(fig, ctx, f"staircase_{key}"))
        depths_txt = ", ".join(str(L) for L in cfg.depths)
        checks.append(Check("staircase", f"{dname}, GD, depths {depths_txt}: flat at the major feature",
                            f"dominant feature = {d} at every (t, alpha) (ties excluded)",
                            f"{gd_major}/{gd_cells} cells", gd_major == gd_cells and gd_cells > 0))
        n_rows = sum(s[1] for s in stair)
        n_good = sum(s[2] for s in stair)
        bad_txt = "; ".join(f"L={s[0]}: {s[3]}" for s in stair if s[3])
        checks.append(Check("staircase", f"{dname}, l2-SAM, depths {depths_txt}: minor first, major last",
                            "some alpha/rho in regime 2 at every depth; their dominant feature climbs to d (after a possible initial step-down)",
                            ", ".join(f"L={s[0]}: {s[2]}/{s[1]} rows" for s in stair) + (f" (not monotone: {bad_txt})" if bad_txt else ""),
                            all(s[1] > 0 for s in stair) and n_good == n_rows))
        exp = {2: True, 3: False, 4: True}
        coll_ok = all((c > 0) == exp.get(L, c > 0) for L, c in coll)
        checks.append(Check("staircase", f"{dname}, l2-SAM: collapse by depth",
                            "depth 2 and 4 collapse for small alpha/rho; depth 3 never does (dw/dtau = mu w_hat^2 >= 0)",
                            ", ".join(f"L={L}: {c} collapsed rows" for L, c in coll), coll_ok,
                            "" if set(cfg.depths) >= {2, 3, 4} else "quick run: depth 2 only"))
        checks.append(Check("staircase", f"{dname}, linf-SAM: alpha > rho gives the major feature first",
                            "regime 3 (rule j* = argmax mu_j (alpha - rho)^(L-2) = d for equal alpha_j)",
                            f"{linf_n - linf_bad}/{linf_n} rows with alpha > rho", linf_bad == 0))
    caption = (
        "Dominant feature argmax_j |beta_j(t)| (colour) over real time t (log) and init scale alpha/rho (log), "
        "w(0) = alpha 1, for GD, l2-SAM and linf-SAM (columns) at depths " + ", ".join(str(L) for L in cfg.depths)
        + " (rows). staircase_single: one sample {(mu, +1)}, mu = (0.2, 0.4, 0.6, 0.8, 1.0); staircase_multi: 4 samples "
        "of increasing feature scale (samflow.datasets.increasing_scale, seed 0). rho is small (per depth, in the "
        "panel titles) so that the loss is still about log 2 while the features switch, which keeps the staircase "
        "at moderate t. GD is flat at the major feature 5. l2-SAM shows the three regimes: collapse to beta = 0 (grey; "
        "depths 2 and 4 only, depth 3 never collapses), the staircase 1 -> 2 -> ... -> 5 (minor first, major last) "
        "for intermediate alpha/rho, and major first for large alpha/rho. linf-SAM: coordinates below rho fall to 0 "
        "(even depth) or rise towards rho (odd depth); above rho the major feature wins. White: all |beta_j| tied (a "
        "cell that has not moved from the symmetric init)."
    )
    return _finish(ctx, FigureResult("staircase", "Figure 4: staircase heat maps (GD, l2-SAM, linf-SAM; depths 2-4; 1 and 4 samples)",
                                     pngs, caption, [ctx.config_ref("staircase"), ctx.config_ref("common")], checks), t0)


# --- figure 5: trajectories and the plateau, one panel per regime ----------------


class TrajectoriesConfig(_Strict):
    rho: float = Field(gt=0)
    alphas: list[float] = Field(min_length=1)  # alpha / rho, one per regime, in order 1, 2, 3
    t1: float = Field(gt=0)  # real-time horizon of the panels (linear save times)
    sweep: _LogAxis  # alpha / rho of the switching-order statistics
    sweep_t_min: float = Field(gt=0)
    sweep_t1: float = Field(gt=0)
    rel_band: float = Field(gt=0)
    rel_drop: float = Field(gt=0, lt=1)


def _first_informative_dominant(beta) -> np.ndarray:
    dom = dominant_index(beta)
    info = (dom > 0) & ~tied(beta, 1e-9)
    first = np.argmax(info, axis=-1)
    out = np.take_along_axis(dom, first[..., None], -1)[..., 0]
    return np.where(info.any(axis=-1), out, 0)


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
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("trajectories", TrajectoriesConfig)
    mu, d = ctx.mu, ctx.d
    data = ctx.single_rows()
    n = ctx.common.n_save
    ts = np.linspace(cfg.t1 / n, cfg.t1, n)
    a = np.asarray(cfg.alphas)
    tr = _solve(ctx, "l2", data, _init(a * cfg.rho, 2, d), cfg.rho, ts, clock="t")
    reg = regime_label(tr.beta, tr.status)
    pl = plateau(tr.loss, ts, cfg.rel_band, cfg.rel_drop, log_time=False)
    cols = feature_colors(d)
    fig, axes = plt.subplots(2, len(a), figsize=(4.5 * len(a), 6.6), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [1.6, 1]})
    checks = []
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
    fig.suptitle(rf"$\ell_2$-SAM, depth 2, one sample, $\rho = {cfg.rho:g}$: one column per regime", fontsize=12)
    _layout_with_legend(fig, handles, ncol=d, inches=0.45, top=1 - 0.35 / fig.get_figheight())
    png = _save(fig, ctx, "trajectories")

    # Statistics over a sweep of alpha/rho (log save times: the first dominant
    # feature is read at the first untied save, right after t = 0).
    sa = cfg.sweep.values()
    ts2 = ctx.log_times(cfg.sweep_t_min, cfg.sweep_t1)
    tr2 = _solve(ctx, "l2", data, _init(sa * cfg.rho, 2, d), cfg.rho, ts2, clock="t")
    reg2 = regime_label(tr2.beta, tr2.status)
    dom2 = np.where(tied(tr2.beta, 1e-9), 0, dominant_index(tr2.beta))
    seqs = {i: visited_sequence(dom2[i]) for i in np.flatnonzero(reg2 == 2)}
    good = [i for i, s in seqs.items() if staircase_ok(s, d)]
    stepped = [(sa[i], s) for i, s in seqs.items() if len(s) > 1 and s[1] < s[0]]
    bad = [(round(float(sa[i]), 3), s) for i, s in seqs.items() if not staircase_ok(s, d)]
    checks.append(Check("trajectories", "l2-SAM depth 2, regime 2: features become dominant in increasing order of mu",
                        "visited dominant features strictly increase to d, after a possible initial step-down near the 1/2 edge",
                        f"{len(good)}/{len(seqs)} regime-2 inits of {sa.size} (alpha/rho in [{sa[0]:g}, {sa[-1]:g}]); "
                        + (f"{len(stepped)} step down first, e.g. alpha/rho = {stepped[0][0]:.3f}: {stepped[0][1]}" if stepped else "none steps down")
                        + (f"; not monotone: {bad[:3]}" if bad else ""),
                        bool(seqs) and len(good) == len(seqs)))
    first_pred = theory.l2_first_dominant(sa, mu)
    first_meas = _first_informative_dominant(tr2.beta)
    live = reg2 != 1
    n_eq = int(np.sum(first_pred[live] == first_meas[live]))
    checks.append(Check("trajectories", "l2-SAM depth 2: the first dominant feature (inits that do not collapse)",
                        "argmax_j mu_j (1 - mu_j / (sqrt 2 a ||mu||)), a = alpha/rho",
                        f"{n_eq}/{int(live.sum())} inits match", n_eq == int(live.sum())))
    # The plateau over the sweep, on the panels' linear time grid.
    trp = _solve(ctx, "l2", data, _init(sa * cfg.rho, 2, d), cfg.rho, ts, clock="t")
    regp = regime_label(trp.beta, trp.status)
    plp = plateau(trp.loss, ts, cfg.rel_band, cfg.rel_drop, log_time=False)
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
    idx = sorted(seqs)
    t_d = np.array([next((t for t, _, to in switching_times(dom2[i], ts2) if to == d), np.nan) for i in idx])
    a_d = sa[idx]
    fin = np.isfinite(t_d)
    mono = bool(fin.sum() >= 2 and np.all(np.diff(t_d[fin]) <= 0))
    checks.append(Check("trajectories", "l2-SAM depth 2, regime 2: time at which the major feature takes the lead",
                        "decreases with alpha/rho, without bound towards the 1/2 edge",
                        (f"t = {t_d[fin][0]:.3g} at alpha/rho = {a_d[fin][0]:.3f} down to {t_d[fin][-1]:.3g} at {a_d[fin][-1]:.3f}; " if fin.any() else "")
                        + ("monotone" if mono else "not monotone"), mono))
    caption = (
        f"Depth-2 l2-SAM in real time t, one sample {{(mu, +1)}}, mu = (0.2, ..., 1.0), rho = {cfg.rho:g}, "
        "w(0) = alpha 1. Top: |beta_j(t)| (log), with the switches of the dominant feature dotted; bottom: the loss, "
        f"with the plateau found by samflow.analysis.plateau (the longest stretch within a {cfg.rel_band:g} relative "
        f"band that is followed by a fall by {cfg.rel_drop:g}) shaded. Columns: regime 1 (every weight shrinks and "
        "collapses to 0 in finite time; the loss rises to log 2 and stays), regime 2 (minor first, major last: the "
        "features take the lead in increasing order of mu while the loss sits on a plateau near log 2, and it falls "
        "once the major feature leads), regime 3 (major first: the plateau is short). With rho small the weights "
        "are of order rho while the features switch, so the loss is still about log 2 then."
    )
    return _finish(ctx, FigureResult("trajectories", "Figure 5: trajectories and the loss plateau, one panel per regime", [png], caption,
                                     [ctx.config_ref("trajectories"), ctx.config_ref("common")], checks), t0)


# --- figure 6: the USAM ablation ---------------------------------------------------


class UsamConfig(_Strict):
    rho: float = Field(gt=0)  # heat maps
    alpha_over_rho: _LogAxis
    t_min: float = Field(gt=0)
    t1: float = Field(gt=0)
    chart_rho: _LogAxis  # the (alpha/rho, rho) charts


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
    mu, d = ctx.mu, ctx.d
    data = ctx.single_rows()
    a_rel = cfg.alpha_over_rho.values()
    ts = ctx.log_times(cfg.t_min, cfg.t1)
    fig, axes = plt.subplots(2, 3, figsize=(14, 9.4))
    first = {}
    missing: list[int] = []
    for j, m in enumerate(["gd", "usam", "l2"]):
        tr = _solve(ctx, m, data, _init(a_rel * cfg.rho, 2, d), cfg.rho, ts, clock="t")
        dom = _dominant_with_ties(tr.beta)
        missing += np.asarray(tr.status)[np.any(dom == MISSING, axis=-1)].tolist()
        ax = axes[0, j]
        _heatmap_panel(ax, ts, a_rel, dom, d)
        ax.set_title(f"{_label(m)}, $\\rho = {cfg.rho:g}$", fontsize=10)
        ax.set_xlabel("real time $t$")
        ax.set_ylabel(r"init scale $\alpha/\rho$")
        first[m] = _first_informative_dominant(tr.beta)
    # Regimes over (rho, alpha/rho).
    rr = cfg.chart_rho.values()
    AA, RR = np.meshgrid(a_rel, rr, indexing="ij")
    cmap, norm, _ = regime_cmap()
    regs = {}
    reg_missing: list[int] = []
    for j, m in enumerate(["usam", "l2"]):
        tr = _solve(ctx, m, data, _init((AA * RR).ravel(), 2, d), RR.ravel(), ts, clock="t")
        reg = regime_label(tr.beta, tr.status).reshape(AA.shape)
        regs[m] = reg
        st = np.asarray(tr.status).reshape(AA.shape)
        img = regime_image(reg, st)  # failed cells: "no value", not "undetermined"
        reg_missing += st[img == NO_VALUE].tolist()
        ax = axes[1, j]
        ax.pcolormesh(_log_edges(rr), _log_edges(a_rel), img, cmap=cmap, norm=norm, rasterized=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"SAM radius $\rho$")
        ax.set_ylabel(r"init scale $\alpha/\rho$")
        ax.set_title(f"{_label(m)}: regime over $(\\rho, \\alpha/\\rho)$", fontsize=10)
    ax = axes[1, 2]
    pred = theory.l2_first_dominant(a_rel, mu)
    ax.step(a_rel, pred, where="mid", color="k", lw=2.5, alpha=0.35, label=r"$\ell_2$-SAM, predicted: $\arg\max_j \mu_j(1 - \mu_j/(\sqrt{2} a \|\mu\|))$")
    ax.plot(a_rel, first["l2"], "o", ms=3.5, color="tab:blue", label=r"$\ell_2$-SAM, measured")
    ax.plot(a_rel, first["usam"], "s", ms=3.5, mfc="none", color="tab:green", label="USAM, measured")
    ax.plot(a_rel, first["gd"], "x", ms=3.5, color="k", label="GD, measured")
    ax.set_xscale("log")
    ax.set_ylim(0.5, d + 2.6)  # room for the legend above the top feature
    ax.set_yticks(range(1, d + 1))
    ax.set_xlabel(r"init scale $\alpha/\rho$")
    ax.set_ylabel("first dominant feature (1 = minor)")
    ax.set_title(f"first dominant feature, $\\rho = {cfg.rho:g}$", fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.grid(True, alpha=0.3)
    handles = _staircase_handles(d, _staircase_cmap(d)[2])[: d + 2]
    if missing:
        handles.append(Patch(facecolor=MISSING_COLOR, label="top: " + no_value_label(missing)))
    handles += [Patch(facecolor=c, edgecolor="k", lw=0.3, label="regime " + n if n[0].isdigit() else n) for c, n in zip(REGIME_COLORS, REGIME_NAMES)]
    if reg_missing:
        handles.append(Patch(facecolor=MISSING_COLOR, edgecolor="k", lw=0.3, label="bottom: " + no_value_label(reg_missing)))
    fig.suptitle("Ablation: USAM (perturbation $\\rho G$) vs $\\ell_2$-SAM ($\\rho G/\\|G\\|_2$), depth 2, one sample: "
                 "the normalization causes minor first", fontsize=12)
    _layout_with_legend(fig, handles, ncol=6, inches=0.8, top=1 - 0.35 / fig.get_figheight(),
                        title=r"top: dominant feature $\arg\max_j|\beta_j|$;  bottom: regime")
    png = _save(fig, ctx, "usam_ablation")
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
        f"of the perturbation (THEORY.md s.2). Depth 2, one sample {{(mu, +1)}}, real time. Top: dominant feature over "
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


# --- figure 7: discrete SAM against its flow ---------------------------------------


class _GapRun(_Strict):
    method: MethodName
    alpha_over_rho: list[float]  # per-coordinate init alpha_j / rho
    rho: float = Field(gt=0)


class DiscreteGapConfig(_Strict):
    runs: list[_GapRun] = Field(min_length=1)
    save_every: float = Field(gt=0)  # save times are multiples of this (and of every eta)
    n_times: int = Field(ge=2)
    eta_max: float = Field(gt=0)
    n_eta: int = Field(ge=2)  # eta = eta_max / 2^k, k = 0 .. n_eta - 1
    shown_etas: list[float]  # drawn as markers over the flow
    slope_range: tuple[float, float]
    gap_tol: float = Field(gt=0)  # pass: gap at the smallest eta below this


def discrete_gap(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 7: discrete SAM (step size eta) against its flow as eta shrinks.

    `samflow.discrete.flow_gap`: max over the save times of ||beta_eta(t) -
    beta_flow(t)|| / ||beta_flow(t)||, at fixed rho; the iteration is a first-order
    method for the flow, so the gap should fall like eta (THEORY.md s.2).

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
    for k, run in enumerate(cfg.runs):
        alpha = np.asarray(run.alpha_over_rho) * run.rho
        gaps = np.array([float(flow_gap(run.method, data, alpha, run.rho, eta, ts)) for eta in etas])
        slope = float(np.polyfit(np.log(etas), np.log(gaps), 1)[0])
        ok = bool(np.all(np.isfinite(gaps)) and cfg.slope_range[0] <= slope <= cfg.slope_range[1] and gaps[-1] < cfg.gap_tol)
        checks.append(Check("discrete_gap", f"discrete {_label_plain(run.method)} -> its flow as eta -> 0 (rho = {run.rho:g} fixed)",
                            f"gap = O(eta): log-log slope in [{cfg.slope_range[0]:g}, {cfg.slope_range[1]:g}], gap < {cfg.gap_tol:g} at eta = {etas[-1]:g}",
                            f"slope {slope:.3f}; gap {gaps[0]:.2e} at eta = {etas[0]:g} down to {gaps[-1]:.2e} at {etas[-1]:g}", ok))
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
        axes[-1].loglog(etas, gaps, "o-", color=colors[run.method], label=f"{_label(run.method)} (slope {slope:.2f})")
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
        "on log axes: it falls like eta (the dashed line), the order of a one-step method."
    )
    return _finish(ctx, FigureResult("discrete_gap", "Figure 7: discrete SAM against its flow as eta shrinks", [png], caption,
                                     [ctx.config_ref("discrete_gap"), ctx.config_ref("common")], checks), t0)


def _flow_dense(method, data, alpha, rho, ts):
    """The flow on a fine grid for drawing (one cell; the same save count as
    `flow_gap` uses, so the compilation is shared)."""
    fine = np.linspace(ts[-1] / ts.size, ts[-1], ts.size)
    tr = solve(method, data, alpha, rho, fine, depth=2, clock="t")
    return fine, tr.beta


# --- figure 8: banded data, the diagonal net and two non-diagonal nets --------------


class _BandedDataSpec(_Strict):
    """`samflow.datasets.banded(n, d, seed, n_bands=..., spread=...)`."""

    n: int = Field(ge=1)
    d: int = Field(ge=2)
    seed: int
    n_bands: int = Field(ge=2)
    spread: float = Field(ge=0)


class BandedConfig(_Strict):
    """configs/figures/banded.toml (also read by `generic_models`)."""

    data: _BandedDataSpec
    rho: float = Field(gt=0)
    alpha_over_rho: _LogAxis  # rows of the heat maps
    t_min: float = Field(gt=0)
    t1: float = Field(gt=0)
    mark_tol: float = Field(gt=0)  # rows within this relative distance of the band-first mark may start either way
    two_layer_width: int = Field(ge=1)  # k: U is (k, d); k >= d so that U(0) = alpha I gives beta(0) = alpha^2 1
    conv_channels: int = Field(ge=1)
    conv_kernel: int = Field(ge=1)

    @model_validator(mode="after")
    def _check(self):
        if self.two_layer_width < self.data.d:
            raise ValueError(f"two_layer_width must be >= data.d = {self.data.d} (U(0) = alpha I), got {self.two_layer_width}")
        if self.conv_kernel > self.data.d:
            raise ValueError(f"conv_kernel must be <= data.d = {self.data.d}, got {self.conv_kernel}")
        if not self.t_min < self.t1:
            raise ValueError(f"t_min must be below t1, got {self.t_min} and {self.t1}")
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


def _generic_model(name: str, cfg: BandedConfig) -> tuple[Model, Callable]:
    """The `samflow.models` model and its init alpha -> theta(0) (deterministic)."""
    d = cfg.data.d
    if name == "diagonal_autodiff":
        m = diagonal_network(2, d)
        return m, lambda a: m.init(a)
    if name == "two_layer":
        m = two_layer_linear(d, cfg.two_layer_width)
        return m, lambda a: m.init(a, seed=None)  # U = alpha I, v = alpha 1
    if name == "conv":
        m = linear_conv(cfg.conv_channels, cfg.conv_kernel, d)
        return m, lambda a: m.init(a, seed=None)  # w = alpha 1, v = alpha 1
    raise ValueError(f"internal: no generic model {name!r}")


def _banded_data(cfg: BandedConfig) -> tuple[Dataset, np.ndarray]:
    s = cfg.data
    return banded(s.n, s.d, s.seed, n_bands=s.n_bands, spread=s.spread)


def _solve_banded(ctx: Context, cfg: BandedConfig, name: str, data: Dataset, alpha, rho, ts) -> dict:
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
    model, init = _generic_model(name, cfg)
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
    """Dominant band (alpha, time): 1..n_bands, 0 from the collapse time on, -1 without a value."""
    dom = band_dominance(sol["beta"], band)
    gone = (sol["status"] == int(Status.COLLAPSED))[:, None] & (np.asarray(ts)[None, :] >= sol["event_time"][:, None])
    return np.where(gone, 0, dom)


def _band_cmap(nb: int):
    colors = ["#000000", "#bdbdbd"] + feature_colors(nb)  # no value, collapsed, bands 1..nb
    return ListedColormap(colors), BoundaryNorm(np.arange(-1.5, nb + 1.5), len(colors)), colors


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
    `samflow.analysis.band_dominance` of beta(t) (THEORY.md s.5, s.6); grey from
    the collapse time on. Checks: GD is flat at the major band; the diagonal
    net's first band is `theory.l2_first_band` and its band climbs in order
    between the collapse edge and `theory.l2_major_band_mark`; what the two
    non-diagonal nets do.

    **Returns:** a `FigureResult` (one PNG and PDF, `banded.png`).

    **Raises:** `ValueError` for a bad config file.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    cfg = ctx.config("banded", BandedConfig)
    data, band = _banded_data(cfg)
    nb = int(band.max()) + 1
    mu = np.mean(np.asarray(data.y)[:, None] * np.asarray(data.X), axis=0)  # r(beta = 0) / ell'(0)
    a_rel = cfg.alpha_over_rho.values()
    na = a_rel.size
    ts = ctx.log_times(cfg.t_min, cfg.t1)
    # One batch per model: rows 0..na-1 GD (rho = 0), na.. l2-SAM at rho.
    alphas = np.concatenate([a_rel, a_rel]) * cfg.rho
    rhos = np.concatenate([np.zeros(na), np.full(na, cfg.rho)])
    maps, sols = {}, {}
    band_missing: list[int] = []
    for name in BANDED_MODELS:
        sol = _solve_banded(ctx, cfg, name, data, alphas, rhos, ts)
        dom = _band_map(sol, ts, band)
        band_missing += np.asarray(sol["status"])[np.any(dom == -1, axis=-1)].tolist()
        maps[name] = (dom[:na], dom[na:])
        sols[name] = {k: (None if v is None else v[na:]) for k, v in sol.items() if k != "theta"}
    mark = theory.l2_major_band_mark(mu, band)
    shrink = float(theory.l2_alpha_marks(np.sort(mu), 1.0).all_shrink)

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
    handles = [Patch(facecolor=colors[2 + b], label=f"band {b + 1}" + (" (minor)" if b == 0 else " (major)" if b == nb - 1 else ""))
               for b in range(nb)]
    handles += [Patch(facecolor=colors[1], label="collapsed (critical point of $L$, $\\beta = 0$)"),
                Patch(facecolor=colors[0], label=no_value_label(band_missing)),
                Line2D([], [], color="k", ls="--", label=r"theory: band-$%d$-first mark (l2_major_band_mark)" % nb)]
    fig.suptitle(f"Dominant band of the predictor on banded data (n = {data.n}, d = {data.d}, {nb} bands), "
                 f"$\\rho = {cfg.rho:g}$: GD (top) vs $\\ell_2$-SAM (bottom)", fontsize=11.5)
    _layout_with_legend(fig, handles, ncol=3, inches=0.75, top=1 - 0.35 / fig.get_figheight(),
                        title=r"dominant band: largest mean $|\beta_j|$ over the band")
    png = _save(fig, ctx, "banded")

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

    # l2-SAM, row by row: collapsed, climbing (starts below the major band, ends at
    # it), still climbing at t1, or major first.
    rows = {}
    for name in BANDED_MODELS:
        dom, st = maps[name][1], sols[name]["status"]
        coll = st == int(Status.COLLAPSED)
        seqs = [visited_sequence(np.where(r > 0, r, 0)) for r in dom]
        rows[name] = (coll, seqs)
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

    # The diagonal net against the single-sample theory with mu = mean_i y_i x_i.
    coll, seqs = rows["diagonal"]
    live = ~coll
    # The marks hold at t -> 0; the first save is at t_min, so inits within mark_tol of
    # a mark (where two bands start at nearly the same rate) may show either band.
    m1 = np.array([mu[band == b].mean() for b in range(nb)])
    m2 = np.array([(mu[band == b] ** 2).mean() for b in range(nb)])
    ties = (m2[:, None] - m2[None, :]) / (np.sqrt(2.0) * np.linalg.norm(mu) * (m1[:, None] - m1[None, :] + np.eye(nb)))
    ties = ties[np.triu_indices(nb, 1)]
    near = np.any(np.abs(a_rel[:, None] / ties[None, :] - 1) < cfg.mark_tol, axis=1)
    first = np.array([s[0] if s else 0 for s in seqs])
    pred_first = theory.l2_first_band(a_rel, mu, band)
    judged = live & ~near
    n_eq = int(np.sum(first[judged] == pred_first[judged]))
    checks.append(Check("banded", "banded data, l2-SAM, diagonal net: the first dominant band (inits that do not collapse)",
                        "argmax_b mean_{j in b} mu_j (1 - mu_j / (sqrt 2 a ||mu||)), mu = mean_i y_i x_i, a = alpha/rho (theory.l2_first_band)",
                        f"{n_eq}/{int(judged.sum())} inits match (first save t = {ts[0]:g}; {int((live & near).sum())} within "
                        f"{100 * cfg.mark_tol:g}% of a mark not judged)", bool(n_eq == int(judged.sum()) and judged.any())))
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
    below, above = a_rel < mark * (1 - cfg.mark_tol), a_rel > mark * (1 + cfg.mark_tol)
    between = (a_rel > edge_c) & below
    ok = bool(full.any() and order_ok and np.all((climb | unfinished)[between]) and np.all(major[above])
              and edge_c < a_rel[climb].min() and a_rel[climb].max() < mark * (1 + cfg.mark_tol) and shrink < edge_c)
    checks.append(Check("banded", f"banded data, l2-SAM, diagonal net: the dominant band climbs minor -> major (1 -> ... -> {nb}) between the collapse edge and the major-first mark",
                        f"bands become dominant in increasing order for alpha/rho between the collapse edge (above the all-shrink mark {shrink:.3f}) "
                        f"and the band-{nb}-first mark {mark:.3f} (theory.l2_major_band_mark; +-{100 * cfg.mark_tol:g}%); band {nb} from the start above it",
                        f"{int(climb.sum())}/{na} rows ({climb.mean():.2f}) climb to band {nb}, alpha/rho in {_range_text(a_rel[climb])}, "
                        f"{int(full.sum())} of them through every band 1 -> {nb}; {int(unfinished.sum())} still climbing at t = {cfg.t1:g} "
                        f"(alpha/rho {_range_text(a_rel[unfinished])}); collapse up to {edge_c:.3f}, major first from {edge_m:.3f}; "
                        f"a minor band leads in {minor_cells}/{dm.size} ({minor_cells / dm.size:.2f}) of the (t, alpha) cells"
                        + ("" if order_ok else "; some rows not monotone"), ok))

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

    caption = (
        f"Banded data: samflow.datasets.banded(n = {data.n}, d = {data.d}, seed {cfg.data.seed}, {nb} bands of "
        f"{data.d // nb} coordinates, intensities 1/{nb} ... 1 from band 1 (minor) to band {nb} (major), spread "
        f"{cfg.data.spread:g}). Each pixel: the band with the largest mean |beta_j| of the predictor beta(t) at "
        f"(real time t, alpha/rho), rho = {cfg.rho:g}; top GD, bottom l2-SAM; grey from the collapse time on. Columns: "
        "the depth-2 diagonal network (w(0) = alpha 1, samflow.solve), the two-layer linear network f = <v, U x> "
        f"(k = {cfg.two_layer_width}, U(0) = alpha I, v(0) = alpha 1) and the two-layer linear convolutional network "
        f"({cfg.conv_channels} channels, kernel {cfg.conv_kernel}, circular, w(0) = alpha 1, v(0) = alpha 1; its "
        "effective linear predictor beta = grad_x f), both by samflow.models.solve_model (autodiff, with its collapse "
        "event). Every init has beta(0) proportional to 1, so the dominant band shows what was learned. GD is "
        "flat at the major band. l2-SAM on the diagonal net shows the single-sample picture: collapse for small "
        "alpha/rho, then the band climbs 1 -> 2 -> 3 (minor first, major last), and band 3 from the start above the "
        "mark of theory.l2_major_band_mark for mu = mean_i y_i x_i (dashed). The two non-diagonal nets differ: the "
        "fully connected two-layer net has no minor-first phase (its l2 shrinkage of beta is the same for every "
        "coordinate; only the collapse, which aligns beta with band 1 at the end, is left), while the conv net, whose "
        "per-position weights move like a diagonal layer, goes from band 1 straight to band 3."
    )
    return _finish(ctx, FigureResult("banded", "Figure 8: banded data, dominant band over time, three models",
                                     [png], caption, [ctx.config_ref("banded"), ctx.config_ref("common")], checks), t0)


# --- figure 9: any differentiable model, autodiff against the hand-written net -----


class GenericModelsConfig(_Strict):
    """configs/figures/generic_models.toml (data, rho, times and models from banded.toml)."""

    alpha_over_rho: list[float] = Field(min_length=1)  # one column each
    beta_tol: float = Field(gt=0)  # pass: autodiff vs hand-written beta, relative
    time_tol: float = Field(gt=0)  # pass: collapse times, relative
    critical_tol: float = Field(gt=0)  # pass: two-layer collapse point, relative


def _band_means(beta, band) -> np.ndarray:
    a = np.abs(np.asarray(beta))
    return np.stack([a[..., band == k].mean(axis=-1) for k in range(int(band.max()) + 1)], axis=-1)


def generic_models(out_dir, *, quick: bool = False, config_dir=None) -> FigureResult:
    """Figure 9: flows of any differentiable model (`samflow.models`, autodiff gradient).

    Top row: the depth-2 diagonal network solved by `solve_model` (autodiff)
    against `samflow.solve` (hand-written gradient, THEORY.md s.1-2), GD and
    l2-SAM, one column per alpha/rho: the same trajectories and collapse times.
    Below: the two-layer linear net and the two-layer linear conv net on the same
    data (configs/figures/banded.toml), with the collapse event of `solve_model`.

    **Returns:** a `FigureResult` (`generic_models.png`).

    **Raises:** `ValueError` for a bad config file.
    """
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    bcfg = ctx.config("banded", BandedConfig)
    cfg = ctx.config("generic_models", GenericModelsConfig)
    data, band = _banded_data(bcfg)
    nb = int(band.max()) + 1
    a_rel = np.asarray(cfg.alpha_over_rho, dtype=np.float64)
    m = a_rel.size
    ts = ctx.log_times(bcfg.t_min, bcfg.t1)
    alphas = np.concatenate([a_rel, a_rel]) * bcfg.rho
    rhos = np.concatenate([np.zeros(m), np.full(m, bcfg.rho)])
    names = ["diagonal", "diagonal_autodiff", "two_layer", "conv"]
    sols = {n: _solve_banded(ctx, bcfg, n, data, alphas, rhos, ts) for n in names}
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
                        f"the same trajectories: max_t |beta_auto - beta_hand| / max_j |beta_hand| < {cfg.beta_tol:g}, the same statuses",
                        f"{rel_max:.1e} over {2 * m} cells (GD and l2-SAM) x {ts.size} times; |beta_auto| <= {after_max:.0e} after the collapses; "
                        f"statuses {'equal' if same_status else 'differ'}",
                        bool(rel_max < cfg.beta_tol and same_status)))
    both = (hand["status"] == int(Status.COLLAPSED)) & (auto["status"] == int(Status.COLLAPSED))
    if both.any():
        trel = np.abs(auto["event_time"][both] - hand["event_time"][both]) / hand["event_time"][both]
        checks.append(Check("generic_models", "l2-SAM collapse of the diagonal network: solve_model's collapse event against samflow.solve's",
                            f"the same collapse time, relative difference < {cfg.time_tol:g}",
                            f"t = {', '.join(f'{t:.6g}' for t in hand['event_time'][both])} (hand-written); max relative difference {np.max(trel):.1e}",
                            bool(np.max(trel) < cfg.time_tol)))
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
                            bool(errU < cfg.critical_tol and vmax < cfg.critical_tol and loss_gap < 1e-9)))

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
    handles += [Line2D([], [], color="0.3", lw=1.7, label=r"$\ell_2$-SAM"), Line2D([], [], color="0.3", ls=":", lw=1.2, label="GD"),
                Line2D([], [], color="0.3", ls="none", marker="o", mfc="none", label="solve_model (autodiff), diagonal net"),
                Line2D([], [], color="k", ls="--", lw=0.9, label=r"$\ell_2$-SAM collapse time")]
    fig.suptitle(f"Flows of any differentiable model (autodiff gradient) on banded data, $\\rho = {bcfg.rho:g}$", fontsize=11.5)
    _layout_with_legend(fig, handles, ncol=4, inches=0.7, top=1 - 0.3 / fig.get_figheight())
    png = _save(fig, ctx, "generic_models")
    caption = (
        "samflow.models.solve_model integrates the GD and SAM flows of any model f(theta, x) with the gradient from "
        "autodiff (THEORY.md s.2), with an l2-SAM collapse event at any critical point of the loss. Data and "
        f"models as in the banded figure (configs/figures/banded.toml, rho = {bcfg.rho:g}); each panel shows the "
        "band means of |beta_j(t)| for GD (dotted) and l2-SAM (solid) at one alpha/rho, a dashed line at the "
        "collapse time. Top row: the depth-2 diagonal network solved by samflow.solve (hand-written gradient, "
        "lines) and by solve_model (autodiff, markers): the same curves and collapse times. Middle: the two-layer "
        "linear net f = <v, U x> from U = alpha I, v = alpha 1: l2-SAM shrinks every band alike and collapses to "
        "v = 0, U r = 0 (not to theta = 0), or follows the major band like GD. Bottom: the two-layer linear conv "
        "net (effective predictor grad_x f): l2-SAM lets the minor band lead before the major one."
    )
    return _finish(ctx, FigureResult("generic_models", "Figure 9: any differentiable model: autodiff flows, two-layer and conv nets",
                                     [png], caption, [ctx.config_ref("generic_models"), ctx.config_ref("banded"), ctx.config_ref("common")], checks), t0)


# --- running everything: groups, report, index ------------------------------------

FIGURES: dict[str, Callable[..., FigureResult]] = {
    "depth1_directions": depth1_directions,
    "linf_limit": linf_limit,
    "regime_chart": regime_chart,
    "staircase": staircase,
    "trajectories": trajectories,
    "usam_ablation": usam_ablation,
    "discrete_gap": discrete_gap,
    "banded": banded_heatmaps,
    "generic_models": generic_models,
}

# Figures that share compilations run in one process, in this order (the real-time
# depth-2 solves of the first group serve all four of its figures).
GROUPS: list[list[str]] = [
    ["staircase", "usam_ablation", "trajectories", "depth1_directions"],
    ["banded", "generic_models"],  # the same data and models: shared compilations
    ["linf_limit"],
    ["regime_chart"],
    ["discrete_gap"],
]


def _run_group(names: list[str], out_dir: str, quick: bool, config_dir: str | None) -> list[FigureResult]:
    return [FIGURES[n](out_dir, quick=quick, config_dir=config_dir) for n in names]


# Every figure config file (configs/figures/<name>.toml) and its schema.
FIGURE_CONFIGS: dict[str, type[BaseModel]] = {
    "common": CommonConfig,
    "depth1_directions": DirectionsConfig,
    "linf_limit": LinfConfig,
    "regime_chart": RegimeChartConfig,
    "staircase": StaircaseConfig,
    "trajectories": TrajectoriesConfig,
    "usam_ablation": UsamConfig,
    "discrete_gap": DiscreteGapConfig,
    "banded": BandedConfig,
    "generic_models": GenericModelsConfig,
}


def check_figure_configs(quick: bool = False, config_dir=None) -> None:
    """Validate every figure config file (full and `[quick]` versions) up front, so a
    bad value stops the run before any figure is built or any folder made.

    **Raises:** `samflow.config.ConfigError` listing every problem of every file,
    one line each, naming the file and the key.
    """
    config_dir = Path(config_dir or CONFIG_DIR)
    problems = []
    for name, model in FIGURE_CONFIGS.items():
        try:
            load_figure_config(config_dir / f"{name}.toml", model, quick)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("\n".join(problems))


def run_all(out_dir, *, quick: bool = False, only: list[str] | None = None, jobs: int = 1,
            config_dir=None, progress: Callable[[str], None] | None = None) -> list[FigureResult]:
    """Build the figures (all, or those named in `only`), then the report and the index.

    With `jobs` > 1 the groups of `GROUPS` run in that many worker processes
    (spawned, each compiling its own solvers), largest group first.

    **Returns:** the `FigureResult`s in the order of `FIGURES`.

    **Raises:** `ValueError` for an unknown figure name; `samflow.config.ConfigError`
    (a `ValueError`) for a bad config file (`check_figure_configs`), before any
    figure is built.
    """
    names = list(FIGURES) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(FIGURES)}")
    check_figure_configs(quick, config_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = [[n for n in g if n in names] for g in GROUPS]
    groups = [g for g in groups if g]
    say = progress or (lambda msg: None)
    results: dict[str, FigureResult] = {}
    cdir = None if config_dir is None else str(config_dir)
    if jobs <= 1:
        for g in groups:
            for n in g:
                say(f"building {n} ...")
                results[n] = FIGURES[n](out_dir, quick=quick, config_dir=cdir)
                say(f"  {n}: {results[n].seconds:.1f} s")
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")  # JAX does not survive fork
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
            futs = {ex.submit(_run_group, g, str(out_dir), quick, cdir): g for g in groups}
            say(f"building {len(names)} figure(s) in {len(groups)} group(s) on {jobs} processes ...")
            for f in as_completed(futs):
                for r in f.result():
                    results[r.name] = r
                    say(f"  {r.name}: {r.seconds:.1f} s")
    ordered = [results[n] for n in FIGURES if n in results]
    write_report(out_dir, ordered, quick=quick)
    write_index(out_dir, ordered, quick=quick)
    return ordered


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report_table(results: list[FigureResult]) -> str:
    """The checks of all figures as a Markdown table: claim, prediction, measurement, result."""
    rows = ["| # | figure | claim | prediction | measurement | result |", "|---|---|---|---|---|---|"]
    k = 0
    for r in results:
        for c in r.checks:
            k += 1
            res = _verdict(c.passed) + (f" ({c.note})" if c.note else "")
            rows.append(f"| {k} | {r.name} | {_cell(c.claim)} | {_cell(c.prediction)} | {_cell(c.measurement)} | **{res}** |")
    return "\n".join(rows)


def _summary(results: list[FigureResult]) -> tuple[int, int, int]:
    checks = [c for r in results for c in r.checks]
    return (sum(c.passed is True for c in checks), sum(c.passed is False for c in checks),
            sum(c.passed is None for c in checks))


def write_report(out_dir, results: list[FigureResult], *, quick: bool = False) -> Path:
    """report.md: the table of checks and the time each figure took."""
    import platform

    n_pass, n_fail, n_note = _summary(results)
    lines = [
        "# Theory against simulation" + (" (quick run)" if quick else ""),
        "",
        f"{n_pass} checks pass, {n_fail} fail, {n_note} not checked in this mode. Each row states a claim of "
        "THEORY.md / the paper, the theory's prediction (samflow.theory or a closed form), and what the "
        "simulation measured (samflow.analysis on samflow's solvers). Figures: [index.md](index.md).",
        "",
        report_table(results),
        "",
        "## Time per figure",
        "",
        "| figure | wall s | CPU s |",
        "|---|---|---|",
    ]
    lines += [f"| {r.name} | {r.seconds:.1f} | {r.cpu_seconds:.1f} |" for r in results]
    lines += ["", f"Machine: {os.cpu_count()} CPU(s), {platform.platform()}, Python {platform.python_version()}, "
              f"jax {jax.__version__}. Compilation of the solvers dominates the CPU time: one per (method, clock, "
              "depth, data shape) in each process.", ""]
    path = Path(out_dir) / "report.md"
    path.write_text("\n".join(lines))
    return path


def write_index(out_dir, results: list[FigureResult], *, quick: bool = False) -> Path:
    """index.md: every figure with its caption and links to its PDF, caption and config."""
    n_pass, n_fail, n_note = _summary(results)
    lines = [
        "# samflow figures" + (" (quick run: small grids)" if quick else ""),
        "",
        "Regenerated by `python scripts/reproduce_figures.py" + (" --quick" if quick else "") + "`; "
        "the parameters of each figure are in `configs/figures/`. "
        f"Theory-vs-simulation report: [report.md](report.md) ({n_pass} pass, {n_fail} fail, {n_note} not checked).",
        "",
    ]
    lines += [f"- [{r.title}](#{r.name.replace('_', '-')})" for r in results]
    lines.append("")
    for r in results:
        lines += [f"<a id=\"{r.name.replace('_', '-')}\"></a>", "", f"## {r.title}", ""]
        for png in r.pngs:
            lines += [f"![{png}]({png})", "", f"[{Path(png).with_suffix('.pdf').name}]({Path(png).with_suffix('.pdf').name})", ""]
        lines += [r.caption, "", f"Caption file: [{r.name}.caption.md]({r.name}.caption.md). Config: "
                  + ", ".join(f"`{c}`" for c in r.configs) + f". Built in {r.seconds:.0f} s.", ""]
        if r.checks:
            lines += [f"Checks: {sum(c.passed is True for c in r.checks)} pass, {sum(c.passed is False for c in r.checks)} fail"
                      + (f", {sum(c.passed is None for c in r.checks)} not checked" if any(c.passed is None for c in r.checks) else "")
                      + " (see report.md).", ""]
    path = Path(out_dir) / "index.md"
    path.write_text("\n".join(lines))
    return path
