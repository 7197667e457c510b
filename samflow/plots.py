"""Figures of a sweep, drawn from its results `xarray.Dataset` (matplotlib, Agg).

- `plot_dominant_heatmap`: dominant feature index argmax_j |beta_j| over
  (time, alpha) at one rho, one panel per method (THEORY.md section 6). Discrete
  colours 1 (minor) .. d (major); collapsed cells (beta = 0) and cells without a
  value (blow-up, failure) have colours of their own, named in the legend.
- `plot_trajectories`: the normalized predictor beta/||beta|| and the loss for a
  few alphas, per method.
- `plot_regime_chart`: regime 1/2/3 over (alpha, rho), per method.
- `plot_sweep`: all of the above that the sweep's grid allows; returns the paths.

A results file saved with `output.save = "summary"` has no beta: the heat map
and the regime chart are drawn from its `dominant` and `tied` variables (the
same pictures as from the full run), and the trajectories are not drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .analysis import dominant_index, regime_label, regime_label_from_dominant  # noqa: E402
from .flows import METHOD_LABELS, Method  # noqa: E402

__all__ = ["plot_dominant_heatmap", "plot_trajectories", "plot_regime_chart", "plot_sweep", "feature_colors", "is_summary"]

COLLAPSED_COLOR = "#d9d9d9"
MISSING_COLOR = "#000000"
REGIME_COLORS = ["#ffffff", "#bdbdbd", "#fdae61", "#2c7bb6"]  # undetermined, 1, 2, 3
REGIME_NAMES = ["undetermined", "1: collapse", "2: minor first, major last", "3: major first"]


def feature_colors(d: int) -> list:
    """d distinct colours from minor (1, purple) to major (d, yellow)."""
    cmap = plt.get_cmap("viridis")
    return [cmap(x) for x in (np.linspace(0.0, 1.0, d) if d > 1 else [0.5])]


def _method_label(name: str) -> str:
    try:
        return METHOD_LABELS[Method(name)]
    except ValueError:
        return name


def _time_label(ds) -> str:
    return "real time $t$" if ds.attrs.get("clock", "t") == "t" else r"rescaled time $\tau$"


def _alpha_label(ds) -> str:
    return r"init scale $\alpha/\rho$" if int(ds.attrs.get("alpha_relative_to_rho", 0)) else r"init scale $\alpha$"


def _edges(x: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around centres x (geometric midpoints on a log axis)."""
    x = np.asarray(x, dtype=float)
    if x.size == 1:
        return np.array([x[0] / 1.5, x[0] * 1.5]) if log else np.array([x[0] - 0.5, x[0] + 0.5])
    if log:
        lx = np.log(x)
        mid = (lx[1:] + lx[:-1]) / 2
        return np.exp(np.concatenate([[lx[0] - (mid[0] - lx[0])], mid, [lx[-1] + (lx[-1] - mid[-1])]]))
    mid = (x[1:] + x[:-1]) / 2
    return np.concatenate([[x[0] - (mid[0] - x[0])], mid, [x[-1] + (x[-1] - mid[-1])]])


def _is_log(x: np.ndarray) -> bool:
    x = np.asarray(x, dtype=float)
    if x.size < 3 or np.any(x <= 0):
        return bool(x.size >= 2 and np.all(x > 0) and x[-1] / x[0] > 50)
    r = x[1:] / x[:-1]
    return bool(np.allclose(r, r[0], rtol=1e-6)) or x[-1] / x[0] > 50


def _nearest(values: np.ndarray, v: float) -> int:
    values = np.asarray(values, dtype=float)
    return int(np.argmin(np.abs(np.log(values / v)) if np.all(values > 0) and v > 0 else np.abs(values - v)))


def is_summary(ds) -> bool:
    """Whether `ds` holds the results of a sweep saved with `output.save = "summary"`."""
    return "beta" not in ds and "dominant" in ds


def _dominant(ds, m, ir: int) -> np.ndarray:
    """Dominant index (alpha, time) of method m at rho index ir, from either kind of file."""
    if is_summary(ds):
        return ds["dominant"].sel(flow=m).isel(rho=ir).values.astype(np.int64)
    return dominant_index(ds["beta"].sel(flow=m).isel(rho=ir).values)  # beta (alpha, time, d)


def _regimes(ds, m) -> np.ndarray:
    """Regime labels (alpha, rho) of method m, from either kind of file."""
    status = ds["status"].sel(flow=m).values
    if is_summary(ds):
        return regime_label_from_dominant(
            ds["dominant"].sel(flow=m).values, ds["tied"].sel(flow=m).values, status, ds.sizes["coord"]
        )
    return regime_label(ds["beta"].sel(flow=m).values, status)


def plot_dominant_heatmap(ds, path: "str | Path", rho: float | None = None, methods=None) -> Path:
    """Heat map of the dominant feature index over (time, alpha) at one rho.

    **Arguments:** `ds` the results of a sweep; `path` the PNG to write (a PDF is
    written next to it); `rho` (default the first) picks the nearest grid rho;
    `methods` a subset of the sweep's methods.

    **Returns:** the PNG path.
    """
    path = Path(path)
    methods = list(methods or ds["flow"].values)
    ir = 0 if rho is None else _nearest(ds["rho"].values, rho)
    rho_v = float(ds["rho"].values[ir])
    d = ds.sizes["coord"]
    times = ds["time"].values
    alphas = ds["alpha"].values
    colors = [MISSING_COLOR, COLLAPSED_COLOR] + feature_colors(d)
    cmap = ListedColormap(colors)
    norm = BoundaryNorm(np.arange(-1.5, d + 1.5, 1.0), cmap.N)
    t_log, a_log = _is_log(times), _is_log(alphas)
    te, ae = _edges(times, t_log), _edges(alphas, a_log)
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods) + 1.2, 4.2), sharey=True, squeeze=False)
    axes = axes[0]
    mesh = None
    for ax, m in zip(axes, methods):
        dom = _dominant(ds, m, ir)
        mesh = ax.pcolormesh(te, ae, dom, cmap=cmap, norm=norm, shading="flat", rasterized=True)
        if t_log:
            ax.set_xscale("log")
        if a_log:
            ax.set_yscale("log")
        ax.set_title(_method_label(m))
        ax.set_xlabel(_time_label(ds))
    axes[0].set_ylabel(_alpha_label(ds))
    cbar = fig.colorbar(mesh, ax=list(axes), ticks=np.arange(1, d + 1), boundaries=np.arange(0.5, d + 1.5, 1.0), values=np.arange(1, d + 1), fraction=0.03, pad=0.02)
    labels = [str(j) for j in range(1, d + 1)]
    labels[0] += " (minor)"
    if d > 1:
        labels[-1] += " (major)"
    cbar.ax.set_yticklabels(labels)
    cbar.set_label(r"dominant feature $\arg\max_j |\beta_j|$")
    handles = [Patch(color=COLLAPSED_COLOR, label=r"collapsed ($\beta = 0$)"), Patch(color=MISSING_COLOR, label="no value (blow-up / failed)")]
    fig.legend(handles=handles, loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.45, -0.02))
    depth = ds.attrs.get("depth", "?")
    fig.suptitle(rf"Dominant feature over time, depth $L={depth}$, $\rho={rho_v:g}$, $d={d}$")
    fig.subplots_adjust(bottom=0.2, top=0.85, right=0.86)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    fig.savefig(path.with_suffix(".pdf"), bbox_inches="tight")
    plt.close(fig)
    return path


def _representative_alphas(ds, ir: int, k: int = 3) -> list[int]:
    """Indices of alphas showing each regime of the first SAM method (or spread)."""
    sam = [m for m in ds["flow"].values if m != "gd"]
    picks = []
    if sam:
        beta = ds["beta"].sel(flow=sam[0]).isel(rho=ir).values
        status = ds["status"].sel(flow=sam[0]).isel(rho=ir).values
        reg = regime_label(beta, status)
        for r in (1, 2, 3):
            idx = np.flatnonzero(reg == r)
            if idx.size:
                picks.append(int(idx[idx.size // 2]))
    if len(picks) < min(k, ds.sizes["alpha"]):
        spread = np.linspace(0, ds.sizes["alpha"] - 1, k).round().astype(int)
        picks = sorted(set(picks) | set(spread.tolist()))[: max(k, len(picks))]
    return sorted(set(picks))


def plot_trajectories(ds, path: "str | Path", rho: float | None = None, alphas=None) -> Path:
    """beta_j/||beta||_2 and the loss over time for a few alphas: rows methods, columns alphas.

    A dotted vertical line marks the collapse / blow-up time when there is one.

    **Arguments:** `alphas` values on the sweep's alpha axis (nearest grid points
    are used); default one per regime of the first SAM method.

    **Returns:** the PNG path (a PDF is written next to it).

    **Raises:** `ValueError` for a results file saved with `output.save =
    "summary"` (it has no beta).
    """
    if is_summary(ds):
        raise ValueError(
            'the trajectory figure needs beta over time: rerun the sweep with output.save = "full" '
            "(this results file is a summary)"
        )
    path = Path(path)
    ir = 0 if rho is None else _nearest(ds["rho"].values, rho)
    rho_v = float(ds["rho"].values[ir])
    if alphas is None:
        ia = _representative_alphas(ds, ir)
    else:
        ia = sorted({_nearest(ds["alpha"].values, a) for a in alphas})
    methods = list(ds["flow"].values)
    d = ds.sizes["coord"]
    cols = feature_colors(d)
    times = ds["time"].values
    fig, axes = plt.subplots(len(methods), len(ia), figsize=(3.6 * len(ia) + 0.8, 2.8 * len(methods)), squeeze=False, sharex=True)
    for i, m in enumerate(methods):
        for j, a in enumerate(ia):
            ax = axes[i, j]
            beta = ds["beta"].sel(flow=m).isel(rho=ir, alpha=a).values
            loss = ds["loss"].sel(flow=m).isel(rho=ir, alpha=a).values
            norm = np.sqrt(np.sum(beta**2, axis=-1))
            unit = np.where(norm[:, None] > 0, beta / np.where(norm[:, None] > 0, norm[:, None], 1.0), np.nan)
            for k in range(d):
                ax.plot(times, unit[:, k], color=cols[k], lw=1.4, label=rf"$\beta_{{{k + 1}}}/\|\beta\|$")
            ax.set_xscale("log")
            ax.set_ylim(min(-0.05, float(np.nanmin(unit, initial=0.0)) - 0.05), 1.05)
            t_ev = float(ds["event_time"].sel(flow=m).isel(rho=ir, alpha=a).values)
            if np.isfinite(t_ev):
                ax.axvline(t_ev, color="0.4", lw=0.8, ls=":")
            ax2 = ax.twinx()
            ax2.plot(times, loss, "k--", lw=1.0, label="loss")
            ax2.set_ylim(0, 1.05 * max(float(np.nanmax(loss, initial=0.0)), 1e-12))
            if j == len(ia) - 1:
                ax2.set_ylabel("loss (dashed)")
            status = int(ds["status"].sel(flow=m).isel(rho=ir, alpha=a).values)
            reg = int(regime_label(beta[None], np.asarray([status]))[0])
            a_v = float(ds["alpha"].values[a])
            ax.set_title(f"{_method_label(m)}, " + (rf"$\alpha/\rho$={a_v:.3g}" if int(ds.attrs.get('alpha_relative_to_rho', 0)) else rf"$\alpha$={a_v:.3g}") + (f", regime {reg}" if reg else ""), fontsize=9)
            if j == 0:
                ax.set_ylabel(r"normalized predictor $\beta_j/\|\beta\|_2$")
            if i == len(methods) - 1:
                ax.set_xlabel(_time_label(ds))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="k", ls="--"))
    labels.append("loss")
    fig.legend(handles, labels, loc="upper center", ncol=min(d + 1, 8), frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(rf"Trajectories at $\rho={rho_v:g}$ (depth {ds.attrs.get('depth', '?')})", y=1.04)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    fig.savefig(path.with_suffix(".pdf"), bbox_inches="tight")
    plt.close(fig)
    return path


def plot_regime_chart(ds, path: "str | Path", methods=None) -> Path:
    """Regime label (1 collapse, 2 minor first, 3 major first) over (alpha, rho).

    The y axis is the absolute init scale alpha, both axes log when the grid is.
    **Returns:** the PNG path (a PDF is written next to it).
    """
    path = Path(path)
    methods = list(methods or [m for m in ds["flow"].values if m != "gd"] or ds["flow"].values)
    rhos = ds["rho"].values
    alpha_abs = ds["alpha_init"].values  # (alpha, rho)
    cmap = ListedColormap(REGIME_COLORS)
    norm = BoundaryNorm(np.arange(-0.5, 4.5, 1.0), cmap.N)
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods) + 0.5, 4.0), squeeze=False, sharey=True)
    for ax, m in zip(axes[0], methods):
        reg = _regimes(ds, m)  # (alpha, rho)
        R = np.broadcast_to(rhos[None, :], alpha_abs.shape)
        ax.pcolormesh(R, alpha_abs, reg, cmap=cmap, norm=norm, shading="nearest", rasterized=True)
        if _is_log(rhos):
            ax.set_xscale("log")
        if np.all(alpha_abs > 0):
            ax.set_yscale("log")
        ax.set_xlabel(r"SAM radius $\rho$")
        ax.set_title(_method_label(m))
    axes[0, 0].set_ylabel(r"init scale $\alpha$")
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.3, label=n) for c, n in zip(REGIME_COLORS, REGIME_NAMES)]
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, -0.06))
    fig.suptitle(f"Regimes over (alpha, rho), depth {ds.attrs.get('depth', '?')}")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    fig.savefig(path.with_suffix(".pdf"), bbox_inches="tight")
    plt.close(fig)
    return path


def plot_sweep(ds, out_dir: "str | Path", cfg=None) -> list[Path]:
    """Draw every figure the sweep's grid supports into `out_dir`; return the PNG paths.

    For a summary file (`output.save = "summary"`) the trajectory figure is
    skipped, with a one-line note on stderr.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_rho = cfg.output.plot_rho if cfg is not None else None
    traj_alphas = cfg.output.trajectory_alphas if cfg is not None else None
    paths = [plot_dominant_heatmap(ds, out_dir / "dominant_heatmap.png", rho=plot_rho)]
    if is_summary(ds):
        print(
            'note: no trajectory figure: the results are a summary without beta over time; '
            'it needs output.save = "full"',
            file=sys.stderr,
        )
    else:
        paths.append(plot_trajectories(ds, out_dir / "trajectories.png", rho=plot_rho, alphas=traj_alphas))
    if ds.sizes["rho"] > 1:
        paths.append(plot_regime_chart(ds, out_dir / "regime_chart.png"))
    return paths
