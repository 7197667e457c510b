"""The engine behind `samflow.solve`: the lane loop and everything it steps.

- `loop`: the lane loop, written once (`run_lanes` over a `LaneProblem`): cells
  handed to lanes, one adaptive step per lane and iteration, the ends of runs
  compacted, the saves, the queue;
- `lanes`: the general `(L, d)` state in that loop (`solve_lanes`): every cell in
  its own lane, events located on the dense interpolant, one program per family;
- `reduced`: the exact reductions (two scalars for depth-2 l2 on one sample, one
  row for equal layers): the same loop code, in a `run_lanes` call of their own
  ahead of the general one (`lanes._reductions`);
- `rk`: one explicit Runge-Kutta step and its dense interpolant, with sums written
  out, and the per-lane gathers and scatters;
- `field`: the vector field of one cell (`SamField`) and what changes at events
  (`RunArgs`); `events`: the event conditions (`EventSet`); `singular`: what
  happens at a singular point (slide or cross, collapse, critical points);
- `record`, `cell_state`: a cell's record at its start, its events and its end;
- `integrate`: `solve`, `solve_cell` and the batching of a call's cells;
- `settings`: `SolverSettings` and the checks of a solve's inputs; `solution`: what
  a solve returns (`Trajectory`, `Summary`).

Private: import the public names from `samflow` and `samflow.solver`.
"""
