"""`run_sweep`: a config -> its `SweepPlan` (`plan_sweep`, the one place the sweep reads
the config) -> `run_plan` with `run_sweep`'s keywords as one `RunOptions` (the memory
check, `solve_grid` per flow, the other kinds) -> a results Dataset (`results_layout`,
`samflow.store.to_dataset`); `build_data` and the memory check made before anything is
compiled."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np

from .. import store
from .._util.backend import require_backend
from .._util.io import free_bytes, size_text
from .._util.progress import progress_bar, progress_line
from ..config import ConfigError, SweepConfig
from ..config._experiments import ModelConfig, experiment_problems
from ..config._sweep import FlowEntry, OutputConfig, pattern_problems, rule_problems
from ..datasets import Dataset, load_dataset, single_sample
from ..flows import Method
from ..solver import SolverSettings
from ..store import ResultsLayout, to_dataset
from . import _devices
from ._checkpoint import ChunkCheckpoint, chunk_key, config_key
from ._devices import batch_width
from ._grid import grid_chunk_size, solve_grid
from ._kinds import p_keyword, solve_other
from ._slices import slice_cells


def build_data(cfg: SweepConfig, base_dir: "Path | None" = None, source: "str | None" = None) -> Dataset:
    """The data set a config describes (`data.mu`, `data.X`/`data.y`, `data.file`
    or `data.generator`, drawn by `samflow.datasets`).

    A relative `data.file` is resolved against `base_dir` (the config's folder)
    first, then the working directory. `source` (the config file) starts the
    message of a refusal, as the config's other refusals do.

    **Raises:** `ConfigError` naming the config, `data.file` and, for a missing
    file, every path looked at, when the file is missing or invalid.
    """
    dc = cfg.data
    if dc.mu is not None:
        return single_sample(dc.mu)
    if dc.X is not None:
        return Dataset.from_arrays(dc.X, dc.y)
    if dc.generator is not None:
        return dc.generate()
    where = f"{source}: data.file" if source else "data.file"
    p = Path(dc.file)
    tried = {}  # path -> where it is, in the order looked
    if base_dir is not None and not p.is_absolute():
        tried[(base_dir / p).resolve()] = " beside the config"
    tried.setdefault(p.resolve(), "" if p.is_absolute() else " in the working directory")
    found = next((t for t in tried if t.is_file()), None)
    if found is None:
        # "data file not found: mydata.npz" named neither the config nor the folders searched.
        looked = " and ".join(f"{t}{role}" for t, role in tried.items())
        hint = "" if p.is_absolute() else "; give it relative to the config's folder, or as an absolute path"
        raise ConfigError(f"{where}: data file not found: {dc.file} (looked for {looked}){hint}")
    try:
        return load_dataset(found)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None


def check_data_file(cfg: SweepConfig, data: Dataset, source: "str | None" = None) -> None:
    """The rules that need the data (`[init]` shapes, and the engine's rules between
    clock, methods, lp's p, data, inits and coords: `samflow.config._sweep.rule_problems`),
    checked once a `data.file` is read (inline and generated data are checked with
    the config). `source` (the config file) starts the message, as the config's
    other refusals do.

    **Raises:** `ConfigError`, one line naming the key and the file.
    """
    if cfg.data.file is not None:
        found = experiment_problems(cfg, data.d) or pattern_problems(cfg, data.d) or rule_problems(cfg, data)
        if found:
            where = f"{source}: " if source else ""
            raise ConfigError(f"{where}{found[0]} (data.file = {cfg.data.file})")


@dataclasses.dataclass(frozen=True, eq=False)
class SweepPlan:
    """A validated `SweepConfig` resolved once (`plan_sweep`): what the parts of a run
    take (the devices' memory model, the checkpoints, the solves of every kind, the
    store and the figures), so that none of them reads the config again."""

    key: str
    """The config's key (`config_key`): the hash of what sets the numbers."""
    data: Dataset
    """The data set, built and checked (`build_data`, `check_data_file`)."""
    data_file: "str | None"
    """The config's `data.file` (its contents enter the checkpoint key), None for inline or generated data."""
    layout: ResultsLayout
    """The results' coordinates and attributes (`samflow.store.to_dataset`), the config's JSON values among them."""
    init_pattern: "np.ndarray | None"
    """The (depth, d) pattern of `[init]` (times alpha in each cell), or None."""
    other_settings: SolverSettings
    """The settings of the other kinds (discrete methods, generic models: `solve_other`), as the config gives them."""
    chunk_size: "int | None"
    """`solver.chunk_size`: cells per chunk (None: from the memory budget)."""
    batch_size: int
    """`solver.batch_size`: cells per batch in flight."""
    memory_budget_mb: float
    """`solver.memory_budget_mb`: the memory of the batches in flight."""
    flows: "tuple[FlowEntry, ...]"
    """The entries of the `flow` axis (`SweepConfig.flow_entries`)."""
    model: ModelConfig
    """The `[model]` section (the diagonal net, or a generic model for `solve_other`)."""
    output: OutputConfig
    """The `[output]` section (what is saved, the switch times, the figures)."""

    @property
    def settings(self) -> SolverSettings:
        """The flows' solver settings: `other_settings` with the tolerances chosen by depth
        where the config gives none."""
        return self.other_settings.with_tolerances(self.layout.depth)

    @property
    def ts(self) -> np.ndarray:
        """The save times."""
        return self.layout.time

    @property
    def summary(self) -> bool:
        """`output.save = "summary"`."""
        return self.output.save == "summary"

    @property
    def n_grid(self) -> int:
        """Cells of the whole (alpha, rho) grid."""
        return self.layout.alpha.size * self.layout.rho.size

    @property
    def switch_slots(self) -> int:
        """Switch-time slots K of a flow cell: 2 d + 2 with `output.switch_times`, else 0."""
        return 2 * self.data.d + 2 if self.output.switch_times else 0

    @property
    def program_flows(self) -> "tuple[Method, ...]":
        """The flows of the diagonal net, which share one compiled program (`samflow._engine.lanes.program_family`)."""
        return tuple(dict.fromkeys(Method.parse(e.method) for e in self.flows if e.eta is None))

    @property
    def n_checkpointed(self) -> int:
        """Methods solved by `solve_grid` in chunks (the flows of the diagonal net); the
        other kinds (`samflow.sweep._kinds`) are recomputed on `--resume`."""
        return 0 if self.model.generic else sum(e.eta is None for e in self.flows)

    def cells(self):
        """Flattened (alpha, rho) cells: W0 (B, L, d), rho (B,), alpha_abs (A, R).
        With `[init]`, W0 of a cell is its alpha times the (L, d) pattern."""
        a_axis, r_axis = self.layout.alpha, self.layout.rho
        A, R = a_axis.size, r_axis.size
        alpha_abs = a_axis[:, None] * (r_axis[None, :] if self.layout.alpha_relative_to_rho else 1.0)
        alpha_abs = np.broadcast_to(alpha_abs, (A, R))
        W0 = np.broadcast_to(alpha_abs.reshape(-1)[:, None, None], (A * R, self.layout.depth, self.data.d)).copy()
        if self.init_pattern is not None:
            W0 = W0 * self.init_pattern[None]
        rho = np.broadcast_to(r_axis[None, :], (A, R)).reshape(-1).copy()
        return W0, rho, alpha_abs


def plan_sweep(cfg: SweepConfig, data: Dataset) -> SweepPlan:
    """The `SweepPlan` of a validated config on its data (`build_data`, checked by
    `check_data_file`): the one place the sweep reads the config."""
    layout = results_layout(cfg)
    return SweepPlan(
        key=config_key(layout.config), data=data, data_file=cfg.data.file, layout=layout,
        init_pattern=cfg.init_pattern(data.d),
        other_settings=cfg.solver.to_settings(cfg.loss), chunk_size=cfg.solver.chunk_size,
        batch_size=cfg.solver.batch_size, memory_budget_mb=cfg.solver.memory_budget_mb,
        flows=tuple(cfg.flow_entries()), model=cfg.model, output=cfg.output,
    )


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
    result carries the attributes `config_key` (`config_key(cfg.model_dump(mode="json"))`) and
    `code_stamp` (`code_stamp`, default `samflow.store.code_stamp()`). Chunks
    in `checkpoint_dir` made under another code stamp are refused, unless
    `accept_other_stamp`: then they are reused and the attribute
    `resumed_code_stamps` (a JSON list) names their stamps.

    Before anything is compiled, the memory the results need is checked against
    the memory available (`memory_preflight`).

    **Raises:** `samflow._util.backend.BackendError` (a `RuntimeError`, one line) when
    JAX cannot start its platform (`JAX_PLATFORMS`); `ConfigError` for a config
    that cannot run (e.g. a missing data file), results that do not fit in
    memory, or a checkpoint of another config or code stamp (one line each);
    `ValueError` for a bad `grid_slice` (see `samflow.merge.check_slice_args`).
    """
    require_backend()  # one line, not JAX's bare AssertionError, when JAX_PLATFORMS cannot start
    data = build_data(cfg, base_dir)
    check_data_file(cfg, data)
    options = RunOptions(progress=progress, checkpoint_dir=checkpoint_dir, grid_slice=grid_slice, code_stamp=code_stamp,
                         accept_other_stamp=accept_other_stamp)
    return run_plan(plan_sweep(cfg, data), options)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How `run_plan` runs a plan: `run_sweep`'s keywords of the same names, bar `base_dir`
    (given by keyword: five fields, two of them None by default in `run_sweep`, in no
    order a reader could check)."""

    progress: bool
    checkpoint_dir: "Path | None"
    grid_slice: "tuple[int, int] | None"
    code_stamp: "str | None"
    accept_other_stamp: bool


def run_plan(plan: SweepPlan, options: RunOptions):
    """`run_sweep` of a config's `SweepPlan` (its data already built and checked) with its
    keywords as `options`: the memory check, the solves of every flow entry, the results
    as an `xarray.Dataset`."""
    require_backend()
    grid_slice, checkpoint_dir = options.grid_slice, options.checkpoint_dir
    data, ts = plan.data, plan.ts
    W0, rho, alpha_abs = plan.cells()
    plan_memory(plan, grid_slice)
    code_stamp = store.code_stamp() if options.code_stamp is None else options.code_stamp
    settings = plan.settings
    key = chunk_key(plan.key, data, grid_slice, from_file=plan.data_file is not None)
    # Cells of similar alpha/rho have similar cost (it sets the regime), then rho.
    with np.errstate(divide="ignore", invalid="ignore"):
        cost_key = np.lexsort((rho, alpha_abs.reshape(-1) / rho))
    rank = np.argsort(cost_key)
    n_cells = W0.shape[0]
    cells, n_real, W0, rho, rank = _take_slice(grid_slice, cost_key, W0, rho, rank, plan.batch_size)
    checkpoint = (
        ChunkCheckpoint(checkpoint_dir, key, code_stamp, accept_other_stamp=options.accept_other_stamp)
        if checkpoint_dir
        else None
    )
    results, timings, switches = {}, {}, {}
    summary = plan.summary
    # The switch times of the diagonal net's flows are recorded in the same pass (K = 2 d + 2 slots).
    K = plan.switch_slots
    total = len(plan.flows) * W0.shape[0]
    # One compiled program serves every flow of the sweep (the method is data, samflow._engine.lanes.program_family).
    flows = plan.program_flows
    with progress_bar(total, "cells", "cell", disable=not options.progress) as bar:
        said: list = []

        def compiling() -> None:
            # Before the first compile: in a log, the first progress line comes only after it
            # (86 s on a cold 2-core machine), and nothing said what the run was doing.
            if not said:
                said.append(True)
                progress_line(bar, COMPILING.format(n=total))

        for label, method, eta, p in plan.flows:
            bar.set_postfix_str(label)
            t0 = time.perf_counter()
            if eta is None and not plan.model.generic:
                results[label] = solve_grid(
                    method, data, W0, rho, ts, clock=plan.layout.clock, settings=settings,
                    chunk_size=plan.chunk_size, batch_size=plan.batch_size,
                    memory_budget_mb=plan.memory_budget_mb, on_chunk=bar.update, checkpoint=checkpoint,
                    sort_key=rank, summary=summary, switches=K, program_methods=flows, on_first_call=compiling,
                    **p_keyword(p),
                )
                if K:
                    results[label], switches[label] = results[label]
                    if plan.output.switch_refine:
                        switches[label] = _refined(plan, method, W0, rho, switches[label], p)
            else:
                compiling()
                results[label] = solve_other(
                    method, eta, data, W0, rho, ts, model_config=plan.model, settings=plan.other_settings,
                    width=batch_width(plan.batch_size, n_cells), summary=summary, on_batch=bar.update, p=p,
                )
            timings[label] = time.perf_counter() - t0
    if cells is not None:
        results = {m: jax.tree_util.tree_map(lambda x: x[:n_real], r) for m, r in results.items()}
        switches = {m: jax.tree_util.tree_map(lambda x: x[:n_real], r) for m, r in switches.items()}
    ds = to_dataset(plan.layout, data, alpha_abs, results, timings, cells=cells)
    if plan.output.switch_times:
        # Discrete methods and generic models have no switch record: NaN / -1 and switch_ok False.
        ds = store.add_switch_times(ds, switches, cells=cells)
    ds.attrs["config_key"] = plan.key
    ds.attrs.update(_provenance(code_stamp, checkpoint, grid_slice))
    return ds


def results_layout(cfg: SweepConfig) -> ResultsLayout:
    """What the results file of `cfg` holds beside the solves, as the
    `samflow.store.ResultsLayout` that `samflow.store.to_dataset` takes first:
    its coordinates, the tolerances used, the config as JSON, and the attributes of the
    experiment tables where they differ from the diagonal net from plain inits on given
    data (`model`, `init`, `data_generator`).

    `to_dataset(results_layout(cfg), data, alpha_abs, results, timings)` labels
    solves of your own as `run_sweep` labels the sweep's.

    **Raises:** `TypeError` (one line) for anything but a `SweepConfig` (load a
    file with `samflow.config.load_config`)."""
    if not isinstance(cfg, SweepConfig):
        raise TypeError(f"results_layout takes a SweepConfig (samflow.config.load_config(path)), "
                        f"got {type(cfg).__name__}")
    entries = cfg.flow_entries()
    flow_eta = {e.label: e.eta for e in entries} if cfg.discrete is not None else None
    fixed = {"l2": 2.0, "linf": np.inf}
    flow_p = ({e.label: (e.p if e.p is not None else fixed.get(e.method, np.nan)) for e in entries}
              if cfg.lp is not None else None)
    attrs = {}
    if cfg.model.generic:
        attrs["model"] = cfg.model.name
    if cfg.init is not None:
        attrs["init"] = "W0" if cfg.init.W0 is not None else "alpha_j"
    if cfg.data.generator is not None:
        attrs["data_generator"] = cfg.data.generator
    used = cfg.solver.to_settings(cfg.loss).with_tolerances(2 if cfg.model.generic else cfg.depth)
    return ResultsLayout(
        name=cfg.name, config=cfg.model_dump(mode="json"), alpha=cfg.grid.alpha_values(),
        rho=cfg.grid.rho_values(), time=cfg.time.values(), depth=cfg.depth, clock=cfg.clock, loss=cfg.loss,
        rtol=used.rtol, atol=used.atol, alpha_relative_to_rho=cfg.grid.alpha_relative_to_rho,
        save=cfg.output.save, save_weights=cfg.output.save_weights, flow_eta=flow_eta, flow_p=flow_p, attrs=attrs,
    )


def _take_slice(grid_slice, cost_key, W0, rho, rank, batch_size):
    """(cells, n_real, W0, rho, rank) of slice `grid_slice` = (i, K) of the grid's
    cells (`slice_cells`; None: the whole grid, cells None), padded to the batch width
    of the whole grid with copies of its last cell (same width, same bits)."""
    n_cells = W0.shape[0]
    if grid_slice is None:
        return None, n_cells, W0, rho, rank
    i, K = grid_slice
    cells = slice_cells(cost_key, K, i)
    n_real = cells.size
    n_pad = max(0, batch_width(batch_size, n_cells) - n_real)
    take = np.concatenate([cells, np.repeat(cells[-1:], n_pad)])
    W0, rho, rank = W0[take], rho[take], rank[take]
    rank[n_real:] = n_cells  # the padding sorts last
    return cells, n_real, W0, rho, rank


def _provenance(code_stamp, checkpoint, grid_slice) -> dict:
    """The results' attributes that say what made them: the code stamp, the stamps of
    resumed chunks made by other code, the slice."""
    attrs = {"code_stamp": code_stamp}
    if checkpoint is not None and checkpoint.other_stamps:
        attrs["resumed_code_stamps"] = json.dumps(checkpoint.other_stamps)
    if grid_slice is not None:
        attrs.update(slice_index=int(grid_slice[0]), num_slices=int(grid_slice[1]))
    return attrs


#: Sweeps of up to this many cells per flow refine their switch times with the program of
#: their own pass (the calls padded to the pass's cell count, `_refined`).
REFINE_SHARES_PASS = 4096


def _refined(plan: SweepPlan, method, W0, rho, sw, p):
    """The sweep's switch post-processing: the switch times of the pass (at the
    solver's rtol) refined until each one's bound meets 1e-9 relative
    (`samflow.switches.refine_with`, docs/theory.md s.5), the cells with switches
    solved again by `solve_grid`, sharded as the pass; the pass is unchanged.

    The pass's cells `W0`, `rho` (as solved: a slice padded), its switch record `sw`
    at `plan.settings`, lp's exponent `p`.

    rtol is traced in the lane engine (`SolverSettings.program_key`), so the rtols of
    `samflow.switches.REFINE_LADDER` share one program: every call is padded (with
    repeats of its cells) to one cell count. A sweep of up to `REFINE_SHARES_PASS`
    cells per flow pads to its own cell count and takes the pass's program
    (`plan.program_flows`, the pass's family, and its output kind): no compilation at all (on the default
    config the refinement's three programs of the method alone took 27 s to compile
    cold); a larger one pads to the first call's count, one program for the three."""
    from ..switches import REFINE_TO, refine_with

    K = int(np.shape(sw.time)[-1])
    B = W0.shape[0]
    n_call: list = []

    def solve(idx, tighter):
        if not n_call:
            n_call.append(B if B <= REFINE_SHARES_PASS else idx.size)
        take = np.resize(idx, max(n_call[0], idx.size))
        _, out = solve_grid(method, plan.data, W0[take], rho[take], plan.ts, clock=plan.layout.clock,
                            settings=tighter, chunk_size=plan.chunk_size, batch_size=plan.batch_size,
                            memory_budget_mb=plan.memory_budget_mb, summary=plan.summary,
                            switches=K, program_methods=plan.program_flows, **p_keyword(p))
        return jax.tree_util.tree_map(lambda x: x[: idx.size], out)

    return refine_with(sw, plan.settings, REFINE_TO, solve)


#: The line a sweep's progress starts with, before the solver's first call, which compiles it or
#: loads it from the compile cache (`samflow._util.cache`): `n` the cells of the run. It names both:
#: a warm run that loaded its program in a second said only "compiling ... up to a minute".
COMPILING = "compiling the solver for {n} cells, or loading it from the compile cache (first run on this machine: up to a minute) ..."


def _n_cells(plan: SweepPlan, grid_slice: "tuple[int, int] | None") -> int:
    """Cells a run solves per method: the whole grid, or slice i of K padded to one batch."""
    n_grid = plan.n_grid
    if grid_slice is None:
        return n_grid
    i, K = grid_slice
    return max(-(-(n_grid - i) // K), batch_width(plan.batch_size, n_grid))


def chunk_count(plan: SweepPlan, grid_slice: "tuple[int, int] | None" = None, n_devices: "int | None" = None) -> int:
    """How many chunks (the checkpoint unit, one `.npz` each under `.partial/`)
    a run of `plan` (or of slice `grid_slice = (i, K)`) has, over all its methods:
    `len(methods) * ceil(cells / chunk size)`, with the chunk size `solve_grid`
    uses (`grid_chunk_size`). `n_devices` None counts the JAX devices (every process's, under `jax.distributed`).
    """
    B = _n_cells(plan, grid_slice)
    size = grid_chunk_size(
        B, plan.layout.depth, plan.data.d, plan.ts.size, chunk_size=plan.chunk_size,
        batch_size=plan.batch_size, memory_budget_mb=plan.memory_budget_mb,
        n_devices=n_devices if n_devices is not None else len(jax.devices()),
        summary=plan.summary,
    )
    return plan.n_checkpointed * -(-B // size)


def memory_preflight(
    cfg: SweepConfig,
    data: Dataset,
    grid_slice: "tuple[int, int] | None" = None,
    available_bytes: "int | None | str" = "auto",
    n_devices: "int | None" = None,
) -> "str | None":
    """Check that the results of `cfg` (or of slice `grid_slice = (i, K)`, padded
    as `run_sweep` pads it) fit in memory, before anything is compiled
    (`samflow.sweep.check_memory`).

    `available_bytes` "auto" asks `samflow.sweep.available_memory_bytes()`;
    `n_devices` None counts the JAX devices (every process's, under `jax.distributed`).

    **Returns:** None, or a one-line note when `solver.memory_budget_mb` is below
    what the batches in flight need.

    **Raises:** `ConfigError` (one line naming `output.save = "summary"`,
    `time.num` and `--num-slices`) when the results cannot be held.
    """
    return plan_memory(plan_sweep(cfg, data), grid_slice, available_bytes, n_devices)


def plan_memory(
    plan: SweepPlan,
    grid_slice: "tuple[int, int] | None" = None,
    available_bytes: "int | None | str" = "auto",
    n_devices: "int | None" = None,
) -> "str | None":
    """`memory_preflight` of a config's `SweepPlan`."""
    n_cells = _n_cells(plan, grid_slice)
    if available_bytes == "auto":
        available_bytes = _devices.available_memory_bytes()
    try:
        return _devices.check_memory(
            n_cells, len(plan.flows), plan.layout.depth, plan.data.d, plan.ts.size,
            summary=plan.summary, batch_size=plan.batch_size,
            n_devices=n_devices if n_devices is not None else len(jax.devices()),
            memory_budget_mb=plan.memory_budget_mb, available_bytes=available_bytes,
            num_slices=grid_slice[1] if grid_slice is not None else None,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None


def disk_preflight(
    plan: SweepPlan, folder: Path, grid_slice: "tuple[int, int] | None" = None, kept: "Path | None" = None,
) -> None:
    """Check, before anything is solved, that the files of a run fit on the disk of
    `folder`: the chunk checkpoints and the results file, bounded as their memory
    is (`samflow.sweep.results_bytes`: twice the solver's outputs), less the `.npz`
    chunks already in the checkpoint folder `kept` (they stay).

    **Raises:** `ConfigError`, one line naming the folder, the bytes needed and free.
    """
    need = _devices.results_bytes(
        _n_cells(plan, grid_slice), len(plan.flows), plan.layout.depth, plan.data.d, plan.ts.size,
        summary=plan.summary,
    )
    if kept is not None and kept.is_dir():
        need -= sum(p.stat().st_size for p in kept.glob("*.npz"))
    free = free_bytes(folder)
    if need > free:
        raise ConfigError(
            f"no space left in {folder} for this run: its checkpoints and results need about {size_text(need)}, "
            f"{size_text(free)} free; free space, or choose another --out"
        )
