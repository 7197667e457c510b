"""Drawing helpers shared by the figures: method labels, saving, cell edges, legends, colour maps, heat-map panels."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Patch

from .._io import atomic_savefig
from .._labels import method_label as _label  # noqa: F401  (the figures import these from here)
from .._labels import method_text as _label_plain  # noqa: F401
from ..plots import MISSING_COLOR, REGIME_COLORS, REGIME_NAMES, feature_colors, no_value_label
from ._context import Context


DPI = 130


# --- drawing helpers -------------------------------------------------------------


def _save(fig, ctx: Context, stem: str) -> str:
    png = ctx.out_dir / f"{stem}.png"
    atomic_savefig(fig, png, dpi=DPI, bbox_inches="tight")
    atomic_savefig(fig, png.with_suffix(".pdf"), bbox_inches="tight")
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


def _regime_handles(missing=(), *, missing_prefix: str = "", undetermined: str = "") -> list:
    """Legend patches of the regime colours (`samflow.plots.REGIME_COLORS`), labelled
    "regime 1", ...; `undetermined` follows the name of the undetermined regime. One
    more, "no value", patch when `missing` (the statuses of the cells without a
    regime) is not empty, its label after `missing_prefix`."""
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.3, label="regime " + n if n[0].isdigit() else n + undetermined)
               for c, n in zip(REGIME_COLORS, REGIME_NAMES)]
    if len(missing):
        handles.append(Patch(facecolor=MISSING_COLOR, edgecolor="k", lw=0.3, label=missing_prefix + no_value_label(missing)))
    return handles


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
