"""Redraw a sweep's figures from its results file alone, without solving again:

    python -m samflow.plot RESULTS.nc [--out DIR] [--only NAME]

draws every figure the sweep draws (`samflow.plots.plot_sweep`, the code the
sweep itself calls, with the `[output]` settings stored in the file) into the
results file's folder, or `--out DIR`; `--only NAME` draws one of them
(`samflow.plots.FIGURES`: dominant_heatmap, trajectories, regime_chart). Use it
after a Ctrl-C during the figures, to draw a merged or copied results file, or
after changing the figure code. A missing file, a file that is not the results
of a sweep (or is one slice of it), a results file that lacks a variable the
figures read (another samflow version wrote it: the line names the variable and
that version) and an unknown `--only` are refused in one line, exit 2.

`draw_missing` is what `python -m samflow.sweep CONFIG --resume` calls on
complete results: it draws only the figures whose PNG or PDF is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ._util.startup import command_start, paused_gc

with command_start(always=__name__ == "__main__"), paused_gc():  # python -m samflow.plot: a Ctrl-C here is one line, exit 130
    from ._util.cli_common import EXIT_SIGINT, command_parser, fail, print_figures, run_command, writable_folder

__all__ = ["draw_missing", "interrupted_line", "main", "read_sweep_results", "resume_figures"]

#: What every figure reads; the beta-or-dominant check is separate (a summary file has no beta).
_NEEDED = ("status", "loss", "event_time", "alpha_init")
_DIMS = ("flow", "alpha", "rho", "time", "coord")
#: The exact switch times (output.switch_times): absent, or all there.
_SWITCHES = ("switch_time", "switch_ok", "switch_from", "switch_to")


def read_sweep_results(path: "str | Path"):
    """The results Dataset of a sweep at `path`, checked to be one.

    **Raises:** `ValueError` (one line naming the file and the fix) for a missing
    file, a file that netCDF cannot read, a file without the variables and axes
    of a sweep's results (for a file samflow wrote, `lacking_line`: the
    variables and the samflow version that wrote it), or one slice of a sweep
    (it needs `python -m samflow.merge` first).
    """
    from .store import read_results

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such results file; give the results.nc that python -m samflow.sweep wrote")
    try:
        ds = read_results(path)
    except Exception as err:  # h5py / xarray raise many types for a file that is not netCDF
        why = (str(err).splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{path} is not a results file of python -m samflow.sweep (netCDF cannot read it: {why})") from None
    if "cell" in ds.dims:
        raise ValueError(f"{path} is one slice of a sweep; merge the slices first (python -m samflow.merge "
                         f"{path.parent.parent}) and draw the merged results.nc")
    lacking = [d for d in _DIMS if d not in ds.dims] + [v for v in _NEEDED if v not in ds]
    if any(v in ds for v in _SWITCHES):  # the trajectory figure reads them together
        lacking += [v for v in _SWITCHES if v not in ds]
    if "beta" not in ds and "dominant" not in ds:
        lacking.append("beta (or dominant)")
    if lacking and _is_samflow_file(ds):
        raise ValueError(lacking_line(path, ds, lacking))
    if lacking:
        raise ValueError(f"{path} is not a results file of python -m samflow.sweep (it lacks {', '.join(lacking)})")
    return ds


def _is_samflow_file(ds) -> bool:
    """Whether a results file was written by samflow (any version): it has the
    attributes `samflow.store.to_dataset` writes (title "samflow sweep ...",
    `versions`, `code_stamp`)."""
    return (str(ds.attrs.get("title", "")).startswith("samflow sweep")
            or "versions" in ds.attrs or "code_stamp" in ds.attrs)


def written_by(ds) -> "str | None":
    """The samflow version that wrote a results file: the `samflow` entry of its
    attribute `versions` (JSON), else the word after "samflow" in its
    `code_stamp`; None when neither says."""
    import json

    try:
        version = json.loads(ds.attrs["versions"])["samflow"]
        if version:
            return str(version)
    except (KeyError, TypeError, ValueError):
        pass
    words = str(ds.attrs.get("code_stamp", "")).split()
    return words[1] if len(words) >= 2 and words[0] == "samflow" else None


def lacking_line(path: "str | Path", ds, names: "list[str]") -> str:
    """The one line for a results file of samflow that lacks variables the figures
    read (`names`): the file, the variables, the samflow that wrote it and the fix."""
    from . import __version__

    version = written_by(ds)
    what = "the variable" + ("s " if len(names) > 1 else " ") + ", ".join(f"'{n}'" for n in names)
    head = f"{path} lacks {what} that the figures of samflow {__version__} read"
    if version is None:
        return (f"{head}: it was written by an unknown samflow version (the file has no versions attribute); "
                "rerun its sweep with this samflow")
    if version == __version__:
        return f"{head}: it was written by samflow {version} and changed since; rerun its sweep"
    return (f"{head}: it was written by samflow {version}; rerun its sweep with this samflow, "
            f"or draw it with samflow {version}")


def _missing_key(err: KeyError, ds) -> "str | None":
    """The variable of `ds` whose absence raised `err` while drawing (xarray's
    "No variable named 'x'"), or None when `err` is about something else (a
    variable the file has, a key of another mapping): such an error is a bug, and
    its traceback is kept."""
    import re

    text = str(err.args[0]) if err.args else ""
    m = re.search(r"No variable named '([^']+)'", text)
    name = m.group(1) if m else text
    return name if name and name not in ds.variables and name not in ds.dims and m is not None else None


def _draw(path: Path, ds, out: Path, names) -> list[Path]:
    """`plot_sweep`, with a variable the file lacks (an older samflow wrote it)
    raised as `ValueError` with `lacking_line`."""
    from .plots import plot_sweep

    try:
        return plot_sweep(ds, out, names=names)
    except KeyError as err:
        name = _missing_key(err, ds)
        if name is None:
            raise
        raise ValueError(lacking_line(path, ds, [name])) from None


def draw_missing(results_path: "str | Path", out_dir: "str | Path") -> list[Path]:
    """Draw the figures of the results at `results_path` whose PNG or PDF is not in
    `out_dir`; return the PNG paths drawn ([] when every figure is there)."""
    from .plots import figure_names

    out_dir = Path(out_dir)
    ds = read_sweep_results(results_path)
    missing = [n for n in figure_names(ds)
               if not ((out_dir / f"{n}.png").is_file() and (out_dir / f"{n}.pdf").is_file())]
    return _draw(Path(results_path), ds, out_dir, missing) if missing else []


def interrupted_line(results_path: "str | Path") -> str:
    """The line of a sweep interrupted once its results were written: the command that draws the rest."""
    return (f"interrupted after the results were written ({results_path}); some figures may be missing: "
            f"draw them with python -m samflow.plot {results_path}")


def resume_figures(results_path: "str | Path", out_dir: "str | Path") -> int:
    """`python -m samflow.sweep CONFIG --resume` on complete results: draw the figures
    that are missing (a Ctrl-C during the figures left them out) or say that nothing
    is to do; returns the exit code (130 on a Ctrl-C, with `interrupted_line`)."""
    try:
        drawn = draw_missing(results_path, out_dir)
    except KeyboardInterrupt:
        print(interrupted_line(results_path), file=sys.stderr)
        return EXIT_SIGINT
    except ValueError as err:
        return fail(str(err))
    if not drawn:
        print(f"already complete: {results_path} (same config and code); nothing to do")
        return 0
    print(f"already complete: {results_path} (same config and code); drew the missing figures")
    print_figures(drawn)
    return 0


def _parser():
    parser = command_parser(
        "python -m samflow.plot", "Draw the figures of a sweep from its results file, without solving again.",
        "the results.nc of a sweep (python -m samflow.sweep or samflow.merge)",
        "folder for the figures (default: the results file's folder)", positional="results", out_metavar="DIR",
    )
    parser.add_argument("--only", metavar="NAME", help="draw one figure: dominant_heatmap, trajectories or regime_chart")
    return parser


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code (0 drawn, 2 bad input)."""
    from .plots import FIGURES, figure_names

    args = _parser().parse_args(argv)
    if args.only is not None and args.only not in FIGURES:
        return fail(f"--only {args.only!r}: no such figure; choose one of {', '.join(FIGURES)}")
    path = Path(args.results)
    try:
        ds = read_sweep_results(path)
    except ValueError as err:
        return fail(str(err))
    names = figure_names(ds)
    if args.only is not None and args.only not in names:
        why = ('the results are a summary without beta over time (output.save = "summary")'
               if args.only == "trajectories" else f"the grid has one rho ({float(ds['rho'].values[0]):g})")
        return fail(f"--only {args.only}: this file has no such figure: {why}; it has {', '.join(names)}")
    out = Path(args.out) if args.out else path.parent
    if problem := writable_folder(out):
        return fail(problem.replace("--out / output.dir", "--out"))
    try:
        drawn = _draw(path, ds, out, [args.only] if args.only else None)
    except ValueError as err:
        return fail(str(err))
    print_figures(drawn)
    return 0


if __name__ == "__main__":
    run_command(main, "figures already written are whole; rerun to draw the rest")
