"""The exact reductions of the state: two scalars per cell (depth-2 l2-SAM on one sample), one row (equal layers).

From equal layers w^(1) = w^(2) = w the layers stay equal, and with
x_j = log|w_j| the rescaled flow is dx_j/dtau = mu_j - kappa mu_j^2 / N with
kappa = rho / sqrt 2 and N = ||mu * w||_2 (docs/theory.md s.3.1). So

    x_j(tau) = log|alpha_j| + mu_j tau - kappa mu_j^2 S(tau),   dS/dtau = 1 / N,

and the whole trajectory, at any d, is given by tau and S (docs/theory.md
s.3.5). The solver integrates y = (u, v), u = m tau and v = m^2 kappa S with
m = max_j |mu_j|, so that x_j = log|alpha_j| + nu_j u - nu_j^2 v with
|nu_j| = |mu_j| / m <= 1: an error of size e in u or v is an error of at most
e in every x_j, i.e. a relative error e of W (the tolerance, relative and
absolute, is `RTOL_FACTOR` x `rtol`).

- clock t: y = (u, v), du/dt = m s(z_hat), dv/dt = m^2 kappa s(z_hat) / N;
- clock tau: y = (v, s) with s = log(1 + t) as in `samflow._engine.field`,
  dv/dtau = m^2 kappa / N, ds/dtau = exp(log(1 / s(z_hat)) - s), and u = m tau;

with z_hat = sum_j mu_j w_hat_j^2, w_hat_j = w_j (1 - kappa mu_j / N) (both
layers perturbed alike). The field costs O(d) per evaluation (N and z_hat), but
the Runge-Kutta arithmetic, the error norm and the stiffness are those of two
scalars: the decay of the major coordinates before a collapse, at rates spread
by (mu_d / mu_1)^2 in W, is the single term -nu_j^2 v here.

The reduced cells are stepped in `LANES` lanes by the lane engine's one loop
(`samflow._engine.loop.run_lanes`; `_ReducedLoop` is the reduced state's instance
of its `LaneProblem`): each lane steps its own cell with its own adaptive step
(diffrax's solver stages, PID controller and dense interpolant) and takes the
next cell of the queue when its cell ends. The
events are the general engine's own (`samflow._engine.events.EventSet`), evaluated on
the weights the reduced state stands for, so that they keep their meaning: a
collapse is recorded exactly as the general engine records it (capture,
linear extrapolation, direction; `samflow._engine.record`), and a switch of the
leader (a call with switches K > 0) as the lane engine records it. Anything
else that ends a reduced run (another event, `max_steps`, a failed step or
root) hands the cell back to the general engine, which then solves it from
the start: a reduced run never returns a number it cannot stand for.

**Equal layers as one row** (`_EqualLayers`, `solve_equal_layers`; docs/theory.md
s.3.5): a gd, l2, usam or lp cell whose L layers start equal (bit for bit, no
weight held at 0) keeps them equal, so its state is one row w `(d,)` (or
x = log|w|) and s, with `samflow.flows.velocity(..., layers=L)` for the field and
the general engine's own controller, events and record; a linf cell (whose
weights reach 0 and slide one by one) is never reduced. Both reductions run in
the same loop (`_ReducedLoop`), in a `run_lanes` call of their own ahead of the
general one (`samflow._engine.lanes._reductions`).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from ..flows import Clock, Method
from ..status import Status
from .cell_state import CellState
from .field import SamField, RunArgs
from .events import (_LOG_ZERO, BracketBisection, _gap_rate, _lead_value, _leader, _log_abs_beta, _no_event_value,
                      _switch_time_err)
from .loop import EndedRuns, LaneProblem, run_lanes
from .rk import _Dense, _erk_step, _take
from .singular import _beta_direction, extrapolate_collapse

__all__ = ["LANES", "reducible", "cell_reducible", "solve_reduced", "equal_layers_reducible", "cell_equal_layers",
           "solve_equal_layers"]

#: Lanes of the reduced solve (each steps one cell and takes the next of the queue when it ends).
LANES = 32
#: The reduced solve's tolerance (relative and absolute, on u and v) is this times
#: `rtol`. x_j = log|alpha_j| + nu_j u - nu_j^2 v is a difference of the two, which
#: grow larger than x_j itself, so that at the same tolerance beta was ~10x less
#: accurate than the general engine's (max 9.5e-6 relative at rtol 1e-8 on the
#: README cells, against 5.1e-7); at rtol / 10 it is at most the general engine's
#: (docs/benchmarks.md, "Exact reductions").
RTOL_FACTOR = 0.1


#: "auto" takes the two-scalar reduction from this dimension on. Below it the general
#: state is as fast (d = 5, the paper's chart: 116 ms against 92-133 ms per 64 warm
#: cells), so the reduction's loop would only double the program to compile (about
#: 4 s more on 2 cores); at d = 10 it is 16-25x faster per cell (68 ms against
#: 1.1-1.7 s per 64 cells, mu_j = j / d; docs/benchmarks.md, "Exact reductions").
AUTO_MIN_D = 8


def reducible(method: Method, L: int, n_samples: int, settings, d: int) -> bool:
    """Whether a call may use the two-scalar reduction (static): l2-SAM, depth 2, one
    sample, and `settings.reduce` "all", or "auto" with d >= `AUTO_MIN_D` (where it
    pays for its compilation). Which of its cells are reduced is `cell_reducible`
    (their inits)."""
    if method is not Method.L2 or L != 2 or n_samples != 1:
        return False
    return settings.reduce == "all" or (settings.reduce == "auto" and d >= AUTO_MIN_D)


def cell_reducible(W0, data):
    """`()` bool: the cell's init `W0` `(2, d)` has equal layers and no weight at
    0, and the sample y x has no coordinate at 0 (a coordinate with mu_j = 0 keeps
    its weight while the others may reach 0: a critical point, not a collapse)."""
    mu = data.y[0] * data.X[0]
    return jnp.all(W0[0] == W0[1]) & jnp.all(W0 != 0) & jnp.all(mu != 0) & jnp.all(jnp.isfinite(W0))


class _Reduced(eqx.Module):
    """The reduced field of one cell, in diffrax's form field(t, y, args) (module
    docstring): `alpha` `(d,)` the init of a layer (signed), `loga` `(d,)`
    log|alpha_j|, `mu` `(d,)` y x, `kappa` `()` rho / sqrt 2; `clock` and `loss`
    static."""

    clock: Clock = eqx.field(static=True)
    loss: object = eqx.field(static=True)
    alpha: jax.Array
    loga: jax.Array
    mu: jax.Array
    kappa: jax.Array

    @property
    def m(self):
        return jnp.max(jnp.abs(self.mu))

    def dx(self, t, y):
        """`(d,)` log|w_j| - log|alpha_j| at clock time t in state y (0 at t = 0)."""
        nu = self.mu / self.m
        u, v = (y[0], y[1]) if self.clock is Clock.T else (self.m * t, y[0])
        return nu * u - nu**2 * v

    def x(self, t, y):
        """`(d,)` log|w_j| at clock time t in state y."""
        return self.loga + self.dx(t, y)

    def w(self, t, y):
        """`(d,)` w_j (signed) at clock time t in state y: alpha_j exp(dx_j), so the
        init itself at t = 0 and wherever nothing has moved (exp(log alpha) would
        lose |log alpha| ULPs: 1.2e-14 relative at alpha = 1e150)."""
        return self.alpha * jnp.exp(self.dx(t, y))

    def s(self, y):
        """s = log(1 + t) (tau clock), else 0."""
        return y[1] if self.clock is Clock.TAU else jnp.zeros_like(y[0])

    def __call__(self, t, y, args):
        x = self.x(t, y)
        log_n = 0.5 * jax.nn.logsumexp(2.0 * (jnp.log(jnp.abs(self.mu)) + x))
        inv_n = jnp.exp(-log_n)
        w_hat = jnp.exp(x) * (1.0 - self.kappa * self.mu * inv_n)
        log_rate = self.loss.log_inv_slope(jnp.sum(self.mu * w_hat**2))  # log(dt/dtau)
        m = self.m
        if self.clock is Clock.T:
            slope = jnp.exp(-log_rate)
            return jnp.stack([m * slope, m * m * self.kappa * slope * inv_n])
        return jnp.stack([m * m * self.kappa * inv_n, jnp.exp(jnp.minimum(log_rate - y[1], 700.0))])


class _TwoScalars:
    """The two-scalar reduction as `_run_reduction` runs it (static): which cells, each
    cell's reduced field (`_Reduced`), its state at time 0, the general engine's
    (Y, s) it stands for, and its step-size controller."""

    dim = 2

    def eligible(self, eng, W0, c0):
        return jax.vmap(lambda W: cell_reducible(W, eng.data))(W0)

    def fields(self, eng, W0, rho):
        mu = eng.data.y[0] * eng.data.X[0]
        loss = eng.field(None).loss
        return jax.vmap(lambda W, r: _Reduced(eng.clock, loss, W[0], jnp.log(jnp.abs(W[0])), mu, r / np.sqrt(2.0)))(
            W0, rho)

    def y0(self, eng, W0, c0):
        return jnp.zeros((W0.shape[0], 2), W0.dtype)

    def engine_state(self, eng, cell, t, y):
        i_red = cell[0]
        if eng.log_coords:
            x = i_red.x(t, y)
            Y = jnp.stack([x, x])
        else:
            w = i_red.w(t, y)
            Y = jnp.stack([w, w])
        return Y, i_red.s(y)

    def controller(self, eng, cell):
        tol = RTOL_FACTOR * eng.rtol
        return diffrax.PIDController(rtol=tol, atol=tol)

    def vector_field(self, eng, cell):
        return cell[0]


class _EqualField(eqx.Module):
    """The field of one cell whose L layers are equal, on y = (w (d,), s) flattened
    to `(d + 1,)`: `field` is the cell's `SamField` with `layers` = L (the one row
    of `samflow.flows.velocity(..., layers=L)`), `rho` its radius; the run's
    memory, held weights and clock flag come from the cell's record (`args`)."""

    field: SamField
    rho: jax.Array

    def __call__(self, t, y, data, memory, frozen, track):
        d = y.shape[0] - 1
        args = RunArgs(self.rho, data, memory[:1], frozen[:1], track)
        dY, ds = self.field(t, (y[None, :d], y[d]), args)
        return jnp.concatenate([dY[0], ds[None]])


class _EqualLayers:
    """The equal-layer reduction as `_run_reduction` runs it (module docstring): a cell
    whose layers start equal keeps them equal, and its state is one row w `(d,)`
    (or x = log|w|) and s, in place of `(L, d)` and s."""

    def __init__(self, d):
        self.dim = d + 1

    def eligible(self, eng, W0, c0):
        return jax.vmap(cell_equal_layers)(W0, c0.memory, c0.frozen)

    def fields(self, eng, W0, rho):
        loss = eng.field(None).loss
        sign = jnp.where(W0[:, :1] < 0, -1.0, 1.0).astype(W0.dtype) if eng.log_coords else None
        return jax.vmap(lambda sg, r: _EqualField(SamField(eng.method, eng.clock, loss, sg, eng.p, layers=eng.L), r))(
            sign, rho)

    def y0(self, eng, W0, c0):
        return jnp.concatenate([c0.Y[:, 0, :], c0.s[:, None]], axis=1)

    def engine_state(self, eng, cell, t, y):
        d = y.shape[0] - 1
        return jnp.broadcast_to(y[None, :d], (eng.L, d)), y[d]

    def controller(self, eng, cell):
        # The general engine's (atol relative to the init scale, rtol alone in log coordinates).
        return eng.controller(eng.field(cell[2]), cell[3])

    def vector_field(self, eng, cell):
        return lambda t, y, args: cell[0](t, y, eng.data, *cell[5])


def cell_equal_layers(W0, memory, frozen):
    """`()` bool: a cell whose record at time 0 (init `W0` `(L, d)`, sign memory,
    held weights) has equal layers (equal rows, bit for bit), finite weights and no
    weight held at 0: its state is one row (`_EqualLayers`)."""
    return (jnp.all(W0 == W0[:1]) & jnp.all(jnp.isfinite(W0)) & jnp.all(memory == memory[:1])
            & ~jnp.any(frozen))


def equal_layers_reducible(method: Method, L: int, multi: bool, settings) -> bool:
    """Whether a call may use the equal-layer reduction (static): `settings.reduce`
    "all" (its program takes 1.5-1.7x as long to compile: `SolverSettings.reduce`), depth >= 2, and a method whose field is continuous (gd, l2, usam, lp:
    not linf, whose weights reach 0 and slide there one by one, which hands a
    reduced run back at its first event)."""
    return settings.reduce == "all" and L >= 2 and not multi and not method.spec.slides


def solve_equal_layers(eng, c0: CellState, W0, rho, sign, w_scale, lead0, t1_floor):
    """`solve_reduced` for the equal-layer reduction (`_EqualLayers`): the cells of
    a lane call whose layers start equal, each in the state `(d + 1,)` (one row
    of the weights, or of x = log|W|, and s) with `samflow.flows.velocity(...,
    layers=L)`; arguments and returns as `solve_reduced`'s."""
    return _run_reduction(_EqualLayers(W0.shape[2]), eng, c0, W0, rho, sign, w_scale, lead0, t1_floor)


def solve_reduced(eng, c0: CellState, W0, rho, sign, w_scale, lead0, t1_floor):
    """Solve the reducible cells of a lane call (`samflow._engine.lanes.solve_lanes`).

    `eng`: the call's `_Engine` (its field, events, settings, data, save times,
    switch count K = `eng.switches`); `c0`: every cell's record at time 0
    (leading axis n); `W0` `(n, 2, d)`, `rho` `(n,)`, `sign` `(n, 2, d)` or None
    (linear coordinates), `w_scale` `(n,)`; `lead0` `(n,)` int32 the leader at
    time 0 (0-based; read only with K > 0); `t1_floor`: the horizon less 100 ULP
    (diffrax's rounding of a step's end).

    With K > 0 the switches of the leader are recorded as the lane engine records
    them: the lead condition (`samflow._engine.events._with_lead`) is one more event,
    located on the step's interpolant, the new leader chosen by `_leader`; the
    step is taken whole when no condition falls through 0 later in it, else the
    run restarts at the switch.

    **Returns:** `(records, ok, sw)`: `records` the cells' `CellState`s at their
    end, with their saved outputs, in the coordinates of the call (W, or log|W|
    with `sign`), to be finished by `samflow._engine.record._finish` as the general
    engine's; `ok` `(n,)` bool, the cells whose record it is (reducible, not
    done at time 0, ended at the horizon or in a collapse); `sw` the switch
    record (time, s, from, to: `(n, K)`, count: `(n,)`, the bounds of the times'
    errors and the gaps' rates: `(n, K)`; 1-based leaders) or None.
    The cells not `ok` keep `c0` and go to the general engine.
    """
    return _run_reduction(_TwoScalars(), eng, c0, W0, rho, sign, w_scale, lead0, t1_floor)


def _blocked(fn, args, size):
    """`jax.vmap(fn)(*args)` in blocks of `size` cells (the last padded): a cell's
    bits then do not depend on how many cells the call has (XLA reduces a wide
    batch of d-vectors in another order than a narrow one, see `samflow._engine.lanes`)."""
    n = jax.tree.leaves(args)[0].shape[0]
    pad = (-n) % size
    blocks = jax.tree.map(
        lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]).reshape((-1, size) + x.shape[1:]), args)
    out = jax.lax.map(lambda b: jax.vmap(fn)(*b), blocks)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:n], out)


class _At(eqx.Module):
    """A cell at a point, as `samflow._engine.events._leader` reads a `CellState`: Y, s and
    the run's arguments (the sign memory, no weight held, whether t is followed)."""

    Y: jax.Array
    s: jax.Array
    memory: jax.Array
    frozen: jax.Array
    track: jax.Array

    def run_args(self, rho, data, multi):
        return RunArgs(rho, data, self.memory, self.frozen, self.track)


class _RLane(eqx.Module):
    """The carry of one reduced lane (a leading lane axis in the loop): the cell it
    holds (`cell`, B: idle), where its run is (`t0`, reduced state `y`), the field
    there (`f0`), the end of the step to try (`tnext`), the PID state, the event
    condition at (t0, y) (`v`), its steps and runs so far, the next save time to
    write (`save_idx`), the leader (0-based) and its switch record (or None)."""

    cell: jax.Array
    t0: jax.Array
    y: jax.Array
    f0: jax.Array
    tnext: jax.Array
    pid: tuple
    v: jax.Array
    steps: jax.Array
    runs: jax.Array
    save_idx: jax.Array
    lead: jax.Array
    sw: "tuple | None"


class _RTried(eqx.Module):
    """What one step of a reduced lane gave (`_ReducedLoop.try_steps`): from `t0`
    to `t1`, the state `y1`, the interpolant's `dense` data, the field `f1` at the
    end, accepted (`keep`), where it ends (`t_new`), the next step's end
    (`tnext`), the PID state, the event condition `v1` at the end, and whether an
    event (a down-crossing), the horizon, the step budget or a failure ends the run."""

    t0: jax.Array
    t1: jax.Array
    y1: jax.Array
    dense: dict
    f1: jax.Array
    keep: jax.Array
    t_new: jax.Array
    tnext: jax.Array
    pid: tuple
    v1: jax.Array
    event: jax.Array
    horizon: jax.Array
    out_of_steps: jax.Array
    failed: jax.Array


class _ReducedLoop(LaneProblem):
    """A reduction `kind` (`_TwoScalars`, `_EqualLayers`) as `samflow._engine.loop.run_lanes`
    steps it. The call's records are per cell: how its reduced solve ended (`end`:
    0 handed back, 1 horizon, 2 collapse), where (`t_ev`, `y_ev`), its steps, runs
    and switch record; the saved outputs the reduced states `(B, n_save, dim)`.

    `cells`: per cell (leading axis B) the reduced field, the signs of W, the signs
    of log coordinates or None, w_scale, rho and the run's arguments (sign memory,
    held weights, t followed); `y0`, `f0`, `tnext`, `pid`, `v`, `lead0`: the
    states the cells' first runs start from."""

    kind: object = eqx.field(static=True)
    eng: object
    cells: tuple
    y0: jax.Array
    f0: jax.Array
    tnext: jax.Array
    pid: tuple
    v: jax.Array
    lead0: jax.Array
    t1_floor: jax.Array

    @property
    def t_final(self):
        return self.eng.ts[-1]

    @property
    def order(self):
        return self.eng.solver.error_order(diffrax.ODETerm(lambda t, y, a: y))

    # -- one cell ---------------------------------------------------------------------------

    def engine_state(self, cell, t, y):
        """(Y, s) of the general engine at reduced state y: W, or log|W| with signs."""
        return self.kind.engine_state(self.eng, cell, t, y)

    def events_of(self, cell, lead):
        return self.eng.events(self.eng.field(cell[2]), cell[3], lead)

    def args_of(self, cell):
        return RunArgs(cell[4], self.eng.data, *cell[5])

    def event_value(self, cell, lead, t, y):
        return _no_event_value(self.events_of(cell, lead), t, self.engine_state(cell, t, y), self.args_of(cell))

    def start(self, cell, lead, t0, y, dt):
        """(f0, tnext, pid, v) of a run from (t0, y) whose first step is dt long."""
        f0 = self.kind.vector_field(self.eng, cell)(t0, y, None)
        dt = jnp.where(dt > 0, dt, 1e-12 * jnp.abs(self.t_final))
        dtype = y.dtype
        pid = (jnp.ones((), dtype), jnp.ones((), dtype), jnp.asarray(False))
        return f0, jnp.minimum(t0 + dt, self.t_final), pid, self.event_value(cell, lead, t0, y)

    def first_dt(self, cell, y):
        term = diffrax.ODETerm(self.kind.vector_field(self.eng, cell))
        t1, _ = self.kind.controller(self.eng, cell).init(term, 0.0, self.t_final, y, None, None,
                                                          self.eng.solver.func, self.order)
        return t1

    def try_step(self, lane: _RLane) -> _RTried:
        cell = _take(self.cells, jnp.minimum(lane.cell, self.y0.shape[0] - 1))
        t0, t_final = lane.t0, self.t_final
        y1, y_err, dense, f1 = _erk_step(type(self.eng.solver).tableau, self.kind.vector_field(self.eng, cell), t0,
                                         lane.tnext, lane.y, None, lane.f0)
        y_err = jnp.where(jnp.isnan(y_err), jnp.inf, y_err)
        keep, t_new, tn, _, pid, cres = self.kind.controller(self.eng, cell).adapt_step_size(
            t0, lane.tnext, lane.y, y1, None, y_err, self.order, lane.pid)
        t_new = jnp.minimum(t_new, t_final)
        tn = jnp.where(tn > self.t1_floor, jnp.where(keep, t_final, t_new + 0.5 * (t_final - t_new)), tn)
        v1 = self.event_value(cell, lane.lead, t_new, y1)
        failed = (cres != diffrax.RESULTS.successful) | ~jnp.all(jnp.isfinite(y1)) & keep
        event = keep & ~failed & (lane.v > 0) & (v1 <= 0)
        horizon = keep & ~failed & ~event & (t_new >= t_final)
        out_of_steps = (lane.steps + 1 >= self.eng.max_steps) & ~event & ~horizon
        return _RTried(t0=t0, t1=lane.tnext, y1=y1, dense=dense, f1=f1, keep=keep, t_new=t_new, tnext=tn,
                       pid=jax.tree.map(jnp.asarray, pid), v1=v1, event=event, horizon=horizon,
                       out_of_steps=out_of_steps, failed=failed)

    def interp(self, tried: _RTried):
        return _Dense(self.eng.solver.interpolation_cls, tried.t0, tried.t_new, tried.dense)

    def locate(self, cell, lead, tried: _RTried):
        """The event of a step, on its interpolant: (t_ev, y_ev, root found)."""
        interp = self.interp(tried)
        root = optx.root_find(
            lambda t, _: self.event_value(cell, lead, t, interp.evaluate(t)),
            BracketBisection(rtol=1e-13, atol=1e-13, flip=True), tried.t_new,
            options=dict(lower=tried.t0, upper=tried.t_new), throw=False,
        )
        t_ev = root.value
        return t_ev, interp.evaluate(t_ev), root.result == optx.RESULTS.successful

    def at_event(self, cell, lead, t_ev, y_ev, t_new, y1, steps):
        """At a located event: (collapse, switch, new leader, the lead condition at the
        step's end with the new leader, the bound of the switch time's error, the gap's
        rate): the fired condition as in `samflow._engine.lanes`."""
        eng = self.eng
        dtype = y1.dtype
        events = self.events_of(cell, lead)
        nan = jnp.full((), jnp.nan, dtype)
        if not events.names:  # no condition (gd in the t clock): no event is ever located
            return jnp.asarray(False), jnp.asarray(False), lead, jnp.ones((), dtype), nan, nan
        Y, s = self.engine_state(cell, t_ev, y_ev)
        values = events.values(t_ev, (Y, s), self.args_of(cell))
        which = jnp.argmin(values)
        collapse = (which == events.names.index("collapse")) if "collapse" in events.names else jnp.asarray(False)
        if not eng.switches:
            return collapse, jnp.asarray(False), lead, jnp.ones((), dtype), nan, nan
        field = eng.field(cell[2])
        lb = _log_abs_beta(field, Y)
        live = jnp.all(jnp.isfinite(lb)) & (jnp.max(lb) > eng.L * _LOG_ZERO)
        switch = (which == len(events.names) - 1) & live & (jnp.abs(_lead_value(field, Y, lead)) <= 1e-7)
        here = _At(Y, s, *cell[5])
        to = _leader(field, here, cell[4], eng.data, False, exclude=lead).astype(jnp.int32)
        new = jnp.where(switch, to, lead)
        # The bound of the time's error (docs/theory.md s.5), on the reduced state and its tolerances.
        ctrl = self.kind.controller(eng, cell)
        gap = lambda y: (lambda lb: lb[to] - lb[lead])(_log_abs_beta(field, self.engine_state(cell, t_ev, y)[0]))
        gap_rate = lambda y: _gap_rate(field, *self.engine_state(cell, t_ev, y), self.args_of(cell), lead, to)
        err, rate = _switch_time_err(gap, gap_rate, y_ev, ctrl.rtol, ctrl.atol, steps, t_ev)
        return collapse & ~switch, switch, new, self.event_value(cell, new, t_new, y1), err, rate

    def end_run(self, lane: _RLane, tried: _RTried, row):
        """A lane whose run ended in this step: its event located and read
        (`at_event`); a switch of the leader is recorded, and the run goes on with
        the step taken whole (the field does not change) unless a condition falls
        through 0 later in it (then it restarts at the switch); a collapse or the
        horizon finish the cell, anything else hands it back (end 0)."""
        K = self.eng.switches
        cell = _take(self.cells, jnp.minimum(lane.cell, self.y0.shape[0] - 1))
        lead = lane.lead
        t_ev, y_ev, root_ok = self.locate(cell, lead, tried)
        collapse, switch, new_lead, v_to, sw_err, sw_rate = self.at_event(
            cell, lead, t_ev, y_ev, tried.t_new, tried.y1, lane.steps)
        event = tried.event & root_ok
        collapse, switch = event & collapse, event & switch
        whole = switch & (v_to > 0)
        restart = switch & ~whole
        cut = event & ~whole  # the step ends at the event: saves strictly before it
        keep, failed = tried.keep, tried.failed
        horizon = keep & ~failed & (~event | whole) & (tried.t_new >= self.t_final)
        other = tried.event & ~root_ok  # a root that failed
        out_of_steps = (lane.steps + 1 >= self.eng.max_steps) & ~event & ~horizon
        stop = (event & ~switch) | horizon | out_of_steps | failed | other
        t_limit = jnp.where(cut, t_ev, jnp.where(keep & ~failed, tried.t_new, tried.t0))
        adv = keep & ~stop & ~restart
        sel = lambda a, b, m: jax.tree.map(lambda x, y: jnp.where(m, x, y), a, b)
        new = eqx.tree_at(
            lambda l: (l.t0, l.y, l.f0, l.tnext, l.pid, l.v, l.steps, l.runs, l.lead), lane,
            (jnp.where(adv, tried.t_new, lane.t0), sel(tried.y1, lane.y, adv), sel(tried.f1, lane.f0, adv),
             tried.tnext, tried.pid, jnp.where(adv, jnp.where(whole, v_to, tried.v1), lane.v), lane.steps + 1,
             lane.runs + restart.astype(jnp.int32), jnp.where(switch, new_lead, lead)),
        )
        if K:
            r_time, r_s, r_from, r_to, count, r_err, r_rate = lane.sw
            slot = jnp.minimum(count, K - 1)
            s_ev = self.engine_state(cell, t_ev, y_ev)[1]
            put = lambda arr, v: jnp.where(switch & (count < K), arr.at[slot].set(v), arr)
            sw = (put(r_time, t_ev), put(r_s, s_ev), put(r_from, lead + 1), put(r_to, new_lead + 1),
                  count + switch.astype(jnp.int32), put(r_err, sw_err), put(r_rate, sw_rate))
            f0_r, tn_r, pid_r, v_r = self.start(cell, new_lead, t_ev, y_ev, jnp.maximum(tried.t1 - tried.t0, 0.0))
            new = eqx.tree_at(
                lambda l: (l.t0, l.y, l.f0, l.tnext, l.pid, l.v, l.sw), new,
                (jnp.where(restart, t_ev, new.t0), sel(y_ev, new.y, restart), sel(f0_r, new.f0, restart),
                 jnp.where(restart, tn_r, new.tnext), sel(pid_r, new.pid, restart), jnp.where(restart, v_r, new.v),
                 sw),
            )
        end = jnp.where(horizon, 1, jnp.where(collapse, 2, 0))
        ended = dict(end=end, t_ev=jnp.where(horizon, tried.t_new, t_ev), y_ev=sel(tried.y1, y_ev, horizon),
                     steps=new.steps, runs=new.runs, sw=new.sw)
        return new, t_limit, cut, stop, sel(ended, row, stop)

    # -- the loop's interface ---------------------------------------------------------------

    def load(self, cells):
        B = self.y0.shape[0]
        i = jnp.minimum(cells, B - 1)
        m = cells.shape[0]
        dtype = self.y0.dtype
        return _RLane(cell=cells, t0=jnp.zeros((m,), dtype), y=self.y0[i], f0=self.f0[i], tnext=self.tnext[i],
                      pid=_take(self.pid, i), v=self.v[i], steps=jnp.zeros((m,), jnp.int32),
                      runs=jnp.ones((m,), jnp.int32), save_idx=jnp.zeros((m,), jnp.int32), lead=self.lead0[i],
                      sw=_fresh_sw(m, self.eng.switches, dtype))

    def try_steps(self, lanes):
        return jax.vmap(self.try_step)(lanes)

    def run_ends(self, tried):
        return tried.event | tried.horizon | tried.out_of_steps | tried.failed

    def end_runs(self, lanes, tried, records):
        new, t_limit, strict, done, rows = jax.vmap(self.end_run)(lanes, tried, records)
        return EndedRuns(new, t_limit, strict, done, rows)

    def advance(self, lanes, tried):
        keep = tried.keep
        sel = lambda a, b: jnp.where(keep.reshape(keep.shape + (1,) * (a.ndim - 1)), a, b)
        return eqx.tree_at(
            lambda l: (l.t0, l.y, l.f0, l.tnext, l.pid, l.v, l.steps), lanes,
            (jnp.where(keep, tried.t_new, lanes.t0), sel(tried.y1, lanes.y), sel(tried.f1, lanes.f0), tried.tnext,
             tried.pid, jnp.where(keep, tried.v1, lanes.v), lanes.steps + 1),
        )

    def save_values(self, tried, t):
        return jax.vmap(lambda tr, t: self.interp(tr).evaluate(t))(tried, t)


def _fresh_sw(m, K, dtype):
    """An empty switch record of `m` cells (K > 0), else None."""
    return ((jnp.full((m, K), jnp.nan, dtype), jnp.full((m, K), jnp.nan, dtype), jnp.full((m, K), -1, jnp.int32),
             jnp.full((m, K), -1, jnp.int32), jnp.zeros((m,), jnp.int32), jnp.full((m, K), jnp.nan, dtype),
             jnp.full((m, K), jnp.nan, dtype)) if K else None)


def _run_reduction(kind, eng, c0, W0, rho, sign, w_scale, lead0, t1_floor):
    """The n cells (leading axis B = n) of a reduction `kind` (`_TwoScalars` or
    `_EqualLayers`) in `LANES` lanes with a queue (`solve_reduced`,
    `solve_equal_layers`): their first states, one call of the lane loop
    (`samflow._engine.loop.run_lanes` with `_ReducedLoop`), and the records of the
    cells it finished in the general engine's coordinates."""
    clock, ts = eng.clock, eng.ts
    t_final = ts[-1]
    n_save = ts.shape[0]
    B = W0.shape[0]
    dtype = W0.dtype
    eligible = kind.eligible(eng, W0, c0) & ~c0.done
    if clock is Clock.TAU:
        eligible = eligible & c0.track  # a loss below ~1e-30 at the start: t is not followed
    red = kind.fields(eng, W0, rho)
    sgn = jnp.sign(W0)
    # Per cell: (reduced field, signs of W, signs of log coordinates or None, w_scale, rho,
    # the run's arguments: sign memory, held weights, t followed).
    cells_all = (red, sgn, sign, w_scale, rho, (c0.memory, c0.frozen, c0.track))
    y0 = kind.y0(eng, W0, c0)
    t0 = jnp.zeros((B,), dtype)
    lead0 = lead0.astype(jnp.int32)
    W = min(B, LANES)
    loop0 = _ReducedLoop(kind, eng, cells_all, y0, None, None, None, None, lead0, t1_floor)
    f0_all, tnext_all, pid_all, v0_all = _blocked(
        lambda c, l, t, y: loop0.start(c, l, t, y, loop0.first_dt(c, y)), (cells_all, lead0, t0, y0), W)
    problem = _ReducedLoop(kind, eng, cells_all, y0, f0_all, tnext_all, pid_all, v0_all, lead0, t1_floor)
    # The queue: the reducible cells, in their order; a lane whose cell ends takes the next.
    queue = jnp.argsort(~eligible, stable=True).astype(jnp.int32)
    n_queue = jnp.sum(eligible).astype(jnp.int32)
    records = dict(end=jnp.zeros((B,), jnp.int32), t_ev=jnp.full((B,), jnp.nan, dtype), y_ev=jnp.zeros_like(y0),
                   steps=jnp.zeros((B,), jnp.int32), runs=jnp.ones((B,), jnp.int32), sw=_fresh_sw(B, eng.switches, dtype))
    out = jnp.full((B, n_save, kind.dim), jnp.nan, dtype)
    final = run_lanes(problem, records, out, ts, queue, n_queue, n=B, width=W, slots=max(1, W // 8))
    st = dict(final.records, out=final.outs)

    def record(cell, end, t_end, y_end, out, steps, runs):
        c = cell[5]
        cell = cell[:5] + ((c.memory, c.frozen, c.track),)
        field = eng.field(cell[2])
        out_Y, out_s = jax.vmap(lambda t, y: problem.engine_state(cell, t, y))(ts, out)
        out_s = jnp.where(jnp.isnan(out[:, 0]), jnp.nan, out_s)
        Y_end, s_end = problem.engine_state(cell, t_end, y_end)
        W_end = field.to_W(Y_end)
        collapsed = end == 2
        dW_end, ds_end = field.velocity_W(Y_end, s_end, problem.args_of(cell))
        dt_rem = extrapolate_collapse(W_end, dW_end)
        return eqx.tree_at(
            lambda q: (q.runs, q.t0, q.Y, q.s, q.out_Y, q.out_s, q.status, q.event_time, q.event_s,
                       q.collapse_direction, q.W_detect, q.t_detect, q.steps, q.done),
            c,
            (runs.astype(c.runs.dtype), jnp.asarray(t_final, dtype),
             Y_end if field.log_coords else jnp.where(collapsed, 0.0, Y_end), s_end, out_Y, out_s,
             jnp.where(collapsed, int(Status.COLLAPSED), c.status).astype(c.status.dtype),
             jnp.where(collapsed, t_end + dt_rem, c.event_time),
             jnp.where(collapsed, s_end + ds_end * dt_rem, c.event_s),
             jnp.where(collapsed, _beta_direction(field, Y_end, W_end), c.collapse_direction),
             jnp.where(collapsed, W_end, c.W_detect), jnp.where(collapsed, t_end, c.t_detect),
             steps.astype(c.steps.dtype), jnp.asarray(True)),
        )

    rec = _blocked(record, ((red, sgn, sign, w_scale, rho, c0), st["end"], st["t_ev"], st["y_ev"], st["out"],
                            st["steps"], st["runs"]), W)
    return rec, eligible & (st["end"] > 0), st["sw"]
