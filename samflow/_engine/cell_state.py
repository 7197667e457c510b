"""The state of one cell between the runs of steps of its solve (`samflow._engine.lanes`):
where the next run starts, what has been saved, and the event record.
Its own module, so that the integrator and the singular points
(`samflow._engine.singular`) both read it without importing each other.
"""

from __future__ import annotations

import equinox as eqx
from jaxtyping import Array, Bool, Float, Int

from .field import RunArgs


class CellState(eqx.Module):
    """A cell's record between its runs (what a lane carries, `samflow._engine.lanes`), grouped as diffrax's `State`.

    Y is the solver's state (W, or log|W| in log coordinates); shapes `(L, d)`
    unless noted, `n` = number of save times.
    """

    # Where the next run starts.
    runs: Int[Array, ""]
    t0: Float[Array, ""]
    Y: Float[Array, "L d"]
    s: Float[Array, ""]
    memory: Float[Array, "L d"]
    frozen: Bool[Array, "L d"]
    track: Bool[Array, ""]
    rmem: Float[Array, " d"]
    rslide: Bool[Array, " d"]
    roff: Float[Array, " d"]
    ra: Float[Array, " 2"]
    # Saved output.
    out_Y: Float[Array, "n L d"]
    out_s: Float[Array, " n"]
    # Event record.
    status: Int[Array, ""]
    event_time: Float[Array, ""]
    event_s: Float[Array, ""]
    collapse_direction: Float[Array, " d"]
    W_detect: Float[Array, "L d"]
    t_detect: Float[Array, ""]
    W_stop: Float[Array, "L d"]
    slide_time: Float[Array, "L d"]
    # lp: where each held weight was captured before its arrival at 0 (NaN: never).
    t_arrive_capture: Float[Array, "L d"]
    W_arrive_capture: Float[Array, "L d"]
    t_untracked: Float[Array, ""]
    # Statistics and loop control.
    steps: Int[Array, ""]
    done: Bool[Array, ""]

    def run_args(self, rho, data, multi: bool) -> RunArgs:
        extra = (self.rmem, self.rslide, self.roff, self.ra) if multi else (None,) * 4
        return RunArgs(rho, data, self.memory, self.frozen, self.track, *extra)
