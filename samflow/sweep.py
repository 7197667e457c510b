"""The sweep engine and its command line: config -> grid -> batched solve -> results -> figures.

    python -m samflow.sweep CONFIG [--out DIR] [--overwrite] [--resume] [--resume-any-version]
                                   [--no-figures] [--quiet] [--num-chunks K --chunk-index i]

reads a TOML config (see `configs/default.toml`), solves every (method, alpha, rho)
cell with one jitted, vmapped diffrax solve per chunk of cells, writes a netCDF
results file and draws the figures. From Python, `run_sweep(config)` returns the
results as an `xarray.Dataset` and `solve_grid` solves any batch of cells.
With `--num-chunks K --chunk-index i` it solves slice i of K of the grid and
writes `<out>/slices/...nc`; `python -m samflow.merge <out>` assembles the
slices (`samflow.merge`).

Reuse is guarded by two stamps: the config key (`config_key`) and the code
stamp (`samflow.store.code_stamp`: samflow version, git commit + dirty marker,
source hash, jax / jaxlib / diffrax / numpy versions). `--resume` continues
partial results only under both, is a no-op success on complete results under
both, and refuses anything else in one line (exit 2). Before any folder is made
or anything compiled, `memory_preflight` refuses results that cannot fit in
memory.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .config import ConfigError, SweepConfig, load_config
from .data import Dataset, load_dataset, single_sample
from .flows import Method
from .parallel import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MEMORY_BUDGET_MB,
    IN_FLIGHT,
    batch_width,
    cell_bytes,
    chunk_cells,
    resolve_devices,
    sharded_solver,
)
from .solve import Clock, SolverSettings, Summary, Trajectory, check_save_times
from .status import FAILED_STATUSES

__all__ = ["build_data", "solve_grid", "run_sweep", "memory_preflight", "config_key", "main"]


def build_data(cfg: SweepConfig, base_dir: "Path | None" = None) -> Dataset:
    """The data set a config describes (`data.mu`, `data.X`/`data.y` or `data.file`).

    A relative `data.file` is resolved against `base_dir` (the config's folder)
    first, then the working directory.

    **Raises:** `ConfigError` naming `data.file` when the file is missing or invalid.
    """
    dc = cfg.data
    if dc.mu is not None:
        return single_sample(dc.mu)
    if dc.X is not None:
        return Dataset.from_arrays(dc.X, dc.y)
    p = Path(dc.file)
    if not p.is_absolute() and base_dir is not None and (base_dir / p).exists():
        p = base_dir / p
    try:
        return load_dataset(p)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"data.file: {err}") from None


def solve_grid(
    method: "str | Method",
    data: Dataset,
    W0: Float[Array, "B L d"],
    rho: Float[Array, " B"],
    ts: Float[Array, " n_save"],
    *,
    clock: "str | Clock" = Clock.T,
    settings: SolverSettings = SolverSettings(),
    chunk_size: "int | None" = None,
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
    batch_size: int = DEFAULT_BATCH_SIZE,
    devices: "Sequence[jax.Device] | int | None" = None,
    summary: bool = False,
    on_chunk: Callable[[int], None] | None = None,
    checkpoint: "ChunkCheckpoint | None" = None,
    sort_key: "np.ndarray | None" = None,
) -> "Trajectory | Summary":
    """Solve a batch of B cells, sharded over devices, in memory-bounded chunks.

    The cells are sorted by `sort_key` and cut into *chunks* (the unit of
    memory and of `checkpoint`); each chunk is solved by calls of one compiled
    program that hand `width` cells to each device (`jax.shard_map` over a 1-D
    mesh: every device runs its own vmapped while loop, no device waits for
    another inside a call), with `width = min(batch_size, B)`; the last call is
    padded by repeating the last cell. For given cells and settings the
    results depend, bit for bit, on `width` alone (XLA's code depends on the
    batch shape): not on `chunk_size`, the memory budget, the devices, the
    sort or `checkpoint` (see `samflow.parallel`); a slice of a grid solved on
    its own must use the width of the whole grid. Each cell keeps its own
    adaptive step size and status; no cell can stop or NaN another. One
    compilation per (method, clock, settings, devices, width, L, d, n_save,
    summary).

    **Arguments:**

    - `W0` (B, L, d) float64 initial weights; `rho` (B,) float64 radii; `ts`
      (n_save,) save times (`check_save_times`).
    - `chunk_size`: cells per chunk. When given it wins; otherwise it is derived
      from `memory_budget_mb` (`samflow.parallel.chunk_cells`: one chunk's
      outputs plus the calls in flight, per `samflow.parallel.cell_bytes`, stay
      under the budget). The budget bounds the solver's working memory, not the
      returned arrays (B rows of outputs, see `summary`).
    - `batch_size`: cells per device per vmapped solve (the lockstep batch).
    - `devices`: the devices to shard over (a list, or a count of local
      devices); default all local devices. One CPU device per core:
      `samflow.parallel.use_cpu_cores()` before JAX starts (the CLI does it),
      or `JAX_NUM_CPU_DEVICES=N` in the environment.
    - `summary`: return a `Summary` (dominant index, ||beta||, loss, status and
      event fields), reduced on the device: about 1.8 kB per cell instead of
      8.9 kB for L = 2, d = 5, 64 save times.
    - `on_chunk(n)`: called with the number of cells finished after each call.
    - `checkpoint`: a `ChunkCheckpoint` that stores each finished chunk on disk
      and supplies the chunks a previous, interrupted run already finished.
    - `sort_key` (B,): groups cells of similar cost into the same batch (a
      vmapped batch runs in lockstep until its slowest cell is done), e.g.
      alpha / rho, which decides the regime; results come back in the original
      order.

    **Returns:** a `Trajectory` (or `Summary`) of NumPy arrays with leading axis
    B; its `ts` field is a read-only broadcast of `ts` (one copy for all cells).

    **Raises:** `ValueError` for an empty grid, a `W0` not of shape (B, L, d)
    or a `rho` not of shape (B,) (one radius per init), a `chunk_size` or
    `batch_size` < 1, a bad `devices` or memory budget, or bad save times;
    `ConfigError` (a `ValueError`, one line) for a checkpoint whose chunks do
    not have this run's chunk size (e.g. made on another number of devices).
    """
    method = Method.parse(method)
    clock = Clock.parse(clock)
    W0 = np.asarray(W0, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    ts_np = check_save_times(ts)
    ts = jnp.asarray(ts_np)
    if W0.ndim != 3 or W0.shape[2] != data.d or rho.shape != W0.shape[:1]:
        raise ValueError(
            f"solve_grid needs W0 of shape (B, L, d = {data.d}) and rho of shape (B,), one radius per "
            f"init; got W0 {W0.shape} and rho {rho.shape}"
        )
    B = W0.shape[0]
    if B == 0:
        raise ValueError("the grid is empty: give at least one alpha and one rho")
    if chunk_size is not None and not (isinstance(chunk_size, (int, np.integer)) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be an integer >= 1 or None, got {chunk_size!r}")
    if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    settings = settings.resolved(method, W0, data)  # coords "auto" -> "log" or "linear"
    devs = resolve_devices(devices)
    n_dev = len(devs)
    width = batch_width(batch_size, B)
    per_call = width * n_dev
    if chunk_size is None:
        L, d = W0.shape[1:]
        out_b, tmp_b = cell_bytes(L, d, ts_np.size, summary=summary)
        chunk_size = chunk_cells(memory_budget_mb, width, n_dev, out_b, tmp_b)
    size = int(min(chunk_size, B))
    fn, sharding = sharded_solver(devs, method, clock, settings, bool(summary))
    perm = np.argsort(np.asarray(sort_key), kind="stable") if sort_key is not None else np.arange(B)
    W0, rho = W0[perm], rho[perm]
    result: dict[str, np.ndarray] = {}
    cls = Summary if summary else Trajectory
    in_flight: collections.deque = collections.deque()

    def put(rows: np.ndarray, fields: dict) -> None:
        """Write the cells of `fields` (arrays with leading axis len(rows)) into the result."""
        for name, value in fields.items():
            if name == "ts":
                continue
            value = np.asarray(value)
            if name not in result:
                result[name] = np.empty((B,) + value.shape[1:], value.dtype)
            result[name][rows] = value

    def finish_oldest() -> None:
        c0, idx, n_call, out = in_flight.popleft()
        keep = np.flatnonzero(idx < c0 + n_call)  # the real cells of the call (not the padding)
        put(perm[idx[keep]], {name: np.asarray(v)[keep] for name, v in _fields(out).items() if name != "ts"})
        if on_chunk is not None:
            on_chunk(n_call)

    for k, start in enumerate(range(0, B, size)):
        n_real = min(size, B - start)
        rows = perm[start : start + n_real]
        piece = checkpoint.load(method, k) if checkpoint is not None else None
        if piece is not None:
            if int(np.shape(piece.status)[0]) != n_real:
                raise ConfigError(
                    f"checkpoint: chunk {k} holds {np.shape(piece.status)[0]} cells, this run's chunk "
                    f"has {n_real}; the partial results were made with another chunk size (another "
                    "memory budget or device count): rerun with --overwrite, or set solver.chunk_size"
                )
            put(rows, _fields(piece))
            if on_chunk is not None:
                on_chunk(n_real)
            continue
        for c0 in range(start, start + n_real, per_call):
            n_call = min(per_call, start + n_real - c0)
            idx = np.minimum(np.arange(c0, c0 + per_call), start + n_real - 1)  # pad: repeat the last cell
            # Device i gets cells i, i + n_dev, ...: every device sees the same cost range.
            idx = idx.reshape(width, n_dev).T.reshape(-1)
            if len(in_flight) >= IN_FLIGHT:
                finish_oldest()
            out = fn(jax.device_put(W0[idx], sharding), jax.device_put(rho[idx], sharding), data, ts)
            in_flight.append((c0, idx, n_call, out))  # dispatched asynchronously
        while in_flight:
            finish_oldest()
        if checkpoint is not None:
            fields = {name: arr[rows] for name, arr in result.items()}
            if not summary:
                fields["ts"] = np.broadcast_to(ts_np, (n_real, ts_np.size))
            checkpoint.save(method, k, cls(**fields))
    if not summary:
        result["ts"] = np.broadcast_to(ts_np, (B, ts_np.size))
    return cls(**result)


def _fields(piece) -> dict:
    return {f.name: getattr(piece, f.name) for f in dataclasses.fields(piece)}


#: The stamp of chunks or results made before samflow recorded code stamps.
NO_STAMP = "none recorded (made before samflow stamped its results)"
_KEY_FILE, _STAMP_FILE = "sweep.key", "code.stamp"


def _chunk_stamps(folder: Path) -> list[str]:
    """The code stamps under which the chunks in `folder` were made ([] when it holds none)."""
    if not any(folder.glob("*.npz")):
        return []
    f = folder / _STAMP_FILE
    stamps = [line for line in f.read_text().splitlines() if line] if f.exists() else []
    return stamps or [NO_STAMP]


def partial_mismatch(folder: "str | Path", key: str, stamp: "str | None") -> "str | None":
    """Why the partial results in `folder` cannot be resumed by a run with config
    key `key` and code stamp `stamp` (one line), or None when they can (or the
    folder holds none). `stamp` None skips the code check."""
    folder = Path(folder)
    kf = folder / _KEY_FILE
    if kf.exists() and kf.read_text() != key:
        return f"{folder}: partial results of a different config; rerun with --overwrite to start over"
    others = [s for s in _chunk_stamps(folder) if s != stamp] if stamp is not None else []
    if others:
        return (
            f"{folder}: partial results made under code stamp '{' and '.join(others)}', this code is "
            f"'{stamp}'; rerun with --overwrite to start over, or --resume-any-version to combine them "
            "(the results then record both stamps)"
        )
    return None


class ChunkCheckpoint:
    """Finished chunks of a sweep, one `.npz` per (method, chunk), in a folder.

    Each chunk is written atomically (temporary name, then rename), so a run
    killed at any moment leaves only whole chunks. `key` identifies the sweep
    (a hash of its config): chunks made under another key are never reused.
    `stamp` (`samflow.store.code_stamp()`) identifies the code: chunks made
    under another stamp are refused too, unless `accept_other_stamp`; then
    `other_stamps` lists the stamps they were made under (the folder's
    `code.stamp` keeps every stamp its chunks were made under).

    **Raises:** `ConfigError` (one line, `partial_mismatch`) when the folder
    holds chunks of another config, or of another code stamp (not accepted).
    """

    def __init__(
        self, folder: "str | Path", key: str, stamp: "str | None" = None, *, accept_other_stamp: bool = False
    ):
        self.folder = Path(folder)
        self.key = key
        self.stamp = stamp
        self.folder.mkdir(parents=True, exist_ok=True)
        problem = partial_mismatch(self.folder, key, stamp)
        kf = self.folder / _KEY_FILE
        same_config = not kf.exists() or kf.read_text() == key
        if problem is not None and not (accept_other_stamp and same_config):
            raise ConfigError(problem)
        (self.folder / _KEY_FILE).write_text(key)
        have = _chunk_stamps(self.folder)
        self.other_stamps = [s for s in have if s != stamp] if stamp is not None else []
        if stamp is not None and stamp not in have:
            tmp = self.folder / f".{_STAMP_FILE}.{os.getpid()}.tmp"
            tmp.write_text("".join(f"{line}\n" for line in have + [stamp]))
            os.replace(tmp, self.folder / _STAMP_FILE)

    def _path(self, method: Method, k: int) -> Path:
        return self.folder / f"{method.value}-{k:06d}.npz"

    def load(self, method: Method, k: int) -> "Trajectory | Summary | None":
        """The stored chunk k of `method` (a `Trajectory`, or a `Summary` for a
        `summary` solve), or None when it was not finished."""
        path = self._path(method, k)
        if not path.exists():
            return None
        with np.load(path) as f:
            cls = Summary if "dominant" in f.files else Trajectory
            return cls(**{name: f[name] for name in f.files})

    def save(self, method: Method, k: int, piece: Trajectory) -> None:
        """Store chunk k of `method` atomically."""
        path = self._path(method, k)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **{f.name: np.asarray(getattr(piece, f.name)) for f in dataclasses.fields(piece)})
        os.replace(tmp, path)


def config_key(cfg: SweepConfig) -> str:
    """A hash of everything that determines a sweep's numbers (not its output folder).

    `output.save = "summary"` changes the key (its chunks and slices hold other
    variables than a full run's, so neither `--resume` nor the merge mixes the
    two); a full run keeps the key it had before `output.save` existed.
    """
    dump = cfg.model_dump(mode="json")
    save = dump.pop("output", {}).get("save", "full")
    if save != "full":
        dump["output.save"] = save
    dump.pop("name", None)
    dump.pop("description", None)
    text = json.dumps(dump, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _grid_cells(cfg: SweepConfig, d: int):
    """Flattened (alpha, rho) cells: W0 (B, L, d), rho (B,), alpha_abs (A, R)."""
    a_axis = cfg.grid.alpha_values()
    r_axis = cfg.grid.rho_values()
    A, R = a_axis.size, r_axis.size
    alpha_abs = a_axis[:, None] * (r_axis[None, :] if cfg.grid.alpha_relative_to_rho else 1.0)
    alpha_abs = np.broadcast_to(alpha_abs, (A, R))
    W0 = np.broadcast_to(alpha_abs.reshape(-1)[:, None, None], (A * R, cfg.depth, d)).copy()
    rho = np.broadcast_to(r_axis[None, :], (A, R)).reshape(-1).copy()
    return W0, rho, alpha_abs


def run_sweep(
    cfg: SweepConfig,
    *,
    progress: bool = True,
    base_dir: "Path | None" = None,
    checkpoint_dir: "Path | None" = None,
    grid_slice: "tuple[int, int] | None" = None,
    code_stamp: "str | None" = None,
    accept_other_stamp: bool = False,
):
    """Run every cell of a config and return the results as an `xarray.Dataset`.

    Dims: flow (the method), alpha, rho, time, coord, layer.
    See `samflow.store.to_dataset` for the variables; with `output.save =
    "summary"` the cells are solved with `solve_grid(..., summary=True)` and
    the results hold the summary variables (dominant index, ||beta||, ...) in
    place of beta. With `checkpoint_dir`,
    every finished chunk is kept there, and chunks already there (from an
    interrupted run of the same config) are reused, so a resumed run gives
    bit-for-bit the results of an uninterrupted one.

    With `grid_slice = (i, K)` only slice i of K of the flattened (alpha, rho)
    cells is solved (`samflow.merge.slice_cells`); the per-cell variables then
    have one axis `cell` (n_i,) in place of (alpha, rho), and the attributes
    `slice_index`, `num_slices` say which slice it is. A slice smaller than one
    solver chunk of the whole grid is padded to that chunk's shape, so that
    `samflow.merge.merge_slices` of the K slices equals the whole run bit for
    bit (XLA's code, and its last bits, depend on the batch shape). Every
    result carries the attributes `config_key` (`config_key(cfg)`) and
    `code_stamp` (`code_stamp`, default `samflow.store.code_stamp()`). Chunks
    in `checkpoint_dir` made under another code stamp are refused, unless
    `accept_other_stamp`: then they are reused and the attribute
    `resumed_code_stamps` (a JSON list) names their stamps.

    Before anything is compiled, the memory the results need is checked against
    the memory available (`memory_preflight`).

    **Raises:** `ConfigError` for a config that cannot run (e.g. a missing data
    file), results that do not fit in memory, or a checkpoint of another config
    or code stamp (one line each); `ValueError` for a bad `grid_slice` (see
    `samflow.merge.check_slice_args`).
    """
    from tqdm.auto import tqdm

    from . import store
    from .store import to_dataset

    data = build_data(cfg, base_dir)
    if cfg.data.mu is None and cfg.clock == "tau" and not data.is_single_sample:
        raise ConfigError("clock: 'tau' needs a single sample; this data set has several, use 't'")
    memory_preflight(cfg, data, grid_slice)
    if code_stamp is None:
        code_stamp = store.code_stamp()
    ts = cfg.time.values()
    W0, rho, alpha_abs = _grid_cells(cfg, data.d)
    settings = SolverSettings(
        solver=cfg.solver.solver,
        rtol=cfg.solver.rtol,
        atol=cfg.solver.atol,
        max_steps=cfg.solver.max_steps,
        capture_radius=cfg.solver.capture_radius,
        blowup_log10=cfg.solver.blowup_log10,
        max_segments=cfg.solver.max_segments,
        loss=cfg.loss,
        coords=cfg.solver.coords,
    )
    key = config_key(cfg)
    # Cells of similar alpha/rho have similar cost (it sets the regime), then rho.
    with np.errstate(divide="ignore", invalid="ignore"):
        cost_key = np.lexsort((rho, W0[:, 0, 0] / rho))
    rank = np.argsort(cost_key)
    n_cells = n_real = W0.shape[0]
    cells = None
    if grid_slice is not None:
        from .merge import slice_cells

        i, K = grid_slice
        cells = slice_cells(cost_key, K, i)
        n_real = cells.size
        # Solve at the batch width of the whole grid (same width, same bits): pad
        # a slice smaller than one batch with copies of its last cell.
        n_pad = max(0, batch_width(cfg.solver.batch_size, n_cells) - n_real)
        take = np.concatenate([cells, np.repeat(cells[-1:], n_pad)])
        W0, rho, rank = W0[take], rho[take], rank[take]
        rank[n_real:] = n_cells  # the padding sorts last
        key = f"{key} slice {i} of {K}"
    checkpoint = (
        ChunkCheckpoint(checkpoint_dir, key, code_stamp, accept_other_stamp=accept_other_stamp)
        if checkpoint_dir
        else None
    )
    results, timings = {}, {}
    total = len(cfg.methods) * W0.shape[0]
    with tqdm(total=total, desc="cells", unit="cell", disable=not progress, file=sys.stderr) as bar:
        for m in cfg.method_enums:
            bar.set_postfix_str(m.value)
            t0 = time.perf_counter()
            results[m] = solve_grid(
                m, data, W0, rho, ts, clock=cfg.clock, settings=settings,
                chunk_size=cfg.solver.chunk_size, batch_size=cfg.solver.batch_size,
                memory_budget_mb=cfg.solver.memory_budget_mb, on_chunk=bar.update, checkpoint=checkpoint,
                sort_key=rank, summary=cfg.output.save == "summary",
            )
            timings[m.value] = time.perf_counter() - t0
    if cells is not None:
        results = {m: jax.tree_util.tree_map(lambda x: x[:n_real], r) for m, r in results.items()}
    ds = to_dataset(cfg, data, ts, alpha_abs, results, timings, cells=cells)
    ds.attrs["config_key"] = config_key(cfg)
    ds.attrs["code_stamp"] = code_stamp
    if checkpoint is not None and checkpoint.other_stamps:
        ds.attrs["resumed_code_stamps"] = json.dumps(checkpoint.other_stamps)
    if grid_slice is not None:
        ds.attrs.update(slice_index=int(grid_slice[0]), num_slices=int(grid_slice[1]))
    return ds


def memory_preflight(
    cfg: SweepConfig,
    data: Dataset,
    grid_slice: "tuple[int, int] | None" = None,
    available_bytes: "int | None | str" = "auto",
    n_devices: "int | None" = None,
) -> "str | None":
    """Check that the results of `cfg` (or of slice `grid_slice = (i, K)`, padded
    as `run_sweep` pads it) fit in memory, before anything is compiled
    (`samflow.parallel.check_memory`).

    `available_bytes` "auto" asks `samflow.parallel.available_memory_bytes()`;
    `n_devices` None counts the local JAX devices.

    **Returns:** None, or a one-line note when `solver.memory_budget_mb` is below
    what the batches in flight need.

    **Raises:** `ConfigError` (one line naming `output.save = "summary"`,
    `time.num` and `--num-chunks`) when the results cannot be held.
    """
    from . import parallel

    n_grid = cfg.grid.alpha_values().size * cfg.grid.rho_values().size
    n_cells = n_grid
    if grid_slice is not None:
        i, K = grid_slice
        n_cells = max(-(-(n_grid - i) // K), batch_width(cfg.solver.batch_size, n_grid))
    if available_bytes == "auto":
        available_bytes = parallel.available_memory_bytes()
    try:
        return parallel.check_memory(
            n_cells, len(cfg.methods), cfg.depth, data.d, cfg.time.values().size,
            summary=cfg.output.save == "summary", batch_size=cfg.solver.batch_size,
            n_devices=n_devices if n_devices is not None else len(jax.local_devices()),
            memory_budget_mb=cfg.solver.memory_budget_mb, available_bytes=available_bytes,
            num_slices=grid_slice[1] if grid_slice is not None else None,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _default_out(cfg: SweepConfig, config_path: Path) -> Path:
    return Path(cfg.output.dir) / (cfg.name or config_path.stem)


def _finished_mismatch(path: Path, key: str, stamp: str, grid_slice, accept_other_stamp: bool):
    """Compare a finished results file with this run: returns (problem, note).

    `problem` is None when `path` holds the complete results of this config
    (`key`, and for a slice the same `grid_slice`) under this code stamp (or
    under another one, with `accept_other_stamp`; then `note` says so);
    otherwise one line saying why it is not this run's result.
    """
    import xarray as xr

    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            attrs = dict(ds.attrs)
    except (OSError, ValueError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"{path} exists but cannot be read ({why}); pass --overwrite to replace it", None
    old_key = str(attrs.get("config_key", ""))
    same_slice = grid_slice is None or (
        int(attrs.get("slice_index", -1)), int(attrs.get("num_slices", -1))) == tuple(grid_slice)
    if old_key != key or not same_slice:
        return (
            f"{path} exists and holds the results of a different config (hash {old_key[:12] or 'none'} vs "
            f"{key[:12]}); pass --overwrite to replace it, or another --out"
        ), None
    old_stamp = str(attrs.get("code_stamp", NO_STAMP))
    if old_stamp != stamp:
        if accept_other_stamp:
            return None, f"note: {path} was made under code stamp '{old_stamp}', this code is '{stamp}'; kept as it is"
        return (
            f"{path} exists, made under code stamp '{old_stamp}', this code is '{stamp}'; pass --overwrite "
            "to recompute it, or --resume-any-version to keep it"
        ), None
    return None, None


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code (0 ok, 2 bad input).

    `--resume` is always safe to pass (e.g. in job scripts): it continues an
    interrupted run of the same config and code stamp, succeeds without
    touching anything when the results are already complete, and refuses (exit
    2, one line naming both stamps) partial or finished results made under
    another code stamp (`samflow.store.code_stamp`), unless
    `--resume-any-version`. With `--resume --overwrite`, matching results are
    kept or continued and stale ones (another config or stamp) are replaced.
    Results that cannot fit in memory are refused before any folder is made.
    """
    from . import store

    parser = argparse.ArgumentParser(
        prog="python -m samflow.sweep",
        description="Sweep SAM flows over an (alpha, rho) grid and draw the regime heat maps.",
    )
    parser.add_argument("config", help="TOML config file (see configs/)")
    parser.add_argument("--out", help="output folder (default: output.dir/<name> of the config)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing results")
    parser.add_argument(
        "--resume", action="store_true",
        help="continue an interrupted run of the same config and code; succeed, changing nothing, "
        "when its results are complete (with --overwrite: replace only stale results)",
    )
    parser.add_argument(
        "--resume-any-version", action="store_true",
        help="--resume, also over results made under another code stamp (samflow commit or "
        "package versions); the results then record every stamp (attribute resumed_code_stamps)",
    )
    parser.add_argument("--no-figures", action="store_true", help="write results only")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--num-chunks", metavar="K",
        help="split the grid into K slices and run one of them (with --chunk-index), e.g. as a "
        "SLURM array task; writes <out>/slices/slice-000i-of-000K.nc, no figures; then run "
        "python -m samflow.merge <out>",
    )
    parser.add_argument("--chunk-index", metavar="I", help="the slice to run, 0..K-1 (with --num-chunks)")
    args = parser.parse_args(argv)
    resume = args.resume or args.resume_any_version

    from .merge import SLICES_DIR, check_slice_args, slice_file_name
    from .store import write_results

    def fail(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    sliced = args.num_chunks is not None or args.chunk_index is not None
    if sliced:
        if args.num_chunks is None or args.chunk_index is None:
            return fail("--num-chunks and --chunk-index go together: give both")
        try:
            n_chunks, chunk_index = int(args.num_chunks), int(args.chunk_index)
        except ValueError:
            return fail(
                "--num-chunks and --chunk-index take whole numbers "
                f"(got {args.num_chunks!r}, {args.chunk_index!r})"
            )
    config_path = Path(args.config)
    try:
        cfg = load_config(config_path)
    except ConfigError as err:
        return fail(str(err).replace("\n", "\nerror: "))
    out_dir = Path(args.out) if args.out else _default_out(cfg, config_path)
    work_dir, results_path, partial, grid_slice = out_dir, out_dir / "results.nc", out_dir / ".partial", None
    if sliced:
        try:
            check_slice_args(n_chunks, chunk_index, cfg.grid.alpha_values().size * cfg.grid.rho_values().size)
        except ValueError as err:
            return fail(str(err))
        grid_slice = (chunk_index, n_chunks)
        work_dir = out_dir / SLICES_DIR
        results_path = work_dir / slice_file_name(chunk_index, n_chunks)
        partial = work_dir / f".partial-{results_path.stem}"
    key = config_key(cfg)
    stamp = store.code_stamp()
    if results_path.exists():
        if resume:
            problem, note = _finished_mismatch(results_path, key, stamp, grid_slice, args.resume_any_version)
            if problem is None:
                if note:
                    print(note, file=sys.stderr)
                print(f"already complete: {results_path} (same config and code); nothing to do")
                return 0
            if not args.overwrite:
                return fail(problem)
        elif not args.overwrite:
            return fail(f"{results_path} exists; pass --overwrite to replace it (or another --out)")
    # Before any folder is made or changed, and before JAX compiles: do the results fit?
    try:
        data = build_data(cfg, config_path.parent)
        memory_note = memory_preflight(cfg, data, grid_slice)
    except ConfigError as err:
        return fail(str(err))
    chunk_key = key if grid_slice is None else f"{key} slice {grid_slice[0]} of {grid_slice[1]}"
    if partial.exists():
        if args.overwrite and not (
            resume
            and partial_mismatch(partial, chunk_key, None if args.resume_any_version else stamp) is None
        ):
            shutil.rmtree(partial)
        elif not resume:
            return fail(
                f"{partial.parent} holds partial results of an interrupted run"
                + (f" of slice {chunk_index} of {n_chunks}" if sliced else "")
                + "; pass --resume to continue it or --overwrite to start over"
            )
        else:
            problem = partial_mismatch(partial, chunk_key, None if args.resume_any_version else stamp)
            if problem is not None:
                return fail(problem)
    if memory_note:
        print(f"note: {memory_note}", file=sys.stderr)
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        # A unique name: slices on other machines may share the folder (and a pid).
        probe = work_dir / f".write-test-{os.getpid()}-{os.urandom(4).hex()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        return fail(f"--out / output.dir: cannot write to {work_dir}: {err.strerror}")

    t_start = time.perf_counter()
    try:
        ds = run_sweep(
            cfg, progress=not args.quiet, base_dir=config_path.parent, checkpoint_dir=partial,
            grid_slice=grid_slice, code_stamp=stamp, accept_other_stamp=args.resume_any_version,
        )
    except ConfigError as err:
        return fail(str(err))
    wall = time.perf_counter() - t_start
    ds.attrs["wall_time_s"] = wall
    write_results(ds, results_path)
    shutil.rmtree(partial, ignore_errors=True)
    if "resumed_code_stamps" in ds.attrs:
        print(
            f"note: combined chunks made under code stamp(s) {ds.attrs['resumed_code_stamps']} with this code "
            f"('{stamp}'); the attributes code_stamp and resumed_code_stamps record both",
            file=sys.stderr,
        )
    if sliced:
        print(f"slice: {results_path} ({chunk_index} of {n_chunks}; merge with python -m samflow.merge {out_dir})")
    else:
        print(f"results: {results_path}")
    n_bad = int(np.isin(ds["status"].values, FAILED_STATUSES).sum())
    if n_bad:
        print(f"note: {n_bad} cell(s) did not finish normally; see the 'status' variable", file=sys.stderr)
    if cfg.output.figures and not args.no_figures and not sliced:
        from .plots import plot_sweep

        for path in plot_sweep(ds, out_dir, cfg):
            print(f"figure: {path}")
    print(f"done in {wall:.1f} s (solve incl. compilation)")
    return 0


if __name__ == "__main__":
    from .parallel import use_cpu_cores

    use_cpu_cores()  # one CPU device per core, unless the user chose a count: sweeps shard over them
    sys.exit(main())
