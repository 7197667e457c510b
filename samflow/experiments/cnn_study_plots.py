"""Figures of the CNN study, drawn from its results `xarray.Dataset` (`cnn_study.assemble`).

Every curve is the mean over the seeds left (status ok) with its 95% Student-t
band (`cnn_study_results.summarize`); GD black, l2-SAM reds, linf-SAM greens (darker for
larger rho). A cell where a seed never left the loss log 2 or went non-finite
is drawn with a hollow marker; a cell with no seed left draws an "x" on the
lower edge of the panel (at its alpha) instead of a point.

- `plot_minor_share_vs_alpha`: the main figure: per task (rows: the "digits"
  and "faint" tasks), the minor share against alpha at the early, middle and
  late epochs, and the held-out accuracy at the late epoch beside them.
- `plot_paired_difference`: SAM - GD minor share on the same seed against alpha.
- `plot_ground_truth`: the faint tasks: share of predictions following a
  swapped patch (early, late), accuracy with the strokes removed and with the
  patch removed, Grad-CAM share on the patch places, against alpha.
- `plot_curves`: minor share and accuracy over epochs at the middle alpha and rho.
- `plot_study`: all four (PNG), returns the paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

from .._util.io import atomic_savefig
from .._labels import OPTIMIZER_LABELS
from .cnn_study_results import summarize


__all__ = ["plot_minor_share_vs_alpha", "plot_paired_difference", "plot_ground_truth", "plot_curves", "plot_study"]

LABELS = OPTIMIZER_LABELS
CMAPS = {"sam_l2": "Reds", "sam_linf": "Greens"}


def _lines(s):
    """(optimizer, rho, colour, label) of every drawn line."""
    rhos = [float(r) for r in s.rho.values]
    shades = np.linspace(0.45, 0.95, len(rhos)) if len(rhos) > 1 else [0.8]
    for m in s.optimizer.values:
        m = str(m)
        if m == "gd":
            yield m, rhos[0], "black", "GD"
        else:
            for r, sh in zip(rhos, shades):
                yield m, r, plt.get_cmap(CMAPS.get(m, "Greys"))(sh), rf"{LABELS.get(m, m)} $\rho$={r:g}"


def _panel(ax, s, task, metric, epoch, *, legend=False):
    alphas = s.alpha.values.astype(float)
    for m, r, colour, label in _lines(s):
        c = s.sel(task=task, optimizer=m, rho=r)
        mean = c[f"{metric}_mean"].sel(epoch=epoch).values
        half = c[f"{metric}_half"].sel(epoch=epoch).values
        run, ok = c.n_run.values, c.n_ok.values
        have = (run > 0) & np.isfinite(mean)
        if not (run > 0).any():
            continue
        style = "-" if m != "sam_linf" else "--"
        ax.plot(alphas[have], mean[have], style, color=colour, label=label, lw=1.2)
        band = have & np.isfinite(half)
        lo, hi = mean - half, mean + half
        if not metric.endswith("_diff"):  # shares and accuracies live in [0, 1]
            lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
        ax.fill_between(alphas[band], lo[band], hi[band], color=colour, alpha=0.15, lw=0)
        full = have & (ok == run)
        ax.plot(alphas[full], mean[full], "o", color=colour, ms=3)
        part = have & (ok < run)
        ax.plot(alphas[part], mean[part], "o", mfc="none", color=colour, ms=5)
        none = (run > 0) & (ok == 0)
        if none.any():
            ax.plot(alphas[none], np.zeros(none.sum()), "x", color=colour, ms=6, clip_on=False,
                    transform=ax.get_xaxis_transform())
    ax.set_xscale("log")
    ax.set_xticks(alphas, [f"{a:g}" for a in alphas])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(r"init scale $\alpha$")
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=6, loc="best")


def plot_minor_share_vs_alpha(ds, path: "str | Path") -> list[Path]:
    """The main figure (see the module docstring)."""
    s = summarize(ds)
    kinds = json.loads(ds.attrs["task_kinds"])
    bands = json.loads(ds.attrs["bands"])
    tasks = [str(t) for t in s.task.values if kinds[str(t)] != "faint_only"]
    fig, axes = plt.subplots(len(tasks), 4, figsize=(15, 3.2 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        for ax, band in zip(row[:3], ("early", "middle", "late")):
            _panel(ax, s, task, "minor_share", bands[band])
            ax.set_title(f"{task}: minor share, {band} (epoch {bands[band]})", fontsize=9)
            ax.set_ylabel("Grad-CAM mass on minor pixels")
        _panel(row[3], s, task, "test_accuracy", bands["late"], legend=True)
        row[3].set_title(f"{task}: held-out accuracy, epoch {bands['late']}", fontsize=9)
        row[3].set_ylabel("accuracy")
    fig.suptitle(
        "Minor share (raw intensity < {:g}) against the init scale: mean and 95% t-band over seeds; "
        "hollow: some seeds stuck at log 2 / non-finite (left out); x: none left".format(float(ds.attrs["threshold"])),
        fontsize=9,
    )
    fig.tight_layout()
    return _savefig_png(fig, Path(path))


def plot_paired_difference(ds, path: "str | Path") -> list[Path]:
    """SAM - GD minor share, paired by seed, against alpha at the early, middle
    and late epochs, with the 95% t-band (GD's own line is 0)."""
    s = summarize(ds)
    if "minor_share_diff_mean" not in s:
        return []
    kinds = json.loads(ds.attrs["task_kinds"])
    bands = json.loads(ds.attrs["bands"])
    tasks = [str(t) for t in s.task.values if kinds[str(t)] != "faint_only"]
    fig, axes = plt.subplots(len(tasks), 3, figsize=(11.5, 3.2 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        for i, (ax, band) in enumerate(zip(row, ("early", "middle", "late"))):
            _panel(ax, s, task, "minor_share_diff", bands[band], legend=i == 2)
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_title(f"{task}: SAM - GD minor share, {band} (epoch {bands[band]})", fontsize=9)
            ax.set_ylabel("paired difference")
    fig.suptitle("Minor share, SAM minus GD on the same seed (split, init, batches): mean and 95% t-band", fontsize=9)
    fig.tight_layout()
    return _savefig_png(fig, Path(path))


def plot_ground_truth(ds, path: "str | Path") -> list[Path]:
    """The ground-truth figure (see the module docstring)."""
    s = summarize(ds)
    kinds = json.loads(ds.attrs["task_kinds"])
    bands = json.loads(ds.attrs["bands"])
    tasks = [str(t) for t in s.task.values if kinds[str(t)] == "faint"]
    if not tasks:
        return []
    panels = [("follow_faint", "early", "follows a swapped patch"), ("follow_faint", "late", "follows a swapped patch"),
              ("acc_no_strokes", "late", "accuracy, strokes removed"), ("acc_no_faint", "late", "accuracy, patch removed"),
              ("faint_share", "late", "Grad-CAM share on the patch places")]
    fig, axes = plt.subplots(len(tasks), len(panels), figsize=(3.6 * len(panels), 3.2 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        for i, (ax, (metric, band, title)) in enumerate(zip(row, panels)):
            _panel(ax, s, task, metric, bands[band], legend=i == len(panels) - 1)
            ax.set_title(f"{task}: {title}, epoch {bands[band]}", fontsize=8)
            if metric.startswith(("follow", "acc")):
                ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    fig.suptitle("Ground truth: the label is carried by the strokes and by a faint patch; "
                 "what does each model use? (mean, 95% t-band over seeds)", fontsize=9)
    fig.tight_layout()
    return _savefig_png(fig, Path(path))


def plot_curves(ds, path: "str | Path", alpha: "float | None" = None, rho: "float | None" = None) -> list[Path]:
    """Minor share and accuracy over epochs at one alpha and rho (default: the middle ones)."""
    s = summarize(ds)
    kinds = json.loads(ds.attrs["task_kinds"])
    tasks = [str(t) for t in s.task.values if kinds[str(t)] != "faint_only"]
    alphas, rhos = s.alpha.values.astype(float), s.rho.values.astype(float)
    alpha = alpha if alpha is not None else alphas[len(alphas) // 2]
    rho = rho if rho is not None else rhos[len(rhos) // 2]
    fig, axes = plt.subplots(len(tasks), 2, figsize=(9, 3.0 * len(tasks)), squeeze=False)
    epochs = s.epoch.values
    for row, task in zip(axes, tasks):
        for ax, metric, name in zip(row, ("minor_share", "test_accuracy"), ("minor share", "held-out accuracy")):
            for m in s.optimizer.values:
                m = str(m)
                c = s.sel(task=task, optimizer=m, alpha=alpha, rho=rho)
                mean, half = c[f"{metric}_mean"].values, c[f"{metric}_half"].values
                colour = "black" if m == "gd" else plt.get_cmap(CMAPS.get(m, "Greys"))(0.75)
                ok = np.isfinite(mean)
                ax.plot(epochs[ok], mean[ok], "-" if m != "sam_linf" else "--", color=colour, marker="o", ms=2.5,
                        label=f"{LABELS.get(m, m)} ({int(c.n_ok)}/{int(c.n_run)} seeds)")
                b = ok & np.isfinite(half)
                ax.fill_between(epochs[b], np.clip(mean - half, 0, 1)[b], np.clip(mean + half, 0, 1)[b], color=colour,
                                alpha=0.15, lw=0)
            ax.set_xscale("symlog", linthresh=1)
            ax.set_xlabel("epoch")
            ax.set_title(rf"{task}: {name}, $\alpha$={alpha:g}, $\rho$={rho:g}", fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.tight_layout()
    return _savefig_png(fig, Path(path))


def _savefig_png(fig, path: Path) -> list[Path]:
    """Save `fig` as a PNG (small, for docs/) via a temporary file and a rename."""
    try:
        atomic_savefig(fig, path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return [path]


def plot_study(ds, out_dir: "str | Path") -> list[Path]:
    """Draw the three figures into `out_dir`; returns the written PNG paths."""
    out_dir = Path(out_dir)
    return (plot_minor_share_vs_alpha(ds, out_dir / "minor_share_vs_alpha.png")
            + plot_paired_difference(ds, out_dir / "minor_share_difference.png")
            + plot_ground_truth(ds, out_dir / "ground_truth.png")
            + plot_curves(ds, out_dir / "curves.png"))
