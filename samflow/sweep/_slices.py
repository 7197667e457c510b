"""Slices of a sweep's grid and their merge (the layout and rules: `samflow.merge`)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
import xarray as xr

from ..store import locked_problem, read_results
from ._checkpoint import NO_STAMP


SLICES_DIR = "slices"
"""The folder, inside the output folder of a sweep, that holds its slices."""

_SLICE_ATTRS = ("slice_index", "num_slices", "config_key")


class SliceError(ValueError):
    """Slices that cannot be merged (missing, duplicated, from another config, ...);
    the message is one line."""


def check_slice_args(num_slices: int, slice_index: int, n_cells: int) -> None:
    """Check `--num-slices K --slice-index i` against a grid of `n_cells` cells.

    **Raises:** `ValueError` (one line) unless 1 <= K <= n_cells and 0 <= i < K.
    """
    if num_slices < 1:
        raise ValueError(f"--num-slices must be >= 1 (got {num_slices})")
    if num_slices > n_cells:
        raise ValueError(
            f"--num-slices {num_slices} is more than the {n_cells} (alpha, rho) cell(s) of the grid; "
            f"use at most {n_cells}"
        )
    if not 0 <= slice_index < num_slices:
        raise ValueError(
            f"--slice-index must be in 0..{num_slices - 1} for --num-slices {num_slices} (got {slice_index})"
        )


def slice_cells(order: np.ndarray, num_slices: int, slice_index: int) -> np.ndarray:
    """The cells of slice `slice_index` of `num_slices`.

    **Arguments:** `order` (B,) a permutation of the flattened cell indices
    0..B-1 (the sweep passes its cost order, so that each slice gets cheap and
    expensive cells alike); `num_slices` K; `slice_index` i.

    **Returns:** (n_i,) int64 flattened indices, increasing: `order[i::K]`
    sorted, n_i = ceil((B - i) / K). The K slices partition 0..B-1.

    **Raises:** `ValueError` as `check_slice_args`, or when `order` is not a
    permutation.
    """
    order = np.asarray(order, dtype=np.int64)
    if order.ndim != 1 or not np.array_equal(np.sort(order), np.arange(order.size)):
        raise ValueError("order must be a permutation of 0..B-1")
    check_slice_args(num_slices, slice_index, order.size)
    return np.sort(order[slice_index::num_slices])


def slice_file_name(slice_index: int, num_slices: int) -> str:
    """The file name of slice i of K, e.g. `slice-0003-of-0016.nc` (at least 4 digits)."""
    w = max(4, len(str(num_slices)))
    return f"slice-{slice_index:0{w}d}-of-{num_slices:0{w}d}.nc"


def _describe(name: str, ds: xr.Dataset) -> str:
    return f"{name} (slice {int(ds.attrs['slice_index']) + 1} of {int(ds.attrs['num_slices'])})"


def merge_slices(
    slices: "list[xr.Dataset]", names: "list[str] | None" = None, *, accept_other_stamp: bool = False
) -> xr.Dataset:
    """Assemble the K slices of a sweep into the results of the whole grid.

    **Arguments:** `slices` the slice datasets (as written by
    `python -m samflow.sweep CONFIG --num-slices K --slice-index i`), in any
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
            raise SliceError(f"slice {i + 1} of {K} (--slice-index {i}) appears twice: {seen[i]} and {name}")
        seen[i] = name
    absent = [i for i in range(K) if i not in seen]
    if absent:
        shown = ", ".join(slice_file_name(i, K) for i in absent[:8]) + (" ..." if len(absent) > 8 else "")
        raise SliceError(
            f"{len(absent)} of {K} slices missing: {shown} (still running, or failed? "
            "run them with --slice-index)"
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
    folder = Path(out_dir) / SLICES_DIR
    paths = sorted(folder.glob("slice-*.nc")) if folder.is_dir() else []
    if not paths:
        raise SliceError(
            f"no slices in {folder}; run python -m samflow.sweep CONFIG --num-slices K "
            "--slice-index i (with the same --out) first"
        )
    slices = []
    for p in paths:
        try:
            slices.append(read_results(p))
        except (OSError, ValueError) as err:
            if (locked := locked_problem(p, err)) is not None:
                raise SliceError(locked) from None
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise SliceError(f"{p}: cannot read the slice: {why}") from None
    return merge_slices(slices, [p.name for p in paths], accept_other_stamp=accept_other_stamp)
