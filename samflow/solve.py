"""Deprecated path (kept in 0.2.x, removed in the release after 0.2): the solver's module is now
`samflow.solver`; this module re-exports its names, so `from samflow.solve import
SolverSettings` keeps working.

`samflow.solve` named both this module and the function `sf.solve`; the attribute
`samflow.solve` is and stays the function (so `import samflow.solve as m` gives the
function, as before). `samflow/__init__.py` imports this module before it binds the
function: a submodule imported later would overwrite the package attribute with
itself.
"""

from .solver import (  # noqa: F401
    Clock as Clock,
    SamField as SamField,
    SegmentArgs as SegmentArgs,
    SolverSettings as SolverSettings,
    Summary as Summary,
    Trajectory as Trajectory,
    __all__ as __all__,
    _critical_ratio as _critical_ratio,
    batch_cells as batch_cells,
    check_data as check_data,
    check_depth as check_depth,
    check_rho as check_rho,
    check_save_times as check_save_times,
    solve as solve,
    solve_cell as solve_cell,
    summarize as summarize,
)
