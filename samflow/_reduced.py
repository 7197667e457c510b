"""The exact reduction of depth-2 l2-SAM on one sample from equal layers: two scalars per cell.

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
- clock tau: y = (v, s) with s = log(1 + t) as in `samflow._field`,
  dv/dtau = m^2 kappa / N, ds/dtau = exp(log(1 / s(z_hat)) - s), and u = m tau;

with z_hat = sum_j mu_j w_hat_j^2, w_hat_j = w_j (1 - kappa mu_j / N) (both
layers perturbed alike). The field costs O(d) per evaluation (N and z_hat), but
the Runge-Kutta arithmetic, the error norm and the stiffness are those of two
scalars: the decay of the major coordinates before a collapse, at rates spread
by (mu_d / mu_1)^2 in W, is the single term -nu_j^2 v here.

The reduced cells are stepped in blocks of `BLOCK` cells, each cell with its own
adaptive step (diffrax's solver stages, PID controller and dense interpolant, as
the lane engine `samflow._lanes`); a block runs until its last cell ends. The
events are the general engine's own (`samflow._events.EventSet`), evaluated on
the weights the reduced state stands for, so that they keep their meaning: a
collapse is recorded exactly as the general engine records it (capture,
linear extrapolation, direction; `samflow._record`). Anything else that ends a
reduced run (another event, `max_steps`, a failed step or root) hands the
cell back to the general engine, which then solves it from the start: a
reduced run never returns a number it cannot stand for.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .flows import Clock, Method
from .status import Status
from ._cell_state import CellState
from ._events import BracketBisection
from ._singular import _beta_direction, extrapolate_collapse

__all__ = ["BLOCK", "reducible", "cell_reducible", "solve_reduced"]

#: Cells stepped together (one block of the reduced solve; the last is padded).
BLOCK = 32
#: The reduced solve's tolerance (relative and absolute, on u and v) is this times
#: `rtol`. x_j = log|alpha_j| + nu_j u - nu_j^2 v is a difference of the two, which
#: grow larger than x_j itself, so that at the same tolerance beta was ~10x less
#: accurate than the general engine's (max 9.5e-6 relative at rtol 1e-8 on the
#: README cells, against 5.1e-7); at rtol / 10 it is at most the general engine's
#: (docs/benchmarks.md, "Exact reductions").
RTOL_FACTOR = 0.1


def reducible(method: Method, L: int, n_samples: int, settings, switches: int) -> bool:
    """Whether a call may use the reduction (static): `settings.reduce` "auto",
    l2-SAM, depth 2, one sample, no switch record. Which of its cells are
    reduced is `cell_reducible` (their inits)."""
    return settings.reduce == "auto" and method is Method.L2 and L == 2 and n_samples == 1 and not switches


def cell_reducible(W0, data):
    """`()` bool: the cell's init `W0` `(2, d)` has equal layers and no weight at
    0, and the sample y x has no coordinate at 0 (a coordinate with mu_j = 0 keeps
    its weight while the others may reach 0: a critical point, not a collapse)."""
    mu = data.y[0] * data.X[0]
    return jnp.all(W0[0] == W0[1]) & jnp.all(W0 != 0) & jnp.all(mu != 0) & jnp.all(jnp.isfinite(W0))


class _Reduced(eqx.Module):
    """The reduced field of one cell, in diffrax's form field(t, y, args) (module
    docstring): `loga` `(d,)` log|alpha_j|, `mu` `(d,)` y x, `kappa` `()`
    rho / sqrt 2; `clock` and `loss` static."""

    clock: Clock = eqx.field(static=True)
    loss: object = eqx.field(static=True)
    loga: jax.Array
    mu: jax.Array
    kappa: jax.Array

    @property
    def m(self):
        return jnp.max(jnp.abs(self.mu))

    def x(self, t, y):
        """`(d,)` log|w_j| at clock time t in state y."""
        nu = self.mu / self.m
        u, v = (y[0], y[1]) if self.clock is Clock.T else (self.m * t, y[0])
        return self.loga + nu * u - nu**2 * v

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


def solve_reduced(eng, c0: CellState, W0, rho, sign, w_scale, t1_floor):
    """Solve the reducible cells of a lane call (`samflow._lanes.solve_lanes`).

    `eng`: the call's `_Engine` (its field, events, settings, data, save times);
    `c0`: every cell's record at time 0 (leading axis n); `W0` `(n, 2, d)`,
    `rho` `(n,)`, `sign` `(n, 2, d)` or None (linear coordinates), `w_scale`
    `(n,)`; `t1_floor`: the horizon less 100 ULP (diffrax's rounding of a step's end).

    **Returns:** `(records, ok)`: `records` the cells' `CellState`s at their
    end, with their saved outputs, in the coordinates of the call (W, or log|W|
    with `sign`), to be finished by `samflow._record._finish` as the general
    engine's; `ok` `(n,)` bool, the cells whose record it is (reducible, not
    done at time 0, ended at the horizon or in a collapse). The others keep
    `c0` and go to the general engine.
    """
    n = W0.shape[0]
    B = min(n, BLOCK)
    pad = (-n) % B
    blocks = jax.tree.map(
        lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]).reshape((-1, B) + x.shape[1:]),
        (c0, W0, rho, sign, w_scale),
    )
    rec, ok = jax.lax.map(lambda b: _solve_block(eng, *b, t1_floor), blocks)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:n], (rec, ok))


def _solve_block(eng, c0, W0, rho, sign, w_scale, t1_floor):
    """`solve_reduced` on one block of B cells (leading axis B everywhere)."""
    from ._lanes import _Dense, _erk_step, _no_event_value

    settings, clock, data, ts = eng.settings, eng.clock, eng.data, eng.ts
    t_final = ts[-1]
    n_save = ts.shape[0]
    B = W0.shape[0]
    solver = eng.solver
    tableau = type(solver).tableau
    dtype = W0.dtype
    mu = data.y[0] * data.X[0]
    loss = eng.field(None).loss
    tol = RTOL_FACTOR * settings.rtol
    ctrl = diffrax.PIDController(rtol=tol, atol=tol)
    order = solver.error_order(diffrax.ODETerm(lambda t, y, a: y))

    eligible = jax.vmap(lambda W: cell_reducible(W, data))(W0) & ~c0.done
    if clock is Clock.TAU:
        eligible = eligible & c0.track  # a loss below ~1e-30 at the start: t is not followed
    red = jax.vmap(lambda W, r: _Reduced(clock, loss, jnp.log(jnp.abs(W[0])), mu, r / np.sqrt(2.0)))(W0, rho)
    sgn = jnp.sign(W0)

    def engine_state(i_red, sg, t, y):
        """(Y, s) of the general engine at reduced state y: W, or log|W| with signs."""
        x = i_red.x(t, y)
        Y = jnp.stack([x, x]) if eng.log_coords else sg * jnp.exp(jnp.stack([x, x]))
        return Y, i_red.s(y)

    def events_of(sgn_log, ws):
        return eng.events(eng.field(sgn_log), ws)

    def event_value(i_red, sg, sgn_log, ws, r, c, t, y):
        return _no_event_value(events_of(sgn_log, ws), t, engine_state(i_red, sg, t, y), c.segment_args(r, data, False))

    y0 = jnp.zeros((B, 2), dtype)
    t0 = jnp.zeros((B,), dtype)

    def start(i_red, sg, sgn_log, ws, r, c, y):
        f0 = i_red(0.0, y, None)
        t1, _ = ctrl.init(diffrax.ODETerm(i_red), 0.0, t_final, y, None, None, solver.func, order)
        dt = jnp.where(t1 > 0, t1, 1e-12 * jnp.abs(t_final))
        v = event_value(i_red, sg, sgn_log, ws, r, c, 0.0, y)
        return f0, jnp.minimum(dt, t_final), v

    vsign = sign if sign is not None else None
    f0, tnext, v0 = jax.vmap(start)(red, sgn, vsign, w_scale, rho, c0, y0)
    pid = (jnp.ones((B,), dtype), jnp.ones((B,), dtype), jnp.zeros((B,), bool))
    out = jnp.full((B, n_save, 2), jnp.nan, dtype)
    state = dict(t0=t0, y=y0, f0=f0, tnext=tnext, pid=pid, v=v0, steps=jnp.zeros((B,), jnp.int32),
                 save=jnp.zeros((B,), jnp.int32), done=~eligible, end=jnp.zeros((B,), jnp.int32),
                 t_ev=jnp.full((B,), jnp.nan, dtype), y_ev=jnp.zeros((B, 2), dtype), out=out)
    # end: 0 handed back (or not reducible), 1 horizon, 2 collapse

    def try_step(i_red, sg, sgn_log, ws, r, c, t0, y, f0, tnext, pid):
        y1, y_err, dense, f1 = _erk_step(tableau, i_red, t0, tnext, y, None, f0)
        y_err = jnp.where(jnp.isnan(y_err), jnp.inf, y_err)
        keep, t_new, tn, _, pid, cres = ctrl.adapt_step_size(t0, tnext, y, y1, None, y_err, order, pid)
        t_new = jnp.minimum(t_new, t_final)
        tn = jnp.where(tn > t1_floor, jnp.where(keep, t_final, t_new + 0.5 * (t_final - t_new)), tn)
        v1 = event_value(i_red, sg, sgn_log, ws, r, c, t_new, y1)
        failed = (cres != diffrax.RESULTS.successful) | ~jnp.all(jnp.isfinite(y1)) & keep
        return y1, dense, f1, keep, t_new, tn, jax.tree.map(jnp.asarray, pid), v1, failed

    def locate(i_red, sg, sgn_log, ws, r, c, t0, t_new, dense):
        interp = _Dense(solver.interpolation_cls, t0, t_new, dense)
        root = optx.root_find(
            lambda t, _: event_value(i_red, sg, sgn_log, ws, r, c, t, interp.evaluate(t)),
            BracketBisection(rtol=1e-13, atol=1e-13, flip=True), t_new,
            options=dict(lower=t0, upper=t_new), throw=False,
        )
        t_ev = root.value
        return t_ev, interp.evaluate(t_ev), root.result == optx.RESULTS.successful

    def cond(st):
        return jnp.any(~st["done"])

    def body(st):
        busy = ~st["done"]
        y1, dense, f1, keep, t_new, tn, pid, v1, failed = jax.vmap(try_step)(
            red, sgn, vsign, w_scale, rho, c0, st["t0"], st["y"], st["f0"], st["tnext"], st["pid"])
        t_prev = st["t0"]
        event = busy & keep & ~failed & (st["v"] > 0) & (v1 <= 0)
        horizon = busy & keep & ~failed & ~event & (t_new >= t_final)
        out_of_steps = busy & (st["steps"] + 1 >= settings.max_steps) & ~event & ~horizon
        t_ev, y_ev, root_ok = jax.lax.cond(
            jnp.any(event),
            lambda: jax.vmap(locate)(red, sgn, vsign, w_scale, rho, c0, t_prev, t_new, dense),
            lambda: (t_new, y1, jnp.ones((B,), bool)),
        )
        collapse = event & root_ok & jax.vmap(
            lambda i_red, sg, sgn_log, ws, r, c, t, y: events_of(sgn_log, ws).fired(
                t, engine_state(i_red, sg, t, y), c.segment_args(r, data, False), True).get("collapse", False)
        )(red, sgn, vsign, w_scale, rho, c0, t_ev, y_ev)
        # Saves inside this step (strictly before a collapse), on its dense interpolant.
        t_limit = jnp.where(event, t_ev, jnp.where(keep, t_new, t_prev))
        saving = busy & (keep | event) & ~failed

        def due_of(save):
            t_s = ts[jnp.minimum(save, n_save - 1)]
            return saving & (save < n_save) & jnp.where(event, t_s < t_limit, t_s <= t_limit), t_s

        def save_body(s):
            out, save = s
            due, t_s = due_of(save)
            ys = jax.vmap(lambda t0_, t1_, dn, t: _Dense(solver.interpolation_cls, t0_, t1_, dn).evaluate(t))(
                t_prev, t_new, dense, t_s)
            rows = jnp.where(due, jnp.arange(B), B)
            out = out.at[rows, save].set(ys, mode="drop")
            return out, save + due

        out, save = jax.lax.while_loop(lambda s: jnp.any(due_of(s[1])[0]), save_body, (st["out"], st["save"]))
        stop = event | horizon | out_of_steps | (busy & failed)
        end = jnp.where(horizon, 1, jnp.where(collapse, 2, 0))
        adv = busy & keep & ~stop
        sel = lambda a, b, m=adv: jnp.where(m.reshape(m.shape + (1,) * (a.ndim - 1)), a, b)
        return dict(
            t0=jnp.where(adv, t_new, st["t0"]), y=sel(y1, st["y"]), f0=sel(f1, st["f0"]), tnext=jnp.where(busy, tn, st["tnext"]),
            pid=jax.tree.map(lambda a, b: sel(a, b, busy), pid, st["pid"]), v=jnp.where(adv, v1, st["v"]),
            steps=st["steps"] + busy.astype(jnp.int32), save=save, done=st["done"] | stop,
            end=jnp.where(busy & stop, end, st["end"]),
            t_ev=jnp.where(busy & stop, jnp.where(horizon, t_new, t_ev), st["t_ev"]),
            y_ev=sel(jnp.where(horizon[:, None], y1, y_ev), st["y_ev"], busy & stop), out=out,
        )

    st = jax.lax.while_loop(cond, body, state)

    def record(i_red, sg, sgn_log, r, c, end, t_end, y_end, out, steps):
        field = eng.field(sgn_log)
        args = c.segment_args(r, data, False)
        out_Y, out_s = jax.vmap(lambda t, y: engine_state(i_red, sg, t, y))(ts, out)
        out_s = jnp.where(jnp.isnan(out[:, 0]), jnp.nan, out_s)
        Y_end, s_end = engine_state(i_red, sg, t_end, y_end)
        W_end = field.to_W(Y_end)
        collapsed = end == 2
        dW_end, ds_end = field.velocity_W(Y_end, s_end, args)
        dt_rem = extrapolate_collapse(W_end, dW_end)
        return eqx.tree_at(
            lambda q: (q.seg, q.t0, q.Y, q.s, q.out_Y, q.out_s, q.status, q.event_time, q.event_s,
                       q.collapse_direction, q.W_detect, q.t_detect, q.steps, q.done),
            c,
            (jnp.ones_like(c.seg), jnp.asarray(t_final, dtype),
             Y_end if field.log_coords else jnp.where(collapsed, 0.0, Y_end), s_end, out_Y, out_s,
             jnp.where(collapsed, int(Status.COLLAPSED), c.status).astype(c.status.dtype),
             jnp.where(collapsed, t_end + dt_rem, c.event_time),
             jnp.where(collapsed, s_end + ds_end * dt_rem, c.event_s),
             jnp.where(collapsed, _beta_direction(field, Y_end, W_end), c.collapse_direction),
             jnp.where(collapsed, W_end, c.W_detect), jnp.where(collapsed, t_end, c.t_detect),
             steps.astype(c.steps.dtype), jnp.asarray(True)),
        )

    rec = jax.vmap(record)(red, sgn, vsign, rho, c0, st["end"], st["t_ev"], st["y_ev"], st["out"], st["steps"])
    return rec, eligible & (st["end"] > 0)
