"""The sweep engine and its command line: config -> grid -> batched solve -> results -> figures.

    python -m samflow.sweep CONFIG [--out DIR] [--overwrite] [--resume] [--resume-any-version]
                                   [--no-figures] [--quiet] [--num-slices K --slice-index i]

reads a TOML config (see `configs/default.toml`), solves every (method, alpha, rho)
cell on the lane engine (`samflow._engine`: each cell steps in a lane of its own, with
its own step size and events, and a finished cell's lane takes the next from the queue;
one compiled program serves every flow of the diagonal net), chunk by chunk, writes a netCDF
results file and draws the figures. From Python, `run_sweep(config)` returns the
results as an `xarray.Dataset` and `solve_grid` solves any batch of cells.
With `--num-slices K --slice-index i` it solves slice i of K of the grid and
writes `<out>/slices/...nc`; `python -m samflow.merge <out>` assembles the
slices (`samflow.merge`).

Reuse is guarded by two stamps: the config key (`config_key`) and the code
stamp (`samflow.store.code_stamp`: samflow version, git commit + dirty marker,
source hash, the versions of the packages that set the numbers,
`samflow.store.STAMP_PACKAGES`). `--resume` continues
partial results only under both, is a no-op success on complete results under
both, and refuses anything else in one line (exit 2). Before any folder is made
or anything compiled, `memory_preflight` refuses results that cannot fit in
memory.
"""

from .._util.startup import command_start as _command_start, paused_gc as _paused_gc

# `python -m samflow.sweep` imports this package before its __main__: a Ctrl-C during
# these imports (pydantic, xarray, the engine) is one line and exit 130, not a traceback;
# the garbage collector waits until they are done (`paused_gc`).
with _command_start(), _paused_gc():
    from ._checkpoint import (
        _KEY_FILE as _KEY_FILE,
        _STAMP_FILE as _STAMP_FILE,
        NO_STAMP as NO_STAMP,
        ChunkCheckpoint as ChunkCheckpoint,
        _chunk_stamps as _chunk_stamps,
        _finished_mismatch as _finished_mismatch,
        config_key as config_key,
        partial_mismatch as partial_mismatch,
    )
    from ._cli import main as main
    from ._devices import (  # the devices, sharding and memory model (once samflow.parallel)
        DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE,
        DEFAULT_MEMORY_BUDGET_MB as DEFAULT_MEMORY_BUDGET_MB,
        available_memory_bytes as available_memory_bytes,
        batch_width as batch_width,
        cell_bytes as cell_bytes,
        check_memory as check_memory,
        chunk_cells as chunk_cells,
        in_flight_bytes as in_flight_bytes,
        resolve_devices as resolve_devices,
        results_bytes as results_bytes,
        sharded_solver as sharded_solver,
        use_cpu_cores as use_cpu_cores,
    )
    from ._grid import _fields as _fields, solve_grid as solve_grid
    from ._run import (
        build_data as build_data,
        memory_preflight as memory_preflight,
        results_layout as results_layout,
        run_sweep as run_sweep,
    )

del _command_start, _paused_gc

__all__ = ["build_data", "solve_grid", "run_sweep", "results_layout", "memory_preflight", "config_key", "main",
           "DEFAULT_BATCH_SIZE", "DEFAULT_MEMORY_BUDGET_MB", "available_memory_bytes", "batch_width", "cell_bytes",
           "check_memory", "chunk_cells", "in_flight_bytes", "resolve_devices", "results_bytes", "sharded_solver",
           "use_cpu_cores"]
