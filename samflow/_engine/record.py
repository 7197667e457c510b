"""The cell's record at its start, at its events and at its end (the lane engine's modes).

A cell (one init, one rho) is integrated by the lane engine (`samflow._engine.lanes`):
adaptive Runge-Kutta steps in float64 with diffrax's solvers, step-size
controller and dense interpolation, and a *run* of steps ends at the first event
(located on the step's interpolant). This module holds what happens there
(`_initial_state`, `_after_event`, `_finish`); the events:

- **collapse** (l2-SAM, L >= 2): ||W||_2 falls to `capture_radius * rho`. The
  field is bounded near 0, so the remaining time to W = 0 is extrapolated
  linearly (error O(capture^2)); the cell's state is 0 from then on
  (docs/theory.md section 4). Status `COLLAPSED`.
- **sign switch** (linf-SAM): a weight reaches 0. It is set to exactly 0 and the
  one-sided limits of the field decide: if the field points towards 0 from both
  sides the weight stays there (Filippov sliding, status `SLID`); otherwise it
  crosses and the integration goes on with its sign on the new side. The next
  run starts at the event, so the solver never steps across the
  discontinuity and never chatters.
- **r_j(W) = 0 surfaces** (linf-SAM on multi-sample data): eps_lj = rho
  sign(G_lj) with G_lj = -r_j(W) prod_excl_lj(W) also flips where the residual
  r_j = mean_i y_i slope(z_i) x_ij changes sign (on one sample r_j = slope mu_j
  never does). The field takes sign(r_j) from a memory between events; at a
  crossing the one-sided rates n+- = d r_j/dt of the two fields decide: it
  crosses, or it slides along the surface with the Filippov field a f+ +
  (1 - a) f-, a = n- / (n- - n+), until a leaves [0, 1]. This is the eta -> 0
  limit of discrete linf-SAM (tests/test_linf_surface.py; a tanh(r_j / eps)
  regularization converges to another, "equivalent control", solution). A
  whole weight column at 0 is decided jointly at even depth, and held weights
  are re-decided when a sign of r changes. At depth 1 a coordinate with samples
  of its own slides by holding its weight (`SLID`, with its `slide_time`):
  r_j depends on it alone. Sliding on two surfaces at once (two
  r_j, or a weight at 0 whose continuation is not unique) is not followed:
  status `SURFACE`, NaN after its event time.
- **a weight reaching 0 under lp-SAM with p > 2** (docs/theory.md s.2
  (lp-SAM)): eps_lj ~ |G_lj|^(q-1) with q - 1 < 1 is not Lipschitz where G_lj
  = 0, so a weight (at depth 2 with equal layers, a whole column) can reach 0
  in finite time. The same `cross` event and slide decision as linf: the field
  takes sign(G) from the sign memory inside a step, the weight is set to 0 at
  the event and held there when its velocity at 0 is 0 (status `SLID`,
  `slide_time`), else it crosses. The arrival is tangential (w ~ (T - t)^(1/(2-q))),
  so the root of w is poorly conditioned: the event captures the weight when
  its time left at the rate of u = |w|^(2-q) falls to 1e-4 min(1, t), and the
  arrival time is extrapolated to second order in u (`arrival_time`; 1e-9
  to 1e-8 relative at the default rtol = 1e-8, the solve's own error; 5e-11 at
  rtol = 1e-12, docs/theory.md s.4.3). For p <= 2 the event only restarts a run where a weight changes sign.
- **blow-up** (rescaled clock): max |beta_j| passes 10**`blowup_log10`, or a
  depth >= 3 cell nears its finite-time pole (relative growth rate x tau > 1e10).
  Status `BLEW_UP`; later saved values are NaN.
- **critical point** (l2-SAM): the weights reach a critical point of the loss
  other than the collapse to 0 (grad L = 0; depth 1, or multi-sample data with
  mixed labels). The l2 direction G/||G|| is undefined there and points into
  it from every side, so the Filippov solution stays at it. Detected as in
  `samflow.models.solve_model`: R = ||G(W)|| / ||G(W_hat)|| (~ distance / rho)
  falls to `capture_radius`; the remaining time is extrapolated linearly in R
  (error O(capture^2)) and the state is held from then on. Status `CRITICAL`.

A stop condition (collapse, blow-up, pole, critical point) that already holds
at the start, inside or exactly on its threshold, ends the cell at time 0 with
that status, without a solve: events only fire on a down-crossing. A run saves
at the requested times that fall inside it. A cell that fails (max_steps,
non-finite input) gets its own status and NaNs, never an exception, so a batch
survives any one member.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..flows import Clock, Method, rescaled_velocity
from .._methods import P_HELP
from ..diagonal_net import beta as beta_of
from ..diagonal_net import loss_value
from ..status import Status
from .events import _LOG_T_MAX, EventSet, _start_events
from .cell_state import CellState
from .field import SamField, RunArgs
from .singular import (
    _beta_direction,
    _critical_target,
    _cross_or_slide,
    _hold_critical,
    _initial_rsurface,
    _rsurface_step,
    _slide_decision,
    arrival_fill,
    arrival_time,
    extrapolate_collapse,
)
from .solution import Trajectory


def _initial_state(field: SamField, events: EventSet, W0, rho, data, ts, finite, multi: bool) -> CellState:
    """The loop state at time 0, with the stop conditions that already hold
    there decided (`_start_events`): such a cell is done without a solve."""
    L, d = W0.shape
    dtype = W0.dtype
    n_save = ts.shape[0]
    method, clock, loss = field.method, field.clock, field.loss
    memory0 = jnp.sign(W0)
    frozen0 = jnp.zeros((L, d), bool)
    s0 = jnp.zeros((), dtype)
    rmem0 = jnp.zeros((d,), dtype)
    rslide0 = jnp.zeros((d,), bool)
    roff0 = jnp.zeros((d,), dtype)
    ra0 = jnp.full((2,), 0.5, dtype)
    surface0 = jnp.asarray(False)
    if multi:
        rmem0, rslide0, roff0, hold0 = _initial_rsurface(field, W0, rho, data, memory0, frozen0)
        frozen0 = frozen0 | hold0[None]
    if "cross" in events.names:  # linf, and lp at depth >= 2: a weight that starts at 0
        memory0, frozen0 = _slide_decision(
            W0, s0, rho, data, memory0, frozen0, W0 == 0, method, clock, loss,
            rsurf=(rmem0, rslide0, ra0) if multi else None, p=field.p,
        )
    if multi:
        # Starting exactly on two surfaces at once (two r_j, or an r_j and a weight
        # at 0) is not followed: the cell stops there (status SURFACE).
        surface0 = finite & ((jnp.sum(rslide0) > 1) | (jnp.any(rslide0) & jnp.any(frozen0)))
    if clock is Clock.TAU:
        # A cell whose loss is already below ~1e-30 starts beyond the t range.
        track0 = rescaled_velocity(W0, rho, method, data, loss, memory0, field.p)[1] < _LOG_T_MAX
    else:
        track0 = jnp.asarray(False)
    Y0 = jnp.log(jnp.where(W0 != 0, jnp.abs(W0), 1.0)) if field.log_coords else W0
    capture = events.capture_radius * rho
    start_collapsed = jnp.sqrt(jnp.sum(W0**2)) <= capture if "collapse" in events.names else jnp.asarray(False)
    args0 = RunArgs(rho, data, memory0, frozen0, track0, *((rmem0, rslide0, roff0, ra0) if multi else (None,) * 4))
    values0 = events.values(0.0, (Y0, s0), args0) if events.names else []
    start_collapsed, start_blown, start_critical = _start_events(
        dict(zip(events.names, values0)), start_collapsed & finite, finite
    )
    start_stop = start_collapsed | start_blown | start_critical | surface0
    # A cell stopped at the start keeps its initial state at the save time 0.
    at_start = (ts <= 0) & start_stop
    return CellState(
        runs=jnp.asarray(0),
        t0=jnp.where(~finite | start_stop, ts[-1], 0.0).astype(dtype),
        Y=Y0,
        s=s0,
        memory=memory0,
        frozen=frozen0,
        track=track0,
        rmem=rmem0,
        rslide=rslide0,
        roff=roff0,
        ra=ra0,
        out_Y=jnp.where(at_start[:, None, None], Y0, jnp.full((n_save, L, d), jnp.nan, dtype)),
        out_s=jnp.where(at_start, 0.0, jnp.full((n_save,), jnp.nan, dtype)),
        status=jnp.select(
            [~finite, start_collapsed, start_blown, start_critical, surface0],
            [
                int(Status.NONFINITE_INPUT),
                int(Status.COLLAPSED),
                int(Status.BLEW_UP),
                int(Status.CRITICAL),
                int(Status.SURFACE),
            ],
            int(Status.FINISHED),
        ),
        event_time=jnp.where(start_stop, 0.0, jnp.nan).astype(dtype),
        event_s=jnp.where(start_stop, 0.0, jnp.nan).astype(dtype),
        collapse_direction=jnp.full((d,), jnp.nan, dtype),
        W_detect=jnp.zeros((L, d), dtype),
        t_detect=jnp.where(start_collapsed | start_critical, 0.0, jnp.nan).astype(dtype),
        W_stop=W0,
        slide_time=jnp.where(frozen0, 0.0, jnp.nan).astype(dtype),
        t_arrive_capture=jnp.full((L, d), jnp.nan, dtype),
        W_arrive_capture=jnp.zeros((L, d), dtype),
        t_untracked=jnp.where(track0, jnp.inf, 0.0).astype(dtype),
        steps=jnp.asarray(0),
        done=~finite | start_stop,
    )


def _after_event(c: CellState, *, field, events, args, rho, data, multi, t_final, t_end, Y_end, s_end, ok,
                 is_event, max_steps, t_stall, steps) -> CellState:
    """The cell's record after a run of steps that ended at `t_end` in state
    (`Y_end`, `s_end`): on its event (collapse, critical point, sign switch,
    r_j surface, blow-up, t range), at the horizon (`ok`), out of steps
    (`max_steps`, stalled at `t_stall`) or on a failure. The saved outputs
    (`out_Y`, `out_s`) are left as they are. `steps`: the steps the run took."""
    W_end = field.to_W(Y_end)
    healthy = ok | is_event
    hit = events.fired(t_end, (Y_end, s_end), args, is_event)
    false = jnp.asarray(False)
    collapsed, critical = hit.get("collapse", false), hit.get("critical", false)
    blew_up = hit.get("blowup", false) | hit.get("pole", false)
    untracked = hit.get("t_range", false)

    # Collapse and critical point: extrapolate linearly (the field is bounded there).
    dW_end, ds_end = field.velocity_W(Y_end, s_end, args)
    dt_rem = extrapolate_collapse(W_end, dW_end)
    coll_dir = jnp.where(collapsed, _beta_direction(field, Y_end, W_end), c.collapse_direction)
    if "critical" in events.names:  # the point it is held at, and when it gets there
        dt_crit, W_crit = _critical_target(W_end, dW_end, rho, data, field.loss, field.method, field.p)
    else:
        dt_crit, W_crit = jnp.zeros((), W_end.dtype), W_end

    W_next, memory, frozen, col_mixed, nonunique = _cross_or_slide(
        field, c, args, W_end, Y_end, s_end, hit.get("cross", false), multi, dW_end, events.capture_radius * rho, t_end
    )
    # lp: a weight captured before reaching 0 arrives a little later (`arrival_time`).
    held = frozen & ~c.frozen
    t_capture, W_capture = c.t_arrive_capture, c.W_arrive_capture
    if field.method is Method.LP:
        # d/dclock of dW/dclock along the flow: the tangent is the state's own velocity
        # (dY = dW in linear coordinates, dx = dW / W in log ones)
        dY_end = field(t_end, (Y_end, s_end), args)[0]
        ddW_end = jax.jvp(lambda Y, s: field.velocity_W(Y, s, args)[0], (Y_end, s_end), (dY_end, ds_end))[1]
        t_arrive = t_end + arrival_time(W_end, dW_end, ddW_end, c.memory, field.p)
        t_capture = jnp.where(held, t_end, t_capture)
        W_capture = jnp.where(held, W_end, W_capture)
    else:
        t_arrive = t_end
    slide_time = jnp.where(held, t_arrive, c.slide_time)
    rmem, rslide, roff, ra, surface = c.rmem, c.rslide, c.roff, c.ra, false
    if multi:
        W_next, memory, frozen, slide_time, rmem, rslide, roff, ra, surface, ambiguous = _rsurface_step(
            field, c, args, W_next, memory, frozen, slide_time, hit, events.r_scale, t_end
        )
        surface = surface | col_mixed
        nonunique = nonunique | ambiguous
    elif field.method is Method.LP:
        surface = col_mixed  # a column of unequal layers arriving at 0 as a whole (`_cross_or_slide`)

    surface = surface & healthy
    status = jnp.select(
        [collapsed, critical, blew_up, max_steps, ~healthy, surface],
        [
            int(Status.COLLAPSED),
            int(Status.CRITICAL),
            int(Status.BLEW_UP),
            int(Status.MAX_STEPS),
            int(Status.FAILED),
            int(Status.SURFACE),
        ],
        c.status,
    )
    stops = collapsed | critical | blew_up | ~healthy | surface
    # lp: a weight captured in the event that stops the cell with SURFACE never arrives in
    # what samflow follows (NaN after): no arrival time past the stop
    slide_time = jnp.where(surface & held & (slide_time > t_end), jnp.nan, slide_time)
    # held where the continuation was not unique, and going on: said in the status, from the first time
    flagged = healthy & nonunique & ~stops & (status == int(Status.FINISHED))
    status = jnp.where(flagged, int(Status.NONUNIQUE), status)
    dt_stop = jnp.where(collapsed, dt_rem, jnp.where(critical, dt_crit, 0.0))
    t_stop = jnp.where(max_steps, t_stall, t_end)
    done = ok | stops
    return CellState(
        runs=c.runs + 1,
        # A finished cell's later (masked) iterations must cost nothing.
        t0=jnp.where(done, t_final, t_end),
        Y=W_next if field.log_coords else jnp.where(collapsed, 0.0, W_next),
        s=s_end,
        memory=memory,
        frozen=frozen,
        track=c.track & ~untracked,
        rmem=rmem,
        rslide=rslide,
        roff=roff,
        ra=ra,
        out_Y=c.out_Y,
        out_s=c.out_s,
        status=status,
        event_time=jnp.where(stops, t_stop + dt_stop, jnp.where(flagged, t_end, c.event_time)),
        event_s=jnp.where(stops, s_end + jnp.where(collapsed | critical, ds_end * dt_stop, 0.0), c.event_s),
        collapse_direction=coll_dir,
        W_detect=jnp.where(collapsed | critical, W_end, c.W_detect),
        t_detect=jnp.where(collapsed | critical, t_end, c.t_detect),
        W_stop=jnp.where(critical, W_crit, c.W_stop),
        slide_time=slide_time,
        t_arrive_capture=t_capture,
        W_arrive_capture=W_capture,
        t_untracked=jnp.where(untracked, t_end, c.t_untracked),
        steps=c.steps + steps,
        done=done,
    )


def _finish(field: SamField, c: CellState, ts, data) -> Trajectory:
    """The `Trajectory` of a finished loop: final status, the state after a
    collapse (0) or a critical point (held), the linear approach between the
    capture and the event, and real time from s = log(1 + t) in the tau clock."""
    loss = field.loss
    status = jnp.where(
        (c.status == int(Status.FINISHED)) & jnp.any(c.frozen), int(Status.SLID), c.status
    )
    status = jnp.where(c.done, status, int(Status.MAX_STEPS))  # ran out of runs
    event_time = jnp.where(c.done, c.event_time, c.t0)  # t0: where the runs ran out

    # After a collapse the state is 0 and the clock runs at the zero-margin rate.
    after = ts > c.event_time
    is_coll = status == int(Status.COLLAPSED)
    out_W = field.to_W(c.out_Y)
    out_W = jnp.where(is_coll & after[:, None, None], 0.0, out_W)
    # Between the capture (||W|| = capture radius) and the extrapolated collapse
    # time the state goes linearly to 0, as the extrapolation assumes.
    span = c.event_time - c.t_detect
    frac = jnp.clip((c.event_time - ts) / jnp.where(span > 0, span, 1.0), 0.0, 1.0)
    approach = is_coll & (ts > c.t_detect) & ~after
    out_W = jnp.where(approach[:, None, None], frac[:, None, None] * c.W_detect, out_W)
    is_crit = status == int(Status.CRITICAL)
    out_W = _hold_critical(out_W, is_crit & after, is_crit & (ts > c.t_detect) & ~after, frac, c.W_detect, c.W_stop)
    if field.method is Method.LP:
        out_W = arrival_fill(out_W, ts, c.t_arrive_capture, c.slide_time, c.W_arrive_capture, field.p)
    if field.clock is Clock.TAU:
        rate0 = jnp.exp(loss.log_inv_slope(0.0))
        t_real = jnp.expm1(c.out_s)
        t_after = jnp.expm1(c.event_s) + (ts - c.event_time) * rate0
        t_real = jnp.where(is_coll & after, t_after, t_real)
        # Held at a critical point, the clock runs at the rate of that point.
        rate_c = jnp.exp(rescaled_velocity(c.W_stop, 0.0, Method.GD, data, loss)[1])
        t_real = jnp.where(is_crit & after, jnp.expm1(c.event_s) + (ts - c.event_time) * rate_c, t_real)
        # Past the tracked range t is above e^_LOG_T_MAX: reported as +inf.
        t_real = jnp.where(ts > c.t_untracked, jnp.inf, t_real)
        t_real = jnp.where(jnp.isfinite(out_W).all((1, 2)), t_real, jnp.nan)
        event_t = jnp.where(c.event_time > c.t_untracked, jnp.inf, jnp.expm1(c.event_s))
    else:
        t_real = jnp.where(jnp.isfinite(out_W).all((1, 2)), ts, jnp.nan)
        event_t = event_time
    t_real = jnp.where(status == int(Status.NONFINITE_INPUT), jnp.nan, t_real)
    return Trajectory(
        ts=ts,
        t=t_real,
        W=out_W,
        beta=jax.vmap(beta_of)(out_W),
        loss=jax.vmap(lambda W: loss_value(W, data, loss))(out_W),
        status=status,
        event_time=event_time,
        event_t=event_t,
        collapse_direction=c.collapse_direction,
        slide_time=c.slide_time,
        num_steps=c.steps,
        num_runs=c.runs,
    )


def _field_p(method: Method, p, dtype):
    """lp's exponent as a float scalar of `dtype` for `SamField` (None for the
    other methods, which have no p)."""
    if method is not Method.LP:
        return None
    if p is None:
        raise ValueError(f"method 'lp' needs the exponent p: {P_HELP}")
    return jnp.asarray(p, dtype)
