"""A sweep on many machines: slices of the grid, and the merge of the slices.

    python -m samflow.sweep CONFIG --num-chunks K --chunk-index i [--out DIR]   # K times, i = 0..K-1
    python -m samflow.merge DIR [--overwrite] [--no-figures]                    # once, after all of them

Each slice is an independent process (a SLURM array task, a Ray task, ...). It
solves its share of the flattened (alpha, rho) cells for every method and writes
`DIR/slices/slice-000i-of-000K.nc` (`slice_file_name`): the variables of a
results file with the axes (alpha, rho) replaced by one axis `cell` (see
`samflow.store`), and the attributes `config` (the full config), `config_key`
(the hash of everything that sets the numbers, `samflow.sweep.config_key`),
`slice_index`, `num_slices` and `code_stamp` (`samflow.store.code_stamp`: the
samflow version, git commit, source hash and the versions of jax, jaxlib,
diffrax and numpy it ran under).

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

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from .status import FAILED_STATUSES

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

SLICES_DIR = "slices"
"""The folder, inside the output folder of a sweep, that holds its slices."""

_SLICE_ATTRS = ("slice_index", "num_slices", "config_key")


class SliceError(ValueError):
    """Slices that cannot be merged (missing, duplicated, from another config, ...);
    the message is one line."""


def check_slice_args(num_chunks: int, chunk_index: int, n_cells: int) -> None:
    """Check `--num-chunks K --chunk-index i` against a grid of `n_cells` cells.

    **Raises:** `ValueError` (one line) unless 1 <= K <= n_cells and 0 <= i < K.
    """
    if num_chunks < 1:
        raise ValueError(f"--num-chunks must be >= 1 (got {num_chunks})")
    if num_chunks > n_cells:
        raise ValueError(
            f"--num-chunks {num_chunks} is more than the {n_cells} (alpha, rho) cell(s) of the grid; "
            f"use at most {n_cells}"
        )
    if not 0 <= chunk_index < num_chunks:
        raise ValueError(
            f"--chunk-index must be in 0..{num_chunks - 1} for --num-chunks {num_chunks} (got {chunk_index})"
        )


def slice_cells(order: np.ndarray, num_chunks: int, chunk_index: int) -> np.ndarray:
    """The cells of slice `chunk_index` of `num_chunks`.

    **Arguments:** `order` (B,) a permutation of the flattened cell indices
    0..B-1 (the sweep passes its cost order, so that each slice gets cheap and
    expensive cells alike); `num_chunks` K; `chunk_index` i.

    **Returns:** (n_i,) int64 flattened indices, increasing: `order[i::K]`
    sorted, n_i = ceil((B - i) / K). The K slices partition 0..B-1.

    **Raises:** `ValueError` as `check_slice_args`, or when `order` is not a
    permutation.
    """
    order = np.asarray(order, dtype=np.int64)
    if order.ndim != 1 or not np.array_equal(np.sort(order), np.arange(order.size)):
        raise ValueError("order must be a permutation of 0..B-1")
    check_slice_args(num_chunks, chunk_index, order.size)
    return np.sort(order[chunk_index::num_chunks])


def slice_file_name(chunk_index: int, num_chunks: int) -> str:
    """The file name of slice i of K, e.g. `slice-0003-of-0016.nc` (at least 4 digits)."""
    w = max(4, len(str(num_chunks)))
    return f"slice-{chunk_index:0{w}d}-of-{num_chunks:0{w}d}.nc"


def _describe(name: str, ds: xr.Dataset) -> str:
    return f"{name} (slice {int(ds.attrs['slice_index'])} of {int(ds.attrs['num_slices'])})"


def merge_slices(
    slices: "list[xr.Dataset]", names: "list[str] | None" = None, *, accept_other_stamp: bool = False
) -> xr.Dataset:
    """Assemble the K slices of a sweep into the results of the whole grid.

    **Arguments:** `slices` the slice datasets (as written by
    `python -m samflow.sweep CONFIG --num-chunks K --chunk-index i`), in any
    order; `names` how to name each in messages (default: its position);
    `accept_other_stamp` merges slices made under different code stamps
    (attribute `code_stamp`, `samflow.store.code_stamp`; a slice without one
    counts as `samflow.sweep.NO_STAMP`).

    **Returns:** a Dataset laid out as `samflow.store.to_dataset` makes it for a
    single run (dims flow, alpha, rho, time, coord, ...), every variable and
    coordinate equal to a single run's bit for bit; global attributes as in the
    module docstring.

    **Raises:** `SliceError` (one line) when a dataset is not a slice, the
    slices come from different configs, different code stamps (unless
    `accept_other_stamp`) or different K, a slice is missing or
    duplicated, the cells do not cover the grid exactly once, or the slices
    disagree on anything outside their cells (coordinates, data, alpha_init).
    """
    if not slices:
        raise SliceError("no slices to merge")
    names = list(names) if names is not None else [f"slice #{k}" for k in range(len(slices))]
    for name, ds in zip(names, slices):
        missing = [a for a in _SLICE_ATTRS if a not in ds.attrs]
        if missing or "cell" not in ds.dims:
            raise SliceError(f"{name}: not a slice of a samflow sweep (no {', '.join(missing) or 'cell axis'})")
    first_name, first = names[0], slices[0]
    for name, ds in zip(names, slices):
        if ds.attrs["config_key"] != first.attrs["config_key"]:
            raise SliceError(
                f"{name} and {first_name} come from different configs (hash "
                f"{str(ds.attrs['config_key'])[:12]} vs {str(first.attrs['config_key'])[:12]}); "
                "remove the stale slices or rerun them with --overwrite"
            )
    if not accept_other_stamp:
        for name, ds in zip(names, slices):
            if _stamp(ds) != _stamp(first):
                raise SliceError(
                    f"{name} and {first_name} were made under different code stamps ('{_stamp(ds)}' vs "
                    f"'{_stamp(first)}'); rerun the stale slices with --overwrite, or merge with --any-version"
                )
    for name, ds in zip(names, slices):
        if int(ds.attrs["num_slices"]) != int(first.attrs["num_slices"]):
            raise SliceError(
                f"slices of different splits: {_describe(name, ds)} and {_describe(first_name, first)}; "
                "remove the stale ones"
            )
    K = int(first.attrs["num_slices"])
    seen: dict[int, str] = {}
    for name, ds in zip(names, slices):
        i = int(ds.attrs["slice_index"])
        if not 0 <= i < K:
            raise SliceError(f"{_describe(name, ds)}: slice index out of range")
        if i in seen:
            raise SliceError(f"slice {i} of {K} appears twice: {seen[i]} and {name}")
        seen[i] = name
    absent = [i for i in range(K) if i not in seen]
    if absent:
        shown = ", ".join(slice_file_name(i, K) for i in absent[:8]) + (" ..." if len(absent) > 8 else "")
        raise SliceError(
            f"{len(absent)} of {K} slices missing: {shown} (still running, or failed? "
            "run them with --chunk-index)"
        )

    order = sorted(range(len(slices)), key=lambda k: int(slices[k].attrs["slice_index"]))
    slices = [slices[k] for k in order]
    names = [names[k] for k in order]
    A, R = first.sizes["alpha"], first.sizes["rho"]
    cells = np.concatenate([np.asarray(ds["cell"].values, dtype=np.int64) for ds in slices])
    if not np.array_equal(np.sort(cells), np.arange(A * R)):
        raise SliceError(
            f"the slices hold {cells.size} cell(s) ({np.unique(cells).size} distinct), not each of the "
            f"{A * R} cells of the {A} x {R} grid once"
        )
    try:
        whole = xr.concat(
            slices, dim="cell", data_vars="minimal", coords="minimal",
            compat="equals", join="exact", combine_attrs="drop",
        )
    except (ValueError, KeyError) as err:
        raise SliceError(f"the slices disagree outside their cells: {str(err).splitlines()[0]}") from None
    whole = whole.isel(cell=np.argsort(whole["cell"].values, kind="stable"))

    variables = {}
    for name in first.data_vars:
        var = whole[name].variable
        if "cell" in var.dims:
            k = var.dims.index("cell")
            dims = var.dims[:k] + ("alpha", "rho") + var.dims[k + 1:]
            values = var.values.reshape(var.shape[:k] + (A, R) + var.shape[k + 1:])
        else:
            dims, values = var.dims, var.values
        variables[name] = xr.Variable(dims, values, attrs=dict(first[name].attrs))
    coords = {
        name: xr.Variable(c.dims, c.values, attrs=dict(c.attrs))
        for name, c in first.coords.items()
        if "cell" not in c.dims
    }
    out = xr.Dataset(variables, coords=coords)
    out.attrs.update(_merged_attrs(slices))
    return out


def _stamp(ds: xr.Dataset) -> str:
    from .sweep import NO_STAMP

    return str(ds.attrs.get("code_stamp", NO_STAMP))


def _merged_attrs(slices: "list[xr.Dataset]") -> dict:
    attrs = {k: v for k, v in slices[0].attrs.items() if k not in ("slice_index", "num_slices")}
    walls = [float(ds.attrs["wall_time_s"]) for ds in slices if "wall_time_s" in ds.attrs]
    if walls:
        attrs["wall_time_s"] = float(sum(walls))
    per_method: dict[str, float] = {}
    for ds in slices:
        for m, s in json.loads(ds.attrs.get("method_wall_time_s", "{}")).items():
            per_method[m] = per_method.get(m, 0.0) + float(s)
    attrs["method_wall_time_s"] = json.dumps(per_method)
    for key in ("git_commit", "versions", "code_stamp"):
        values = list(dict.fromkeys(str(ds.attrs[key]) for ds in slices if key in ds.attrs))
        if len(values) > 1:
            attrs[key] = " | ".join(values)
    resumed = list(dict.fromkeys(
        st for ds in slices for st in json.loads(ds.attrs.get("resumed_code_stamps", "[]"))
    ))
    if resumed:
        attrs["resumed_code_stamps"] = json.dumps(resumed)
    attrs["merged_slices"] = len(slices)
    attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return attrs


def merge_dir(out_dir: "str | Path", *, accept_other_stamp: bool = False) -> xr.Dataset:
    """Read every `slice-*.nc` under `out_dir/slices/` and merge them (`merge_slices`).

    **Returns:** the merged Dataset (not written).

    **Raises:** `SliceError` (one line) when the folder holds no slices, a slice
    file cannot be read, or `merge_slices` refuses.
    """
    from .store import read_results

    folder = Path(out_dir) / SLICES_DIR
    paths = sorted(folder.glob("slice-*.nc")) if folder.is_dir() else []
    if not paths:
        raise SliceError(
            f"no slices in {folder}; run python -m samflow.sweep CONFIG --num-chunks K "
            "--chunk-index i (with the same --out) first"
        )
    slices = []
    for p in paths:
        try:
            slices.append(read_results(p))
        except (OSError, ValueError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise SliceError(f"{p}: cannot read the slice: {why}") from None
    return merge_slices(slices, [p.name for p in paths], accept_other_stamp=accept_other_stamp)


def _merge_is_current(out_dir: Path, results_path: Path) -> "str | None":
    """None when `results_path` is the merge of the slices now in `out_dir/slices`
    (same config key, code stamp(s) and number of slices, per the attributes);
    otherwise one line saying why not."""
    paths = sorted((out_dir / SLICES_DIR).glob("slice-*.nc"))
    try:
        with xr.open_dataset(results_path, engine="h5netcdf") as ds:
            done = dict(ds.attrs)
        metas = []
        for q in paths:
            with xr.open_dataset(q, engine="h5netcdf") as ds:
                metas.append(dict(ds.attrs))
    except (OSError, ValueError) as err:
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
    parser = argparse.ArgumentParser(
        prog="python -m samflow.merge",
        description="Merge the slices of a sweep run with --num-chunks/--chunk-index into one results.nc.",
    )
    parser.add_argument("out_dir", help="the output folder of the sliced sweep (holds slices/)")
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

    from .config import ConfigError, parse_config
    from .store import write_results

    def fail(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    out_dir = Path(args.out_dir)
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

            for path in plot_sweep(ds, out_dir, cfg):
                print(f"figure: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
