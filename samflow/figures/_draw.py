"""Drawing helpers shared by the figures: method labels, saving, cell edges, legends, colour maps, heat-map panels."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Patch

from .._util.io import atomic_savefig
from .._labels import method_label as _label  # noqa: F401  (the figures import these from here)
from .._labels import method_text as _label_plain  # noqa: F401
from ..plots import (
    BLEW_UP_COLOR,
    MISSING_COLOR,
    REGIME_COLORS,
    REGIME_NAMES,
    blow_up_label,
    feature_colors,
    no_value_label,
    regime_cmap,
    regime_image,
    with_blow_up,
)
from ..plots._common import plain_log_labels
from ._context import SETTINGS, Context


DPI = 130


# --- drawing helpers -------------------------------------------------------------


def _save(fig, ctx: Context, stem: str) -> str:
    png = ctx.out_dir / f"{stem}.png"
    plain_log_labels(fig)
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
    """(cmap, norm, colors) of a dominant-feature map: -3 tied (`_measure.TIED`), -2 blew
    up (`with_blow_up`), -1 no value, 0 collapsed, 1..d the features."""
    colors = ["#ffffff", BLEW_UP_COLOR, MISSING_COLOR, "#bdbdbd"] + feature_colors(d)
    return ListedColormap(colors), BoundaryNorm(np.arange(-3.5, d + 1.5), len(colors)), colors


def _blow_up_handle() -> Patch:
    """The legend patch of the blow-up colour (`samflow.plots.BLEW_UP_COLOR`), labelled
    with the figures' threshold (`SETTINGS.blowup_log10`)."""
    return Patch(facecolor=BLEW_UP_COLOR, edgecolor="k", lw=0.3, label=blow_up_label(blowup_log10=SETTINGS.blowup_log10))


def _staircase_handles(d, colors, missing=(), *, blew_up: bool = False):
    """Legend of the dominant-feature maps; `missing` the statuses of the cells with a "no
    value" pixel; `blew_up` whether a map has a pixel after a blow-up (its entry comes
    before "no value", which stays last)."""
    handles = [Patch(facecolor=colors[4 + j], label=f"{j + 1}" + (" (minor)" if j == 0 else " (major)" if j == d - 1 else "")) for j in range(d)]
    handles += [Patch(facecolor=colors[3], label=r"collapsed ($\beta = 0$)"),
                Patch(facecolor=colors[0], edgecolor="k", lw=0.4, label=r"tied ($|\beta_j|$ all equal)")]
    if blew_up:
        handles.append(_blow_up_handle())
    handles.append(Patch(facecolor=colors[2], label=no_value_label(missing)))
    return handles


def _row_major(items: list, ncol: int) -> list:
    """Reorder legend entries so that they read left to right (matplotlib fills columns)."""
    nrow = -(-len(items) // ncol)
    return [items[r * ncol + c] for c in range(ncol) for r in range(nrow) if r * ncol + c < len(items)]


def _regime_handles(missing=(), *, blew_up: bool = False, missing_prefix: str = "", undetermined: str = "") -> list:
    """Legend patches of the regime colours (`samflow.plots.REGIME_COLORS`), labelled
    "regime 1", ...; `undetermined` follows the name of the undetermined regime. One
    more, the blow-up patch, when `blew_up` (a cell without a regime blew up:
    `_regime_panel`), and a "no value" patch last when `missing` (the statuses of the
    other cells without a regime) is not empty, its label after `missing_prefix`."""
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.3, label="regime " + n if n[0].isdigit() else n + undetermined)
               for c, n in zip(REGIME_COLORS, REGIME_NAMES)]
    if blew_up:
        handles.append(_blow_up_handle())
    if len(missing):
        handles.append(Patch(facecolor=MISSING_COLOR, edgecolor="k", lw=0.3, label=missing_prefix + no_value_label(missing)))
    return handles


def _layout_with_legend(fig, handles, *, ncol, title=None, inches=0.75, top=0.95, labels=None):
    """tight_layout leaving `inches` at the bottom for a legend below the panels."""
    frac = inches / fig.get_figheight()
    plain_log_labels(fig)  # before the layout: it lays out the tick labels
    fig.tight_layout(rect=(0, frac, 1, top))
    kw = dict(loc="lower center", ncol=ncol, frameon=False, fontsize=9, title=title, title_fontsize=9,
              bbox_to_anchor=(0.5, 0.0))
    if labels is None:
        fig.legend(handles=_row_major(handles, ncol), **kw)
    else:
        fig.legend(_row_major(handles, ncol), _row_major(labels, ncol), **kw)


def _heatmap_panel(ax, ts, a_rel, dom, d, status) -> np.ndarray:
    """Draw a dominant-feature map `dom` (alpha, time) (`_measure._dominant_with_ties`) on
    log axes; the "no value" pixels of a row whose cell blew up (`status` (alpha,) BLEW_UP)
    in the blow-up colour (`with_blow_up`), other failures black. Returns the codes drawn."""
    img = with_blow_up(dom, status)
    cmap, norm, _ = _staircase_cmap(d)
    ax.pcolormesh(_log_edges(ts), _log_edges(a_rel), img, cmap=cmap, norm=norm, rasterized=True)
    ax.set_xscale("log")
    ax.set_yscale("log")
    return img


def _regime_panel(ax, x_edges, y_edges, reg, status) -> np.ndarray:
    """Draw regime labels `reg` (rows y, columns x) whose cells ended with `status`: a cell
    without a regime that failed is "no value" (`regime_image`, black), in the blow-up
    colour when it blew up (`with_blow_up`). Returns the codes drawn (`regime_cmap`)."""
    cmap, norm, _ = regime_cmap()
    img = with_blow_up(regime_image(reg, status), status)
    ax.pcolormesh(x_edges, y_edges, img, cmap=cmap, norm=norm, rasterized=True)
    return img
