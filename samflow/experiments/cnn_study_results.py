"""The CNN study's results, read from its netCDF (`cnn_study.assemble`): intervals over
seeds (`t_interval`, `summarize`), paired SAM - GD comparisons and the tables
(`format_tables`). See `samflow.experiments.cnn_study`.
"""

from __future__ import annotations

import json
import math

import numpy as np

from .._labels import OPTIMIZER_TEXT

METHOD_LABELS = OPTIMIZER_TEXT


STATUS = {"ok": 0, "stuck": 1, "nonfinite": 2, "not run": -1}


METRICS = {
    "train_loss": "logistic loss on the training set",
    "test_loss": "logistic loss on the held-out set",
    "test_accuracy": "accuracy on the held-out set",
    "minor_share": "share of Grad-CAM mass on minor pixels (raw intensity < threshold), mean over maps",
    "faint_share": "share of Grad-CAM mass on the two patch places (faint tasks)",
    "acc_no_faint": "held-out accuracy with the faint patch removed (faint tasks)",
    "acc_no_strokes": "held-out accuracy with the strokes removed (faint tasks)",
    "follow_faint": "share of held-out images whose prediction follows a swapped patch (faint tasks)",
    "zero_maps": "Grad-CAM maps that are zero everywhere (left out of the shares)",
    "param_norm": "l2 norm of all parameters",
}


PAIRED = ("minor_share", "faint_share", "follow_faint", "acc_no_strokes", "test_accuracy")


def t_interval(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, half-width of the 95% Student-t interval, count) over `axis`, NaNs left out.

    The half-width is t_{0.975, n-1} s / sqrt(n) with s the sample standard
    deviation; NaN when fewer than 2 values remain (no interval from one seed).
    """
    import warnings

    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    n = np.sum(np.isfinite(v), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells and single seeds: NaN by design
        mean = np.where(n > 0, np.nanmean(np.where(np.isfinite(v), v, np.nan), axis=axis) if v.size else np.nan, np.nan)
        sd = np.nanstd(v, axis=axis, ddof=1) if v.shape[axis] > 1 else np.full(mean.shape, np.nan)
        half = np.where(n >= 2, stats.t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(np.maximum(n, 1)), np.nan)
    return mean, half, n


def summarize(ds):
    """Mean, 95% half-width and seeds left (status ok) of every metric at every
    epoch: an `xarray.Dataset` with variables `<metric>_mean`, `<metric>_half`,
    dims (task, optimizer, alpha, rho, epoch), plus `n_ok`, `n_stuck`,
    `n_nonfinite`, `n_run` (task, optimizer, alpha, rho).

    With GD in the study, also the paired difference method - GD over the
    seeds where both runs are ok (same split, init directions and batches, so
    what the seeds share cancels): `<metric>_diff_mean`, `<metric>_diff_half`
    for the metrics of `PAIRED`, and `n_paired`."""
    import warnings

    import xarray as xr

    ok = ds.status == STATUS["ok"]
    out = {}
    for k in METRICS:
        v = ds[k].where(ok)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, half, _ = t_interval(v.values, axis=0)
        out[f"{k}_mean"] = (v.dims[1:], mean)
        out[f"{k}_half"] = (v.dims[1:], half)
    if "gd" in list(ds.optimizer.values):
        gd = ds.sel(optimizer="gd")
        both = ok & (gd.status == STATUS["ok"])
        for k in PAIRED:
            d = (ds[k] - gd[k]).where(both)
            mean, half, _ = t_interval(d.values, axis=0)
            out[f"{k}_diff_mean"] = (d.dims[1:], mean)
            out[f"{k}_diff_half"] = (d.dims[1:], half)
        out["n_paired"] = (ds.status.dims[1:], both.sum("seed").values)
    dims = ds.status.dims[1:]
    for name, code in (("n_ok", 0), ("n_stuck", 1), ("n_nonfinite", 2)):
        out[name] = (dims, (ds.status == code).sum("seed").values)
    out["n_run"] = (dims, (ds.status >= 0).sum("seed").values)
    coords = {c: ds[c].values for c in ("task", "optimizer", "alpha", "rho", "epoch")}
    return xr.Dataset({k: xr.Variable(*v) for k, v in out.items()}, coords=coords, attrs=dict(ds.attrs))


def _cell(mean: float, half: float) -> str:
    if not math.isfinite(mean):
        return "—"
    return f"{mean:.3f} ± {half:.3f}" if math.isfinite(half) else f"{mean:.3f}"


def _mark(s, **sel) -> str:
    c = s.sel(**sel)
    n_ok, n_run = int(c.n_ok), int(c.n_run)
    marks = []
    if int(c.n_stuck):
        marks.append(f"{int(c.n_stuck)} stuck")
    if int(c.n_nonfinite):
        marks.append(f"{int(c.n_nonfinite)} non-finite")
    return f"{n_ok}/{n_run}" + (f" ({', '.join(marks)})" if marks else "")


def _rows(s, task: str):
    """(optimizer, rho or None, alpha) of the table rows of `task`: GD once, SAM per rho."""
    for m in s.optimizer.values:
        for r in ([s.rho.values[0]] if m == "gd" else s.rho.values):
            for a in s.alpha.values:
                if int(s.n_run.sel(task=task, optimizer=m, alpha=a, rho=r)) > 0:
                    yield str(m), (None if m == "gd" else float(r)), float(a), r


def compare_paired(s, task: str, method: str, rho: float, alpha: float, epoch: int, metric: str = "minor_share") -> str:
    """The paired difference SAM - GD as "+0.012 ± 0.008" with a mark: "▲" when
    its 95% interval lies above 0, "▼" below, nothing when it holds 0; "—"
    with fewer than 2 paired seeds."""
    c = s.sel(task=task, optimizer=method, rho=rho, alpha=alpha, epoch=epoch)
    m, h = float(c[f"{metric}_diff_mean"]), float(c[f"{metric}_diff_half"])
    if not (math.isfinite(m) and math.isfinite(h)):
        return "—"
    mark = " ▲" if m - h > 0 else " ▼" if m + h < 0 else ""
    return f"{m:+.3f} ± {h:.3f}{mark}"


def compare(s, task: str, method: str, rho: float, alpha: float, epoch: int, metric: str = "minor_share") -> str:
    """">" when SAM's interval lies above GD's, "<" below, "=" when they overlap,
    "?" when either has no interval (fewer than 2 seeds left)."""
    sam = s.sel(task=task, optimizer=method, rho=rho, alpha=alpha, epoch=epoch)
    gd = s.sel(task=task, optimizer="gd", rho=rho, alpha=alpha, epoch=epoch)
    ms, hs, mg, hg = (float(v) for v in (sam[f"{metric}_mean"], sam[f"{metric}_half"], gd[f"{metric}_mean"], gd[f"{metric}_half"]))
    if not all(map(math.isfinite, (ms, hs, mg, hg))):
        return "?"
    if ms - hs > mg + hg:
        return ">"
    if ms + hs < mg - hg:
        return "<"
    return "="


def format_tables(ds) -> str:
    """The study's tables as Markdown: per task, minor share (mean ± 95%
    half-width) at the early / middle / late epochs, final accuracy and the
    seeds left; for faint tasks the ground-truth measures; then where SAM's
    minor share lies above / below GD's with non-overlapping intervals."""
    s = summarize(ds)
    bands = json.loads(ds.attrs["bands"])
    kinds = json.loads(ds.attrs["task_kinds"])
    late = bands["late"]
    lines = [
        f"Mean ± half-width of the 95% Student-t interval over the seeds left (ok / run; "
        f"stuck = training loss never below {float(ds.attrs['stuck_below']):.4f}, left out). "
        f"Bands: early = epoch {bands['early']}, middle = epoch {bands['middle']}, late = epoch {late}.",
        "",
    ]
    for task in s.task.values:
        task = str(task)
        kind = kinds[task]
        lines.append(f"### task {task} ({kind})")
        lines.append("")
        if kind == "digits":
            head = ["method", "rho", "alpha", "minor early", "minor middle", "minor late", "test acc late", "seeds ok"]
        else:
            head = ["method", "rho", "alpha", "minor late", "patch share late", "follows swapped patch early",
                    "follows swapped patch late", "acc no strokes late", "acc no patch late", "test acc late", "seeds ok"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for m, rho, a, r in _rows(s, task):
            cell = s.sel(task=task, optimizer=m, alpha=a, rho=r)

            def c(metric, e, cell=cell):
                return _cell(float(cell[f"{metric}_mean"].sel(epoch=e)), float(cell[f"{metric}_half"].sel(epoch=e)))

            first = [METHOD_LABELS.get(m, m), "—" if rho is None else f"{rho:g}", f"{a:g}"]
            if kind == "digits":
                cells = [c("minor_share", bands["early"]), c("minor_share", bands["middle"]), c("minor_share", late),
                         c("test_accuracy", late)]
            else:
                cells = [c("minor_share", late), c("faint_share", late), c("follow_faint", bands["early"]),
                         c("follow_faint", late), c("acc_no_strokes", late), c("acc_no_faint", late), c("test_accuracy", late)]
            lines.append("| " + " | ".join(first + cells + [_mark(s, task=task, optimizer=m, alpha=a, rho=r)]) + " |")
        lines.append("")
    lines.append("### SAM vs GD, minor share: > SAM's interval above GD's, < below, = overlapping, ? no interval")
    lines.append("")
    lines.append("Each cell: early / middle / late.")
    lines.append("")
    alphas = [float(a) for a in s.alpha.values]
    head = ["task", "method", "rho"] + [f"alpha {a:g}" for a in alphas]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for task in s.task.values:
        if kinds[str(task)] == "faint_only":
            continue
        for m in s.optimizer.values:
            if m == "gd" or "gd" not in s.optimizer.values:
                continue
            for r in s.rho.values:
                cells = []
                for a in alphas:
                    if int(s.n_run.sel(task=task, optimizer=m, alpha=a, rho=r)) == 0:
                        cells.append("")
                        continue
                    cells.append(" / ".join(compare(s, str(task), str(m), r, a, bands[b]) for b in ("early", "middle", "late")))
                lines.append("| " + " | ".join([str(task), METHOD_LABELS.get(str(m), str(m)), f"{float(r):g}"] + cells) + " |")
    lines.append("")
    if "minor_share_diff_mean" in s:
        for metric, title, tasks_kind in (
            ("minor_share", "minor share", ("digits", "faint")),
            ("follow_faint", "share following a swapped patch", ("faint",)),
            ("acc_no_strokes", "accuracy with the strokes removed (the patch alone)", ("faint",)),
            ("test_accuracy", "held-out accuracy", ("digits", "faint")),
        ):
            lines.append(f"### Paired difference SAM - GD, {title} (same seed: split, init, batches): "
                         "mean ± 95% t half-width; ▲ / ▼ interval above / below 0")
            lines.append("")
            head = ["task", "method", "rho", "band"] + [f"alpha {a:g}" for a in alphas]
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---|" * len(head))
            for task in s.task.values:
                if kinds[str(task)] not in tasks_kind:
                    continue
                for m in s.optimizer.values:
                    if m == "gd":
                        continue
                    for r in s.rho.values:
                        for b in ("early", "late"):
                            cells = [compare_paired(s, str(task), str(m), r, a, bands[b], metric)
                                     if int(s.n_run.sel(task=task, optimizer=m, alpha=a, rho=r)) else "" for a in alphas]
                            lines.append("| " + " | ".join([str(task), METHOD_LABELS.get(str(m), str(m)), f"{float(r):g}",
                                                            f"{b} ({bands[b]})"] + cells) + " |")
            lines.append("")
    rho0 = json.loads(ds.attrs.get("rho0_check", "{}"))
    for m, v in rho0.items():
        lines.append(
            f"rho = 0 check: {METHOD_LABELS.get(m, m)} vs GD at alpha {v['alpha']:g}, {v['epochs']} epochs, every seed: "
            f"max |theta_SAM - theta_GD| = {v['max_abs_diff']:.3g}"
        )
    for msg in json.loads(ds.attrs.get("nonfinite_runs", "[]")):
        lines.append(f"non-finite: {msg}")
    return "\n".join(lines) + "\n"
