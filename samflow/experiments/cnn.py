"""CNNs on real images trained with GD and SAM; where Grad-CAM puts its mass.

    python -m samflow.experiments.cnn CONFIG [--out DIR] [--overwrite] [--no-figures] [--quiet]

docs/theory.md section 6: GD attends to bright strokes (major features); SAM, at an
intermediate init scale, attends more to the dark background and low-intensity
pixels (minor features) early in training. For every task, method and init
scale alpha of the config, this trains the CNN of `convnet` (same init
directions, same batches for every method) and after every epoch measures, on
held-out images, the share of the Grad-CAM mass (last convolutional layer, true
class) on minor pixels (raw intensity below `gradcam.threshold`) and on major
ones, with the test accuracy and the losses.

Writes into `<output.dir>/<name>/` (each file atomically, refusing to replace
existing results without `--overwrite`):

- `results.nc`: dims `task`, `optimizer` ("gd", "sam_l2", "sam_linf"; not
  "method", which xarray's `.sel` takes as its own keyword), `alpha`, `epoch`;
  variables `minor_share`,
  `major_share` (mean over images of each map's share), `zero_maps` (maps that
  are zero everywhere, left out of the means), `uniform_minor_share` (the share
  a uniform map would give: the minor pixels' area), `train_loss`, `test_loss`,
  `test_accuracy`, `param_norm`, `wall_time_s`; the maps of the figure images `maps`
  (task, optimizer, alpha, fig_epoch, image, y, x) and those images `fig_images`.
  Cells a task does not run (its own `alphas` / `epochs`) are NaN.
- `shares.csv`: the same numbers as one tidy table.
- `gradcam.png/.pdf` (input | GD | SAM maps) and `minor_share.png/.pdf` (the
  share over epochs for every method and alpha).

Training stops at the first non-finite loss, parameter, logit or Grad-CAM map
with `NonFiniteError`, one line naming the task, method, alpha, epoch and step;
no metric is computed from such a model and no result file is written (the
command line exits 1). Maps that are zero everywhere (e.g. every ReLU dead) are
counted in `zero_maps`, left out of the shares, and shown as "zero" in the table.

Float32 throughout the CNN (see `convnet`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from .._util.cli_common import (command_parser, config_and_folder, existing_file, fail, print_figures, run_command,
                           run_locked, writable_folder)
from .._util.io import atomic_write_bytes
from .._labels import OPTIMIZER_TEXT
from .cnn_config import CnnConfig, DataConfig, GradcamConfig, ModelConfig, TaskConfig, TrainConfig, load_cnn_config
from .images import DataNotFoundError, MissingExtraError, EXTRA_HINT
from .convnet import NonFiniteError

__all__ = ["run_experiment", "format_table", "write_csv", "main"]

METHOD_LABELS = OPTIMIZER_TEXT
OUTPUT_FILES = ("results.nc", "shares.csv", "gradcam.png", "gradcam.pdf", "minor_share.png", "minor_share.pdf")


def _figure_indices(y: np.ndarray, n: int) -> np.ndarray:
    """Held-out images for the figure: classes taken in turn, so every class shows."""
    labels = np.asarray(y)
    classes = sorted(set(labels.tolist()))
    per_class = {c: list(np.flatnonzero(labels == c)) for c in classes}
    out: list[int] = []
    while len(out) < min(n, len(labels)):
        for c in classes:
            if per_class[c] and len(out) < n:
                out.append(int(per_class[c].pop(0)))
    return np.asarray(sorted(out))


def _share_text(row: dict) -> str:
    """A measured minor share as text; "all N maps zero" when no map has mass."""
    if math.isnan(row["minor_share"]):
        return f"all {row['zero_maps']} maps zero"
    return f"{row['minor_share']:.3f}"


def _train_cell(
    tcfg: TaskConfig, task, base, method: str, optimizer, epoch_fn, alpha: float, *, key_data,
    x_train, y_train, x_test, y_test, x_eval, y_eval, major, measured, fig_epochs, fig_idx, n_epochs, bar, log,
) -> dict:
    """Train one method at one init scale on a task, measuring at the `measured`
    epochs; return {"rows": {epoch: measurements}, "maps": {epoch: figure maps},
    "wall": seconds}.

    **Raises:** `NonFiniteError` naming task, method, alpha, epoch and step.
    """
    import equinox as eqx
    import jax.random as jr

    from .convnet import param_norm, scale_init
    from .gradcam import gradcam_batch, mass_shares
    from .train import NonFiniteError, evaluate, nonfinite_params

    t0 = time.perf_counter()
    params, static = eqx.partition(scale_init(base, alpha), eqx.is_inexact_array)
    opt_state = optimizer.init(params)
    rows, maps = {}, {}
    batch_loss = math.nan
    where = dict(task=tcfg.name, method=method, alpha=alpha)
    for epoch in range(n_epochs + 1):
        try:
            if epoch > 0:
                params, opt_state, loss = epoch_fn(params, opt_state, x_train, y_train, jr.fold_in(key_data, epoch))
                batch_loss = float(loss)
            elif (bad := nonfinite_params(params)) is not None:  # alpha overflowing float32
                raise NonFiniteError(f"{bad} at the init (alpha = {alpha:g} overflows float32)")
            if epoch not in measured:
                bar.update(1)
                continue
            model = eqx.combine(params, static)
            train_loss, _ = evaluate(model, x_train, y_train, task.binary)
            test_loss, test_acc = evaluate(model, x_test, y_test, task.binary)
            cams = np.asarray(gradcam_batch(model, x_eval, y_eval))
            if not np.isfinite(cams).all():
                raise NonFiniteError(
                    f"{int((~np.isfinite(cams).all(axis=(1, 2))).sum())} of {len(cams)} Grad-CAM maps are not "
                    "finite (float32 overflow of the features)"
                )
        except NonFiniteError as err:
            raise err.at(epoch=epoch, **where) from None
        share, zero = mass_shares(cams, major)
        minor = float(1.0 - np.nanmean(share)) if not zero.all() else math.nan
        rows[epoch] = dict(
            minor_share=minor,
            major_share=1.0 - minor,
            zero_maps=int(zero.sum()),
            train_loss=train_loss,
            test_loss=test_loss,
            test_accuracy=test_acc,
            mean_batch_loss=batch_loss,
            param_norm=param_norm(model),
        )
        if epoch in fig_epochs:
            maps[epoch] = cams[fig_idx]
        bar.set_postfix_str(
            f"{tcfg.name} {METHOD_LABELS[method]} alpha={alpha:g} ep {epoch}: loss {train_loss:.3f} "
            f"acc {test_acc:.3f} minor {_share_text(rows[epoch])}",
            refresh=epoch == 0,
        )
        if epoch > 0:
            bar.update(1)
    wall = time.perf_counter() - t0
    last = rows[max(rows)]
    log(
        f"  {tcfg.name:>10s} {METHOD_LABELS[method]:>8s} alpha={alpha:<6g} {wall:6.1f} s  "
        f"final train loss {last['train_loss']:.4f}  test acc {last['test_accuracy']:.3f}  "
        f"|theta| {rows[0]['param_norm']:.4g} -> {last['param_norm']:.4g}  "
        f"minor share {_share_text(rows[0])} -> {_share_text(last)}"
    )
    return {"rows": rows, "maps": maps, "wall": wall}


@dataclasses.dataclass(frozen=True, eq=False)
class _TaskPlan:
    """One task of an experiment, resolved once from its config (`run_experiment`):
    what `_run_task` takes."""

    task: TaskConfig
    """The task (`[[tasks]]`: its name and classes)."""
    limit: "int | None"
    """Images drawn for it (`CnnConfig.task_limit`)."""
    epochs: int
    """Epochs trained (`CnnConfig.task_epochs`)."""
    alphas: list
    """Init scales (`CnnConfig.task_alphas`)."""
    measured: list
    """Epochs measured (`CnnConfig.measured_epochs`)."""
    figure_epochs: list
    """Epochs whose Grad-CAM maps are kept for the figure ([] unless it is the figure task)."""
    seed: int
    """The seed of the split, the init and the batches."""
    figure_images: int
    """Held-out images kept for the figure (`figure.num_images`)."""
    data: DataConfig
    """The `[data]` section (split and normalization)."""
    model: ModelConfig
    """The `[model]` section (the CNN)."""
    train: TrainConfig
    """The `[train]` section (methods, rho, learning rate, batches)."""
    gradcam: GradcamConfig
    """The `[gradcam]` section (images measured, the minor-pixel threshold)."""


def _run_task(plan: _TaskPlan, data, bar, log) -> dict:
    """Train every method and alpha on the task of `plan`; return its measurements."""
    import jax.numpy as jnp
    import jax.random as jr

    from .convnet import count_params, make_convnet
    from .gradcam import area_shares, major_mask
    from .images import make_task
    from .train import make_epoch, make_optimizer

    tcfg = plan.task
    task = make_task(
        data,
        tcfg.classes,
        test_fraction=plan.data.test_fraction,
        normalize=plan.data.normalize,
        limit=plan.limit,
        seed=plan.seed,
        name=tcfg.name,
    )
    n_eval = min(plan.gradcam.num_images, len(task.x_test))
    x_eval = jnp.asarray(task.x_test[:n_eval])
    y_eval = jnp.asarray(task.y_test[:n_eval])
    major = major_mask(task.intensity_test[:n_eval], plan.gradcam.threshold)
    uniform_minor = float(1.0 - area_shares(major).mean())
    fig_idx = _figure_indices(task.y_test[:n_eval], plan.figure_images)
    fig_epochs = plan.figure_epochs
    measured = plan.measured
    x_train, y_train = jnp.asarray(task.x_train), jnp.asarray(task.y_train)
    x_test, y_test = jnp.asarray(task.x_test), jnp.asarray(task.y_test)
    n_epochs = plan.epochs
    alphas = plan.alphas
    key_model, key_data = jr.split(jr.PRNGKey(plan.seed))
    base = make_convnet(
        task.x_train.shape[1],
        task.num_outputs,
        channels=plan.model.channels,
        strides=plan.model.strides,
        kernel_size=plan.model.kernel_size,
        bias=plan.model.bias,
        padding_mode=plan.model.padding_mode,
        alpha=1.0,
        key=key_model,
    )
    log(
        f"task {tcfg.name}: classes {list(task.classes)}, {len(task.x_train)} train / {len(task.x_test)} held-out "
        f"images {task.x_train.shape[1:]}, {count_params(base)} parameters; Grad-CAM on {n_eval} held-out images, "
        f"minor pixels (intensity < {plan.gradcam.threshold}) cover {uniform_minor:.3f} of them"
    )
    out = {
        "task": task,
        "uniform_minor": uniform_minor,
        "n_eval": n_eval,
        "fig_idx": fig_idx,
        "fig_images": task.intensity_test[fig_idx] if task.x_test.shape[1] == 1 else None,
        "cells": {},
    }
    if task.x_test.shape[1] != 1:  # colour: keep the raw RGB for the figure
        raw = task.x_test[fig_idx] * task.std[None, :, None, None] + task.mean[None, :, None, None]
        out["fig_images"] = raw.transpose(0, 2, 3, 1).clip(0, 1)
    for method in plan.train.methods:
        rho = plan.train.rho_linf if method == "sam_linf" else plan.train.rho
        optimizer = make_optimizer(method, plan.train.learning_rate, rho, plan.train.momentum)
        epoch_fn = make_epoch(base, optimizer, binary=task.binary, n_train=len(task.x_train), batch_size=plan.train.batch_size)
        for alpha in alphas:
            out["cells"][(method, alpha)] = _train_cell(
                tcfg, task, base, method, optimizer, epoch_fn, alpha, key_data=key_data,
                x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, x_eval=x_eval, y_eval=y_eval,
                major=major, measured=measured, fig_epochs=fig_epochs, fig_idx=fig_idx, n_epochs=n_epochs, bar=bar, log=log,
            )
    return out


def _gather(fig_epochs: list, results: dict, task_names: list, methods: list, alphas: list, epochs: list, fields: tuple):
    """The measurements of every task (`_run_task`'s dicts) as arrays over (task,
    method, alpha, epoch), NaN where a task does not run; the figure maps (at `fig_epochs`,
    `CnnConfig.figure_epochs`), images and labels."""
    shape = (len(task_names), len(methods), len(alphas), len(epochs))
    arrays = {f: np.full(shape, np.nan) for f in fields}
    walls = np.full(shape[:3], np.nan)
    first = results[task_names[0]]
    H, W = first["task"].x_test.shape[2:]
    n_fig = max(len(r["fig_idx"]) for r in results.values())
    maps = np.full((len(task_names), len(methods), len(alphas), len(fig_epochs), n_fig, H, W), np.nan, np.float32)
    fig_images = np.full((len(task_names), n_fig, H, W, first["task"].x_test.shape[1]), np.nan, np.float32)
    fig_labels = np.full((len(task_names), n_fig), -99, np.int64)
    for it, name in enumerate(task_names):
        r = results[name]
        k = len(r["fig_idx"])
        imgs = np.asarray(r["fig_images"], np.float32)
        fig_images[it, :k] = imgs[..., None] if imgs.ndim == 3 else imgs
        lab = r["task"].y_test[r["fig_idx"]]
        fig_labels[it, :k] = [r["task"].classes[int(v > 0)] if r["task"].binary else r["task"].classes[int(v)] for v in lab]
        for (method, alpha), cell in r["cells"].items():
            im, ia = methods.index(method), alphas.index(alpha)
            walls[it, im, ia] = cell["wall"]
            for epoch, row in cell["rows"].items():
                ie = epochs.index(epoch)
                for f in fields:
                    arrays[f][it, im, ia, ie] = row[f]
            for epoch, m in cell["maps"].items():
                maps[it, im, ia, fig_epochs.index(epoch), : m.shape[0]] = m
    return arrays, walls, fig_epochs, maps, fig_images, fig_labels


def _versions() -> dict:
    """samflow's package versions (`samflow.store.package_versions`) and those of the images extra."""
    from ..store import package_versions

    versions = package_versions()
    for p in ("optax", "mlxtend", "scikit-learn"):
        try:
            import importlib.metadata

            versions[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            versions[p] = "not installed"
    return versions


def run_experiment(cfg: CnnConfig, *, base_dir: "Path | None" = None, progress: bool = True):
    """Run every task of `cfg`; return the results as an `xarray.Dataset`
    (layout in the module docstring). `progress` shows a bar advancing per
    epoch and one line per trained model.

    **Raises:** `MissingExtraError` when optax (or the data set's package) is
    missing; `DataNotFoundError` when the data files are.
    """
    import xarray as xr
    from tqdm.auto import tqdm

    from .._util.progress import progress_bar
    from .images import load_dataset

    root = cfg.data.root
    if root is not None and base_dir is not None and not Path(root).is_absolute():
        root = str(Path(base_dir) / root)
    data = load_dataset(cfg.data.dataset, root)
    try:
        import optax  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"training needs the optional package 'optax'; install the images extra: {EXTRA_HINT}") from None
    total = sum(len(cfg.train.methods) * len(cfg.task_alphas(t)) * cfg.task_epochs(t) for t in cfg.tasks)
    figure_task = cfg.figure_task().name
    plans = [  # the config resolved once, per task: below here nothing reads it
        _TaskPlan(task=t, limit=cfg.task_limit(t), epochs=cfg.task_epochs(t), alphas=cfg.task_alphas(t),
                  measured=cfg.measured_epochs(t), figure_epochs=cfg.figure_epochs() if t.name == figure_task else [],
                  seed=cfg.seed, figure_images=cfg.figure.num_images, data=cfg.data, model=cfg.model,
                  train=cfg.train, gradcam=cfg.gradcam)
        for t in cfg.tasks
    ]
    t_start = time.perf_counter()
    results = {}
    with progress_bar(total, "epochs", "epoch", disable=not progress) as bar:
        say = (lambda msg: tqdm.write(msg, file=sys.stdout)) if progress else (lambda *_: None)
        for plan in plans:
            results[plan.task.name] = _run_task(plan, data, bar, say)
    wall = time.perf_counter() - t_start

    task_names = [t.name for t in cfg.tasks]
    methods = list(cfg.train.methods)
    alphas = sorted({a for t in cfg.tasks for a in cfg.task_alphas(t)})
    epochs = sorted({e for t in cfg.tasks for e in cfg.measured_epochs(t)})
    fields = (
        "minor_share", "major_share", "zero_maps", "train_loss", "test_loss", "test_accuracy", "mean_batch_loss",
        "param_norm",
    )
    arrays, walls, fig_epochs, maps, fig_images, fig_labels = _gather(cfg.figure_epochs(), results, task_names, methods,
                                                                      alphas, epochs, fields)

    dims = ("task", "optimizer", "alpha", "epoch")
    long_names = {
        "minor_share": f"share of Grad-CAM mass on minor pixels (intensity < {cfg.gradcam.threshold}), mean over images",
        "major_share": f"share of Grad-CAM mass on major pixels (intensity >= {cfg.gradcam.threshold}), mean over images",
        "zero_maps": "Grad-CAM maps that are zero everywhere (left out of the shares)",
        "train_loss": "loss on the whole training set",
        "test_loss": "loss on the held-out set",
        "test_accuracy": "accuracy on the held-out set",
        "mean_batch_loss": "mean mini-batch loss during the epoch",
        "param_norm": "l2 norm of all parameters (shrinking to 0: SAM's collapse, regime 1 of docs/theory.md)",
    }
    variables = {f: (dims, arrays[f], {"long_name": long_names[f]}) for f in fields}
    variables["uniform_minor_share"] = (
        ("task",),
        np.array([results[n]["uniform_minor"] for n in task_names]),
        {"long_name": "minor pixels' area fraction: the minor share of a uniform map"},
    )
    variables["wall_time_s"] = (("task", "optimizer", "alpha"), walls, {"long_name": "training + measuring time"})
    variables["maps"] = (
        ("task", "optimizer", "alpha", "fig_epoch", "image", "y", "x"),
        maps,
        {"long_name": "Grad-CAM maps of the figure images (upsampled to the input)"},
    )
    variables["fig_images"] = (("task", "image", "y", "x", "channel"), fig_images, {"long_name": "figure images, raw intensities in [0, 1]"})
    variables["fig_labels"] = (("task", "image"), fig_labels, {"long_name": "class of the figure images (-99: none)"})
    variables["n_images"] = (("task",), np.array([results[n]["n_eval"] for n in task_names]), {"long_name": "held-out images measured"})
    ds = xr.Dataset(
        {k: xr.Variable(*v) for k, v in variables.items()},
        coords={"task": task_names, "optimizer": methods, "alpha": alphas, "epoch": epochs, "fig_epoch": fig_epochs},
    )
    ds.attrs.update(
        title=f"samflow CNN experiment '{cfg.name}'",
        config=json.dumps(cfg.model_dump(mode="json")),
        versions=json.dumps(_versions()),
        dataset=cfg.data.dataset,
        threshold=cfg.gradcam.threshold,
        figure_task=cfg.figure_task().name,
        figure_alpha=cfg.figure_alpha(),
        task_classes=json.dumps({n: list(results[n]["task"].classes) for n in task_names}),
        wall_time_s=wall,
        dtype="float32",
    )
    return ds


def _table_epochs(epochs: list[int], k: int = 9) -> list[int]:
    """At most about `k` epochs for the printed table: all of them when few, else
    the init, powers of two (early epochs are where minor-first shows) and the last."""
    if len(epochs) <= k:
        return epochs
    marks = [0] + [2**i for i in range(20) if 2**i < epochs[-1]] + [epochs[-1]]
    picks = {min(epochs, key=lambda e: abs(e - m)) for m in marks}
    return sorted(picks)


def format_table(ds) -> str:
    """The minor-share table as text: one block per task, a row per method and
    alpha, a column per (selected) epoch, then the final held-out accuracy."""
    lines = []
    for task in ds.task.values:
        t = ds.sel(task=task)
        measured = np.isfinite(t.test_accuracy.values).any(axis=(0, 1))
        epochs = _table_epochs([int(e) for e, ok in zip(ds.epoch.values, measured) if ok])
        lines.append(
            f"task {task} (classes {json.loads(ds.attrs['task_classes'])[str(task)]}): share of Grad-CAM mass on "
            f"minor pixels (intensity < {ds.attrs['threshold']}); a uniform map gives {float(t.uniform_minor_share):.3f}"
        )
        head = f"{'method':>9s} {'alpha':>6s} | " + " ".join(f"{'ep ' + str(e):>7s}" for e in epochs) + " | test acc"
        lines.append(head)
        lines.append("-" * len(head))
        any_zero = False
        for m in ds.optimizer.values:
            for a in ds.alpha.values:
                row = t.sel(optimizer=m, alpha=a)
                if not np.isfinite(row.test_accuracy.values).any():
                    continue  # a cell this task does not run
                cells = []
                for e in epochs:
                    r = row.sel(epoch=e)
                    if np.isfinite(float(r.minor_share)):
                        cells.append(f"{float(r.minor_share):7.3f}")
                    elif np.isfinite(float(r.test_accuracy)):  # measured, every map zero
                        cells.append(f"{'zero':>7s}")
                        any_zero = True
                    else:
                        cells.append(f"{'':>7s}")
                last = row.test_accuracy.values[np.isfinite(row.test_accuracy.values)][-1]
                lines.append(f"{METHOD_LABELS.get(str(m), str(m)):>9s} {float(a):6g} | {' '.join(cells)} | {last:.3f}")
        if any_zero:
            lines.append(f"zero: every one of the {int(t.n_images)} Grad-CAM maps is zero (no mass to share; see zero_maps)")
        lines.append("")
    return "\n".join(lines)


def write_csv(ds, path: "str | Path") -> Path:
    """The tidy table (one row per task, optimizer, alpha and measured epoch that ran), written atomically."""
    buf = io.StringIO()
    cols = ["minor_share", "major_share", "zero_maps", "train_loss", "test_loss", "test_accuracy", "param_norm"]
    w = csv.writer(buf)
    w.writerow(["task", "optimizer", "alpha", "epoch", *cols, "uniform_minor_share", "n_images"])
    for task in ds.task.values:
        t = ds.sel(task=task)
        for m in ds.optimizer.values:
            for a in ds.alpha.values:
                for e in ds.epoch.values:
                    row = t.sel(optimizer=m, alpha=a, epoch=e)
                    if not np.isfinite(float(row.test_accuracy)):
                        continue
                    vals = [float(row[c]) for c in cols]
                    vals[2] = int(vals[2])
                    w.writerow(
                        [task, m, f"{float(a):g}", int(e), *[v if isinstance(v, int) else f"{v:.6g}" for v in vals],
                         f"{float(t.uniform_minor_share):.6g}", int(t.n_images)]
                    )
    return atomic_write_bytes(buf.getvalue().encode(), Path(path))


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code: 0 ok, 2 bad input
    (config, data, missing extra), 1 training became non-finite (one line
    naming task, method, alpha, epoch and step; no result file is written and
    an output folder made by this run is removed again)."""
    parser = command_parser(
        "python -m samflow.experiments.cnn",
        "Train CNNs with GD and SAM on real images and measure where Grad-CAM puts its mass.",
        "TOML config file (see configs/cnn_mnist.toml)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing results")
    parser.add_argument("--no-figures", action="store_true", help="write results only")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or log")
    args = parser.parse_args(argv)
    config_path = Path(args.config)
    cfg, out_dir, refused = config_and_folder(load_cnn_config, config_path, args.out)
    if refused is not None:
        return refused
    train = lambda: run_experiment(cfg, base_dir=config_path.parent, progress=not args.quiet)  # noqa: E731
    figures = cfg.output.figures and not args.no_figures
    # Two runs into one folder would leave results.nc of one and shares.csv of the other.
    return run_locked(out_dir, ".results.lock", "CNN experiment",
                      lambda: _locked_main(train, args, config_path, out_dir, figures))


def _locked_main(train, args, config_path: Path, out_dir: Path, figures: bool) -> int:
    """`main` once the output folder is locked: check, train (`train()`: `run_experiment`
    of the config), write, draw (with `figures`)."""
    if (existing := existing_file(out_dir, OUTPUT_FILES)) and not args.overwrite:
        return fail(f"{existing} exists; pass --overwrite to replace it")
    if problem := writable_folder(out_dir):
        return fail(problem)

    try:
        ds = train()
    except (MissingExtraError, DataNotFoundError) as err:
        return fail(str(err))
    except NonFiniteError as err:  # diverged: one line, nothing written
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # e.g. a class the data set lacks
        return fail(f"{config_path}: {err}")

    from ..store import write_results

    results_path = write_results(ds, out_dir / "results.nc")  # atomic, with the usual permissions
    print(f"results: {results_path}")
    print(f"table:   {write_csv(ds, out_dir / 'shares.csv')}")
    print()
    print(format_table(ds))
    if figures:
        from .cnn_plots import plot_cnn

        print_figures(plot_cnn(ds, out_dir))
    print(f"done in {ds.attrs['wall_time_s']:.1f} s (training, Grad-CAM and compilation)")
    return 0


if __name__ == "__main__":
    run_command(main, "no results were written (they are written at the end); rerun the command")  # float64 and Agg first
