"""What the sweep's figures share (`samflow.plots`): colours and labels of
methods, features, regimes and statuses; the axis scale of a grid and the cell
edges of a heat map; the dominant feature and the regime of a results Dataset.
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.scale import LogTransform, SymmetricalLogTransform
from matplotlib.ticker import LogFormatterSciNotation

from ..analysis import _unit, dominant_index, regime_label, regime_label_from_dominant
from .._util.io import atomic_savefig, atomic_write_bytes, figure_bytes
from .._labels import method_label as _method_label
from ..status import Status

COLLAPSED_COLOR = "#d9d9d9"


MISSING_COLOR = "#000000"

#: The colour of a blown-up cell's pixels after its blow-up (status BLEW_UP: the tau
#: clock's growth past 10**blowup_log10, or a finite-tau pole at depth >= 3): a category
#: of its own, not the black of a failure.
BLEW_UP_COLOR = "#d7191c"


REGIME_COLORS = ["#ffffff", "#bdbdbd", "#fdae61", "#2c7bb6"]  # undetermined, 1, 2, 3


REGIME_NAMES = ["undetermined", "1: collapse", "2: minor first, major last", "3: major first"]
# What "undetermined" means on a legend (`samflow.analysis.regime_label` rule 7):
# the major feature d does not lead at the last saved time.
UNDETERMINED_NOTE = " (not at $d$ by the horizon)"


NO_VALUE = -1  # regime_image / dominant index of a cell without a value
BLOWN_UP = -2  # the same, for a cell that blew up (`with_blow_up`)


# Statuses whose cells integrated to the final time (or to a collapse): a regime
# label 0 there means "undetermined". Any other status (a failure, or one this
# module does not know) leaves the cell without a value.
# Cells that ended normally (their saved values are valid to the horizon); a CRITICAL
# cell is held at a critical point of the loss and keeps its values; a NONUNIQUE one
# holds weights at 0 where it could also have left (one of the Filippov solutions).
_COMPLETED = frozenset({int(Status.FINISHED), int(Status.COLLAPSED), int(Status.SLID), int(Status.CRITICAL),
                        int(Status.NONUNIQUE)})


_STATUS_WORDS = {
    "BLEW_UP": "blew up",
    "MAX_STEPS": "step limit, solver.max_steps",
    "NONFINITE_INPUT": "non-finite input",
    "FAILED": "solver failed",
    "SURFACE": "a singular set not followed",
}


def feature_colors(d: int) -> list:
    """d distinct colours from minor (1, purple) to major (d, yellow)."""
    cmap = plt.get_cmap("viridis")
    return [cmap(x) for x in (np.linspace(0.0, 1.0, d) if d > 1 else [0.5])]


#: Up to this many features every one is labelled (colour bar ticks, trajectory legend).
ALL_FEATURES_UP_TO = 10


def feature_ticks(d: int, minor: int, major: int, most: int = ALL_FEATURES_UP_TO) -> list[int]:
    """The 1-based features to label on a colour bar of d features: all of them for
    d <= `most`; else 1, d, the minor and the major feature and evenly spaced ones
    between, at most `most` + 2 in all (the minor and major ones may fall between)."""
    if d <= most:
        return list(range(1, d + 1))
    spaced = np.unique(np.round(np.linspace(1, d, most)).astype(int))
    picks = {int(j) for j in spaced} | {minor, major}
    # A spaced tick next to the minor or major one would print over it: drop it.
    crowded = {j for j in picks - {1, d, minor, major} if min(abs(j - minor), abs(j - major)) < max(2, d // (3 * most))}
    return sorted(picks - crowded)


def legend_features(d: int, minor: int, major: int, leaders, most: int = 6) -> list[int]:
    """The 1-based features a trajectory legend names: all of them for d <=
    `ALL_FEATURES_UP_TO`; else the minor and the major feature and those that lead
    at some time (`leaders`), evenly thinned to `most` in all when there are more."""
    if d <= ALL_FEATURES_UP_TO:
        return list(range(1, d + 1))
    rest = sorted({int(j) for j in leaders} - {minor, major})
    keep = max(0, most - len({minor, major}))
    if len(rest) > keep:
        rest = [rest[i] for i in np.unique(np.round(np.linspace(0, len(rest) - 1, keep)).astype(int))] if keep else []
    return sorted({minor, major} | set(rest))


def sequence_text(seq, most: int = 6, arrow: str = r" $\to$ ") -> str:
    """The dominant features in the order visited, "1 -> 2 -> 3"; a sequence of more
    than `most` is shortened to its first two and its last, with the number of
    switches: "1 -> 2 -> ... -> 50 (29 switches)"."""
    seq = [str(j) for j in seq]
    if len(seq) <= most:
        return arrow.join(seq)
    return arrow.join(seq[:2] + ["...", seq[-1]]) + f" ({len(seq) - 1} switches)"



def _time_label(ds) -> str:
    return "real time $t$" if ds.attrs.get("clock", "t") == "t" else r"rescaled time $\tau$"


def _alpha_label(ds) -> str:
    return r"init scale $\alpha/\rho$" if int(ds.attrs.get("alpha_relative_to_rho", 0)) else r"init scale $\alpha$"


def _is_log(x: np.ndarray) -> bool:
    """Whether positive grid values x read as a log grid (geometric, or spanning > 50x)."""
    x = np.asarray(x, dtype=float)
    if x.size < 3 or np.any(x <= 0):
        return bool(x.size >= 2 and np.all(x > 0) and x[-1] / x[0] > 50)
    r = x[1:] / x[:-1]
    return bool(np.allclose(r, r[0], rtol=1e-6)) or x[-1] / x[0] > 50


def axis_scale(x) -> tuple[str, float | None]:
    """The axis scale that shows every grid value x: `(name, linthresh)`.

    - all x > 0: `("log", None)` for a log grid (geometric or spanning more than
      50x), else `("linear", None)`.
    - some x <= 0 (e.g. rho = 0, t = 0): an equally spaced grid stays
      `("linear", None)`; otherwise, when the nonzero |x| form a log grid,
      `("symlog", min |x| over x != 0)`: matplotlib's symlog axis, linear within
      +-linthresh, so 0 is drawn as its own cell instead of turning a log grid
      linear or vanishing from a log axis.

    **Arguments:** `x` 1-D grid values (any order). **Returns:** the tuple above.
    """
    x = np.asarray(x, dtype=float).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return ("linear", None)
    if np.all(x > 0):
        return ("log", None) if _is_log(np.sort(x)) else ("linear", None)
    u = np.unique(x)
    if u.size < 3:
        return ("linear", None)
    step = np.diff(u)
    if np.allclose(step, step[0], rtol=1e-6):
        return ("linear", None)
    nz = np.unique(np.abs(u[u != 0]))
    if nz.size >= 2 and _is_log(nz):
        return ("symlog", float(nz[0]))
    return ("linear", None)


def _transform(scale: str, linthresh: float | None):
    if scale == "log":
        return LogTransform(10)
    if scale == "symlog":
        return SymmetricalLogTransform(10, linthresh, 1.0)  # matplotlib's defaults: base 10, linscale 1
    if scale == "linear":
        return None
    raise ValueError(f"scale must be 'linear', 'log' or 'symlog', got {scale!r}")


def cell_edges(x, scale: str = "linear", linthresh: float | None = None) -> np.ndarray:
    """Cell edges around strictly monotone centres x, as drawn on an axis of `scale`.

    Each interior edge is the midpoint of its neighbours in the axis's own
    coordinate: the arithmetic midpoint on a linear axis, the geometric midpoint
    sqrt(x_i x_{i+1}) on a log axis, the midpoint in matplotlib's symlog
    coordinate on a symlog axis (geometric above `linthresh`, arithmetic below).
    The outer edges lie half a neighbouring step beyond the end centres. One
    centre gets [x/1.5, 1.5 x] on a log axis and [x - 0.5, x + 0.5] otherwise.

    **Arguments:** `x` (n,) finite, strictly increasing or decreasing (> 0 for
    "log"); `scale` "linear", "log" or "symlog"; `linthresh` > 0 for "symlog"
    (see `axis_scale`).

    **Returns:** float64 (n + 1,) edges, for `pcolormesh(..., shading="flat")`.

    **Raises:** `ValueError` for an empty, non-finite or non-monotone x, x <= 0 on
    a log axis, or an unknown scale.
    """
    x = np.asarray(x, dtype=float).ravel()
    tr = _transform(scale, linthresh)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"cell centres must be finite and non-empty, got {x!r}")
    if scale == "log" and np.any(x <= 0):
        raise ValueError(f"cell centres on a log axis must be > 0, got {x!r}")
    if x.size == 1:
        return np.array([x[0] / 1.5, x[0] * 1.5]) if scale == "log" else np.array([x[0] - 0.5, x[0] + 0.5])
    dx = np.diff(x)
    if not (np.all(dx > 0) or np.all(dx < 0)):
        raise ValueError(f"cell centres must be strictly monotone, got {x!r}")
    u = x if tr is None else tr.transform_non_affine(x)
    mid = (u[1:] + u[:-1]) / 2
    e = np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])
    e = e if tr is None else tr.inverted().transform_non_affine(e)
    return np.asarray(e, dtype=float)


def _set_scale(ax, which: str, scale: str, linthresh: float | None) -> None:
    setter = ax.set_xscale if which == "x" else ax.set_yscale
    if scale == "symlog":
        setter("symlog", linthresh=linthresh, linscale=1.0)
    elif scale == "log":
        setter("log")


def _scale_note(scale: str, linthresh: float | None, name: str) -> str:
    """An axis-label note for a symlog axis (empty otherwise)."""
    return f"\n(symlog axis: linear below {linthresh:g}, so {name} = 0 is drawn)" if scale == "symlog" else ""


def status_text(s: int) -> str:
    """A short name of a status value, e.g. "MAX_STEPS: hit solver.max_steps".

    A value that `samflow.Status` does not know gives "status 7 (unknown)"; a
    known status without a short description gives its lower-cased name.
    """
    try:
        st = Status(int(s))
    except ValueError:
        return f"status {int(s)} (unknown)"
    return f"{st.name}: {_STATUS_WORDS.get(st.name, st.name.lower().replace('_', ' '))}"


def _status_name(s: int) -> str:
    try:
        return Status(int(s)).name
    except ValueError:
        return f"status {int(s)}"


def no_value_label(statuses, what: str = "non-finite $\\beta$") -> str:
    """Legend text of the "no value" colour, naming the statuses of the cells drawn so.

    **Arguments:** `statuses` the status values of the cells without a value
    (any iterable of ints; duplicates are fine); `what` the text used when there
    are none.

    **Returns:** e.g. "no value (MAX_STEPS: hit solver.max_steps)".
    """
    ss = sorted({int(v) for v in (statuses.ravel() if isinstance(statuses, np.ndarray) else statuses)})
    if not ss:
        return f"no value ({what})"
    return "no value (" + "; ".join(status_text(v) for v in ss) + ")"


_ZERO_WORDS = {int(Status.COLLAPSED): "collapsed", int(Status.SLID): "slid to 0", int(Status.CRITICAL): "held at a critical point"}


def zero_label(statuses_by_method: dict) -> str:
    """Legend text of the beta = 0 colour of the heat map, naming how each method got there.

    **Arguments:** `statuses_by_method` method name -> the statuses of its cells that
    have a beta = 0 pixel. **Returns:** e.g. r"$\\beta = 0$: collapsed ($\\ell_2$-SAM);
    slid to 0 ($\\ell_\\infty$-SAM)" (l2-SAM collapses to W = 0, docs/theory.md s.4; linf-SAM
    coordinates slide to 0 and stay there, a Filippov sliding mode).
    """
    parts = []
    for m, sts in statuses_by_method.items():
        words = sorted({_ZERO_WORDS.get(int(v), _status_name(v)) for v in sts})
        parts.append(f"{' / '.join(words)} ({_method_label(m)})")
    return r"$\beta = 0$: " + "; ".join(parts)


def regime_image(reg, status) -> np.ndarray:
    """Regime labels to draw: `reg`, with `NO_VALUE` (-1) where a cell has no value.

    A cell has no value when its label is 0 (undetermined) and its status is not
    FINISHED, COLLAPSED, SLID or CRITICAL (it blew up, hit max_steps, had a non-finite
    input, failed, or has a status this module does not know): it is not
    "undetermined", it was never determined.

    **Arguments:** `reg` int (...) from `samflow.analysis.regime_label`; `status`
    int (...) of the same shape.

    **Returns:** int8 (...), values in {-1, 0, 1, 2, 3}; draw with `regime_cmap`.
    """
    reg = np.asarray(reg)
    st = np.asarray(status).astype(np.int64)
    if reg.shape != st.shape:
        raise ValueError(f"reg and status must have one shape, got {reg.shape} and {st.shape}")
    done = np.isin(st, list(_COMPLETED))
    return np.where((reg == 0) & ~done, NO_VALUE, reg).astype(np.int8)


def with_blow_up(img, status) -> np.ndarray:
    """`img` (a `regime_image`, or a dominant-index image) with the `NO_VALUE`
    pixels of cells that blew up (status BLEW_UP) set to `BLOWN_UP`, so that a
    figure draws a blow-up as its own category (`BLEW_UP_COLOR`, `blow_up_label`)
    rather than as a failure.

    **Arguments:** `img` int (...); `status` the cells' statuses, of `img`'s shape
    or of its shape without the last axis (one status per row of a heat map over
    time). **Returns:** int64 of `img`'s shape.
    """
    img = np.asarray(img).astype(np.int64)
    blew = np.asarray(status).astype(np.int64) == int(Status.BLEW_UP)
    if blew.shape != img.shape:
        blew = blew[..., None]
    return np.where((img == NO_VALUE) & blew, BLOWN_UP, img)


def _blowup_log10(ds) -> float:
    """`solver.blowup_log10` of the config stored in a results file (200, the default, without one)."""
    import json

    try:
        return float(json.loads(ds.attrs["config"])["solver"]["blowup_log10"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return 200.0


def blow_up_label(ds=None, *, blowup_log10: float | None = None) -> str:
    r"""Legend text of the blow-up colour: what a BLEW_UP cell met (docs/theory.md
    s.4.4), with the threshold of `ds`'s stored config, e.g. "blew up ($\tau$ clock:
    $|\beta| \geq 10^{200}$, or a pole at depth $\geq 3$); no value after".
    `blowup_log10` gives the threshold instead, for a figure drawn from solves
    rather than from a results file (`samflow.figures`: its `SETTINGS`)."""
    if blowup_log10 is not None:
        b = float(blowup_log10)
    else:
        b = _blowup_log10(ds) if ds is not None else 200.0
    return (rf"blew up ($\tau$ clock: $|\beta| \geq 10^{{{b:g}}}$, or a pole at depth $\geq 3$); "
            "no value after")


def regime_cmap():
    """(cmap, norm, colors) for `regime_image`: -2 blew up (`with_blow_up`, BLEW_UP_COLOR),
    -1 no value (black), 0 .. 3 as REGIME_COLORS."""
    colors = [BLEW_UP_COLOR, MISSING_COLOR] + REGIME_COLORS
    return ListedColormap(colors), BoundaryNorm(np.arange(-2.5, 4.5, 1.0), len(colors)), colors


def normalized_beta(beta) -> np.ndarray:
    """beta / ||beta||_2 over the last axis, without overflow or underflow.

    Scaled by max_j |beta_j| first (`samflow.analysis._unit`), so |beta| up to the
    float64 range (e.g. 5e177, whose square overflows) gives unit vectors. An
    all-zero beta (collapsed) or a non-finite one gives NaN (no direction).

    **Arguments:** `beta` (..., d). **Returns:** float64 (..., d).
    """
    b = np.asarray(beta, dtype=np.float64)
    ok = np.all(np.isfinite(b), axis=-1, keepdims=True) & np.any(b != 0, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        u = _unit(np.where(ok, b, 0.0))
    return np.where(ok, u, np.nan)


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


def major_feature(ds) -> int:
    """The 1-based major feature of a sweep's data: the largest mean_i y_i x_ij
    (docs/theory.md s.1: the largest mu_j; the last of them on a tie, so equal
    spectra keep the last coordinate), as `samflow.edges` reads it. The regime
    labels ask whether this feature leads; taking the last coordinate instead
    mislabelled every cell of a sweep whose data are not in increasing order
    (`data.mu = [1.0, 0.6, 0.2]`, a banded or generated data set). A file
    without `data_X` / `data_y` gives the last coordinate."""
    mu_bar = _mu_bar(ds)
    if mu_bar is None:
        return int(ds.sizes["coord"])
    return int(np.flatnonzero(mu_bar == np.max(mu_bar))[-1]) + 1


def minor_feature(ds) -> int:
    """The 1-based most minor feature: the smallest mean_i y_i x_ij (the first one
    on a tie); 1 for a file without `data_X` / `data_y` (see `major_feature`)."""
    mu_bar = _mu_bar(ds)
    return 1 if mu_bar is None else int(np.argmin(mu_bar)) + 1


def _mu_bar(ds) -> "np.ndarray | None":
    """mean_i y_i x_i of the sweep's data, shape (d,), or None without data in the file."""
    if "data_X" not in ds or "data_y" not in ds:
        return None
    return np.mean(ds["data_y"].values[:, None] * ds["data_X"].values, axis=0)


def _regimes(ds, m) -> np.ndarray:
    """Regime labels (alpha, rho) of method m, from either kind of file; the
    major feature is `major_feature(ds)`."""
    status = ds["status"].sel(flow=m).values
    if is_summary(ds):
        return regime_label_from_dominant(
            ds["dominant"].sel(flow=m).values, ds["tied"].sel(flow=m).values, status, major_feature(ds)
        )
    return regime_label(ds["beta"].sel(flow=m).values, status, major_feature(ds))


_SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")
_POWER = re.compile(r"^\$\\mathdefault\{(-?)(?:([0-9.]+)\\times)?10\^\{(-?\d+)\}\}\$$")


class PlainLogFormatter(LogFormatterSciNotation):
    """matplotlib's labels of a log axis (`LogFormatterSciNotation`: the same ticks
    labelled, the same numbers) written in plain text with Unicode superscripts,
    "10⁻²", "2×10⁻²", "−10³", instead of mathtext ("$\\mathdefault{10^{-2}}$");
    a label of another form (another base) keeps its mathtext.

    Why: laying out a mathtext label parses it with pyparsing, about 6 ms a label
    per font size and dpi, and matplotlib keeps only the last 50 parses: the
    sweep's two figures made 218 parses, 1.3-1.5 s of a warm sweep's 10-12 s; with
    plain tick labels 125, 0.8-1.0 s (docs/benchmarks.md, "Issue 34, seventh
    round"). Plain text is laid out from the font's metrics, cached."""

    def __call__(self, x, pos=None):
        label = super().__call__(x, pos)
        power = _POWER.match(label)
        if power is None:
            return label
        sign, coeff, exponent = power.groups()
        return ("\u2212" if sign else "") + (f"{coeff}\u00d7" if coeff else "") + "10" + exponent.translate(_SUPERSCRIPT)


def plain_log_labels(fig) -> None:
    """Give every log axis of `fig` whose labels are matplotlib's default
    (`LogFormatterSciNotation`, major and minor) a `PlainLogFormatter` with the
    same settings; other formatters are left as they are. samflow's figures call
    it once they are drawn, before their layout (`tight_layout`) and save (the
    sweep's, the paper's and the atlas's; `save_png_pdf` itself only saves)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                old = get()
                if type(old) is LogFormatterSciNotation:
                    new = PlainLogFormatter.__new__(PlainLogFormatter)
                    new.__dict__.update(old.__dict__)
                    put(new)


def save_png_pdf(fig, path, dpi: float) -> None:
    """Save `fig` as the PNG `path` at `dpi` and as a PDF beside it, both cropped to
    the figure's tight bounding box (`bbox_inches="tight"`, padded by
    `savefig.pad_inches`), with the box measured once, on the PNG's renderer:
    `bbox_inches="tight"` measures it again for each file, a layout pass over
    every axis, tick label and title (a third of the time of a many-axes
    figure). The PNG is rendered right after that measure, without the layout
    pass of its own that savefig makes for a figure laid out by `tight_layout`
    (`samflow._util.io.figure_bytes`); the PDF, at another dpi, keeps its pass.
    The PNG is pixel for pixel what `savefig(path, dpi=dpi, bbox_inches="tight")`
    writes; the PDF keeps its resolution (the figure's own dpi for rasterized
    artists) and gets the PNG's box. Both are written whole or not at all
    (`samflow._util.io.atomic_path`).

    **Raises:** `samflow._util.io.DiskFullError` when a file does not fit."""
    from pathlib import Path

    import matplotlib

    path = Path(path)
    pdf_dpi = getattr(fig, "_original_dpi", fig.dpi)  # what savefig(dpi="figure") would use
    fig.set_dpi(dpi)
    fig.draw_without_rendering()  # places ticks, titles and labels, as savefig's own first pass
    bbox = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    # laid out at the PNG's dpi just now: its savefig need not lay it out again (`figure_bytes`)
    atomic_write_bytes(figure_bytes(fig, "png", laid_out=True, dpi=dpi, bbox_inches=bbox), path)
    atomic_savefig(fig, path.with_suffix(".pdf"), dpi=pdf_dpi, bbox_inches=bbox)
