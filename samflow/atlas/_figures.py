"""Figures of the atlas, drawn from the atlas dataset alone (`draw_atlas`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from .._util.io import atomic_savefig
from .._labels import method_text
from ..plots._common import plain_log_labels

__all__ = ["draw_atlas", "tables"]

_MARKERS = {"linear": "o", "geometric": "s", "random": "^"}


def _save(fig, out: Path, name: str, dpi: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    plain_log_labels(fig)
    atomic_savefig(fig, path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def _colors(n):
    return plt.get_cmap("viridis")(np.linspace(0.0, 0.9, max(n, 1)))


def edges_vs_depth(ds: xr.Dataset, out: Path, dpi: int = 90) -> Path:
    """Edges against depth L, one line per d (linear spectrum), one panel per (method, samples)."""
    methods, kinds = list(ds.method.values), list(ds.samples.values)
    fig, axes = plt.subplots(len(methods), len(kinds), figsize=(4.6 * len(kinds), 3.6 * len(methods)),
                             squeeze=False, sharex=True)
    L = ds.depth.values
    cols = _colors(ds.d.size)
    bars = False
    for i, m in enumerate(methods):
        for j, k in enumerate(kinds):
            ax = axes[i, j]
            sub = ds.sel({"method": m, "samples": k, "spectrum": "linear"})
            for c, d in zip(cols, ds.d.values):
                s = sub.sel(d=d)
                ax.plot(L, s.collapse_edge, "o-", color=c, ms=4, label=f"d = {d}")
                ax.plot(L, s.major_edge, "s--", color=c, ms=4)
                ax.plot(L, s.major_low_edge, "v:", color=c, ms=4)
                ax.plot(L, s.mark_major, "x", color="k", ms=5, alpha=0.6)
                for var in _EDGES:
                    bars |= _unconverged(ax, L, s[var], *_bracket(s, var), c)
            vals = np.concatenate([a.values.ravel() for v in _EDGES for a in (sub[v], *_bracket(sub, v))])
            vals = vals[np.isfinite(vals)]
            if vals.size and np.ptp(np.log10(vals)) > 0.05:
                ax.set_yscale("log")
            else:  # linf: every edge is a = 1
                ax.set_ylim(0.5, 1.5)
            ax.set_title(f"{method_text(m)}, {'one sample' if k == 'one' else k + ' samples'}", fontsize=10)
            ax.set_xlabel("depth L")
            ax.set_ylabel(r"edge, $\alpha/\rho$")
            ax.set_xticks(L)
    axes[0, 0].legend(fontsize=7, ncol=2, title="o collapse, s major-first,\nv odd-L lower edge, x theory" + _BAR_KEY * bars,
                      title_fontsize=7)
    fig.suptitle(r"Regime edges against depth (linear $\mu_j = j/d$)", fontsize=11)
    return _save(fig, out, "fig_edges_vs_depth", dpi)


def edges_vs_d(ds: xr.Dataset, out: Path, dpi: int = 90) -> Path:
    """l2 edges against d, one line per depth (linear spectrum), one panel per samples kind."""
    kinds = list(ds.samples.values)
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.8 * len(kinds), 3.8), squeeze=False)
    cols = _colors(ds.depth.size)
    d = ds.d.values
    bars = False
    for j, k in enumerate(kinds):
        ax = axes[0, j]
        sub = ds.sel({"method": "l2", "samples": k, "spectrum": "linear"}) if "l2" in ds.method else None
        if sub is None:
            continue
        for c, L in zip(cols, ds.depth.values):
            s = sub.sel(depth=L)
            ax.plot(d, s.collapse_edge, "o-", color=c, ms=4, label=f"L = {L}")
            ax.plot(d, s.major_edge, "s--", color=c, ms=4)
            ax.plot(d, s.major_low_edge, "v:", color=c, ms=4)
            for var in _EDGES:
                bars |= _unconverged(ax, d, s[var], *_bracket(s, var), c)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(d)
        ax.set_xticklabels([str(v) for v in d])
        ax.set_xlabel("dimension d")
        ax.set_ylabel(r"edge, $\alpha/\rho$")
        ax.set_title(f"{method_text('l2')}, {'one sample' if k == 'one' else k + ' samples'}", fontsize=10)
    axes[0, 0].legend(fontsize=7, title="o collapse, s major-first,\nv odd-L lower edge" + _BAR_KEY * bars,
                      title_fontsize=7)
    fig.suptitle(r"Regime edges against dimension (linear $\mu_j = j/d$)", fontsize=11)
    return _save(fig, out, "fig_edges_vs_d", dpi)


def edges_vs_gap(ds: xr.Dataset, out: Path, dpi: int = 90) -> Path:
    """l2 edges against the spectral gap mu_(d-1)/mu_d, every spectrum and d, one sample."""
    k = str(ds.samples.values[0])
    sub = ds.sel({"method": "l2", "samples": k})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9))
    cols = _colors(ds.depth.size)
    gap = sub.gap.values  # (d, spectrum)
    # The marks of s.3.1 scale like mu_d / ||mu||: show a ||mu|| / mu_d, where the
    # depth-2 major-first edge is the line (1 + gap) / sqrt 2.
    mu = sub.mu.values  # (d, spectrum, feature)
    scale = np.sqrt(np.nansum(mu**2, axis=-1)) / np.nanmax(mu, axis=-1)
    g = np.linspace(0.0, 1.0, 50)
    axes[1].plot(g, (1 + g) / np.sqrt(2), "k--", lw=1, label=r"L = 2 theory $(1+\mathrm{gap})/\sqrt{2}$")
    bars = False
    for ax, var, title in ((axes[0], "collapse_edge", "collapse edge (regime 1/2)"),
                           (axes[1], "major_edge", "major-first edge (regime 2/3)")):
        for c, L in zip(cols, ds.depth.values):
            v = sub[var].sel(depth=L).values  # (d, spectrum)
            lo, hi = (b.sel(depth=L).values for b in _bracket(sub, var))
            if not np.any(np.isfinite(lo)):
                continue
            for si, lab in enumerate(ds.spectrum.values):
                kind = str(lab).split()[0]
                ax.scatter(gap[:, si], v[:, si] * scale[:, si], color=c, marker=_MARKERS.get(kind, "o"), s=18,
                           label=f"L = {L}" if si == 0 else None)
                bars |= _unconverged(ax, gap[:, si], v[:, si], lo[:, si] * scale[:, si], hi[:, si] * scale[:, si], c)
        ax.set_yscale("log")
        ax.set_xlabel(r"spectral gap $\mu_{d-1}/\mu_d$")
        ax.set_ylabel(r"$(\alpha/\rho)\, \|\mu\| / \mu_d$")
        ax.set_title(title, fontsize=10)
    axes[1].legend(fontsize=7, title="o linear, s geometric, ^ random" + _BAR_KEY * bars, title_fontsize=7)
    fig.subplots_adjust(wspace=0.3)
    fig.suptitle(f"{method_text('l2')} edges against the spectral gap ({'one sample' if k == 'one' else k + ' samples'}, every d)",
                 fontsize=11)
    return _save(fig, out, "fig_edges_vs_gap", dpi)


def width_map(ds: xr.Dataset, out: Path, dpi: int = 90) -> Path:
    """Width of regime 2, log10(major edge / lower edge), over (L, d), l2, linear spectrum."""
    kinds = list(ds.samples.values)
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.6 * len(kinds), 3.6), squeeze=False)
    for j, k in enumerate(kinds):
        ax = axes[0, j]
        at = {"method": "l2", "samples": k, "spectrum": "linear"}
        w = ds.width.sel(at).values  # (L, d)
        w_lo, w_hi = (b.sel(at).values for b in _bracket(ds, "width"))
        im = ax.imshow(w.T, origin="lower", cmap="magma", aspect="auto")
        for (a, b), v in np.ndenumerate(w):
            if np.isfinite(v):
                ax.text(a, b, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="w" if v < np.nanmean(w) else "k")
            elif np.isfinite(w_lo[a, b]) and np.isfinite(w_hi[a, b]):  # an edge did not converge: no colour
                ax.text(a, b, f"NaN\n[{w_lo[a, b]:.2f},\n{w_hi[a, b]:.2f}]", ha="center", va="center", fontsize=5)
        ax.set_xticks(range(ds.depth.size))
        ax.set_xticklabels(ds.depth.values)
        ax.set_yticks(range(ds.d.size))
        ax.set_yticklabels(ds.d.values)
        ax.set_xlabel("depth L")
        ax.set_ylabel("dimension d")
        ax.set_title(f"{'one sample' if k == 'one' else k + ' samples'}", fontsize=10)
        fig.colorbar(im, ax=ax, label="decades of alpha/rho")
    fig.suptitle("Width of regime 2 (minor first, major last), l2-SAM, linear mu:\n"
                 "log10(major-first edge / collapse edge); odd L: / lower first-leader edge", fontsize=10, y=1.06)
    fig.subplots_adjust(wspace=0.35)
    return _save(fig, out, "fig_width", dpi)


def staircase_time(ds: xr.Dataset, out: Path, dpi: int = 90) -> Path:
    """Last switch time against alpha/rho, and against the distance to the lower edge."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9))
    cols = _colors(ds.stair_depth.size)
    for c, (li, L) in zip(cols, enumerate(ds.stair_depth.values)):
        a = ds.stair_a.values[li]
        t = ds.stair_last_switch.values[li]
        low, top = ds.stair_edges.values[li]
        axes[0].plot(a, t, ".-", color=c, label=f"L = {L}")
        axes[0].axvline(top, color=c, ls="--", lw=0.8)
        axes[0].axvline(low, color=c, ls=":", lw=0.8)
        if L % 2 == 0:
            axes[1].plot(a / low - 1.0, t, ".-", color=c, label=f"L = {L}")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel(r"$\alpha/\rho$ (dotted: lower edge, dashed: major-first edge)")
    axes[0].set_ylabel(r"last switch time $\tau$ ($\rho = 1$)")
    axes[0].legend(fontsize=7)
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel(r"$a / a_{\mathrm{collapse}} - 1$ (even depths)")
    axes[1].set_ylabel(r"last switch time $\tau$")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"Time of the staircase, l2-SAM, one sample, mu_j = j/{int(ds.stair_d)}", fontsize=11)
    return _save(fig, out, "fig_staircase_time", dpi)


def draw_atlas(ds: xr.Dataset, out: str | Path, dpi: int = 90) -> list[Path]:
    """Every atlas figure from the atlas dataset `ds` into `out`; returns the paths."""
    out = Path(out)
    paths = [edges_vs_depth(ds, out, dpi)]
    if "l2" in ds.method:
        paths += [edges_vs_d(ds, out, dpi), edges_vs_gap(ds, out, dpi), width_map(ds, out, dpi)]
    if "stair_a" in ds:
        paths.append(staircase_time(ds, out, dpi))
    return paths


_EDGES = ("collapse_edge", "major_edge", "major_low_edge")
_BAR_KEY = ",\n| bracket of an unconverged edge (NaN)"
_BRACKET = {"collapse_edge": "collapse", "major_edge": "major", "major_low_edge": "major_low", "width": "width"}


def _bracket(ds: xr.Dataset, var: str) -> tuple[xr.DataArray, xr.DataArray]:
    """The bracket [lo, hi] of an edge (or of the width) of the atlas dataset."""
    key = _BRACKET[var]
    return ds[f"{key}_lo"], ds[f"{key}_hi"]


def _fmt(v, lo, hi) -> str:
    """A table cell: the value to 4 digits; where it is NaN but its bisection found a
    bracket (it did not converge), "NaN [lo, hi]" with the digits that tell lo from hi."""
    if np.isfinite(v):
        return f"{v:.4g}"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "-"
    n = 4
    while n < 12 and f"{lo:.{n}g}" == f"{hi:.{n}g}":
        n += 1
    return f"NaN [{lo:.{n}g}, {hi:.{n}g}]"


def _unconverged(ax, x, v, lo, hi, color) -> bool:
    """Draw the brackets of the unconverged edges (NaN in `v`, its line skips them) as
    bars from lo to hi at x; True if there was one."""
    x, v, lo, hi = (np.asarray(a, dtype=np.float64) for a in (x, v, lo, hi))
    open_ = ~np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi)
    if open_.any():
        ax.vlines(x[open_], lo[open_], hi[open_], color=color, lw=2.5)
        ax.plot(x[open_], lo[open_], "_", color=color, ms=8)
        ax.plot(x[open_], hi[open_], "_", color=color, ms=8)
    return bool(open_.any())


def tables(ds: xr.Dataset) -> str:
    """Markdown tables of the linear-spectrum edges (rows depth, columns d), one per
    (method, samples, edge), and the convergence counts: the numbers behind the figures."""
    lines = []
    names = (("collapse_edge", "collapse edge (regime 1/2)"), ("major_edge", "major-first edge (regime 2/3)"),
             ("major_low_edge", "odd depth: lower first-leader edge"), ("width", "width of regime 2, decades"))
    for m in ds.method.values:
        for k in ds.samples.values:
            for var, title in names:
                if m == "linf" and var in ("major_low_edge", "width"):
                    continue
                at = {"method": m, "samples": k, "spectrum": "linear"}
                v = ds[var].sel(at)
                lo, hi = (b.sel(at) for b in _bracket(ds, var))
                if not np.any(np.isfinite(v.values) | (np.isfinite(lo.values) & np.isfinite(hi.values))):
                    continue
                lines.append(f"**{method_text(m)}, {'one sample' if k == 'one' else k + ' samples'}: {title}** (linear mu)\n")
                lines.append("| L \\ d | " + " | ".join(str(d) for d in ds.d.values) + " |")
                lines.append("|---" * (ds.d.size + 1) + "|")
                for L in ds.depth.values:
                    row = zip(*(a.sel(depth=L).values for a in (v, lo, hi)))
                    lines.append(f"| {L} | " + " | ".join(_fmt(*x) for x in row) + " |")
                lines.append("")
    lines.append("A `-` cell has no value: odd depths never collapse (no collapse edge) and have "
                 "the lower first-leader edge instead (none at even depths); otherwise the cell was "
                 "not computed in this run (linf edges are solved at depth 2 only). A `NaN [lo, hi]` "
                 "cell is an edge whose bisection did not converge (a step budget or the rounds ran "
                 "out): it lies somewhere in [lo, hi], and no digit of it is known beyond those shown "
                 "(its width: NaN, with the range the brackets allow).\n")
    conv = ds.collapse_converged.values
    tried = ds.collapse_n_solves.values > 0
    lines.append(f"Collapse edges: {int(conv.sum())} of {int(tried.sum())} bisections converged to "
                 f"rtol {ds.attrs.get('bisection_rtol', float('nan')):g} (the others are NaN, with their brackets in atlas.nc and, for the linear spectrum, above); "
                 f"{int(ds.collapse_n_solves.values.sum())} "
                 f"cells solved in all; total time {ds.attrs.get('seconds_total', float('nan')):.0f} s.")
    return "\n".join(lines) + "\n"
