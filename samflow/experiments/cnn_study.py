"""The CNN study: seeds, an init-scale and rho sweep, and a ground-truth task.

    python -m samflow.experiments.cnn_study CONFIG [--out DIR] [--resume] [--overwrite] [--quick] [--no-figures] [--quiet]

docs/theory.md section 6 claims that at an intermediate init scale alpha SAM
attends to minor features (low-intensity pixels) where GD attends to major ones
(bright strokes). `samflow.experiments.cnn` shows one run; this module makes the
question answerable (docs/cnn.md has the answer):

- every (task, method, alpha, rho) runs for every seed of `seeds`; the seed
  draws the train / held-out split, the init directions and the batch order,
  and is shared by every method, alpha and rho (paired runs);
- methods "gd", "sam_l2", "sam_linf" (`train.make_optimizer`'s algorithms; SAM
  is `optax.contrib.sam`); GD does not depend on rho and runs once per (alpha,
  seed); linf-SAM runs at rho / sqrt(P) per coordinate (P parameters), so its
  perturbation has the l2 norm rho of the l2 one;
- tasks: "digits" (real images; minor pixel = raw intensity < threshold),
  "faint" (the digits plus a faint patch whose place also carries the label,
  `samflow.datasets.faint_patch_images`: minor and major features known by
  construction) and "faint_only" (the patch alone: the faint feature is
  learnable);
- after each measured epoch, on held-out images: losses, accuracy, the
  Grad-CAM share on minor pixels and on the patch places, and (faint tasks)
  the accuracy with the patch removed, with the strokes removed, and the share
  of images whose prediction follows a swapped patch;
- a run whose loss, parameters, logits or maps turn non-finite stops there
  (one line on stderr; status "nonfinite", its later epochs NaN); a run whose
  training loss never goes below log 2 - stuck_tol is "stuck". Both are
  marked in the tables and figures and left out of the means and intervals;
- the interval is the 95% Student-t interval over the seeds left in
  (mean +- t_{0.975, n-1} s / sqrt(n)); none with fewer than 2 seeds;
- a check that SAM at rho = 0 gives GD's parameters (`rho0_max_abs_diff`).

Writes into `<output.dir>/<name>/`: `runs/` (one .npz per finished run:
`--resume` skips them), `results.nc` (dims seed, task, optimizer, alpha, rho,
epoch; "optimizer" because xarray's `.sel` takes `method` as its own keyword),
`summary.csv` (mean, interval, seeds left, per band), `tables.md` and the
figures `minor_share_vs_alpha.png`, `minor_share_difference.png`,
`ground_truth.png`, `curves.png`
(`cnn_study_plots`). Float32 in the CNN.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

from .._util.cli_common import (command_parser, config_and_folder, existing_file, fail, print_figures, run_command,
                           run_locked, writable_folder)
from .._util.io import atomic_path, atomic_write_text
from .._util.io import atomic_write_bytes as _atomic_write
from ..config import ConfigError
from .cnn_study_config import StudyConfig, StudyData, StudyPlan, StudyTask, load_study_config
from .cnn_study_results import (  # noqa: F401  (re-exported: the study's public names)
    METHOD_LABELS,
    METRICS,
    PAIRED,
    STATUS,
    _rows,
    compare,
    compare_paired,
    format_tables,
    summarize,
    t_interval,
)

__all__ = ["METRICS", "STATUS", "StudyConfig", "StudyPlan", "run_study", "assemble", "summarize", "format_tables", "main"]

RESULT_FILES = ("results.nc", "summary.csv", "tables.md")
#: The packages besides `samflow.store.STAMP_PACKAGES` whose code sets a run's numbers (SAM is optax's).
STAMP_EXTRA = ("optax",)


# ------------------------------------------------------------------ data


def _digits(source: StudyData):
    """The two classes of the data set of the `[data]` section `source`, downsampled: an `ImageSet`."""
    from .images import ImageSet, load_dataset

    data = load_dataset(source.dataset)
    keep = np.isin(data.labels, source.classes)
    images, labels = data.images[keep], data.labels[keep]
    k = source.downsample
    if k > 1:
        n, h, w, c = images.shape
        images = images[:, : h // k * k, : w // k * k].reshape(n, h // k, k, w // k, k, c).mean(axis=(2, 4))
    return ImageSet(images.astype(np.float32), labels, f"{data.name}/{k}")


def task_arrays(source: StudyData, task: StudyTask, digits, seed: int) -> dict:
    """The arrays of one task and seed, normalized with the training mean and std.

    **Arguments:** `source` the config's `[data]` section (`StudyConfig.data`: the
    classes, the split, the limit, the normalization); `digits` its images (`_digits`).

    **Returns:** a dict of float32 arrays: `x_train` (n, 1, H, W), `y_train`
    (n,) in {-1, +1}, `x_test`, `y_test`, the test-time interventions
    `x_no_faint`, `x_no_strokes`, `x_swap` (each like `x_test`; for "digits"
    tasks the clean images), `raw_test` (n_test, H, W) raw intensities (the
    minor-pixel mask) and `patch` (H, W) booleans, the two patch places.
    """
    from ..datasets import faint_patch_images, faint_patch_masks
    from .images import make_task

    split = make_task(
        digits, list(source.classes), test_fraction=source.test_fraction, normalize=False,
        limit=source.limit, seed=seed,
    )
    tr, te = split.x_train[:, 0], split.x_test[:, 0]
    ytr, yte = split.y_train, split.y_test
    kw = dict(contrast=task.contrast, size=task.patch)
    if task.kind == "digits":
        train, test = tr, te
        no_faint = no_strokes = swap = te
    else:
        strokes = task.kind == "faint"
        train = faint_patch_images(tr, ytr, strokes=strokes, **kw)
        test = faint_patch_images(te, yte, strokes=strokes, **kw)
        no_faint = te if strokes else np.zeros_like(te)
        no_strokes = faint_patch_images(te, yte, strokes=False, **kw)
        swap = faint_patch_images(te, yte, strokes=strokes, swap=True, **kw)
    if source.normalize:
        mean, std = float(train.mean()), float(train.std()) + 1e-6
    else:
        mean, std = 0.0, 1.0
    norm = lambda a: ((a[:, None] - mean) / std).astype(np.float32)  # noqa: E731
    return dict(
        x_train=norm(train), y_train=ytr.astype(np.float32), x_test=norm(test), y_test=yte.astype(np.float32),
        x_no_faint=norm(no_faint), x_no_strokes=norm(no_strokes), x_swap=norm(swap),
        raw_test=test.astype(np.float32), patch=faint_patch_masks(train.shape[1:], task.patch).any(axis=0),
    )


# ------------------------------------------------------------------ training


def _loss(static, p, x, y):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    f = jax.vmap(eqx.combine(p, static))(x)
    return jnp.mean(jax.nn.softplus(-y * f))


def _optimizer(method: str, lr: float, rho):
    """`train.make_optimizer`'s algorithm with a rho that may be traced (one
    compilation serves every rho)."""
    import optax

    from .train import normalize_safe

    outer = optax.sgd(lr)
    if method == "gd":
        return outer
    ascent = normalize_safe() if method == "sam_l2" else optax.scale_by_sign()
    return optax.contrib.sam(outer, optax.chain(ascent, optax.sgd(rho)), sync_period=2, opaque_mode=True)


def _make_step(static, method: str, lr: float):
    """One jitted step `(params, state, x, y, rho) -> (params, state, loss, ok)`."""
    import jax
    import jax.numpy as jnp
    import optax

    loss = lambda p, x, y: _loss(static, p, x, y)  # noqa: E731

    @jax.jit
    def step(p, s, x, y, rho):
        value, g = jax.value_and_grad(loss)(p, x, y)
        opt = _optimizer(method, lr, rho)
        u, s = opt.update(g, s, p, grad_fn=lambda q, _: jax.grad(loss)(q, x, y))
        p = optax.apply_updates(p, u)
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree_util.tree_leaves(p)]))
        return p, s, value, jnp.isfinite(value) & finite

    return step


def _make_measure(static):
    """One jitted measurement of a model on the arrays of `task_arrays`."""
    from functools import partial

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from .gradcam import gradcam

    @partial(jax.jit, static_argnums=2)
    def measure(p, a, n_cam):
        model = eqx.combine(p, static)
        f = lambda x: jax.vmap(model)(x)  # noqa: E731
        ftr, fte = f(a["x_train"]), f(a["x_test"])
        out = dict(
            train_loss=jnp.mean(jax.nn.softplus(-a["y_train"] * ftr)),
            test_loss=jnp.mean(jax.nn.softplus(-a["y_test"] * fte)),
            test_accuracy=jnp.mean(jnp.where(fte >= 0, 1.0, -1.0) == a["y_test"]),
            acc_no_faint=jnp.mean(jnp.where(f(a["x_no_faint"]) >= 0, 1.0, -1.0) == a["y_test"]),
            acc_no_strokes=jnp.mean(jnp.where(f(a["x_no_strokes"]) >= 0, 1.0, -1.0) == a["y_test"]),
            follow_faint=jnp.mean(jnp.where(f(a["x_swap"]) >= 0, 1.0, -1.0) == -a["y_test"]),
            finite=jnp.all(jnp.isfinite(ftr)) & jnp.all(jnp.isfinite(fte)),
        )
        xs, ys = a["x_test"][:n_cam], a["y_test"][:n_cam]
        out["cams"] = jax.vmap(lambda x, t: gradcam(model, x, t))(xs, ys)
        return out

    return measure


def _shares(cams: np.ndarray, raw: np.ndarray, patch: np.ndarray, threshold: float) -> tuple[float, float, int]:
    """(minor share, patch share, number of zero maps) of maps (n, H, W)."""
    from .gradcam import major_mask, mass_shares

    major_share, zero = mass_shares(cams, major_mask(raw, threshold))
    patch_share, _ = mass_shares(cams, np.broadcast_to(patch, cams.shape))
    if zero.all():
        return math.nan, math.nan, int(zero.sum())
    return float(1 - np.nanmean(major_share)), float(np.nanmean(patch_share)), int(zero.sum())


def train_run(step, measure, p0, state0, arrays: dict, *, rho: float, epochs: int, measured: list[int],
              batch_size: int, seed: int, threshold: float, n_cam: int, stuck_tol: float) -> dict:
    """Train one model and measure it; never raises on non-finite numbers.

    **Returns:** a dict with every metric of `METRICS` as float64 (len(measured),)
    (NaN after a non-finite stop), `status` (a key of `STATUS`, "ok" / "stuck"
    / "nonfinite"), `message` (one line, why it stopped; "" otherwise),
    `wall_s` and `final_params` (the parameters after the last step).
    """
    import jax.numpy as jnp

    t0 = time.perf_counter()
    n = len(arrays["x_train"])
    dev = {k: jnp.asarray(v) for k, v in arrays.items() if k.startswith(("x_", "y_"))}
    raw_cam = arrays["raw_test"][:n_cam]
    rows = {k: np.full(len(measured), np.nan) for k in METRICS}
    p, s = p0, state0
    rho_j = jnp.float32(rho)
    status, message = "ok", ""
    oks: list = []
    bs = n if batch_size in (0, None) or batch_size >= n else int(batch_size)
    for i, epoch in enumerate(measured):
        while len(oks) < epoch * (n // bs) and status == "ok":
            e = len(oks) // (n // bs) + 1
            if bs == n:
                xb, yb = dev["x_train"], dev["y_train"]
                p, s, _, ok = step(p, s, xb, yb, rho_j)
                oks.append(ok)
            else:
                perm = np.random.default_rng([seed, e]).permutation(n)
                for b in range(n // bs):
                    idx = jnp.asarray(perm[b * bs : (b + 1) * bs])
                    p, s, _, ok = step(p, s, dev["x_train"][idx], dev["y_train"][idx], rho_j)
                    oks.append(ok)
        flags = np.asarray(jnp.stack(oks)) if oks else np.ones(0, bool)
        if not flags.all():
            k = int(np.flatnonzero(~flags)[0])
            status, message = "nonfinite", f"the loss or a parameter became non-finite at step {k + 1}"
            break
        from .train import nonfinite_params

        if (bad := nonfinite_params(p)) is not None:
            status, message = "nonfinite", f"{bad} at epoch {epoch}"
            break
        m = measure(p, dev, n_cam)
        cams = np.asarray(m.pop("cams"))
        vals = {k: float(v) for k, v in m.items()}
        if not (vals.pop("finite") and np.isfinite(cams).all() and all(map(math.isfinite, vals.values()))):
            status, message = "nonfinite", f"a logit, loss or Grad-CAM map is not finite at epoch {epoch}"
            break
        minor, faint, zero = _shares(cams, raw_cam, arrays["patch"], threshold)
        vals.update(minor_share=minor, faint_share=faint, zero_maps=float(zero), param_norm=_norm(p))
        for k, v in vals.items():
            rows[k][i] = v
    if status == "ok":
        losses = rows["train_loss"][np.asarray(measured) > 0]
        if losses.size and np.nanmin(losses) >= math.log(2) - stuck_tol:
            status = "stuck"
            message = f"the training loss never went below log 2 - {stuck_tol:g} (min {np.nanmin(losses):.4f})"
    return dict(rows, status=status, message=message, wall_s=time.perf_counter() - t0, final_params=p)


def _norm(p) -> float:
    import jax

    return float(np.sqrt(sum(float(np.sum(np.asarray(v, np.float64) ** 2)) for v in jax.tree_util.tree_leaves(p))))


# ------------------------------------------------------------------ the sweep


def _run_id(task: str, method: str, alpha: float, rho: "float | None", seed: int) -> str:
    r = "gd" if rho is None else f"r{rho:g}"
    return f"{task}/{method}/a{alpha:g}_{r}_s{seed}"


def _fingerprint(config: dict) -> str:
    """What makes a stored run reusable: everything of the config's JSON values (`StudyPlan.config`)
    but the name, description and output."""
    raw = dict(config)
    for k in ("name", "description", "output"):
        raw.pop(k, None)
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]


def _save_run(path: Path, run: dict, fingerprint: str, stamp: str) -> None:
    """Store one run atomically, with the `_fingerprint` of the config it ran under
    and the code stamp (`samflow.store.code_stamp`) of the code that ran it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **{k: run[k] for k in METRICS}, status=run["status"], message=run["message"], wall_s=run["wall_s"],
                 fingerprint=fingerprint, code_stamp=stamp)


def _stamp_problem(what: str, old: str, stamp: str) -> str:
    """The refusal of stored runs (`what`: "<folder> holds runs") made under the code
    stamp `old` by code of stamp `stamp`."""
    return (f"{what} made under code stamp '{old}', this code is '{stamp}'; rerun with --overwrite "
            "to start over (or use another --out), or finish them with the code that made them")


def _load_run(path: Path, fingerprint: str, stamp: str) -> "dict | None":
    """A stored run, or None when its file is damaged (truncated, unreadable: one note
    names it, and the run is redone).

    **Raises:** `ConfigError` (one line naming the file) when the run carries
    another config's fingerprint (another study wrote into this folder) or was
    made under another code stamp than `stamp` (other versions of samflow, JAX,
    optax...: its numbers would be mixed with this code's); runs stored before
    runs carried them are judged by `runs/fingerprint.json`.
    """
    try:
        with np.load(path) as z:
            out = {k: z[k].astype(np.float64) for k in METRICS}
            out.update(status=str(z["status"]), message=str(z["message"]), wall_s=float(z["wall_s"]))
            own = str(z["fingerprint"]) if "fingerprint" in z.files else fingerprint
            own_stamp = str(z["code_stamp"]) if "code_stamp" in z.files else stamp
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError, TypeError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"note: stored run {path} is damaged ({why}); it is run again", file=sys.stderr)
        return None
    if own != fingerprint:
        raise ConfigError(
            f"{path} holds a run of another config (fingerprint {own} != {fingerprint}): another study wrote "
            "into this folder; use another --out or --overwrite"
        )
    if own_stamp != stamp:
        raise ConfigError(_stamp_problem(f"{path} holds a run", own_stamp, stamp))
    return out


def run_study(cfg: StudyConfig, out_dir: "str | Path", *, resume: bool = False, progress: bool = True) -> dict:
    """Run every planned run not yet in `out_dir/runs` (with `resume`), store each
    as it finishes, and return `{run_id: run}` for all of them plus the rho = 0
    check under the key "rho0".

    Every stored run carries the code stamp (`samflow.store.code_stamp` with
    `STAMP_EXTRA`), kept in `runs/fingerprint.json` and in the results
    (`results["_code_stamp"]`, the attribute `code_stamp` of `assemble`).

    **Raises:** `ConfigError` when `out_dir/runs` holds runs of another config
    or of another code stamp (one line naming both stamps; or any runs without
    `resume`); `MissingExtraError` without optax / mlxtend.
    """
    return _study(cfg.plan(), out_dir, resume=resume, progress=progress)


def _study(plan: StudyPlan, out_dir: "str | Path", *, resume: bool = False, progress: bool = True) -> dict:
    """`run_study` of a config's `StudyPlan`."""
    import equinox as eqx
    import jax
    import jax.random as jr
    from tqdm.auto import tqdm

    from .._util.progress import progress_bar
    from ..store import code_stamp
    from ..sweep import NO_STAMP
    from .convnet import count_params, make_convnet, scale_init

    out_dir = Path(out_dir)
    runs_dir = out_dir / "runs"
    kept = runs_dir / "fingerprint.json"
    fp, stamp = _fingerprint(plan.config), code_stamp(STAMP_EXTRA)
    if runs_dir.exists() and any(runs_dir.rglob("*.npz")):
        old = json.loads(kept.read_text()) if kept.exists() else {}
        if not resume:
            raise ConfigError(f"{runs_dir} holds runs already; pass --resume to continue them or --overwrite to start over")
        if old.get("fingerprint") != fp:
            raise ConfigError(
                f"{runs_dir} holds runs of another config (fingerprint {old.get('fingerprint')} != {fp}); use another "
                "--out or --overwrite"
            )
        if old.get("code_stamp", NO_STAMP) != stamp:
            raise ConfigError(_stamp_problem(f"{runs_dir} holds runs", old.get("code_stamp", NO_STAMP), stamp))
    runs_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        json.dumps({"fingerprint": fp, "code_stamp": stamp, "config": plan.config}, indent=1), kept
    )

    digits = _digits(plan.data)
    measured = plan.measured
    results, todo = {}, []
    for r in plan.runs:
        rid = _run_id(r[0].name, *r[1:])
        path = runs_dir / f"{rid}.npz"
        run = _load_run(path, fp, stamp) if resume and path.exists() else None
        if run is not None:
            results[rid] = run
        else:
            todo.append(r)
    say = (lambda m: tqdm.write(m, file=sys.stderr)) if progress else (lambda m: None)
    if results:
        say(f"resume: {len(results)} of {len(plan.runs)} runs already done in {runs_dir}")
    steps, measures, arrays, bases = {}, {}, {}, {}
    n_params = None
    t_start = time.perf_counter()
    with progress_bar(len(todo), "runs", "run", disable=not progress) as bar:
        for task, method, alpha, rho, seed in todo:
            key = (task.name, seed)
            if key not in arrays:
                arrays.clear()  # one task and seed at a time: the loop keeps seeds outermost per task
                arrays[key] = task_arrays(plan.data, task, digits, seed)
            a = arrays[key]
            if seed not in bases:
                bases[seed] = make_convnet(
                    1, 1, channels=plan.model.channels, strides=plan.model.strides, kernel_size=plan.model.kernel_size,
                    bias=plan.model.bias, padding_mode=plan.model.padding_mode, key=jr.PRNGKey(seed),
                )
            base = bases[seed]
            params, static = eqx.partition(scale_init(base, alpha), eqx.is_inexact_array)
            n_params = n_params or count_params(base)
            if method not in steps:
                steps[method] = _make_step(static, method, plan.train.learning_rate)
            if "m" not in measures:
                measures["m"] = _make_measure(static)
            rho_eff = 0.0 if rho is None else (rho if method == "sam_l2" else rho / math.sqrt(n_params))
            state = _optimizer(method, plan.train.learning_rate, rho_eff).init(params)
            run = train_run(
                steps[method], measures["m"], params, state, a, rho=rho_eff, epochs=plan.train.epochs,
                measured=measured, batch_size=plan.train.batch_size, seed=seed, threshold=plan.measure.threshold,
                n_cam=min(plan.measure.num_images, len(a["x_test"])), stuck_tol=plan.measure.stuck_tol,
            )
            rid = _run_id(task.name, method, alpha, rho, seed)
            if run["status"] == "nonfinite":
                say(f"stopped {rid}: {run['message']}")
            _save_run(runs_dir / f"{rid}.npz", run, fp, stamp)
            run.pop("final_params")
            results[rid] = run
            bar.set_postfix_str(
                f"{rid} {run['status']} acc {run['test_accuracy'][-1]:.3f} minor {run['minor_share'][-1]:.3f}",
                refresh=False,
            )
            bar.update(1)
    results["rho0"] = _rho0_check(plan, digits) if plan.measure.rho0_epochs and "gd" in plan.train.methods else {}
    results["_wall_s"] = time.perf_counter() - t_start
    results["_code_stamp"] = stamp
    jax.clear_caches()
    return results


def _rho0_check(plan: StudyPlan, digits) -> dict:
    """max |theta_SAM - theta_GD| after `rho0_epochs` epochs at rho = 0, over
    the seeds, on the first task at its middle alpha, for each SAM method."""
    import equinox as eqx
    import jax.random as jr

    from .convnet import make_convnet, scale_init

    task = plan.tasks[0]
    alphas = plan.alphas[task.name]
    alpha = alphas[len(alphas) // 2]
    K = plan.measure.rho0_epochs
    out = {}
    for method in [m for m in plan.train.methods if m != "gd"]:
        worst = 0.0
        for seed in plan.seeds:
            a = task_arrays(plan.data, task, digits, seed)
            base = make_convnet(1, 1, channels=plan.model.channels, strides=plan.model.strides,
                                kernel_size=plan.model.kernel_size, bias=plan.model.bias,
                                padding_mode=plan.model.padding_mode, key=jr.PRNGKey(seed))
            params, static = eqx.partition(scale_init(base, alpha), eqx.is_inexact_array)
            measure = _make_measure(static)
            finals = []
            for m in ("gd", method):
                run = train_run(
                    _make_step(static, m, plan.train.learning_rate), measure, params,
                    _optimizer(m, plan.train.learning_rate, 0.0).init(params), a, rho=0.0, epochs=K, measured=[0, K],
                    batch_size=plan.train.batch_size, seed=seed, threshold=plan.measure.threshold, n_cam=1,
                    stuck_tol=plan.measure.stuck_tol,
                )
                finals.append(run["final_params"])
            import jax

            diff = jax.tree_util.tree_map(lambda u, v: float(np.max(np.abs(np.asarray(u) - np.asarray(v)))), *finals)
            worst = max(worst, max(jax.tree_util.tree_leaves(diff)))
        out[method] = dict(alpha=alpha, epochs=K, max_abs_diff=worst)
    return out


def assemble(plan: StudyPlan, results: dict, *, partial: bool = False):
    """The results of the study planned by `plan` (`StudyConfig.plan()`) as an
    `xarray.Dataset` with dims (seed, task, optimizer,
    alpha, rho, epoch): every metric of `METRICS`, `status` (codes of `STATUS`)
    and `wall_time_s` per run. GD's runs (no rho) are stored at every rho.
    Cells a task does not run are NaN with status -1; so are runs missing
    from `results` with `partial` (a look at an unfinished study), which
    otherwise raise `KeyError`.

    **Raises:** `TypeError` (one line) for a `StudyConfig` as `plan` (0.2's argument):
    pass its `.plan()`."""
    import xarray as xr

    if not isinstance(plan, StudyPlan):
        raise TypeError(f"assemble takes the study's plan since samflow 0.3.0: pass cfg.plan(), not a {type(plan).__name__}")
    seeds, tasks, methods = list(plan.seeds), [t.name for t in plan.tasks], list(plan.train.methods)
    alphas = sorted({a for t in plan.tasks for a in plan.alphas[t.name]})
    rhos, epochs = list(plan.train.rhos), plan.measured
    shape = (len(seeds), len(tasks), len(methods), len(alphas), len(rhos), len(epochs))
    data = {k: np.full(shape, np.nan) for k in METRICS}
    status = np.full(shape[:-1], STATUS["not run"], np.int8)
    wall = np.full(shape[:-1], np.nan)
    messages = []
    for task, method, alpha, rho, seed in plan.runs:
        rid = _run_id(task.name, method, alpha, rho, seed)
        if partial and rid not in results:
            continue
        run = results[rid]
        idx = (seeds.index(seed), tasks.index(task.name), methods.index(method), alphas.index(alpha))
        for ir in range(len(rhos)) if rho is None else [rhos.index(rho)]:
            for k in METRICS:
                data[k][idx + (ir,)] = run[k]
            status[idx + (ir,)] = STATUS[run["status"]]
            wall[idx + (ir,)] = run["wall_s"]
        if run["status"] == "nonfinite":
            messages.append(f"{_run_id(task.name, method, alpha, rho, seed)}: {run['message']}")
    dims = ("seed", "task", "optimizer", "alpha", "rho", "epoch")
    variables = {k: (dims, v, {"long_name": d}) for k, v in ((k, data[k]) for k in METRICS) for d in [METRICS[k]]}
    variables["status"] = (dims[:-1], status, {"long_name": "0 ok, 1 stuck at log 2, 2 non-finite, -1 not run"})
    variables["wall_time_s"] = (dims[:-1], wall, {"long_name": "training + measuring time of the run"})
    ds = xr.Dataset(
        {k: xr.Variable(*v) for k, v in variables.items()},
        coords={"seed": seeds, "task": tasks, "optimizer": methods, "alpha": alphas, "rho": rhos, "epoch": epochs},
    )
    ds.attrs.update(
        title=f"samflow CNN study '{plan.name}'",
        config=json.dumps(plan.config),
        task_kinds=json.dumps({t.name: t.kind for t in plan.tasks}),
        bands=json.dumps(plan.measure.bands),
        threshold=plan.measure.threshold,
        stuck_below=math.log(2) - plan.measure.stuck_tol,
        interval="95% Student-t over the seeds with status 0 (ok)",
        rho_note="rho is the l2 radius; linf-SAM runs at rho / sqrt(#parameters) per coordinate; GD is stored at every rho",
        rho0_check=json.dumps(results.get("rho0", {})),
        nonfinite_runs=json.dumps(messages),
        wall_time_s=float(results.get("_wall_s", float("nan"))),
        code_stamp=str(results.get("_code_stamp", "not recorded")),
        dtype="float32",
    )
    return ds


def write_summary_csv(ds, path: "str | Path") -> Path:
    """The summary (mean, 95% half-width, seeds ok) at every band epoch, one row per cell, atomically."""
    import csv

    s = summarize(ds)
    bands = json.loads(ds.attrs["bands"])
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["task", "optimizer", "rho", "alpha", "band", "epoch", "metric", "mean", "half_width_95", "n_ok", "n_stuck", "n_nonfinite", "n_run"])
    for task in s.task.values:
        for m, rho, a, r in _rows(s, str(task)):
            c = s.sel(task=task, optimizer=m, alpha=a, rho=r)
            for band, e in bands.items():
                for k in METRICS:
                    w.writerow([str(task), m, "" if rho is None else f"{rho:g}", f"{a:g}", band, e, k,
                                f"{float(c[f'{k}_mean'].sel(epoch=e)):.6g}", f"{float(c[f'{k}_half'].sel(epoch=e)):.6g}",
                                int(c.n_ok), int(c.n_stuck), int(c.n_nonfinite), int(c.n_run)])
    return _atomic_write(buf.getvalue().encode(), Path(path))


def main(argv: "list[str] | None" = None) -> int:
    """Command line; returns 0 ok, 2 bad input (config, data, output folder,
    missing extra: one line). Non-finite runs do not fail the study: each is
    one line on stderr and marked in the results."""
    parser = command_parser(
        "python -m samflow.experiments.cnn_study", __doc__.split("\n")[0], "TOML config (see configs/cnn_study.toml)",
        out_help="output folder (default: output.dir/<name>)",
    )
    parser.add_argument("--resume", action="store_true", help="keep the finished runs in <out>/runs and run the rest")
    parser.add_argument("--overwrite", action="store_true", help="delete earlier results and runs in <out> first")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 2 alphas, 1 rho, 6 epochs, 120 images (tests)")
    parser.add_argument("--no-figures", action="store_true", help="write results and tables only")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.resume and args.overwrite:
        return fail("--resume and --overwrite exclude each other: keep the finished runs or delete them")
    load = (lambda path: load_study_config(path).quick()) if args.quick else load_study_config
    cfg, out_dir, refused = config_and_folder(load, args.config, args.out)
    if refused is not None:
        return refused
    figures = cfg.output.figures and not args.no_figures
    # A second study with --overwrite would delete the runs the first is storing, then take them for its own.
    return run_locked(out_dir, ".results.lock", "CNN study", lambda: _locked_main(cfg.plan(), args, out_dir, figures))


def _locked_main(plan: StudyPlan, args, out_dir: Path, figures: bool) -> int:
    """`main` once the output folder is locked: check, run the study (`plan`), write, draw (with `figures`)."""
    if (existing := existing_file(out_dir, RESULT_FILES)) and not (args.overwrite or args.resume):
        return fail(f"{existing} exists; pass --resume to finish it or --overwrite to replace it")
    if args.overwrite:
        import shutil

        shutil.rmtree(out_dir / "runs", ignore_errors=True)  # never raises: ignore_errors
    if problem := writable_folder(out_dir):
        return fail(problem)

    from .images import DataNotFoundError, MissingExtraError

    try:
        results = _study(plan, out_dir, resume=args.resume, progress=not args.quiet)
    except (ConfigError, MissingExtraError, DataNotFoundError) as err:
        return fail(str(err))

    from ..store import write_results

    ds = assemble(plan, results)
    print(f"results: {write_results(ds, out_dir / 'results.nc')}")
    print(f"summary: {write_summary_csv(ds, out_dir / 'summary.csv')}")
    tables = format_tables(ds)
    print(f"tables:  {_atomic_write(tables.encode(), out_dir / 'tables.md')}")
    print()
    print(tables)
    if figures:
        from .cnn_study_plots import plot_study

        print_figures(plot_study(ds, out_dir))
    print(f"done in {ds.attrs['wall_time_s']:.1f} s")
    return 0


if __name__ == "__main__":
    run_command(main, "finished runs are kept in <out>/runs/; rerun with --resume to continue",  # float64, Agg first
                "free space, then rerun with --resume (finished runs are kept in <out>/runs/)")
