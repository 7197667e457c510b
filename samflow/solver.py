"""`samflow.solver`: the solve of a flow, cell by cell (a re-export module).

The engine lives in private modules, one concept each: `_settings`
(SolverSettings, input checks), `_field` (the vector field), `_events` (the
event conditions), `_singular` (slide or cross, collapse, critical points),
`_integrate` (`batch_cells`, `solve_cell`, `solve`), `_solution`
(Trajectory, Summary). This module is their public home; its name differs
from the function `samflow.solve` (the old module path `samflow.solve` is a
deprecated shim, `samflow/solve.py`).
"""

from ._engine.field import SamField as SamField
from ._engine.field import RunArgs as RunArgs
from ._engine.integrate import batch_cells as batch_cells
from ._engine.integrate import solve as solve
from ._engine.integrate import solve_cell as solve_cell
from ._engine.settings import SolverSettings as SolverSettings
from ._engine.settings import check_data as check_data
from ._engine.settings import check_depth as check_depth
from ._engine.settings import check_rho as check_rho
from ._engine.settings import check_save_times as check_save_times
from ._engine.singular import _critical_ratio as _critical_ratio
from ._engine.solution import Summary as Summary
from ._engine.solution import Trajectory as Trajectory
from ._engine.solution import summarize as summarize
from .flows import Clock as Clock

__all__ = ["Clock", "SolverSettings", "Trajectory", "Summary", "solve", "solve_cell", "summarize"]
