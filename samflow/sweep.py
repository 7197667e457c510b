"""The sweep engine and its command line: config -> grid -> batched solve -> results -> figures.

    python -m samflow.sweep CONFIG [--out DIR] [--overwrite] [--no-figures] [--quiet]

reads a TOML config (see `configs/default.toml`), solves every (method, alpha, rho)
cell with one jitted, vmapped diffrax solve per chunk of cells, writes a netCDF
results file and draws the figures. From Python, `run_sweep(config)` returns the
results as an `xarray.Dataset` and `solve_grid` solves any batch of cells.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .config import ConfigError, SweepConfig, load_config
from .data import Dataset, load_dataset, single_sample
from .flows import Method
from .solve import Clock, SolverSettings, Trajectory, _solve_batch, check_save_times

__all__ = ["build_data", "solve_grid", "run_sweep", "main"]


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
    chunk_size: int = 512,
    on_chunk: Callable[[int], None] | None = None,
    checkpoint: "ChunkCheckpoint | None" = None,
    sort_key: "np.ndarray | None" = None,
) -> Trajectory:
    """Solve a batch of B cells, `chunk_size` cells per jitted vmapped call.

    Every chunk has the same shape (the last one is padded by repeating its
    final cell), so the whole batch costs one compilation per (method, clock,
    settings, L, d, chunk size, n_save). Each cell keeps its own adaptive step
    size and its own status; no cell can stop or NaN another.

    **Arguments:** `W0` (B, L, d) initial weights; `rho` (B,) radii; `ts`
    (n_save,) save times; `on_chunk(n_cells_done)` is called after each chunk;
    `checkpoint` (a `ChunkCheckpoint`) stores each finished chunk on disk and
    supplies the chunks a previous, interrupted run already finished;
    `sort_key` (B,) groups cells of similar cost into the same chunk (a vmapped
    chunk runs in lockstep until its slowest cell is done), e.g. alpha / rho,
    which decides the regime; results come back in the original order.

    **Returns:** a `Trajectory` with leading axis B (NumPy arrays).
    """
    method = Method.parse(method)
    clock = Clock.parse(clock)
    W0 = np.asarray(W0, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    ts = jnp.asarray(check_save_times(ts))
    B = W0.shape[0]
    if B == 0:
        raise ValueError("the grid is empty: give at least one alpha and one rho")
    settings = settings.resolved(method, W0, data)  # checks coords = "log" applies
    size = min(chunk_size, B)
    perm = np.argsort(np.asarray(sort_key), kind="stable") if sort_key is not None else np.arange(B)
    W0, rho = W0[perm], rho[perm]
    pieces = []
    for k, start in enumerate(range(0, B, size)):
        n_real = min(size, B - start)
        piece = checkpoint.load(method, k) if checkpoint is not None else None
        if piece is None:
            idx = np.arange(start, start + size)
            idx = np.minimum(idx, B - 1)  # pad by repeating the last cell
            out = _solve_batch(jnp.asarray(W0[idx]), jnp.asarray(rho[idx]), data, ts, method, clock, settings)
            piece = jax.tree_util.tree_map(lambda x: np.asarray(x)[:n_real], out)
            if checkpoint is not None:
                checkpoint.save(method, k, piece)
        pieces.append(piece)
        if on_chunk is not None:
            on_chunk(n_real)
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(B)
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, axis=0)[inverse], *pieces)


class ChunkCheckpoint:
    """Finished chunks of a sweep, one `.npz` per (method, chunk), in a folder.

    Each chunk is written atomically (temporary name, then rename), so a run
    killed at any moment leaves only whole chunks. `key` identifies the sweep
    (a hash of its config): chunks made under another key are never reused.
    """

    def __init__(self, folder: "str | Path", key: str):
        self.folder = Path(folder)
        self.key = key
        self.folder.mkdir(parents=True, exist_ok=True)
        stamp = self.folder / "sweep.key"
        if stamp.exists() and stamp.read_text() != key:
            raise ConfigError(
                f"{self.folder}: partial results of a different config; "
                "rerun with --overwrite to start over"
            )
        stamp.write_text(key)

    def _path(self, method: Method, k: int) -> Path:
        return self.folder / f"{method.value}-{k:06d}.npz"

    def load(self, method: Method, k: int) -> "Trajectory | None":
        """The stored chunk k of `method`, or None when it was not finished."""
        path = self._path(method, k)
        if not path.exists():
            return None
        with np.load(path) as f:
            return Trajectory(**{name: f[name] for name in f.files})

    def save(self, method: Method, k: int, piece: Trajectory) -> None:
        """Store chunk k of `method` atomically."""
        path = self._path(method, k)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **{f.name: np.asarray(getattr(piece, f.name)) for f in dataclasses.fields(piece)})
        os.replace(tmp, path)


def config_key(cfg: SweepConfig) -> str:
    """A hash of everything that determines a sweep's numbers (not its output folder)."""
    dump = cfg.model_dump(mode="json")
    dump.pop("output", None)
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
):
    """Run every cell of a config and return the results as an `xarray.Dataset`.

    Dims: flow (the method), alpha, rho, time, coord (and layer with `output.save_weights`).
    See `samflow.store.to_dataset` for the variables. With `checkpoint_dir`,
    every finished chunk is kept there, and chunks already there (from an
    interrupted run of the same config) are reused, so a resumed run gives
    bit-for-bit the results of an uninterrupted one.

    **Raises:** `ConfigError` for a config that cannot run (e.g. a missing data file).
    """
    from tqdm.auto import tqdm

    from .store import to_dataset

    data = build_data(cfg, base_dir)
    if cfg.data.mu is None and cfg.clock == "tau" and not data.is_single_sample:
        raise ConfigError("clock: 'tau' needs a single sample; this data set has several, use 't'")
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
    for m in cfg.method_enums:
        try:
            settings.resolved(m, W0, data)
        except ValueError as err:
            raise ConfigError(f"{err} (method {m.value!r})") from None
    checkpoint = ChunkCheckpoint(checkpoint_dir, config_key(cfg)) if checkpoint_dir else None
    # Cells of similar alpha/rho have similar cost (it sets the regime), then rho.
    with np.errstate(divide="ignore", invalid="ignore"):
        cost_key = np.lexsort((rho, W0[:, 0, 0] / rho))
    results, timings = {}, {}
    total = len(cfg.methods) * W0.shape[0]
    with tqdm(total=total, desc="cells", unit="cell", disable=not progress, file=sys.stderr) as bar:
        for m in cfg.method_enums:
            bar.set_postfix_str(m.value)
            t0 = time.perf_counter()
            results[m] = solve_grid(
                m, data, W0, rho, ts, clock=cfg.clock, settings=settings,
                chunk_size=cfg.solver.chunk_size, on_chunk=bar.update, checkpoint=checkpoint,
                sort_key=np.argsort(cost_key),
            )
            timings[m.value] = time.perf_counter() - t0
    return to_dataset(cfg, data, ts, alpha_abs, results, timings)


def _default_out(cfg: SweepConfig, config_path: Path) -> Path:
    return Path(cfg.output.dir) / (cfg.name or config_path.stem)


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code (0 ok, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m samflow.sweep",
        description="Sweep SAM flows over an (alpha, rho) grid and draw the regime heat maps.",
    )
    parser.add_argument("config", help="TOML config file (see configs/)")
    parser.add_argument("--out", help="output folder (default: output.dir/<name> of the config)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing results")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run of the same config")
    parser.add_argument("--no-figures", action="store_true", help="write results only")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    from .store import write_results

    def fail(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    config_path = Path(args.config)
    try:
        cfg = load_config(config_path)
    except ConfigError as err:
        return fail(str(err).replace("\n", "\nerror: "))
    out_dir = Path(args.out) if args.out else _default_out(cfg, config_path)
    results_path = out_dir / "results.nc"
    partial = out_dir / ".partial"
    if args.overwrite and args.resume:
        return fail("--overwrite and --resume exclude each other: pick one")
    if results_path.exists() and not args.overwrite:
        return fail(f"{results_path} exists; pass --overwrite to replace it (or another --out)")
    if partial.exists() and not (args.resume or args.overwrite):
        return fail(
            f"{out_dir} holds partial results of an interrupted run; pass --resume to "
            "continue it or --overwrite to start over"
        )
    if args.overwrite and partial.exists():
        shutil.rmtree(partial)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        return fail(f"--out / output.dir: cannot write to {out_dir}: {err.strerror}")

    t_start = time.perf_counter()
    try:
        ds = run_sweep(cfg, progress=not args.quiet, base_dir=config_path.parent, checkpoint_dir=partial)
    except ConfigError as err:
        return fail(str(err))
    wall = time.perf_counter() - t_start
    ds.attrs["wall_time_s"] = wall
    write_results(ds, results_path)
    shutil.rmtree(partial, ignore_errors=True)
    print(f"results: {results_path}")
    n_bad = int((ds["status"].values >= 3).sum())
    if n_bad:
        print(f"note: {n_bad} cell(s) did not finish normally; see the 'status' variable", file=sys.stderr)
    if cfg.output.figures and not args.no_figures:
        from .plots import plot_sweep

        for path in plot_sweep(ds, out_dir, cfg):
            print(f"figure: {path}")
    print(f"done in {wall:.1f} s (solve incl. compilation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
