"""Results of a figure (Check, FigureResult), caption files, report.md and index.md."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import jax

from .._util.io import atomic_write_text
from ._context import Context


# --- results of a figure ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    """One numerical check of a claim: `passed` is True, False, or None (not
    checked in this mode; `note` says why)."""

    figure: str
    claim: str
    prediction: str
    measurement: str
    passed: bool | None
    note: str = ""


@dataclasses.dataclass
class FigureResult:
    """What a figure function wrote: file names (relative to the output folder),
    its caption, the configs it read, its checks and its wall time in seconds."""

    name: str
    title: str
    pngs: list[str]
    caption: str
    configs: list[str]
    checks: list[Check]
    seconds: float = float("nan")  # wall time
    cpu_seconds: float = float("nan")  # CPU time of the process (all its threads)


def mu_text(mu, *, short: bool = False) -> str:
    """The feature scales mu (d,) as captions write them, from the config value (never
    typed into a caption, so editing configs/figures/common.toml cannot make one lie):
    "(0.2, 0.4, 0.6, 0.8, 1.0)", or with `short` "(0.2, ..., 1.0)"."""
    mu = [float(m) for m in mu]
    return str(tuple(mu)) if not short or len(mu) <= 3 else f"({mu[0]}, ..., {mu[-1]})"


def _write_caption(ctx: Context, result: FigureResult) -> None:
    lines = [f"# {result.title}", "", result.caption.strip(), ""]
    lines.append("Made by `python scripts/reproduce_figures.py" + (" --quick" if ctx.quick else "") + "` from " + ", ".join(f"`{c}`" for c in result.configs) + ".")
    lines.append("")
    if result.checks:
        lines.append("Checks of this figure (see report.md):")
        lines.append("")
        for c in result.checks:
            lines.append(f"- {_verdict(c.passed)}: {c.claim} -- predicted {c.prediction}; measured {c.measurement}" + (f" ({c.note})" if c.note else ""))
        lines.append("")
    atomic_write_text("\n".join(lines), ctx.out_dir / f"{result.name}.caption.md")


def _verdict(passed: bool | None) -> str:
    return "PASS" if passed is True else ("FAIL" if passed is False else "NOTE")


def _start() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _finish(ctx: Context, result: FigureResult, t0: tuple[float, float]) -> FigureResult:
    result.seconds = time.perf_counter() - t0[0]
    result.cpu_seconds = time.process_time() - t0[1]
    _write_caption(ctx, result)
    return result


def _planned_figure(name: str, title: str, config_cls, out_dir, quick: bool, config_dir, *,
                    plan, measure, check, draw, caption) -> FigureResult:
    """A figure drawn from its own config (and the common one), read once: `plan(ctx, cfg)`
    resolves the config into what the figure needs (a frozen plan; the only step that sees
    the config), `measure(ctx, plan)` -> its run (frozen: the measured numbers and the
    plan), `check(run)` -> its checks, `draw(ctx, run)` -> its PNG name, `caption(run)` ->
    its caption; timed, captioned and returned as the `FigureResult` called `name`."""
    t0 = _start()
    ctx = Context.make(out_dir, quick, config_dir)
    run = measure(ctx, plan(ctx, ctx.config(name, config_cls)))
    checks = check(run)
    png = draw(ctx, run)
    return _finish(ctx, FigureResult(name, title, [png], caption(run),
                                     [ctx.config_ref(name), ctx.config_ref("common")], checks), t0)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report_table(results: list[FigureResult]) -> str:
    """The checks of all figures as a Markdown table: claim, prediction, measurement, result."""
    rows = ["| # | figure | claim | prediction | measurement | result |", "|---|---|---|---|---|---|"]
    k = 0
    for r in results:
        for c in r.checks:
            k += 1
            res = _verdict(c.passed) + (f" ({c.note})" if c.note else "")
            rows.append(f"| {k} | {r.name} | {_cell(c.claim)} | {_cell(c.prediction)} | {_cell(c.measurement)} | **{res}** |")
    return "\n".join(rows)


def _summary(results: list[FigureResult]) -> tuple[int, int, int]:
    checks = [c for r in results for c in r.checks]
    return (sum(c.passed is True for c in checks), sum(c.passed is False for c in checks),
            sum(c.passed is None for c in checks))


def write_report(out_dir, results: list[FigureResult], *, quick: bool = False) -> Path:
    """report.md: the table of checks and the time each figure took."""
    import platform

    n_pass, n_fail, n_note = _summary(results)
    lines = [
        "# Theory against simulation" + (" (quick run)" if quick else ""),
        "",
        f"{n_pass} checks pass, {n_fail} fail, {n_note} not checked in this mode. Each row states a claim of "
        "docs/theory.md / the paper, the theory's prediction (samflow.theory or a closed form), and what the "
        "simulation measured (samflow.analysis on samflow's solvers). Figures: [index.md](index.md).",
        "",
        report_table(results),
        "",
        "## Time per figure",
        "",
        "| figure | wall s | CPU s |",
        "|---|---|---|",
    ]
    lines += [f"| {r.name} | {r.seconds:.1f} | {r.cpu_seconds:.1f} |" for r in results]
    lines += ["", f"Machine: {os.cpu_count()} CPU(s), {platform.platform()}, Python {platform.python_version()}, "
              f"jax {jax.__version__}. Compilation of the solvers dominates the CPU time: one per (method, clock, "
              "depth, data shape) in each process.", ""]
    path = atomic_write_text("\n".join(lines), Path(out_dir) / "report.md")
    return path


def write_index(out_dir, results: list[FigureResult], *, quick: bool = False) -> Path:
    """index.md: every figure with its caption and links to its PDF, caption and config."""
    n_pass, n_fail, n_note = _summary(results)
    lines = [
        "# samflow figures" + (" (quick run: small grids)" if quick else ""),
        "",
        "Regenerated by `python scripts/reproduce_figures.py" + (" --quick" if quick else "") + "`; "
        "the parameters of each figure are in `configs/figures/`. "
        f"Theory-vs-simulation report: [report.md](report.md) ({n_pass} pass, {n_fail} fail, {n_note} not checked).",
        "",
    ]
    lines += [f"- [{r.title}](#{r.name.replace('_', '-')})" for r in results]
    lines.append("")
    for r in results:
        lines += [f"<a id=\"{r.name.replace('_', '-')}\"></a>", "", f"## {r.title}", ""]
        for png in r.pngs:
            lines += [f"![{png}]({png})", "", f"[{Path(png).with_suffix('.pdf').name}]({Path(png).with_suffix('.pdf').name})", ""]
        lines += [r.caption, "", f"Caption file: [{r.name}.caption.md]({r.name}.caption.md). Config: "
                  + ", ".join(f"`{c}`" for c in r.configs) + f". Built in {r.seconds:.0f} s.", ""]
        if r.checks:
            lines += [f"Checks: {sum(c.passed is True for c in r.checks)} pass, {sum(c.passed is False for c in r.checks)} fail"
                      + (f", {sum(c.passed is None for c in r.checks)} not checked" if any(c.passed is None for c in r.checks) else "")
                      + " (see report.md).", ""]
    path = atomic_write_text("\n".join(lines), Path(out_dir) / "index.md")
    return path
