"""Deprecated path (kept for one release): the device sharding and the memory model
moved to `samflow.sweep._devices` and are re-exported by `samflow.sweep`
(`from samflow.sweep import use_cpu_cores`); this module re-exports every name."""

import warnings as _warnings

_warnings.warn("samflow.parallel is deprecated and will be removed in the next release: import from samflow.sweep",
               DeprecationWarning, stacklevel=2)

from .sweep._devices import (  # noqa: F401
    AXIS as AXIS,
    DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE,
    DEFAULT_MEMORY_BUDGET_MB as DEFAULT_MEMORY_BUDGET_MB,
    IN_FLIGHT as IN_FLIGHT,
    __all__ as __all__,
    _gib as _gib,
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
