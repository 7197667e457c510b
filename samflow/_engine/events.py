"""The event conditions of a run of steps, combined into one scalar event.

Each condition is a function of (events, t, y, args), dimensionless, positive
until its event: diffrax fires on the down-crossing through 0. `EventSet`
takes their minimum (so that bisection brackets the earliest) and says which
one fired (docs/theory.md s.4).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float, Int

from ..flows import LOG_ZERO, Clock, Method
from ..diagonal_net import beta as beta_of
from .field import SamField, _sliding_parts, r_unit
from .singular import _BIG, _R_OFFSET, _critical_cond, _rsurface_active, arrival_margin


# Real time in the tau clock is carried as s = log(1 + t) while t < e^_LOG_T_MAX
# (about 1e30); past that it is reported as +inf (see `_velocity`).
_LOG_T_MAX = 69.0


# At depth L >= 2, W = 0 is itself a critical point of the loss, handled by the
# collapse event. Near 0, R = ||G(W)|| / ||G(W_hat)|| ~ kappa (||W|| / rho)^(L-1)
# with kappa <= ~1, so the critical-point event is armed only where
# ||W|| > (_CRITICAL_GATE x capture_radius)^(1/(L-1)) x rho: there R reaches the
# capture radius only if kappa < 1/_CRITICAL_GATE, and the collapse keeps its
# time. (A nonzero critical point nearer than that to 0, e.g. 1e-3 rho at depth
# 2, 0.1 rho at depth 4 with the default capture, is not detected.)
_CRITICAL_GATE = 1e3


class BracketBisection(optx.Bisection):
    """Bisection that stops when the bracket is small in time alone.

    `optx.Bisection` also asks |f| < atol, which never holds for a steep event
    function (the pole condition changes by ~1/(tau* - tau) per unit time)."""

    def terminate(self, fn, y, args, options, state, tags):
        scale = self.atol + self.rtol * jnp.abs(y)
        return jnp.abs(state.lower - state.upper) < scale, optx.RESULTS.successful


def _collapse_condition(ev, t, y, args):
    """l2, L >= 2: (||W|| - capture_radius rho) / rho; in log coordinates
    log||W|| - log(capture_radius rho) (docs/theory.md s.4)."""
    rho = args.rho
    capture = ev.capture_radius * rho
    if ev.field.log_coords:
        log_capture = jnp.log(jnp.where(rho > 0, capture, 1.0))
        return jnp.where(rho > 0, 0.5 * jax.nn.logsumexp(2.0 * y[0]) - log_capture, _BIG)
    return (jnp.sqrt(jnp.sum(y[0] ** 2)) - capture) / jnp.where(rho > 0, rho, 1.0)


def _critical_condition(ev, t, y, args):
    """l2: R - capture_radius at a critical point of the loss (`_critical_cond`)."""
    return _critical_cond(
        ev.field.to_W(y[0]), args.rho, args.data, ev.field.loss, ev.capture_radius, ev.gate, ev.field.method, ev.field.p
    )


def _cross_condition(ev, t, y, args):
    """linf: the smallest w_lj memory_lj / rho over the weights not held at 0;
    lp: the smallest `arrival_margin` / rho (a weight reaching 0 with p > 2 is
    captured a clock time ARRIVAL_CAPTURE before, at u = |w|^k's rate)."""
    active = ~args.frozen & (args.memory != 0)
    rho = args.rho
    scale = jnp.where(rho > 0, rho, 1.0)
    if ev.field.method is Method.LP:
        dW, _ = ev.field.velocity_W(y[0], y[1], args)  # in linear coordinates, also from log ones
        W = ev.field.to_W(y[0])
        value = arrival_margin(W, dW, args.memory, ev.field.p, ev.capture_radius * rho, t, args.data, ev.field.loss) / scale
    else:
        value = y[0] * args.memory / scale
    if args.rmem is not None:
        # A weight that a decision sent the wrong way (a field the one-sided
        # limits misjudged) fires at once instead of masking every later event.
        value = value + _R_OFFSET
    return jnp.min(jnp.where(active, value, _BIG))


def _rcross_condition(ev, t, y, args):
    """linf, multi-sample: an r_j = 0 surface is reached when r_j rmem_j, on the
    surfaces' scale (`r_unit`: the same at any size of the loss), falls to
    -roff_j (just past it, so the next run starts on the new side)."""
    r = r_unit(y[0], args.data, ev.field.loss)
    active = _rsurface_active(args.rmem, args.rslide, args.frozen, args.data)
    return jnp.min(jnp.where(active, r * args.rmem + args.roff, _BIG))


def _rexit_condition(ev, t, y, args):
    """linf, multi-sample: sliding on r_j = 0 ends where a = n- / (n- - n+)
    leaves [0, 1]; on two surfaces at once, where a_1 or a_2 leaves it or the
    product system folds (its scaled discriminant reaches 0: the root followed
    merges with the other one) (`_sliding_parts`, docs/theory.md s.4.3)."""
    _, a, disc = _sliding_parts(
        y[0], args.rho, args.data, args.memory, args.frozen, args.rmem, args.rslide, ev.field.loss, args.ra
    )
    return jnp.where(jnp.any(args.rslide), jnp.minimum(jnp.min(jnp.minimum(a, 1.0 - a)), disc), _BIG)


def _blowup_condition(ev, t, y, args):
    """tau clock: blowup_log10 - log10 max_j |beta_j|."""
    if ev.field.log_coords:
        return ev.blowup_log10 - jnp.max(jnp.sum(y[0], axis=0)) / np.log(10.0)
    m = jnp.max(jnp.abs(beta_of(y[0])))
    return ev.blowup_log10 - jnp.log10(jnp.where(m > 0, m, 1.0))


def _pole_condition(ev, t, y, args):
    """tau clock, L >= 3: 10 - log10(rate x tau), rate = d log|w|/dtau of the
    largest weight. Near a pole tau* the rate is ~1/((L-2)(tau* - tau)), so the
    event is within ~1e-10 of tau*, far from the float64 resolution of tau
    where steps would stall (depth <= 2 has no pole: growth is at most exponential)."""
    Y = y[0]
    dY, _ = ev.field(t, (Y, y[1]), args)
    # The largest weight: near a pole it is the one blowing up (a small weight
    # crossing or leaving 0 also has a large |dw/w| but is no pole).
    if ev.field.log_coords:
        k = jnp.argmax(Y.reshape(-1))
        # Only a weight above its initial scale can be nearing a pole.
        big = Y.reshape(-1)[k] > jnp.log(ev.w_scale)
        rate = jnp.where(big, dY.reshape(-1)[k], 0.0)
    else:
        k = jnp.argmax(jnp.abs(Y).reshape(-1))
        w_k, dw_k = Y.reshape(-1)[k], dY.reshape(-1)[k]
        big = jnp.abs(w_k) > ev.w_scale
        rate = jnp.where(big, dw_k / jnp.where(big, w_k, 1.0), 0.0)
    x = rate * jnp.abs(t)
    return 10.0 - jnp.log10(jnp.where(x > 1e-300, x, 1e-300))


def _t_range_condition(ev, t, y, args):
    """tau clock: s = log(1 + t) reaches _LOG_T_MAX (t is no longer followed)."""
    return jnp.where(args.track, (_LOG_T_MAX - y[1]) / _LOG_T_MAX, _BIG)


_CONDITIONS = {
    "collapse": _collapse_condition,
    "critical": _critical_condition,
    "cross": _cross_condition,
    "rcross": _rcross_condition,
    "rexit": _rexit_condition,
    "blowup": _blowup_condition,
    "pole": _pole_condition,
    "t_range": _t_range_condition,
}


@eqx.filter_jit
def _event_values(events, t, y, args):
    """`EventSet.values` as a nested jit (as `samflow._engine.field._velocity`): the calls
    of a program with the same shapes (a step's end, a run's start, the root finder)
    trace the conditions once."""
    return jnp.stack([_CONDITIONS[k](events, t, y, args) for k in events.names])


class EventSet(eqx.Module):
    """The event conditions of a cell, as ONE scalar event: `value` is the
    smallest condition (each positive until its event), so that bisection
    brackets the earliest event robustly; `which` names the one that fired.
    (diffrax's own multi-event mask takes the first condition in tree order
    within a step, not the earliest.)

    `names` (static) lists the conditions that apply, in a fixed order (ties
    go to the first): collapse, critical, cross, rcross, rexit, blowup, pole,
    t_range (`for_cell`).
    """

    field: SamField
    names: tuple[str, ...] = eqx.field(static=True)
    capture_radius: float = eqx.field(static=True)
    gate: float = eqx.field(static=True)
    blowup_log10: float = eqx.field(static=True)
    w_scale: Float[Array, ""]
    r_scale: Float[Array, ""] | None

    @classmethod
    def for_cell(cls, field: SamField, depth: int, multi: bool, settings, w_scale, r_scale) -> "EventSet":
        """The events of a cell of `field` at this depth (`multi`: linf on
        multi-sample data; `r_scale` = max|X| there, else None)."""
        names = list(field.method.spec.events_at(depth))
        if field.log_coords and field.method is not Method.LP:  # no weight reaches 0 there (`log_coords_problem`)
            names = [k for k in names if k != "cross"]
        if multi:
            names += ["rcross", "rexit"]
        if field.clock is Clock.TAU:
            names += ["blowup", "pole", "t_range"] if depth >= 3 else ["blowup", "t_range"]
        gate = (_CRITICAL_GATE * settings.capture_radius) ** (1.0 / (depth - 1)) if depth >= 2 else 0.0
        return cls(field, tuple(names), settings.capture_radius, gate, settings.blowup_log10, w_scale, r_scale)

    def values(self, t, y, args) -> Float[Array, " n_events"]:
        return _event_values(self, t, y, args)

    def value(self, t, y, args, **kwargs) -> Float[Array, ""]:
        return jnp.min(self.values(t, y, args))

    def fired(self, t, y, args, is_event) -> dict:
        """name -> bool: the condition nearest 0 at the event time fired."""
        if not self.names:
            return {}
        which = jnp.argmin(self.values(t, y, args))
        return {k: is_event & (which == i) for i, k in enumerate(self.names)}


def _start_events(values, start_collapsed, finite):
    """Stop events that already hold at the start (inside or exactly on their
    threshold): diffrax fires an event only on a down-crossing, so these are
    decided here. `values` maps each event name to its condition at time 0.
    Returns (collapsed, blown, critical) booleans, at most one of them True.

    The sign switch of linf at a weight that starts at 0 is decided by the
    slide decision at the start; the pole condition (growth rate x tau) is 0 at
    tau = 0 and the t-range condition is 1 at s = 0, so neither holds there.
    """
    false = jnp.asarray(False)
    hits = {k: finite & (v <= 0) for k, v in values.items()}
    blown = (hits.get("blowup", false) | hits.get("pole", false)) & ~start_collapsed
    critical = hits.get("critical", false) & ~start_collapsed & ~blown
    return start_collapsed, blown, critical


# The lead condition of the switch times (docs/theory.md s.5, `samflow.switches`).
_OFFSET = 1e-12  # the lead condition's offset (module docstring)
_TIE = 1e-9  # relative tie of |beta| (as `samflow.analysis.tied`)
_LOG_ZERO = LOG_ZERO  # log|w| of a weight that is exactly 0


def _log_abs_beta(field: SamField, Y) -> Float[Array, " d"]:
    """log|beta_j| = sum_l log|w_lj| (a weight at 0 counts as e^-10000)."""
    if field.log_coords:
        return jnp.sum(Y, axis=0)
    a = jnp.abs(Y)
    return jnp.sum(jnp.where(a > 0, jnp.log(jnp.where(a > 0, a, 1.0)), _LOG_ZERO), axis=0)


def _lead_value(field: SamField, Y, lead) -> Float[Array, ""]:
    lb = _log_abs_beta(field, Y)
    others = jnp.where(jnp.arange(lb.shape[0]) == lead, -jnp.inf, lb)
    return lb[lead] - jnp.max(others) + _OFFSET


class _LeadEvents(EventSet):
    """The cell's `EventSet` plus the "lead" condition (last in `names`)."""

    lead: Int[Array, ""]

    def values(self, t, y, args):
        base = [_CONDITIONS[k](self, t, y, args) for k in self.names if k != "lead"]
        return jnp.stack(base + [_lead_value(self.field, y[0], self.lead)])


def _with_lead(events: EventSet, lead) -> _LeadEvents:
    kw = {f.name: getattr(events, f.name) for f in dataclasses.fields(events)}
    kw["names"] = events.names + ("lead",)
    return _LeadEvents(**kw, lead=lead)


def _leader(field: SamField, c, rho, data, multi, exclude=None):
    """argmax |beta_j| (j != `exclude`); among those tied with it to _TIE, the
    fastest growing (largest d log|beta_j|/dt): the leader just after now."""
    lb = _log_abs_beta(field, c.Y)
    if exclude is not None:
        lb = jnp.where(jnp.arange(lb.shape[0]) == exclude, -jnp.inf, lb)
    dW, _ = field.velocity_W(c.Y, c.s, c.run_args(rho, data, multi))
    W = field.to_W(c.Y)
    rate = jnp.sum(jnp.where(W != 0, dW / jnp.where(W != 0, W, 1.0), 0.0), axis=0)
    near = lb >= jnp.max(lb) + jnp.log1p(-_TIE)
    return jnp.argmax(jnp.where(near, rate, -jnp.inf))


#: The bisection's tolerance in time (`BracketBisection(rtol=1e-13, atol=1e-13)`).
_ROOT_TOL = 1e-13
#: Rounding per step and per unit of |d g / d y_i| |y_i| (a few ULP of each stage sum).
_ROUND = 8 * np.finfo(np.float64).eps


def _gap_rate(field: SamField, Y, s, args, lead, to) -> Float[Array, ""]:
    """d/dclock (log|beta_to| - log|beta_lead|) at (Y, s), from the field (`args`: the
    run's arguments)."""
    dW, _ = field.velocity_W(Y, s, args)
    W = field.to_W(Y)
    rate = jnp.sum(jnp.where(W != 0, dW / jnp.where(W != 0, W, 1.0), 0.0), axis=0)
    return rate[to] - rate[lead]


def _switch_time_err(gap, gap_rate, y, rtol, atol, steps, t) -> tuple:
    """(bound, rate): a bound on the error of a switch time located at clock time `t`
    (docs/theory.md s.5), and the gap's rate there.

    `gap(y)`, `gap_rate(y)`: the gap g = log|beta_to| - log|beta_lead| and its rate
    dg/dclock as functions of the solver's state `y` (a pytree); `rtol`, `atol`: the
    step-size controller's tolerances on y; `steps`: the steps taken to here. Every
    accepted step has an error estimate e with RMS_i(e_i / (atol + rtol |y_i|)) <= 1
    over the N components of y, so it moves a function with gradient a by at most
    sqrt(N) ||a (atol + rtol |y|)||_2 (Cauchy-Schwarz). Summed over the steps (and
    once more for the dense interpolant the root is found on), the state's error
    reaches g directly (a = dg/dy) and through the rate of g, over the time elapsed
    (a = d(dg/dclock)/dy, times |t|): both gradients are taken at the root. Then the
    rounding, the lead condition's offset 1e-12 (the event is late by offset / |rate|),
    divided by |rate|, and the bisection's tolerance."""
    c = jax.grad(gap)(y)
    rate, r = jax.value_and_grad(gap_rate)(y)
    ys = jax.tree.leaves(y)
    n = sum(x.size for x in ys)
    tol = [atol + rtol * jnp.abs(yi) for yi in ys]
    size = lambda a: jnp.sqrt(n * sum(jnp.sum((ai * ti) ** 2) for ai, ti in zip(jax.tree.leaves(a), tol)))
    rounding = _ROUND * sum(jnp.sum(jnp.abs(ci * yi)) for ci, yi in zip(jax.tree.leaves(c), ys))
    err_g = (steps + 1) * (size(c) + jnp.abs(t) * size(r) + rounding) + _OFFSET
    return err_g / jnp.abs(rate) + _ROOT_TOL * (1.0 + jnp.abs(t)), rate


def _no_event_value(events: EventSet, t, y, args):
    return events.value(t, y, args) if events.names else jnp.asarray(1.0, jnp.result_type(t))
