"""`samflow.solver`: the solve of a flow, cell by cell (a re-export module).

The engine lives in the private package `samflow._engine`, one concept per module:
`settings` (SolverSettings, input checks), `field` (the vector field), `events`
(the event conditions), `singular` (slide or cross, collapse, critical points),
`integrate` (`batch_cells`, `solve_cell`, `solve`), `solution` (Trajectory,
Summary), and the lane engine behind them (docs/layout.md). This module is their
public home; its name differs from the function `samflow.solve` (the module path
`samflow.solve`, deprecated through 0.2.x, was removed in 0.3.0).
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
