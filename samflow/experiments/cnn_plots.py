"""Figures of the CNN experiment, drawn from its results `xarray.Dataset`.

- `plot_gradcam_grid`: the paper's kind of figure: one row per held-out image,
  the input, then for each drawn epoch the Grad-CAM map of every method (GD,
  SAM), at one task and init scale. Each map is scaled to its own maximum; a
  cyan contour outlines the major pixels (intensity >= threshold), so a map
  inside the contour attends to the strokes and one outside it to the background.
- `plot_minor_share`: the share of Grad-CAM mass on minor pixels over epochs,
  one panel per task, a colour family and line style per method (GD blue,
  solid; l2-SAM red, dashed; linf-SAM green, dotted), darker for larger alpha,
  with the share of a uniform map (the minor pixels' area) in grey.
- `plot_cnn`: both; returns the paths. Every file is written atomically.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from .._util.io import atomic_savefig
from .._labels import OPTIMIZER_LABELS

__all__ = ["plot_gradcam_grid", "plot_minor_share", "plot_cnn"]

METHOD_LABELS = OPTIMIZER_LABELS
METHOD_CMAPS = {"gd": "Blues", "sam_l2": "Reds", "sam_linf": "Greens"}
METHOD_STYLES = {"gd": "-", "sam_l2": "--", "sam_linf": ":"}


def _savefig(fig, path: Path, title: str) -> list[Path]:
    """Give `fig` its title, lay it out and save it as `path` (.png) and its .pdf
    twin, each via a temporary file and a rename."""
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out = []
    for p in (path.with_suffix(".png"), path.with_suffix(".pdf")):
        out.append(atomic_savefig(fig, p, dpi=130, bbox_inches="tight"))
    plt.close(fig)
    return out


def _nearest(values, v) -> int:
    return int(np.argmin(np.abs(np.asarray(values, dtype=float) - v)))


def plot_gradcam_grid(ds, path: "str | Path", task: str | None = None, alpha: float | None = None) -> list[Path]:
    """Input | method maps per epoch, one row per figure image (see the module docstring)."""
    path = Path(path)
    task = task if task is not None else ds.attrs.get("figure_task", str(ds.task.values[0]))
    alpha = alpha if alpha is not None else float(ds.attrs.get("figure_alpha", ds.alpha.values[0]))
    t = ds.sel(task=task)
    ia = _nearest(ds.alpha.values, alpha)
    methods = [str(m) for m in ds.optimizer.values]
    epochs = [int(e) for e in ds.fig_epoch.values]
    labels = t.fig_labels.values
    n_img = int((labels != -99).sum())
    images = t.fig_images.values[:n_img]
    threshold = float(ds.attrs.get("threshold", 0.5))
    ncol = 1 + len(epochs) * len(methods)
    fig, axes = plt.subplots(n_img, ncol, figsize=(1.35 * ncol, 1.4 * n_img + 0.6), squeeze=False)
    for r in range(n_img):
        img = images[r]
        gray = img[..., 0] if img.shape[-1] == 1 else img.mean(axis=-1)
        ax = axes[r, 0]
        ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
        if r == 0:
            ax.set_title("input", fontsize=8)
        ax.set_ylabel(f"class {labels[r]}", fontsize=7)
        c = 1
        for e_i, epoch in enumerate(epochs):
            for m in methods:
                ax = axes[r, c]
                cam = t.maps.values[list(ds.optimizer.values).index(m), ia, e_i, r]
                if np.isfinite(cam).all() and cam.max() > 0:
                    ax.imshow(cam / cam.max(), cmap="inferno", vmin=0, vmax=1)
                else:
                    ax.imshow(np.zeros_like(gray), cmap="inferno", vmin=0, vmax=1)
                    ax.text(0.5, 0.5, "zero map", color="w", fontsize=6, ha="center", va="center", transform=ax.transAxes)
                ax.contour(gray >= threshold, levels=[0.5], colors="cyan", linewidths=0.5)
                if r == 0:
                    ax.set_title(f"{METHOD_LABELS.get(m, m)}\nepoch {epoch}", fontsize=8)
                c += 1
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    title = (
        f"Grad-CAM of the last conv layer ({ds.attrs.get('dataset', '')}, task {task}, "
        rf"$\alpha$ = {float(ds.alpha.values[ia]):g}); cyan: intensity $\geq$ {threshold:g}"
    )
    return _savefig(fig, path, title)


def plot_minor_share(ds, path: "str | Path") -> list[Path]:
    """Minor share over epochs: a panel per task, a line per method and alpha."""
    path = Path(path)
    tasks = [str(t) for t in ds.task.values]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.4), squeeze=False)
    alphas = ds.alpha.values
    shades = np.linspace(0.45, 1.0, len(alphas)) if len(alphas) > 1 else [0.8]
    for ax, task in zip(axes[0], tasks):
        t = ds.sel(task=task)
        for m in ds.optimizer.values:
            cmap = plt.get_cmap(METHOD_CMAPS.get(str(m), "Greys"))
            for i, a in enumerate(alphas):
                y = t.minor_share.sel(optimizer=m, alpha=a).values
                ok = np.isfinite(y)
                if not ok.any():
                    continue
                ax.plot(
                    ds.epoch.values[ok], y[ok], linestyle=METHOD_STYLES.get(str(m), "-"), marker="o", markersize=2.5,
                    color=cmap(shades[i]), label=rf"{METHOD_LABELS.get(str(m), m)}, $\alpha$={float(a):g}",
                )
        ax.axhline(float(t.uniform_minor_share), color="grey", linestyle="-.", linewidth=0.8, label="uniform map")
        ax.set_title(f"task {task}", fontsize=9)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("Grad-CAM mass on minor pixels")
        ax.grid(alpha=0.3)
    # One legend below the panels: inside, it hid points (issue 17).
    entries = {lab: h for ax in axes[0] for h, lab in zip(*ax.get_legend_handles_labels())}
    fig.legend(entries.values(), entries.keys(), fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               frameon=False)
    threshold = float(ds.attrs.get("threshold", 0.5))
    return _savefig(fig, path, f"Share of Grad-CAM mass on minor pixels (intensity < {threshold:g}), held-out images")


def plot_cnn(ds, out_dir: "str | Path") -> list[Path]:
    """Draw both figures into `out_dir`; returns the written paths (png and pdf)."""
    out_dir = Path(out_dir)
    return plot_gradcam_grid(ds, out_dir / "gradcam.png") + plot_minor_share(ds, out_dir / "minor_share.png")
