"""The general `(L, d)` state in the lane loop: `solve_lanes`, every cell in its own lane.

A call hands `n` cells to `width` lanes of `samflow._engine.loop.run_lanes`, the
lane loop written once (its stages: try the steps, end runs, save inside the
steps, advance, refill lanes). This module's `_General` is the general state's
`LaneProblem` in it; what a lane does at each stage:

- **try the steps** (`_Engine.try_step`): ONE adaptive Runge-Kutta step of its
  own cell with its own step size (diffrax's tableau, written out in
  `samflow._engine.rk`, and its `PIDController.adapt_step_size`, as inside
  `diffrax.diffeqsolve`), and the cell's event condition at the step's end
  (`samflow._engine.events.EventSet`, docs/theory.md s.4): a down-crossing
  through 0 ends the run (`_General.run_ends`), as do the horizon, the step
  budget and a failure.
- **end runs** (`_Engine.end_run`, compacted): the event is located on the
  step's dense interpolant by bisection (`BracketBisection`, an `optimistix`
  root finder, to 1e-13) and the cell's record is updated there
  (`samflow._engine.record._after_event`: collapse capture and extrapolation,
  linf sign switches and sliding, the r_j surfaces of multi-sample linf, lp
  arrivals at 0, critical points, blow-up, poles, the t range). A cell that goes
  on restarts its solver there (a fresh first-same-as-last stage, a fresh PID
  state, its last step size as the first guess); a cell that is done (the
  horizon, a stopping event, its step budget of `max_steps` per run and
  `max_runs` runs, or a failure) hands its lane to the next cell of the queue.
- **save inside the steps** (`_General.save_values`): the save times inside a
  step are evaluated on its dense interpolant (diffrax's `interpolation_cls`).

Before the general loop, the cells an exact reduction covers run in a
`run_lanes` call of their own (`_reductions`, `samflow._engine.reduced`: two
scalars, or one row, per cell); the cells it finishes keep its records, and the
ones it hands back start again in the general call.

**The hot path.** An iteration does for every lane only what a step needs: the
Runge-Kutta stages, the controller, the event condition at the step's end, the
saves inside the step. A lane carries only its record's hot fields (`HOT`: where
it is, its modes, its step count); the rest of the record (`COLD`: the event
record, the run count, done) and the switch record stay in the call's per-cell
records, and the end of a run runs compacted, in few iterations
(docs/benchmarks.md, "Issue 34, second round").
Everything a lane computes is a function of its cell alone: the results do not
depend on the width, the order of the cells or the other cells of the call (with
`samflow._util.x64.exact_cpu_arithmetic`: no fused multiply-add, and no YNNPACK sums,
which XLA uses for large arrays and which add in another order).

**One program per family of methods** (docs/theory.md s.4): the method of a call
can be data. With `family` (a static tuple of methods, `program_family`) the
method is an int32 index into it, traced, shared by every lane of the call: the
per-lane work that depends on the method (the initial state, a step, the end of
a run, the final outputs) is a `lax.switch` over the members on that unbatched
index, a real conditional (only the chosen member's code runs), and each branch
is the code of that method alone. A method's results are those of its program
alone bit for bit (tests/test_lanes.py, the pinned grid), but for gd in log
coordinates in the t clock: XLA compiles its step inside the conditional to
other last bits (5.9e-15 relative at most on the pinned grid). The scaffolding (the lane loop, the saves, the queue) is
shared. A family holds the methods whose cells have one state structure:
linf on multi-sample data (its state carries the r_j surfaces) is a family of its
own, and log coordinates have no linf.
"""

from __future__ import annotations

import dataclasses
import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, Bool, Float, Int

from ..datasets import Dataset
from ..flows import Clock, Method
from ..losses import get_loss
from ..status import Status
from .._util.cache import no_runtime_checks
from .cell_state import CellState
from .events import (_LOG_ZERO, BracketBisection, EventSet, _gap_rate, _lead_value, _leader, _log_abs_beta,
                      _no_event_value, _switch_time_err, _with_lead)
from .field import SamField, _r_scale
from .loop import EndedRuns, LaneProblem, run_lanes, where_rows
from .record import _after_event, _field_p, _finish, _initial_state
from .reduced import equal_layers_reducible, reducible, solve_equal_layers, solve_reduced
from .rk import _Dense, _erk_step, _put, _take
from .settings import _SOLVERS, TAU_ONE_SAMPLE, SolverSettings
from .solution import Trajectory
from ..flows import LOG_NOT_LINF

__all__ = ["solve_lanes", "program_family", "DEFAULT_LANES"]

#: Lanes per device when the caller does not say (`solve`, `solve_grid`).
DEFAULT_LANES = 256
#: Cells per block of the final outputs (`_finish`; see `solve_lanes`).
FINISH_BLOCK = 8


class Lane(eqx.Module):
    """The carry of one lane (a leading lane axis in the loop).

    - `cell`: `()` int, the cell it holds (n: idle).
    - `rec`: the cell's `CellState` without its saved outputs (`out_Y`,
      `out_s` are None): where it is (`t0`, `Y`, `s`), its modes (`memory`,
      `frozen`, `rmem`, `rslide`, `roff`, `track`) and its event record.
    - `rho`, `sign` (log coordinates, else None), `w_scale`: the cell's constants.
    - `tnext`: `()` the end of the step to try; `f0`: the field at (`t0`, `Y`,
      `s`) (the first stage of the next step); `pid`: the PID controller's state.
    - `v`: `()` the event condition at (`t0`, `Y`, `s`) (a down-crossing through
      0 is an event). `run_steps`: steps since the run began (its `max_steps`).
    - `save_idx`: `()` the next save time to write.
    - `lead`: `()` the leader argmax |beta_j| (0-based) when switches are
      recorded; `sw`: the cell's switches so far (time, s, from, to: `(K,)`;
      count: `()`; the bounds of the times' errors and the gaps' rates: `(K,)`), else None.
    """

    cell: Int[Array, ""]
    rec: CellState
    rho: Float[Array, ""]
    sign: "Float[Array, 'L d'] | None"
    w_scale: Float[Array, ""]
    tnext: Float[Array, ""]
    f0: tuple
    pid: tuple
    v: Float[Array, ""]
    run_steps: Int[Array, ""]
    save_idx: Int[Array, ""]
    lead: Int[Array, ""]
    sw: "tuple | None"


class _Tried(eqx.Module):
    """What one step of a lane gave (`_Engine.try_step`)."""

    t0: Float[Array, ""]
    t1: Float[Array, ""]
    y1: tuple
    dense: dict
    keep: Bool[Array, ""]
    tnext: Float[Array, ""]
    t_new: Float[Array, ""]
    pid: tuple
    f1: tuple
    v1: Float[Array, ""]
    event: Bool[Array, ""]
    horizon: Bool[Array, ""]
    out_of_steps: Bool[Array, ""]
    failed: Bool[Array, ""]


class _Engine(eqx.Module):
    """The static parts of a call (method, clock, settings, shapes) and its shared
    inputs (data, save times, p); builds each lane's field, events and controller."""

    method: Method = eqx.field(static=True)
    clock: Clock = eqx.field(static=True)
    settings: SolverSettings = eqx.field(static=True)
    multi: bool = eqx.field(static=True)
    log_coords: bool = eqx.field(static=True)
    L: int = eqx.field(static=True)
    max_runs: int = eqx.field(static=True)
    switches: int = eqx.field(static=True)
    data: Dataset
    ts: Float[Array, " n_save"]
    p: "Float[Array, ''] | None"
    r_scale: "Float[Array, ''] | None"
    tol: "Float[Array, ' 3'] | None" = None

    @property
    def rtol(self):
        """The controller's relative tolerance: traced (`tol`) or the settings'
        (chosen by depth where they give none, `SolverSettings.with_tolerances`)."""
        return self.settings.with_tolerances(self.L).rtol if self.tol is None else self.tol[0]

    @property
    def atol(self):
        return self.settings.with_tolerances(self.L).atol if self.tol is None else self.tol[1]

    @property
    def max_steps(self):
        """A run's step budget: traced (`tol`) or the settings'."""
        return self.settings.max_steps if self.tol is None else self.tol[2]

    @property
    def solver(self):
        return _SOLVERS[self.settings.solver]()

    @property
    def t_final(self):
        return self.ts[-1]

    def field(self, sign) -> SamField:
        return SamField(self.method, self.clock, get_loss(self.settings.loss), sign, self.p)

    def events(self, field, w_scale, lead=None) -> EventSet:
        """The cell's events; with switches recorded, also "a challenger overtakes
        `lead`" (`samflow._engine.events._with_lead`, docs/theory.md s.5)."""
        base = EventSet.for_cell(field, self.L, self.multi, self.settings, w_scale, self.r_scale)
        return _with_lead(base, lead) if self.switches and lead is not None else base

    def controller(self, field, w_scale):
        # atol relative to the init scale (floored
        # at 1e-150), rtol alone in log coordinates.
        atol = self.atol * jnp.where(w_scale > 0, jnp.clip(w_scale, 1e-150, 1.0), 1.0)
        if field.log_coords:
            atol = self.rtol
        return diffrax.PIDController(rtol=self.rtol, atol=atol)

    def args(self, lane_or_rec, rho):
        return lane_or_rec.run_args(rho, self.data, self.multi)

    # -- one lane -----------------------------------------------------------------

    def start_run(self, rec: CellState, rho, sign, w_scale, dt, lead=None):
        """(tnext, f0, pid, v) of a run that starts at the record's (t0, Y, s):
        the first step is `dt` long (clipped to the horizon)."""
        field = self.field(sign)
        args = self.args(rec, rho)
        y0 = (rec.Y, rec.s)
        f0 = field(rec.t0, y0, args)
        v = _no_event_value(self.events(field, w_scale, lead), rec.t0, y0, args)
        # A first step that underflowed to 0 (an init near 1e-300: diffrax's selection
        # scales it with the weights) would never move: start at 1e-12 of the horizon,
        # and let the controller shrink it.
        dt = jnp.where(dt > 0, dt, 1e-12 * jnp.abs(self.t_final))
        tnext = jnp.minimum(rec.t0 + dt, self.t_final)
        dtype = rec.t0.dtype
        pid = (jnp.ones((), dtype), jnp.ones((), dtype), jnp.asarray(False))
        return tnext, f0, pid, v

    def first_dt(self, rec: CellState, rho, sign, w_scale):
        """The first step of a cell: diffrax's initial step-size selection."""
        field = self.field(sign)
        term = diffrax.ODETerm(field)
        solver = self.solver
        ctrl = self.controller(field, w_scale)
        t1, _ = ctrl.init(term, rec.t0, self.t_final, (rec.Y, rec.s), None, self.args(rec, rho), solver.func,
                          solver.error_order(term))
        return t1 - rec.t0

    def try_step(self, lane: Lane, t1_floor) -> _Tried:
        """One step of `lane` from rec.t0 to lane.tnext, as diffeqsolve's loop body."""
        rec = lane.rec
        field = self.field(lane.sign)
        term = diffrax.ODETerm(field)
        solver = self.solver
        args = self.args(rec, lane.rho)
        t0, t1 = rec.t0, lane.tnext
        y0 = (rec.Y, rec.s)
        y1, y_err, dense, f1 = _erk_step(type(solver).tableau, field, t0, t1, y0, args, lane.f0)
        y_err = jax.tree.map(lambda x: jnp.where(jnp.isnan(x), jnp.inf, x), y_err)
        keep, t_new, tnext, _, pid, cres = self.controller(field, lane.w_scale).adapt_step_size(
            t0, t1, y0, y1, args, y_err, solver.error_order(term), lane.pid
        )
        t_final = self.t_final
        t_new = jnp.minimum(t_new, t_final)
        tnext = jnp.where(tnext > t1_floor, jnp.where(keep, t_final, t_new + 0.5 * (t_final - t_new)), tnext)
        v1 = _no_event_value(self.events(field, lane.w_scale, lane.lead), t_new, y1, args)
        v1 = jnp.where(keep, v1, lane.v)
        event = keep & (lane.v > 0) & (v1 <= 0)
        failed = cres != diffrax.RESULTS.successful  # the step itself (`_erk_step`) cannot fail
        horizon = keep & ~event & (t_new >= t_final)
        out_of_steps = (lane.run_steps + 1 >= self.max_steps) & ~event & ~horizon
        return _Tried(
            t0=t0, t1=t1, y1=y1, dense=dense, keep=keep, tnext=tnext, t_new=t_new,
            pid=jax.tree.map(jnp.asarray, pid), f1=f1, v1=v1, event=event & ~failed,
            horizon=horizon & ~failed, out_of_steps=out_of_steps & ~failed, failed=failed,
        )

    def interp(self, tried: _Tried):
        return _Dense(self.solver.interpolation_cls, tried.t0, tried.t1, tried.dense)

    def end_run(self, lane: Lane, tried: _Tried):
        """A lane whose run ended in this step: locate its event, update its record
        (`_after_event`) and, if its cell goes on, start the next run there.
        Returns (lane, t_limit, strict): the saves of this step are those up to
        t_limit (strictly before it for an event)."""
        rec = lane.rec
        field = self.field(lane.sign)
        events = self.events(field, lane.w_scale, lane.lead)
        args = self.args(rec, lane.rho)
        interp = self.interp(tried)

        if events.names:
            def cond(t, _):
                return events.value(t, interp.evaluate(t), args)

            root = optx.root_find(
                cond, BracketBisection(rtol=1e-13, atol=1e-13, flip=True), tried.t_new,
                options=dict(lower=tried.t0, upper=tried.t_new), throw=False,
            )
            t_ev = jnp.where(tried.event, root.value, tried.t_new)
            root_ok = ~tried.event | (root.result == optx.RESULTS.successful)
            y_ev = interp.evaluate(t_ev)
        else:
            t_ev, root_ok, y_ev = tried.t_new, jnp.asarray(True), tried.y1
        # Out of steps or failed: the run stalls at its last accepted point.
        t_here = jnp.where(tried.keep, tried.t_new, tried.t0)
        y_here = jax.tree.map(lambda a, b: jnp.where(tried.keep, a, b), tried.y1, (rec.Y, rec.s))
        t_end = jnp.where(tried.event & root_ok, t_ev, t_here)
        Y_end, s_end = jax.tree.map(lambda a, b: jnp.where(tried.event & root_ok, a, b), y_ev, y_here)
        rec = eqx.tree_at(lambda r: r.steps, rec, rec.steps + 1)
        new = _after_event(
            rec, field=field, events=events, args=args, rho=lane.rho, data=self.data, multi=self.multi,
            t_final=self.t_final, t_end=t_end, Y_end=Y_end, s_end=s_end, ok=tried.horizon,
            is_event=tried.event & root_ok, max_steps=tried.out_of_steps & ~tried.failed,
            t_stall=t_here, steps=jnp.zeros((), rec.steps.dtype),
        )
        new = eqx.tree_at(lambda r: r.status, new, jnp.where(~root_ok & ~tried.failed, int(Status.FAILED), new.status))
        new = eqx.tree_at(lambda r: r.done, new, new.done | ~root_ok | tried.failed)
        lead, sw, fired = lane.lead, lane.sw, jnp.asarray(False)
        if self.switches:
            # A switch of the leader: the lead condition (last of `events`) is the one
            # nearest 0 at the event (a run that ends on another event, a weight sliding,
            # while features are tied is no switch). It is dated at the root, and the
            # fastest growing of the features tied there leads on (`_leader`).
            lb = _log_abs_beta(field, new.Y)
            live = jnp.all(jnp.isfinite(lb)) & (jnp.max(lb) > self.L * _LOG_ZERO)
            lead_hit = jnp.argmin(events.values(t_end, (Y_end, s_end), args)) == len(events.names) - 1
            fired = (tried.event & root_ok & lead_hit & ~new.done & live
                     & (jnp.abs(_lead_value(field, new.Y, lead)) <= 1e-7))
            to = _leader(field, new, lane.rho, self.data, self.multi, exclude=lead)
            # The bound of the time's error (docs/theory.md s.5): the controller's tolerances
            # summed over the cell's steps, through the gap and its rate, over the gap's rate at the root.
            ctrl = self.controller(field, lane.w_scale)
            new_args = new.run_args(lane.rho, self.data, self.multi)
            err, rate = _switch_time_err(
                lambda y: _log_abs_beta(field, y[0])[to] - _log_abs_beta(field, y[0])[lead],
                lambda y: _gap_rate(field, y[0], y[1], new_args, lead, to),
                (new.Y, new.s), ctrl.rtol, ctrl.atol, new.steps, t_end)
            r_time, r_s, r_from, r_to, count, r_err, r_rate = sw
            K = r_time.shape[0]
            slot = jnp.minimum(count, K - 1)
            put = lambda arr, v: jnp.where(fired & (count < K), arr.at[slot].set(v), arr)
            sw = (put(r_time, t_end), put(r_s, s_end), put(r_from, (lead + 1).astype(jnp.int32)),
                  put(r_to, (to + 1).astype(jnp.int32)), count + fired.astype(jnp.int32), put(r_err, err),
                  put(r_rate, rate))
            lead = jnp.where(fired, to, lead).astype(lane.lead.dtype)
        # The next run starts at the event with the step size of this one.
        dt = jnp.maximum(tried.t1 - tried.t0, 0.0)
        tnext, f0, pid, v = self.start_run(new, lane.rho, lane.sign, lane.w_scale, dt, lead)
        restarted = eqx.tree_at(
            lambda l: (l.rec, l.tnext, l.f0, l.pid, l.v, l.run_steps, l.lead, l.sw),
            lane, (new, tnext, f0, pid, v, jnp.zeros_like(lane.run_steps), lead, sw),
            is_leaf=lambda x: x is None,
        )
        t_limit = jnp.where(tried.keep | tried.event, t_end, tried.t0)
        strict = tried.event & root_ok
        if not self.switches:
            return restarted, t_limit, strict
        # The field does not change at a switch: when no other condition falls through 0
        # later in the step, the run goes on with the step taken whole (the steps, and so
        # the numbers, are those of a solve that records no switches).
        v_to = _no_event_value(self.events(field, lane.w_scale, lead), tried.t_new, tried.y1, args)
        whole = fired & (v_to > 0)
        stepped = self.advance(lane, tried)
        stepped = eqx.tree_at(lambda l: (l.v, l.lead, l.sw), stepped, (v_to, lead, sw))
        lane = jax.tree.map(lambda a, b: jnp.where(whole, a, b), stepped, restarted)
        return lane, jnp.where(whole, tried.t_new, t_limit), strict & ~whole

    def advance(self, lane: Lane, tried: _Tried) -> Lane:
        """A lane whose run goes on: take the step if accepted, else retry smaller."""
        keep = tried.keep
        sel = lambda a, b: jax.tree.map(lambda x, y: jnp.where(keep, x, y), a, b)
        rec = lane.rec
        Y, s = sel(tried.y1, (rec.Y, rec.s))
        rec = eqx.tree_at(
            lambda r: (r.t0, r.Y, r.s, r.steps), rec,
            (jnp.where(keep, tried.t_new, rec.t0), Y, s, rec.steps + 1),
        )
        return eqx.tree_at(
            lambda l: (l.rec, l.tnext, l.f0, l.pid, l.v, l.run_steps),
            lane, (rec, tried.tnext, sel(tried.f1, lane.f0), tried.pid, tried.v1, lane.run_steps + 1),
        )


#: The fields of a cell's record that only the end of a run reads or writes: they
#: stay in the call's per-cell records while the cell steps (`_hot`), so that the
#: hot loop carries, selects and copies only what a step needs.
COLD = ("runs", "status", "event_time", "event_s", "collapse_direction", "W_detect", "t_detect", "W_stop",
        "slide_time", "t_arrive_capture", "W_arrive_capture", "t_untracked", "done")


#: The other fields of a cell's record (but the saved outputs, which the loop writes apart).
HOT = tuple(f.name for f in dataclasses.fields(CellState) if f.name not in COLD + ("out_Y", "out_s"))


def _cold(rec: CellState):
    return tuple(getattr(rec, f) for f in COLD)


def _hot_fields(rec: CellState):
    return tuple(getattr(rec, f) for f in HOT)


def _hot(lane: Lane) -> Lane:
    """`lane` without its record's `COLD` fields and its switch record (None)."""
    return eqx.tree_at(lambda l: _cold(l.rec) + (l.sw,), lane, (None,) * (len(COLD) + 1), is_leaf=lambda x: x is None)


def _whole(lane: Lane, rec: CellState, sw) -> Lane:
    """A `_hot` lane with its cold fields (from `rec`) and switch record `sw` back."""
    return eqx.tree_at(lambda l: _cold(l.rec) + (l.sw,), lane, _cold(rec) + (sw,), is_leaf=lambda x: x is None)


_where_rows = where_rows


class _General(LaneProblem):
    """The general state as `samflow._engine.loop.run_lanes` steps it: a lane is a
    `Lane` without its record's `COLD` fields (`_hot`), the call's records are
    `(CellState without saved outputs, switch record or None)` per cell, the saved
    outputs `(out_Y, out_s)`. The methods of the call's family are `engines` (one
    `_Engine` each), the call's method `index` into them (`_switch`); `first`:
    every cell's lane as its first run starts (leading axis n), which a cell
    takes with a lane (`load`)."""

    engines: tuple
    index: object
    max_runs: int = eqx.field(static=True)
    t1_floor: Float[Array, ""]
    first: Lane

    def load(self, cells):
        lane = _take(self.first, jnp.minimum(cells, self.first.cell.shape[0] - 1))
        return eqx.tree_at(lambda l: l.cell, lane, cells)

    def try_steps(self, lanes):
        return _switch(self.index, [lambda l, e=e: jax.vmap(lambda x: e.try_step(x, self.t1_floor))(l)
                                    for e in self.engines], lanes)

    def run_ends(self, tried):
        return tried.event | tried.horizon | tried.out_of_steps | tried.failed

    def end_runs(self, lanes, tried, records):
        recs, sws = records
        whole = _whole(lanes, recs, sws)
        ended, t_limit, strict = _switch(self.index, [jax.vmap(e.end_run) for e in self.engines], whole, tried)
        done = ended.rec.done | (ended.rec.runs >= self.max_runs)
        return EndedRuns(_hot(ended), t_limit, strict, done, (ended.rec, ended.sw))

    def advance(self, lanes, tried):
        return jax.vmap(self.engines[0].advance)(lanes, tried)

    def save_values(self, tried, t):
        eng = self.engines[0]  # the solver's interpolant: no method changes it
        return jax.vmap(lambda tr, t: eng.interp(tr).evaluate(t))(tried, t)

    def retire(self, records, rows, lanes):
        # The finished cells' hot fields join their cold ones.
        recs, sws = records
        recs = eqx.tree_at(_hot_fields, recs, _put(_hot_fields(recs), rows, _hot_fields(lanes.rec)))
        return recs, sws


def program_family(method: "str | Method", n_samples: int, coords: str = "linear", among=None) -> tuple[Method, ...]:
    """The methods that one compiled lane program serves with `method` among them
    (`solve_lanes(..., family=...)`; docs/theory.md s.4): every method whose cells
    have the state structure of `method`'s on data of `n_samples` samples in
    `coords` ("linear" or "log"), in `Method`'s order; with `among` (methods or
    names) only those of them (and `method`): a caller that knows all its methods
    (a sweep) compiles no branch it does not run (each costs compile time, and the
    program's temporaries are those of its largest branch: linf's and lp's grow as
    d^2, docs/theory.md s.4).

    - linf on multi-sample data: `(LINF,)` alone (its state carries the r_j
      surfaces, `CellState.rmem`, and more runs).
    - log coordinates: the methods that have them (no linf).
    - otherwise every method that has the structure of `method` (on one sample
      all five; on several, all but linf).

    **Raises:** `ValueError` for an unknown method, or linf in log coordinates
    (`LOG_NOT_LINF`).
    """
    method = Method.parse(method)
    if coords == "log" and not method.spec.log_coords:
        raise ValueError(LOG_NOT_LINF)
    multi = lambda m: m.spec.slides and n_samples > 1
    keep = set(Method) if among is None else {Method.parse(m) for m in among} | {method}
    return tuple(m for m in Method if m in keep and multi(m) == multi(method) and (coords != "log" or m.spec.log_coords))


def _switch(index, branches, *operands):
    """`branches[index](*operands)`: the one branch itself when there is one (the
    program of a single method is exactly the code of that method), else
    `lax.switch` on the call's method index (not batched: a real conditional)."""
    if len(branches) == 1:
        return branches[0](*operands)
    return jax.lax.switch(index, branches, *operands)


def _family_index(method, family):
    """The call's family of methods (static) and its method's index into it
    (`solve_lanes`'s `method` and `family`)."""
    if family is None:
        family, index = (Method.parse(method),), 0
    else:
        family = tuple(Method.parse(m) for m in family)
        index = method
        if isinstance(method, (str, Method)):
            if Method.parse(method) not in family:
                raise ValueError(f"method {Method.parse(method).value!r} is not in the program's family "
                                 f"{tuple(m.value for m in family)}: take it from samflow._engine.lanes.program_family")
            index = family.index(Method.parse(method))
    return family, index


def _initial_states(engines, index, W0, rho, sign, w_scale, finite, data, ts, multi, switches):
    """Every cell's record at time 0 and the state its first run starts from
    (tnext, f0, pid, v) and its leader: leading axis n."""
    # Every cell's state at time 0 (stop conditions that hold there decided).
    def init_cell(eng, W, r, sgn, ws, fin):
        field = eng.field(sgn)
        events = eng.events(field, ws)
        c = _initial_state(field, events, W, r, data, ts, fin, multi)
        lead = _leader(field, c, r, data, multi).astype(jnp.int32) if switches else jnp.zeros((), jnp.int32)
        dt = eng.first_dt(c, r, sgn, ws)
        tnext, f0, pid, v = eng.start_run(c, r, sgn, ws, dt, lead)
        return c, tnext, f0, pid, v, lead

    with no_runtime_checks():
        c0, tnext0, f00, pid0, v0, lead0 = _switch(  # sign None (linear) maps as no leaves
            index, [lambda *a, e=e: jax.vmap(lambda *c: init_cell(e, *c))(*a) for e in engines],
            W0, rho, sign, w_scale, finite,
        )
    return c0, tnext0, f00, pid0, v0, lead0


def _reductions(engines, family, index, settings, c0, sw0, W0, rho, sign, w_scale, lead0, t1_floor):
    """The cells an exact reduction finishes (`samflow._engine.reduced`): their
    records (with saved outputs) and switch records in place of `c0`'s and
    `sw0`'s; the others stay as they are, queued for the general loop."""
    L, d = W0.shape[1:]
    data, multi = engines[0].data, engines[0].multi
    if Method.L2 in family and reducible(Method.L2, L, data.X.shape[0], settings, d):
        # Depth-2 l2-SAM on one sample from equal layers: two scalars per cell
        # (`samflow._engine.reduced`, docs/theory.md s.3.5); what it cannot finish stays queued here.
        # In a program of several methods it runs only when the call's method is l2.
        l2 = family.index(Method.L2)
        reduce = lambda: solve_reduced(engines[l2], c0, W0, rho, sign, w_scale, lead0, t1_floor)
        if len(family) == 1:
            red, red_ok, red_sw = reduce()
        else:
            def skip():  # no cell reduced: the records stay c0's (without tracing the reduction again for its shapes)
                return c0, jnp.zeros(W0.shape[:1], bool), sw0
            red, red_ok, red_sw = jax.lax.cond(jnp.asarray(index) == l2, reduce, skip)
        c0 = _where_rows(red_ok, red, c0)
        sw0 = None if sw0 is None else _where_rows(red_ok, red_sw, sw0)
    two_scalars = Method.L2 in family and reducible(Method.L2, L, data.X.shape[0], settings, d)
    equal = [equal_layers_reducible(m, L, multi, settings) and not (m is Method.L2 and two_scalars) for m in family]
    if any(equal):
        # Layers that start equal stay equal: one row per cell (`samflow._engine.reduced`,
        # docs/theory.md s.3.5) for the methods with a continuous field; what the
        # reduction cannot finish stays queued here. A branch per member of the family.
        def equal_of(e):
            return lambda: solve_equal_layers(e, c0, W0, rho, sign, w_scale, lead0, t1_floor)

        def skip():  # no cell reduced: the records stay c0's (without tracing the reduction again for its shapes)
            return c0, jnp.zeros(W0.shape[:1], bool), sw0

        red, red_ok, red_sw = _switch(index, [equal_of(e) if ok else skip for e, ok in zip(engines, equal)])
        c0 = _where_rows(red_ok, red, c0)
        sw0 = None if sw0 is None else _where_rows(red_ok, red_sw, sw0)
    return c0, sw0


def _finish_cells(engines, index, c_all, sign, ts, data):
    """The `Trajectory` of every cell from its final record (with saved outputs)."""
    n = c_all.t0.shape[0]

    def finish(eng, c, sgn):
        return _finish(eng.field(sgn), c, ts, data)

    # The outputs in blocks of FINISH_BLOCK cells of one shape: XLA reduced an array
    # of (64 cells x 24 saves) margins in another order than one of 8 or fewer (its
    # YNNPACK reductions, off with `samflow._util.x64.EXACT_REDUCE_FLAG`), so a vmap over
    # all n cells gave a cell other last bits in a call of another size.
    pad = (-n) % FINISH_BLOCK
    blocks = jax.tree.map(
        lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]).reshape((-1, FINISH_BLOCK) + x.shape[1:]),
        (c_all, sign),
    )
    traj = _switch(  # sign None (linear) maps as no leaves
        index, [lambda b, e=e: jax.lax.map(lambda cs: jax.vmap(lambda *c: finish(e, *c))(*cs), b) for e in engines],
        blocks,
    )
    traj = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:n], traj)
    return traj


def _family_state(family, method, data, settings, clock, p):
    """Whether the family's cells carry the r_j surfaces (multi-sample linf), and
    lp's p (NaN for an lp branch that a program of several methods traces but a
    call of another method does not take). Raises as `solve_lanes` says."""
    multis = {m.spec.slides and data.X.shape[0] > 1 for m in family}
    if settings.coords == "log" and not all(m.spec.log_coords for m in family):
        raise ValueError(LOG_NOT_LINF)
    if len(multis) != 1:
        raise ValueError(
            f"family {tuple(m.value for m in family)}: linf on multi-sample data has a program of its own "
            "(its state carries the r_j surfaces); take the family from samflow._engine.lanes.program_family"
        )
    multi = multis.pop()
    if p is None and len(family) > 1 and not (isinstance(method, (str, Method)) and Method.parse(method) is Method.LP):
        p = jnp.nan  # lp's branch, traced but not taken, needs a number (a traced index to lp gives NaN)
    if multi and clock is Clock.TAU:
        raise ValueError(TAU_ONE_SAMPLE)
    return multi, p


def _switch_output(sw_all, records, clock, lead0, finite):
    """`solve_lanes`'s raw switch record from the loop's (`sw_all`) and the cells'
    final records."""
    r_time, r_s, r_from, r_to, count, r_err, r_rate = sw_all
    if clock is Clock.TAU:
        # Past the tracked range (t > e^69) real time is +inf, as in `Trajectory.t`.
        untracked = records.t_untracked[:, None]
        t_real = jnp.where(jnp.isnan(r_time), jnp.nan, jnp.where(r_time < untracked, jnp.expm1(r_s), jnp.inf))
    else:
        t_real = r_time
    return (r_time, t_real, r_from, r_to, count, lead0 + 1, finite & records.done, r_err, r_rate)


def solve_lanes(
    W0: Float[Array, "n L d"],
    rho: Float[Array, " n"],
    data: Dataset,
    ts: Float[Array, " n_save"],
    *,
    method: "Method | Int[Array, ''] | int",
    clock: Clock,
    settings: SolverSettings,
    p: "Float[Array, ''] | None" = None,
    width: int = DEFAULT_LANES,
    slots: "int | None" = None,
    switches: int = 0,
    family: "tuple[Method, ...] | None" = None,
    tol: "Float[Array, ' 3'] | None" = None,
) -> tuple[Trajectory, Int[Array, ""], "tuple | None"]:
    """Solve `n` cells in `width` lanes; traceable (call it inside `jax.jit`).

    `method`: a `Method` (a program of that method alone), or with `family` (a
    static tuple of methods, `program_family`) a `Method` of it or an int32
    index into it, traced is fine: then one program serves every member of the
    family (module docstring; a member's results are those of its program
    alone, bit for bit but for gd in log coordinates in the t clock).

    `W0` `(n, L, d)` float64 initial weights, `rho` `(n,)` float64 radii, `ts`
    `(n_save,)` save times (increasing, `ts[0] >= 0`, the last one the horizon;
    not checked here: see `samflow.solve`). `p`: lp's exponent (float64 scalar,
    traced; required for "lp", NaN results when lp is chosen by a traced index
    without it). `width`: lanes (static); `slots`: lanes whose
    runs end that are processed together (static; default width // 8,
    at least 1; module docstring, "the hot path"). `switches`: K > 0 records every switch of the leader argmax_j
    |beta_j| in the same pass, up to K per cell (static; docs/theory.md s.5):
    the lead condition is one more event of the cell, located like the others.

    **Returns:** `(trajectory, iterations, switches)`: a `Trajectory` with
    leading axis n (the same fields and meaning as `samflow.solve`), the number
    of iterations of the general loop (lane efficiency = sum of `num_steps` /
    (iterations x width) where no reduction runs: a reduction's cells are
    stepped in a loop of its own, whose iterations are not counted), and with `switches` > 0 the raw record `(time, t, from_, to,
    count, first, ok, time_err, rate)` (`(n, K)` float64 clock times and real times, 1-based
    int32 leaders, `(n,)` counts, first leaders and done flags, `(n, K)` bounds of
    the times' errors in the clock's units and the rates d(log|beta_to| -
    log|beta_from|)/dclock at the switches, docs/theory.md s.5; the check of
    `samflow.switches` is not applied here), else None.

    `tol`: `(3,)` float64 `[rtol, atol, max_steps]`, traced: the controller's
    tolerances and a run's step budget instead of `settings.rtol`, `settings.atol`
    and `settings.max_steps` (then one program serves every tolerance and budget:
    give `settings.program_key()` and `settings.tolerances()`).

    **Raises:** `ValueError` for log coordinates with linf-SAM or the tau clock on
    multi-sample linf data (as `samflow.solve_cell`), a `family` whose members
    do not share one state structure (`program_family`), a `Method` not in
    `family`, or a `tol` not of shape `(3,)` (an index past its end would read
    another entry: JAX clamps it).
    """
    if tol is not None and jnp.shape(tol) != (3,):
        raise ValueError(f"solve_lanes: tol must be settings.tolerances(), [rtol, atol, max_steps] of shape (3,); "
                         f"got shape {jnp.shape(tol)}")
    clock = Clock.parse(clock)
    n, L, d = W0.shape
    family, index = _family_index(method, family)
    multi, p = _family_state(family, method, data, settings, clock, p)
    width = int(max(1, min(width, n)))
    slots = int(slots or max(1, width // 8))
    max_runs = settings.max_runs or (2 * L * d + 2 + (4 * d if multi else 0))
    if switches:
        max_runs += switches + 1  # a run ends at each switch too
    dtype = jnp.result_type(W0.dtype, jnp.float64)
    W0 = W0.astype(dtype)
    rho = jnp.asarray(rho, dtype)
    ts = jnp.asarray(ts, dtype)
    data_finite = jnp.all(jnp.isfinite(data.X))
    data = Dataset(X=jnp.where(data_finite, data.X, 0.0), y=data.y)
    finite = jnp.all(jnp.isfinite(W0), axis=(1, 2)) & jnp.isfinite(rho) & data_finite
    W0 = jnp.where(finite[:, None, None], W0, 0.0)
    rho = jnp.where(finite, rho, 0.0)
    sign = jnp.where(W0 < 0, -1.0, 1.0).astype(dtype) if settings.coords == "log" else None
    w_scale = jnp.max(jnp.abs(W0), axis=(1, 2))
    engines = [_Engine(m, clock, settings, multi, settings.coords == "log", L, max_runs, int(switches), data, ts,
                       _field_p(m, p, dtype), _r_scale(data) if multi else None,
                       None if tol is None else jnp.asarray(tol, dtype)) for m in family]
    t_final = ts[-1]
    # diffrax rounds a step ending within 100 ULP of t1 to t1 (a rolled loop: 100
    # unrolled `prevbefore`s were one 1,700-line fusion of the program).
    t1_floor = jax.lax.fori_loop(0, 100, lambda _, x: eqxi.prevbefore(x), t_final)

    c0, tnext0, f00, pid0, v0, lead0 = _initial_states(engines, index, W0, rho, sign, w_scale, finite, data, ts,
                                                       multi, switches)
    out_Y, out_s = c0.out_Y, c0.out_s
    K = int(switches)
    sw0 = (
        (jnp.full((n, K), jnp.nan, dtype), jnp.full((n, K), jnp.nan, dtype), jnp.full((n, K), -1, jnp.int32),
         jnp.full((n, K), -1, jnp.int32), jnp.zeros((n,), jnp.int32), jnp.full((n, K), jnp.nan, dtype),
         jnp.full((n, K), jnp.nan, dtype)) if K else None
    )
    c0, sw0 = _reductions(engines, family, index, settings, c0, sw0, W0, rho, sign, w_scale, lead0, t1_floor)
    out_Y, out_s = c0.out_Y, c0.out_s
    records = eqx.tree_at(lambda c: (c.out_Y, c.out_s), c0, (None, None), is_leaf=lambda x: x is None)
    # The queue: the cells not already done at time 0, in their order.
    queue = jnp.argsort(c0.done, stable=True).astype(jnp.int32)
    n_queue = jnp.sum(~c0.done).astype(jnp.int32)
    first = Lane(
        cell=jnp.arange(n, dtype=jnp.int32), rec=eqx.tree_at(_cold, records, (None,) * len(COLD)), rho=rho,
        sign=sign, w_scale=w_scale, tnext=tnext0, f0=f00, pid=pid0, v=v0, run_steps=jnp.zeros((n,), jnp.int32),
        save_idx=jnp.zeros((n,), jnp.int32), lead=lead0, sw=None,
    )
    problem = _General(engines=tuple(engines), index=index, max_runs=max_runs, t1_floor=t1_floor, first=first)
    with no_runtime_checks():
        final = run_lanes(problem, (records, sw0), (out_Y, out_s), ts, queue, n_queue, n=n, width=width, slots=slots)
    (records, sw_all), (out_Y, out_s), iters = final.records, final.outs, final.iters
    c_all = eqx.tree_at(lambda c: (c.out_Y, c.out_s), records, (out_Y, out_s), is_leaf=lambda x: x is None)

    traj = _finish_cells(engines, index, c_all, sign, ts, data)
    if not K:
        return traj, iters, None
    return traj, iters, _switch_output(sw_all, records, clock, lead0, finite)
