"""Redraw a sweep's figures from its results file alone, without solving again:

    python -m samflow.plot RESULTS.nc [--out DIR] [--only NAME]

draws every figure the sweep draws (`samflow.plots.plot_sweep`, the code the
sweep itself calls, with the `[output]` settings stored in the file) into the
results file's folder, or `--out DIR`; `--only NAME` draws one of them
(`samflow.plots.FIGURES`: dominant_heatmap, trajectories, regime_chart). Use it
after a Ctrl-C during the figures, to draw a merged or copied results file, or
after changing the figure code. A missing file, a file that is not the results
of a sweep (or is one slice of it) and an unknown `--only` are refused in one
line, exit 2.

`draw_missing` is what `python -m samflow.sweep CONFIG --resume` calls on
complete results: it draws only the figures whose PNG or PDF is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ._cli_common import EXIT_SIGINT, fail, print_figures, run_command, writable_folder

__all__ = ["draw_missing", "interrupted_line", "main", "read_sweep_results", "resume_figures"]

#: What every figure reads; the beta-or-dominant check is separate (a summary file has no beta).
_NEEDED = ("status", "loss", "event_time", "alpha_init")
_DIMS = ("flow", "alpha", "rho", "time", "coord")


def read_sweep_results(path: "str | Path"):
    """The results Dataset of a sweep at `path`, checked to be one.

    **Raises:** `ValueError` (one line naming the file and the fix) for a missing
    file, a file that netCDF cannot read, a file without the variables and axes
    of a sweep's results, or one slice of a sweep (it needs `python -m
    samflow.merge` first).
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
    if "beta" not in ds and "dominant" not in ds:
        lacking.append("beta (or dominant)")
    if lacking:
        raise ValueError(f"{path} is not a results file of python -m samflow.sweep (it lacks {', '.join(lacking)})")
    return ds


def draw_missing(results_path: "str | Path", out_dir: "str | Path") -> list[Path]:
    """Draw the figures of the results at `results_path` whose PNG or PDF is not in
    `out_dir`; return the PNG paths drawn ([] when every figure is there)."""
    from .plots import figure_names, plot_sweep

    out_dir = Path(out_dir)
    ds = read_sweep_results(results_path)
    missing = [n for n in figure_names(ds)
               if not ((out_dir / f"{n}.png").is_file() and (out_dir / f"{n}.pdf").is_file())]
    return plot_sweep(ds, out_dir, names=missing) if missing else []


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
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m samflow.plot",
        description="Draw the figures of a sweep from its results file, without solving again.",
    )
    parser.add_argument("results", help="the results.nc of a sweep (python -m samflow.sweep or samflow.merge)")
    parser.add_argument("--out", metavar="DIR", help="folder for the figures (default: the results file's folder)")
    parser.add_argument("--only", metavar="NAME", help="draw one figure: dominant_heatmap, trajectories or regime_chart")
    return parser


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code (0 drawn, 2 bad input)."""
    from .plots import FIGURES, figure_names, plot_sweep

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
    print_figures(plot_sweep(ds, out, names=[args.only] if args.only else None))
    return 0


if __name__ == "__main__":
    run_command(main, "figures already written are whole; rerun to draw the rest")
