"""A sweep on many machines: slices of the grid, and the merge of the slices.

    python -m samflow.sweep CONFIG --num-slices K --slice-index i [--out DIR]   # K times, i = 0..K-1
    python -m samflow.merge DIR [--overwrite] [--no-figures]                    # once, after all of them

Each slice is an independent process (a SLURM array task, a Ray task, ...). It
solves its share of the flattened (alpha, rho) cells for every method and writes
`DIR/slices/slice-000i-of-000K.nc` (`slice_file_name`): the variables of a
results file with the axes (alpha, rho) replaced by one axis `cell` (see
`samflow.store`), and the attributes `config` (the full config), `config_key`
(the hash of everything that sets the numbers, `samflow.sweep.config_key`),
`slice_index`, `num_slices` and `code_stamp` (`samflow.store.code_stamp`: the
samflow version, git commit, source hash and the versions of the packages
that set the numbers, `samflow.store.STAMP_PACKAGES`, it ran under).

The partition (`slice_cells`) is deterministic: the cells sorted by the sweep's
cost key (alpha/rho, then rho; the order `run_sweep` uses to group cells into
solver chunks) are dealt round-robin to the K slices, so every slice gets a
share of cheap and of expensive cells and the sizes differ by at most one.

The merge checks that the K slices are all there, once each, from one config
and one code stamp (slices made under different stamps are refused unless
`--any-version`; the merged `code_stamp` then lists each, joined by " | "),
and assembles them into `DIR/results.nc`, equal to the results of a single run
of the config bit for bit in every variable and coordinate. Global attributes
that describe the run rather than the results differ: `wall_time_s` and
`method_wall_time_s` are sums over the slices (compute time, not elapsed time),
`created` is the time of the merge, `merged_slices` is K, and `git_commit` /
`versions` list every distinct value when the slices disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from ._util.cli_common import command_parser, fail, run_locked
from .status import FAILED_STATUSES
from .store import locked_problem
from .sweep._slices import (
    _SLICE_ATTRS as _SLICE_ATTRS,
    SLICES_DIR as SLICES_DIR,
    SliceError as SliceError,
    _describe as _describe,
    _merged_attrs as _merged_attrs,
    _stamp as _stamp,
    check_slice_args as check_slice_args,
    merge_dir as merge_dir,
    merge_slices as merge_slices,
    slice_cells as slice_cells,
    slice_file_name as slice_file_name,
)

__all__ = [
    "SLICES_DIR",
    "SliceError",
    "check_slice_args",
    "slice_cells",
    "slice_file_name",
    "merge_slices",
    "merge_dir",
    "main",
]


def _merge_is_current(out_dir: Path, results_path: Path) -> "str | None":
    """None when `results_path` is the merge of the slices now in `out_dir/slices`
    (same config key, code stamp(s) and number of slices, per the attributes, and
    the same data_X / data_y);
    otherwise one line saying why not."""
    paths = sorted((out_dir / SLICES_DIR).glob("slice-*.nc"))
    data_vars = ("data_X", "data_y")
    reading = results_path
    try:
        with xr.open_dataset(results_path, engine="h5netcdf") as ds:
            done = dict(ds.attrs)
            done_data = [ds[v].values if v in ds else None for v in data_vars]
        metas, same_data = [], True
        for reading in paths:
            with xr.open_dataset(reading, engine="h5netcdf") as ds:
                metas.append(dict(ds.attrs))
                # The config names a data file, not its contents: slices rerun on an
                # edited file have the same key and stamp but other data.
                same_data &= all(
                    a is not None and v in ds and np.array_equal(a, ds[v].values) for a, v in zip(done_data, data_vars)
                )
    except (OSError, ValueError) as err:
        if (locked := locked_problem(reading, err)) is not None:
            return locked
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"cannot compare {results_path} with its slices ({why}); pass --overwrite to merge again"
    from .sweep import NO_STAMP

    keys = {str(m.get("config_key")) for m in metas}
    stamps = " | ".join(dict.fromkeys(str(m.get("code_stamp", NO_STAMP)) for m in metas))
    if (
        not metas
        or keys != {str(done.get("config_key"))}
        or stamps != str(done.get("code_stamp", NO_STAMP))
        or int(done.get("merged_slices", -1)) != len(metas)
        or not same_data
    ):
        return f"{results_path} exists and is not the merge of the slices in {out_dir / SLICES_DIR}; pass --overwrite to merge again"
    return None


def main(argv: "list[str] | None" = None) -> int:
    """Command line: merge the slices in OUT_DIR/slices/ into OUT_DIR/results.nc.

    Returns the exit code: 0 ok (also with `--resume` when results.nc already is
    the merge of these slices: nothing changes), 2 for missing, duplicated or
    mismatched slices (another config or code stamp), existing results without
    --overwrite, or an unwritable folder (one line each).
    """
    parser = command_parser(
        "python -m samflow.merge", "Merge the slices of a sweep run with --num-slices/--slice-index into one results.nc.",
        "the output folder of the sliced sweep (holds slices/)", out_help=None, positional="out_dir",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing results.nc")
    parser.add_argument("--no-figures", action="store_true", help="write results only")
    parser.add_argument(
        "--resume", action="store_true",
        help="succeed without changing anything when results.nc already is the merge of these slices",
    )
    parser.add_argument(
        "--any-version", action="store_true",
        help="merge slices made under different code stamps (samflow commit or package versions); "
        "the merged code_stamp attribute lists each",
    )
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    # The sweep of this folder (without slices) writes the same results.nc: one lock for both.
    return run_locked(out_dir, ".results.lock", "merge", lambda: _merge(args, out_dir))



def _merge(args, out_dir: Path) -> int:
    """`main` once the output folder is locked: merge, write, report, draw."""
    from ._util.io import DiskFullError
    from .config import ConfigError, parse_config
    from .store import write_results

    results_path = out_dir / "results.nc"
    if results_path.exists() and args.resume:
        problem = _merge_is_current(out_dir, results_path)
        if problem is None:
            print(f"already complete: {results_path} (the merge of the slices in {out_dir / SLICES_DIR}); nothing to do")
            return 0
        if not args.overwrite:
            return fail(problem)
    elif results_path.exists() and not args.overwrite:
        return fail(f"{results_path} exists; pass --overwrite to replace it (or --resume to accept a finished merge)")
    try:
        ds = merge_dir(out_dir, accept_other_stamp=args.any_version)
    except SliceError as err:
        return fail(str(err))
    try:
        write_results(ds, results_path)
    except DiskFullError as err:
        return fail(f"{err}; free space, then rerun the merge (the slices are kept)")
    except OSError as err:
        return fail(f"cannot write {results_path}: {err.strerror or err}")
    print(f"results: {results_path} (merged from {ds.attrs['merged_slices']} slices)")
    if any(" | " in str(ds.attrs.get(key, "")) for key in ("git_commit", "versions", "code_stamp")):
        print(
            "note: the slices ran on different code or package versions; see the git_commit and versions attributes",
            file=sys.stderr,
        )
    n_bad = int(np.isin(ds["status"].values, FAILED_STATUSES).sum())
    if n_bad:
        print(f"note: {n_bad} cell(s) did not finish normally; see the 'status' variable", file=sys.stderr)
    if not args.no_figures:
        try:
            cfg = parse_config(json.loads(ds.attrs["config"]), f"{results_path} (config attribute)")
        except (ConfigError, KeyError, ValueError) as err:
            why = str(err).splitlines()[0]
            print(f"note: no figures, the stored config does not parse: {why}", file=sys.stderr)
            return 0
        if cfg.output.figures:
            from .plots import plot_sweep

            for path in plot_sweep(ds, out_dir, cfg.output):
                print(f"figure: {path}")
    return 0


if __name__ == "__main__":
    from ._util.cli_common import run_command

    run_command(main, "results.nc is written whole or not at all; rerun the merge")  # float64, Agg first
