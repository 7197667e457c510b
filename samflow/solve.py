"""Integrate one cell (one init, one rho) of a flow with diffrax, singular points included.

The solve of a cell is a short loop of diffrax solves ("segments"). Each segment
runs an adaptive Runge-Kutta solve in float64 that stops at the first event:

- **collapse** (l2-SAM, L >= 2): ||W||_2 falls to `capture_radius * rho`. The
  field is bounded near 0, so the remaining time to W = 0 is extrapolated
  linearly (error O(capture^2)); the cell's state is 0 from then on
  (docs/theory.md section 4). Status `COLLAPSED`.
- **sign switch** (linf-SAM): a weight reaches 0. It is set to exactly 0 and the
  one-sided limits of the field decide: if the field points towards 0 from both
  sides the weight stays there (Filippov sliding, status `SLID`); otherwise it
  crosses and the integration goes on with its sign on the new side. The next
  segment starts at the event, so the solver never steps across the
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
  are re-decided when a sign of r changes. Sliding on two surfaces at once (two
  r_j, or a weight at 0 whose continuation is not unique) is not followed:
  status `SURFACE`, NaN after its event time.
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
that status, without a solve: diffrax events only fire on a down-crossing.
Every segment saves at the requested times that fall inside it. A cell that
fails (max_steps, non-finite input) gets its own status and NaNs, never an
exception, so a vmapped batch survives any one member (`throw=False`).
"""

from __future__ import annotations

import dataclasses
import enum

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .data import Dataset
from .flows import (
    Method,
    log_coords_eligible,
    log_velocity,
    perturbed_weights,
    real_time_velocity,
    rescaled_velocity,
    unit_l2,
)
from .losses import AbstractLoss, get_loss
from .model import beta as beta_of
from .model import init_weights, loss_value, prod_excl, residual
from .status import Status

__all__ = ["Clock", "SolverSettings", "Trajectory", "solve", "solve_cell"]

_BIG = 1e300
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
# linf on multi-sample data: an r_j = 0 surface counts as crossed 1e-12 (in units
# of max|X|) past it, so that the next segment starts strictly on the new side
# (diffrax fires an event only on a down-crossing from > 0).
_R_OFFSET = 1e-12


class _BracketEvent(optx.Bisection):
    """Bisection that stops when the bracket is small in time alone.

    `optx.Bisection` also asks |f| < atol, which never holds for a steep event
    function (the pole condition changes by ~1/(tau* - tau) per unit time)."""

    def terminate(self, fn, y, args, options, state, tags):
        scale = self.atol + self.rtol * jnp.abs(y)
        return jnp.abs(state.lower - state.upper) < scale, optx.RESULTS.successful


class Clock(str, enum.Enum):
    """The time variable of a solve: real time `t` or rescaled time `tau`."""

    T = "t"
    TAU = "tau"

    @classmethod
    def parse(cls, name: "str | Clock") -> "Clock":
        """Clock from its name; `ValueError` naming the allowed names otherwise."""
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown clock {name!r}: allowed values are t, tau") from None


_SOLVERS = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}


@dataclasses.dataclass(frozen=True)
class SolverSettings:
    """Static settings of a solve (hashable: one compilation per distinct value).

    **Fields:**

    - `solver`: "tsit5" (default), "dopri5" or "dopri8" (diffrax explicit RK).
    - `rtol`, `atol`: tolerances of the PID step-size controller; the absolute
      tolerance used is atol x clip(max|W(0)|, 1e-150, 1), so that cells with tiny
      inits keep their relative accuracy.
    - `max_steps`: step budget of one segment.
    - `capture_radius`: collapse is declared when ||W||_2 <= capture_radius * rho
      (docs/theory.md section 4 recommends 1e-6 in float64); arrival at another
      critical point of the loss (l2) when ||G(W)|| / ||G(W_hat)|| <= capture_radius.
    - `blowup_log10`: in the tau clock a cell stops as blown up when max_j |beta_j|
      >= 10**blowup_log10 (growth past the float64 range), or, for depth >= 3,
      when it nears a pole: relative growth rate x tau > 1e10 (finite-time
      blow-up; the event is then within ~1e-10 relative of the blow-up time).
    - `max_segments`: most segments (events) per cell; None means 2 L d + 2
      (plus 4 d for linf-SAM on multi-sample data: its r_j = 0 crossings and
      slides).
    - `loss`: "logistic" or "exponential".
    - `coords`: the state the solver integrates: "linear" (default; the weights
      W) or "log" (x = log|W| with the signs held fixed; gd, l2 and usam on one
      sample with sign(prod_l w_lj(0)) = sign(mu_j) only, see
      `samflow.flows.log_coords_eligible`). In log coordinates a suppressed
      coordinate never underflows to 0 (docs/theory.md s.4: in linear coordinates
      one that falls below ~1e-308 is lost for good, and "major last" with it),
      and the stiff decay of the major coordinates before an l2 collapse is
      plain linear motion (about half the steps); the absolute tolerance on x
      is `rtol`, since an error in x is a relative error of W. On CPU the log
      field costs about 1.5x per step, so the two run at about the same speed;
      linear stays the default because it places the collapse time about 10x
      more accurately (see docs/benchmarks.md).
    """

    solver: str = "tsit5"
    rtol: float = 1e-8
    atol: float = 1e-12
    max_steps: int = 16384
    capture_radius: float = 1e-6
    blowup_log10: float = 200.0
    max_segments: int | None = None
    loss: str = "logistic"
    coords: str = "linear"

    def __post_init__(self):
        if self.solver not in _SOLVERS:
            raise ValueError(
                f"solver.solver: unknown solver {self.solver!r}; allowed: {', '.join(_SOLVERS)}"
            )
        if not (0 < self.blowup_log10 <= 300):
            raise ValueError(f"solver.blowup_log10 must be in (0, 300], got {self.blowup_log10!r}")
        for name in ("rtol", "atol", "capture_radius"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"solver.{name} must be a finite number > 0, got {v!r}")
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise ValueError(f"solver.max_steps must be an integer >= 1, got {self.max_steps!r}")
        if self.max_segments is not None and not (
            isinstance(self.max_segments, int) and self.max_segments >= 1
        ):
            raise ValueError(
                f"solver.max_segments must be an integer >= 1 or omitted, got {self.max_segments!r}"
            )
        get_loss(self.loss)
        if self.coords not in ("linear", "log"):
            raise ValueError(f"solver.coords must be 'linear' or 'log', got {self.coords!r}")

    def resolved(self, method: "str | Method", W0, data: Dataset) -> "SolverSettings":
        """These settings, checked against a batch of inits `W0` ((L, d) or
        (B, L, d), host arrays) and its data.

        **Raises:** `ValueError` when `coords` is "log" and the batch is not
        eligible (`samflow.flows.log_coords_eligible`).
        """
        if self.coords == "log" and not log_coords_eligible(W0, data, method):
            raise ValueError(
                "solver.coords = 'log' needs gd, l2 or usam on one sample with nonzero inits "
                "whose layer product has the sign of mu_j; use coords = 'linear'"
            )
        return self


class Trajectory(eqx.Module):
    """The solution of one cell (or, with leading batch axes, of a grid of cells).

    Shapes are given for one cell; a batched solve adds leading axes to each.

    **Fields:**

    - `ts`: `(n_save,)` save times in the clock of the solve (t or tau).
    - `t`: `(n_save,)` real time at the save times (equals `ts` for clock t).
    - `W`: `(n_save, L, d)` weights.
    - `beta`: `(n_save, d)` linear predictor.
    - `loss`: `(n_save,)` empirical loss L(W).
    - `status`: `()` int, a `samflow.Status`.
    - `event_time`: `()` clock time of the collapse, critical point, blow-up or
      failure (for MAX_STEPS: the last accepted step, where the solver stalled);
      0 for a stop condition that holds at the start; NaN if none.
    - `event_t`: `()` the same event in real time t; NaN if none.
    - `collapse_direction`: `(d,)` beta/||beta|| just before collapse; NaN otherwise.
    - `slide_time`: `(L, d)` clock time from which each weight slid at 0; NaN if never
      (or if it left 0 again: linf on multi-sample data, when a sign of r_j changed).
    - `num_steps`: `()` accepted + rejected solver steps over all segments.
    - `num_segments`: `()` diffrax solves used.
    """

    ts: Float[Array, " n_save"]
    t: Float[Array, " n_save"]
    W: Float[Array, "n_save L d"]
    beta: Float[Array, "n_save d"]
    loss: Float[Array, " n_save"]
    status: Int[Array, ""]
    event_time: Float[Array, ""]
    event_t: Float[Array, ""]
    collapse_direction: Float[Array, " d"]
    slide_time: Float[Array, "L d"]
    num_steps: Int[Array, ""]
    num_segments: Int[Array, ""]


def _velocity(W, s, rho, data, memory, frozen, track, method, clock, loss, sign=None, rsurf=None):
    """(dW, ds) of the segment's field, frozen weights held at 0.

    With `rsurf` = (rmem, rslide) given (linf on multi-sample data, clock t), the
    field is `_linf_multi_field`: the sign of r_j from its memory, Filippov
    sliding on an r_j = 0 surface.

    With `sign` given, `W` is x = log|W| and the result is (dx, ds) (log
    coordinates, `samflow.flows.log_velocity`).

    In the tau clock s = log(1 + t), ds/dtau = exp(log(dt/dtau) - s): smooth, and
    error-controlled like the weights. Its stiffness is about d log(dt/dtau)/dtau,
    which stays moderate while t < e^_LOG_T_MAX; past that (`track` false) t is
    no longer followed (docs/theory.md s.4: integrating t is stiff once the loss is tiny).
    """
    if sign is not None:
        dW, log_rate = log_velocity(W, sign, rho, method, data, loss, clock is Clock.TAU)
        if clock is Clock.T:
            return dW, jnp.zeros_like(s)
        return dW, jnp.where(track, jnp.exp(jnp.minimum(log_rate - s, 700.0)), 0.0)
    if rsurf is not None:
        return _linf_multi_field(W, rho, data, memory, frozen, rsurf[0], rsurf[1], loss), jnp.zeros_like(s)
    if clock is Clock.T:
        dW = real_time_velocity(W, rho, method, data, loss, memory)
        ds = jnp.zeros_like(s)
    else:
        dW, log_rate = rescaled_velocity(W, rho, method, data, loss, memory)
        ds = jnp.where(track, jnp.exp(jnp.minimum(log_rate - s, 700.0)), 0.0)
    return jnp.where(frozen, 0.0, dW), ds


def _slide_decision(W, s, rho, data, memory, frozen, candidates, method, clock, loss, rsurf=None):
    """For weights at exactly 0 (`candidates`), decide slide or leave, from the
    one-sided limits of the field (Filippov): returns (memory, frozen) updated."""
    L, d = W.shape
    flat = jnp.arange(L * d)

    def one_sided(c, side):
        mem = memory.reshape(-1).at[c].set(side).reshape(L, d)
        dW, _ = _velocity(W, s, rho, data, mem, frozen, True, method, clock, loss, rsurf=rsurf)
        return dW.reshape(-1)[c]

    f_plus = jax.vmap(lambda c: one_sided(c, 1.0))(flat).reshape(L, d)
    f_minus = jax.vmap(lambda c: one_sided(c, -1.0))(flat).reshape(L, d)
    out_plus = f_plus > 0
    out_minus = f_minus < 0
    came_from = memory
    # Leaves towards the one side whose field points away from 0; when both do
    # (a repelling surface), it keeps going the way it came, and from rest it stays.
    new_side = jnp.where(
        out_plus & ~out_minus,
        1.0,
        jnp.where(out_minus & ~out_plus, -1.0, jnp.where(out_plus & out_minus, -came_from, 0.0)),
    )
    slides = candidates & (new_side == 0)
    memory = jnp.where(candidates & ~slides, new_side, memory)
    return memory, frozen | slides


def _linf_multi_field(W, rho, data, memory, frozen, rmem, rslide, loss):
    """Real-time linf-SAM field on multi-sample data with the sign memory of r.

    eps_lj = rho sign(G_lj), G_lj = -r_j(W) prod_excl_lj(W): besides the weights
    (`memory`, `frozen` as in `_velocity`), its sign flips where r_j(W) = 0. Between
    two events the field uses `rmem` (d,), the side of each r_j = 0 surface the
    cell is on (+-1; 0: plain sign(r_j)), so it is smooth inside a segment. On a
    surface the flow slides along (`rslide` (d,), at most one True: see
    `_rsurface_parts`) the field is the Filippov combination a f+ + (1 - a) f-
    of the two one-sided fields, a = n- / (n- - n+) with n+- = grad r_j . f+-, so
    that r_j stays 0 (docs/theory.md s.2; Filippov, "Differential equations with
    discontinuous righthand sides", 1988, s.2.4). Shape (L, d), per unit t.
    """
    f, _, _, _ = _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss)
    return f


def _one_sided_r(W, rho, data, memory, frozen, rmem, loss):
    """The linf field with the sign of r_j taken from `rmem` (0: sign(r_j(W)))."""
    r = residual(W, data, loss)
    rs = jnp.where(rmem != 0, rmem, r)  # linf uses only the sign of r
    W_hat = perturbed_weights(W, rs, rho, Method.LINF, memory)
    dW = residual(W_hat, data, loss)[None, :] * prod_excl(W_hat)
    return jnp.where(frozen, 0.0, dW)


def _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss, j=None):
    """(field, a, n_plus, n_minus) at W for the r_j = 0 surface of coordinate `j`
    (default: the sliding one, argmax `rslide`).

    f+- are the fields with sign(r_j) = +-1 (f+ applies where r_j > 0); n+- =
    d r_j / dt along them (a JVP of r_j(W)); a = n- / (n- - n+) is the weight of
    f+ in the Filippov sliding field (in [0, 1] exactly when n+ and n- have
    opposite signs, 0/0 guarded to 0). `field` is a f+ + (1 - a) f- where
    `rslide[j]`, else the one-sided field of `rmem`. (L, d), (), (), ().
    """
    if j is None:
        j = jnp.argmax(rslide)
    onehot = jnp.arange(W.shape[1]) == j
    f_p = _one_sided_r(W, rho, data, memory, frozen, jnp.where(onehot, 1.0, rmem), loss)
    f_m = _one_sided_r(W, rho, data, memory, frozen, jnp.where(onehot, -1.0, rmem), loss)
    r_j = lambda w: residual(w, data, loss)[j]
    _, n_p = jax.jvp(r_j, (W,), (f_p,))
    _, n_m = jax.jvp(r_j, (W,), (f_m,))
    den = n_m - n_p
    a = jnp.where(den != 0, n_m / jnp.where(den != 0, den, 1.0), 0.0)
    sliding = rslide[j]
    f_plain = jnp.where(rmem[j] > 0, f_p, f_m)
    f_plain = jnp.where(rmem[j] == 0, _one_sided_r(W, rho, data, memory, frozen, rmem, loss), f_plain)
    ac = jnp.clip(a, 0.0, 1.0)
    f = jnp.where(sliding, ac * f_p + (1.0 - ac) * f_m, f_plain)
    return f, a, n_p, n_m


def _side_decision(n_plus, n_minus, came_from):
    """Filippov at a switching surface from the one-sided normal rates n+- (n > 0:
    the field moves to the + side): +1 / -1 leave to that side, 0 slide. When both
    point away (repelling) it keeps going the way it came (`came_from`; from rest,
    0: it stays, as `_slide_decision`)."""
    out_plus = n_plus > 0
    out_minus = n_minus < 0
    return jnp.where(
        out_plus & ~out_minus,
        1.0,
        jnp.where(out_minus & ~out_plus, -1.0, jnp.where(out_plus & out_minus, -came_from, 0.0)),
    )


def _rehold(W, rho, data, memory, frozen, rmem, rslide, loss):
    """Re-decide the weights held at 0 (`frozen`) after the sign of some r_j
    changed (linf, multi-sample): the field at 0 jumps with it. From the new
    one-sided limits (as `_slide_decision`): both into 0, it stays held; one
    side pointing away, it leaves to that side (memory set, no longer frozen);
    both away (repelling from rest, no unique Filippov continuation):
    `ambiguous`. At even depth a whole column at 0 is decided jointly
    (`_column_decision`; mixed: `ambiguous`).
    Returns (memory, frozen, released, ambiguous): (L, d), (L, d), (L, d), ().
    """
    L, d = W.shape
    flat = jnp.arange(L * d)

    def one_sided(c, side):
        mem = memory.reshape(-1).at[c].set(side).reshape(L, d)
        # dW at c does not depend on which weights are frozen (only zeroed there)
        dW = _linf_multi_field(W, rho, data, mem, jnp.zeros_like(frozen), rmem, rslide, loss)
        return dW.reshape(-1)[c]

    f_plus = jax.vmap(lambda c: one_sided(c, 1.0))(flat).reshape(L, d)
    f_minus = jax.vmap(lambda c: one_sided(c, -1.0))(flat).reshape(L, d)
    out_plus = frozen & (f_plus > 0)
    out_minus = frozen & (f_minus < 0)
    one_way = out_plus ^ out_minus
    both = out_plus & out_minus
    released = one_way
    memory_new = jnp.where(one_way, jnp.where(out_plus, 1.0, -1.0), memory)
    ambiguous = both
    if L % 2 == 0:  # whole columns at 0: jointly (`_column_decision`)
        whole, hold, leave, mixed = _column_decision(W, rho, data, memory, frozen, rmem, rslide, loss)
        released = jnp.where(whole[None], leave[None], released)
        memory_new = jnp.where(whole[None], memory, memory_new)
        ambiguous = jnp.where(whole[None], mixed[None], ambiguous)
    return memory_new, frozen & ~released, released, jnp.any(ambiguous)


def _column_decision(W, rho, data, memory, cand, rmem, rslide, loss):
    """linf on multi-sample data, even depth: a whole column j at 0 (all L
    weights in `cand`, with a sign memory), decided jointly.

    Flipping the sign pattern of a whole column flips each eps_lj (L - 1 factors)
    and keeps beta_hat_j (L factors, even), hence r(W_hat): the column's field
    is f(-m) = -f(m). So the column is attracted to 0 from both sides exactly
    when f(m) . m < 0 for all its weights (it stays: Filippov), and repelled
    when f(m) . m > 0 for all (it leaves with its pattern m; -m gives the same
    beta). Deciding weight by weight instead mixes in the patterns with
    beta_hat_j of the other sign, which on multi-sample data (r(W_hat) can
    change sign) can send a pair across 0 against its field. Returns
    (whole, hold, leave, mixed), each (d,) bool.
    """
    whole = jnp.all(cand, axis=0) & jnp.all(memory != 0, axis=0)
    f0 = _linf_multi_field(W, rho, data, memory, jnp.zeros_like(cand), rmem, rslide, loss)
    sm = f0 * memory
    hold = whole & jnp.all(sm < 0, axis=0)
    leave = whole & jnp.all(sm > 0, axis=0)
    return whole, hold, leave, whole & ~hold & ~leave


def _rsurface_event(W, rho, data, memory, frozen, rmem, rslide, roff, crossed, exited, r_scale, loss):
    """After an r_j = 0 event of linf on multi-sample data (Filippov, as
    `_slide_decision` for a weight): returns (rmem, rslide, surface).

    `crossed`: some r_j reached 0 (the one nearest its event, j). The one-sided
    rates n+- = d r_j/dt of f+- decide: both the same way, it crosses (rmem_j
    flips); both into the surface (n+ < 0 < n-), it slides along it (rslide_j).
    `exited`: the sliding coordinate's a left [0, 1]; it leaves to the side
    whose field now points away (a -> 1: +, a -> 0: -). `surface` is True where
    the cell must stop with status SURFACE: a second r_k surface while sliding
    on one, or two at once (not followed). `changed`: the r-sign state changed,
    so the weights held at 0 must be re-decided (`_rehold`). Returns
    (rmem, rslide, surface, changed).
    """
    d = W.shape[1]
    idx = jnp.arange(d)
    r = residual(W, data, loss)
    active = (rmem != 0) & ~rslide
    j = jnp.argmin(jnp.where(active, r * rmem / r_scale + roff, _BIG))
    _, _, n_p, n_m = _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss, j=j)
    side = _side_decision(n_p, n_m, rmem[j])
    on_j = idx == j
    starts = crossed & (side == 0)
    # Another r_k at 0 too (to 1e-9 of max|X|): two surfaces at once.
    other_zero = jnp.any(active & (idx != j) & (jnp.abs(r) / r_scale < 1e-9))
    surface = crossed & (jnp.any(rslide) | (starts & other_zero))
    rmem_new = jnp.where(crossed & on_j & (side != 0), side, rmem)
    rslide_new = rslide | (starts & on_j)
    k = jnp.argmax(rslide)
    _, a, _, _ = _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss, j=k)
    on_k = idx == k
    rmem_new = jnp.where(exited & on_k, jnp.where(a > 0.5, 1.0, -1.0), rmem_new)
    rslide_new = jnp.where(exited & on_k, False, rslide_new)
    changed = (crossed & (side != rmem[j])) | exited
    return rmem_new, rslide_new, surface, changed


def _critical_ratio(W, rho, data, loss):
    """How close l2-SAM is to a critical point of the loss: (R, ok), both ().

    R = ||G(W)|| / ||G(W_hat)||, with G = grad L (norm over all layers) and
    W_hat = W + rho G / ||G||: `samflow.models.collapse_ratio` for the diagonal
    network (docs/theory.md s.4). Near a critical point W* the l2 field stays of
    order rho while G vanishes linearly, so R ~ ||W - W*|| / rho. `ok` is
    L(W_hat) <= 2 L(W) with L(W) > 1e-280: it rules out a small R from large
    margins (a perturbation that multiplies the loss), including a loss that
    has underflowed. Norms are scaled by max|G| first (no underflow).
    """
    G = -residual(W, data, loss)[None, :] * prod_excl(W)
    W_hat = W + rho * unit_l2(G)
    G_hat = -residual(W_hat, data, loss)[None, :] * prod_excl(W_hat)
    m = jnp.maximum(jnp.max(jnp.abs(G)), jnp.max(jnp.abs(G_hat)))
    m = jnp.where(m > 0, m, 1.0)
    g = jnp.sqrt(jnp.sum((G / m) ** 2))
    g_hat = jnp.sqrt(jnp.sum((G_hat / m) ** 2))
    R = jnp.where(g > 0, g / jnp.where(g_hat > 0, g_hat, 1.0), 0.0)
    value = loss_value(W, data, loss)
    ok = (loss_value(W_hat, data, loss) <= 2.0 * value) & (value > 1e-280)
    return R, ok


def _critical_cond(W, rho, data, loss, capture_radius, gate):
    """Event condition of the l2 critical point, positive until the arrival:
    R - capture_radius where armed (rho > 0, `ok`, ||W|| > gate x rho), else _BIG."""
    R, ok = _critical_ratio(W, rho, data, loss)
    armed = ok & (rho > 0)
    if gate > 0:
        armed = armed & (jnp.sqrt(jnp.sum(W**2)) > gate * rho)
    return jnp.where(armed, R - capture_radius, _BIG)


def _critical_target(W, dW, rho, data, loss):
    """Linear extrapolation to the critical point from the capture: R falls at a
    constant rate there (bounded field). `dW` is dW/dclock; returns the remaining
    clock time dt (>= 0) and the point W + dt dW."""
    R, dR = jax.jvp(lambda w: _critical_ratio(w, rho, data, loss)[0], (W,), (dW,))
    dt = jnp.where(dR < 0, R / jnp.where(dR < 0, -dR, 1.0), 0.0)
    return dt, W + dt * dW


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


def _hold_critical(out_W, after, approach, frac, W_detect, W_stop):
    """Saved weights (n_save, L, d) of a cell that reached a critical point: held
    at `W_stop` after the event, linear from the capture (`W_detect`) to it in
    between (`frac` 1 at the capture, 0 at the event), as the extrapolation assumes."""
    path = W_stop[None] + frac[:, None, None] * (W_detect - W_stop)[None]
    out_W = jnp.where(approach[:, None, None], path, out_W)
    return jnp.where(after[:, None, None], W_stop[None], out_W)


class SegmentArgs(eqx.Module):
    """What the vector field and the event conditions read during one segment
    (diffrax's `args`): constant inside a segment, changed only at its events.

    **Fields** (one cell):

    - `rho`: `()` SAM radius. `data`: the `Dataset` (inputs made finite).
    - `memory`: `(L, d)` the side of 0 each weight is on (+-1; 0: at rest), from
      which linf-SAM takes sign(w_lj) between sign events (docs/theory.md s.4).
    - `frozen`: `(L, d)` bool, weights held at 0 (Filippov sliding).
    - `track`: `()` bool, the tau clock still follows s = log(1 + t).
    - `rmem`, `rslide`, `roff`: `(d,)`, linf-SAM on multi-sample data only (else
      None): the side of each r_j = 0 surface, the coordinate sliding on its
      surface, and the event offsets (`_rsurface_event`).
    """

    rho: Float[Array, ""]
    data: Dataset
    memory: Float[Array, "L d"]
    frozen: Bool[Array, "L d"]
    track: Bool[Array, ""]
    rmem: Float[Array, " d"] | None = None
    rslide: Bool[Array, " d"] | None = None
    roff: Float[Array, " d"] | None = None

    @property
    def rsurf(self):
        """(rmem, rslide) for `_velocity` on multi-sample linf data, else None."""
        return None if self.rmem is None else (self.rmem, self.rslide)


class SamField(eqx.Module):
    """The vector field of one cell in diffrax's form `field(t, y, args)`, with
    y = (Y, s) and `args` a `SegmentArgs`; returns (dY, ds) per unit clock time.

    Y is the weights W `(L, d)`, or x = log|W| with the signs `sign` held fixed
    (log coordinates, `sign` not None). s = log(1 + t) is the real time carried
    by the tau clock (0 in the t clock). See `_velocity` (docs/theory.md s.2-4).
    """

    method: Method = eqx.field(static=True)
    clock: Clock = eqx.field(static=True)
    loss: AbstractLoss = eqx.field(static=True)
    sign: Float[Array, "L d"] | None = None

    @property
    def log_coords(self) -> bool:
        return self.sign is not None

    def to_W(self, Y):
        """Weights from the state (identity in linear coordinates)."""
        return self.sign * jnp.exp(Y) if self.log_coords else Y

    def __call__(self, t, y, args: SegmentArgs):
        W, s = y
        return _velocity(
            W, s, args.rho, args.data, args.memory, args.frozen, args.track,
            self.method, self.clock, self.loss, self.sign, args.rsurf,
        )

    def velocity_W(self, Y, s, args: SegmentArgs):
        """dW/dclock and ds/dclock at state (Y, s), in linear coordinates."""
        dY, ds = self(None, (Y, s), args)
        return (self.to_W(Y) * dY if self.log_coords else dY), ds


# Event conditions: each is a function of (events, t, y, args), dimensionless,
# positive until its event (diffrax fires on the down-crossing through 0).


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
    return _critical_cond(ev.field.to_W(y[0]), args.rho, args.data, ev.field.loss, ev.capture_radius, ev.gate)


def _cross_condition(ev, t, y, args):
    """linf: the smallest w_lj memory_lj / rho over the weights not held at 0."""
    active = ~args.frozen & (args.memory != 0)
    rho = args.rho
    scale = jnp.where(rho > 0, rho, 1.0)
    value = y[0] * args.memory / scale
    if args.rmem is not None:
        # A weight that a decision sent the wrong way (a field the one-sided
        # limits misjudged) fires at once instead of masking every later event.
        value = value + _R_OFFSET
    return jnp.min(jnp.where(active, value, _BIG))


def _rcross_condition(ev, t, y, args):
    """linf, multi-sample: an r_j = 0 surface is reached when r_j rmem_j / max|X|
    falls to -roff_j (just past it, so the next segment starts on the new side)."""
    r = residual(y[0], args.data, ev.field.loss)
    active = (args.rmem != 0) & ~args.rslide
    return jnp.min(jnp.where(active, r * args.rmem / ev.r_scale + args.roff, _BIG))


def _rexit_condition(ev, t, y, args):
    """linf, multi-sample: sliding on r_j = 0 ends where a = n- / (n- - n+)
    leaves [0, 1] (`_rsurface_parts`)."""
    _, a, _, _ = _rsurface_parts(
        y[0], args.rho, args.data, args.memory, args.frozen, args.rmem, args.rslide, ev.field.loss
    )
    return jnp.where(jnp.any(args.rslide), jnp.minimum(a, 1.0 - a), _BIG)


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
        names = []
        if field.method is Method.L2 and depth >= 2:
            names.append("collapse")
        if field.method is Method.L2:
            names.append("critical")
        if field.method is Method.LINF:
            names.append("cross")
        if multi:
            names += ["rcross", "rexit"]
        if field.clock is Clock.TAU:
            names += ["blowup", "pole", "t_range"] if depth >= 3 else ["blowup", "t_range"]
        gate = (_CRITICAL_GATE * settings.capture_radius) ** (1.0 / (depth - 1)) if depth >= 2 else 0.0
        return cls(field, tuple(names), settings.capture_radius, gate, settings.blowup_log10, w_scale, r_scale)

    def values(self, t, y, args) -> Float[Array, " n_events"]:
        return jnp.stack([_CONDITIONS[k](self, t, y, args) for k in self.names])

    def value(self, t, y, args, **kwargs) -> Float[Array, ""]:
        return jnp.min(self.values(t, y, args))

    def fired(self, t, y, args, is_event) -> dict:
        """name -> bool: the condition nearest 0 at the event time fired."""
        if not self.names:
            return {}
        which = jnp.argmin(self.values(t, y, args))
        return {k: is_event & (which == i) for i, k in enumerate(self.names)}

    def diffrax_event(self) -> "diffrax.Event | None":
        if not self.names:
            return None
        # Bisection on the bracket: Newton on Tsit5's dense interpolant can fail
        # to terminate. Decreasing conditions: events are down-crossings.
        return diffrax.Event(
            self.value, root_finder=_BracketEvent(rtol=1e-13, atol=1e-13, flip=True), direction=False
        )


class CellState(eqx.Module):
    """The carry of `solve_cell`'s segment loop, grouped as diffrax's `State`.

    Y is the solver's state (W, or log|W| in log coordinates); shapes `(L, d)`
    unless noted, `n` = number of save times.
    """

    # Where the next segment starts.
    seg: Int[Array, ""]
    t0: Float[Array, ""]
    Y: Float[Array, "L d"]
    s: Float[Array, ""]
    memory: Float[Array, "L d"]
    frozen: Bool[Array, "L d"]
    track: Bool[Array, ""]
    rmem: Float[Array, " d"]
    rslide: Bool[Array, " d"]
    roff: Float[Array, " d"]
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
    t_untracked: Float[Array, ""]
    # Statistics and loop control.
    steps: Int[Array, ""]
    done: Bool[Array, ""]

    def segment_args(self, rho, data, multi: bool) -> SegmentArgs:
        extra = (self.rmem, self.rslide, self.roff) if multi else (None, None, None)
        return SegmentArgs(rho, data, self.memory, self.frozen, self.track, *extra)


def _sanitize(W0, rho, data):
    """float64 inputs, with non-finite ones replaced by harmless zeros so that
    nothing non-finite enters the solver: (W0, rho, data, finite)."""
    dtype = jnp.result_type(W0.dtype, jnp.float64)
    W0 = W0.astype(dtype)
    rho = jnp.asarray(rho, dtype)
    finite = jnp.all(jnp.isfinite(W0)) & jnp.isfinite(rho) & jnp.all(jnp.isfinite(data.X))
    W0 = jnp.where(finite, W0, 0.0)
    rho = jnp.where(finite, rho, 0.0)
    data = Dataset(X=jnp.where(finite, data.X, 0.0), y=data.y)
    return W0, rho, data, finite


def _r_scale(data: Dataset):
    """max|X|: r_j / max|X| is dimensionless (|r_j| <= max|x_ij| max slope)."""
    r_scale = jnp.max(jnp.abs(data.X))
    return jnp.where(r_scale > 0, r_scale, 1.0)


def _initial_rsurface(field: SamField, W0, rho, data, memory0, frozen0):
    """linf on multi-sample data: the side of each r_j = 0 surface at the start;
    one that starts exactly on it is decided from the one-sided fields
    (Filippov), as a weight at 0 is. Returns (rmem0, rslide0, roff0), each (d,)."""
    d = W0.shape[1]
    dtype = W0.dtype
    loss = field.loss
    r0 = residual(W0, data, loss)
    rmem0 = jnp.sign(r0)
    rslide0 = jnp.zeros((d,), bool)
    n_p0, n_m0 = jax.vmap(
        lambda j: _rsurface_parts(W0, rho, data, memory0, frozen0, rmem0, rslide0, loss, j=j)[2:]
    )(jnp.arange(d))
    side0 = _side_decision(n_p0, n_m0, jnp.zeros((d,), dtype))
    on0 = (r0 == 0) & ~((n_p0 == 0) & (n_m0 == 0))  # not an r_j that is 0 for every W
    rmem0 = jnp.where(on0 & (side0 != 0), side0, rmem0)
    rslide0 = on0 & (side0 == 0)
    return rmem0, rslide0, jnp.full((d,), _R_OFFSET, dtype)


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
    surface0 = jnp.asarray(False)
    if multi:
        rmem0, rslide0, roff0 = _initial_rsurface(field, W0, rho, data, memory0, frozen0)
    if method is Method.LINF:
        memory0, frozen0 = _slide_decision(
            W0, s0, rho, data, memory0, frozen0, W0 == 0, method, clock, loss,
            rsurf=(rmem0, rslide0) if multi else None,
        )
    if multi:
        # Sliding on two surfaces at once (two r_j, or an r_j and a weight at 0)
        # is not followed: the cell stops there (status SURFACE).
        surface0 = finite & ((jnp.sum(rslide0) > 1) | (jnp.any(rslide0) & jnp.any(frozen0)))
    if clock is Clock.TAU:
        # A cell whose loss is already below ~1e-30 starts beyond the t range.
        track0 = rescaled_velocity(W0, rho, method, data, loss, memory0)[1] < _LOG_T_MAX
    else:
        track0 = jnp.asarray(False)
    Y0 = jnp.log(jnp.where(W0 != 0, jnp.abs(W0), 1.0)) if field.log_coords else W0
    capture = events.capture_radius * rho
    start_collapsed = jnp.sqrt(jnp.sum(W0**2)) <= capture if "collapse" in events.names else jnp.asarray(False)
    args0 = SegmentArgs(rho, data, memory0, frozen0, track0, *((rmem0, rslide0, roff0) if multi else (None,) * 3))
    values0 = events.values(0.0, (Y0, s0), args0) if events.names else []
    start_collapsed, start_blown, start_critical = _start_events(
        dict(zip(events.names, values0)), start_collapsed & finite, finite
    )
    start_stop = start_collapsed | start_blown | start_critical | surface0
    # A cell stopped at the start keeps its initial state at the save time 0.
    at_start = (ts <= 0) & start_stop
    return CellState(
        seg=jnp.asarray(0),
        t0=jnp.where(~finite | start_stop, ts[-1], 0.0).astype(dtype),
        Y=Y0,
        s=s0,
        memory=memory0,
        frozen=frozen0,
        track=track0,
        rmem=rmem0,
        rslide=rslide0,
        roff=roff0,
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
        t_untracked=jnp.where(track0, jnp.inf, 0.0).astype(dtype),
        steps=jnp.asarray(0),
        done=~finite | start_stop,
    )


def _segment_solver(field: SamField, events: EventSet, settings: SolverSettings, w_scale):
    """`run(t0, t1, y0, args, ts_seg)`: one diffrax solve from t0 that stops at
    the first event, saving at `ts_seg` and at its end (`throw=False`: a failed
    cell keeps its status, the batch goes on)."""
    term = diffrax.ODETerm(field)
    solver = _SOLVERS[settings.solver]()
    # atol is relative to the init scale: a cell started at 1e-300 is followed
    # to rtol, not swamped by an absolute tolerance far above its weights.
    # (Floored at 1e-150: below that the error norms themselves leave the normal
    # float64 range, and beta = w^L has underflowed anyway.)
    atol = settings.atol * jnp.where(w_scale > 0, jnp.clip(w_scale, 1e-150, 1.0), 1.0)
    if field.log_coords:
        atol = settings.rtol  # an absolute error of x is a relative error of W
    controller = diffrax.PIDController(rtol=settings.rtol, atol=atol)
    event = events.diffrax_event()

    def run(t0, t1, y0, args, ts_seg):
        return diffrax.diffeqsolve(
            term, solver, t0, t1, None, y0, args=args,
            saveat=diffrax.SaveAt(subs=(diffrax.SubSaveAt(ts=ts_seg), diffrax.SubSaveAt(t1=True))),
            stepsize_controller=controller, event=event, max_steps=settings.max_steps, throw=False,
        )

    return run


def extrapolate_collapse(W, dW):
    """Remaining clock time to W = 0 along a straight line from the capture:
    ||W||^2 / (-W . dW) (0 if the field does not point inwards). The field is
    bounded near 0, so the error is O(capture^2) (docs/theory.md s.4)."""
    radial = -jnp.sum(W * dW)
    return jnp.where(radial > 0, jnp.sum(W**2) / jnp.where(radial > 0, radial, 1.0), 0.0)


def _beta_direction(field: SamField, Y, W):
    """beta / ||beta|| at state Y (log coordinates: without forming beta, which
    may underflow); 0/0 guarded."""
    if field.log_coords:
        X = jnp.sum(Y, axis=0)
        b = jnp.prod(field.sign, axis=0) * jnp.exp(X - jnp.max(X))
    else:
        b = beta_of(W)
    b_norm = jnp.sqrt(jnp.sum(b**2))
    return b / jnp.where(b_norm > 0, b_norm, 1.0)


def _cross_or_slide(field: SamField, c: CellState, args: SegmentArgs, W_end, Y_end, s_end, crossed, multi):
    """linf sign event: the weights that reached 0 are set to exactly 0, then
    slide or cross (`_slide_decision`; at even depth on multi-sample data a
    whole column at 0 is decided jointly, `_column_decision`). Returns
    (W_next, memory, frozen, col_mixed); W_next is the next segment's state."""
    method, clock, loss = field.method, field.clock, field.loss
    rho, data = args.rho, args.data
    L = W_end.shape[0]
    active = ~c.frozen & (c.memory != 0)
    at_zero = crossed & active & (W_end * c.memory <= 1e-9 * rho)
    W_next = jnp.where(at_zero, 0.0, W_end) if not field.log_coords else Y_end
    col_mixed = jnp.asarray(False)
    if multi and L % 2 == 0:
        whole, hold, leave, mixed = _column_decision(W_next, rho, data, c.memory, at_zero, c.rmem, c.rslide, loss)
        memory, frozen = _slide_decision(
            W_next, s_end, rho, data, c.memory, c.frozen, at_zero & ~whole[None], method, clock, loss,
            rsurf=args.rsurf,
        )
        frozen = frozen | (hold[None] & at_zero)
        col_mixed = jnp.any(mixed)
    elif method is Method.LINF:
        memory, frozen = _slide_decision(
            W_next, s_end, rho, data, c.memory, c.frozen, at_zero, method, clock, loss, rsurf=args.rsurf
        )
    else:
        memory, frozen = c.memory, c.frozen
    return W_next, memory, frozen, col_mixed


def _rsurface_step(field, c, args, W_next, memory, frozen, slide_time, hit, r_scale):
    """linf on multi-sample data, after a segment: the r_j = 0 surface decision
    (`_rsurface_event`) and the re-decision of the weights held at 0 when a sign
    of r changed (`_rehold`). Returns (memory, frozen, slide_time, rmem, rslide,
    roff, surface)."""
    rho, data, loss = args.rho, args.data, field.loss
    rmem, rslide, surface, changed = _rsurface_event(
        W_next, rho, data, memory, frozen, c.rmem, c.rslide, c.roff, hit["rcross"], hit["rexit"], r_scale, loss
    )
    mem2, frozen2, released, ambiguous = _rehold(W_next, rho, data, memory, frozen, rmem, rslide, loss)
    memory = jnp.where(changed, mem2, memory)
    frozen = jnp.where(changed, frozen2, frozen)
    slide_time = jnp.where(changed & released, jnp.nan, slide_time)
    surface = surface | (changed & ambiguous)
    r_next = residual(W_next, data, loss)
    roff = _R_OFFSET + jnp.maximum(0.0, -r_next * rmem / r_scale)
    return memory, frozen, slide_time, rmem, rslide, roff, surface


def _segment(c: CellState, *, field, events, run, ts, rho, data, multi) -> CellState:
    """One segment: solve to the first event, save what it covers, and act on
    the event (collapse, critical point, sign switch, r_j surface, blow-up,
    t range, failure)."""
    args = c.segment_args(rho, data, multi)
    t_final = ts[-1]
    sol = run(c.t0, t_final, (c.Y, c.s), args, jnp.clip(ts, c.t0, t_final))
    (Y_seg, s_seg), (Y_end, s_end) = sol.ys
    Y_end, s_end = Y_end[0], s_end[0]
    W_end = field.to_W(Y_end)
    ok = sol.result == diffrax.RESULTS.successful
    is_event = sol.result == diffrax.RESULTS.event_occurred
    healthy = ok | is_event
    # The step at which a failure happened is not reported reliably; keep what
    # was saved strictly before the failure and nothing after it. Out of steps,
    # the solver stalled at its last accepted step (the t1 save); every save up
    # to there is valid.
    saved_ok = jnp.isfinite(Y_seg).all((1, 2)) & (ts >= c.t0)
    t_stall = sol.ts[1][0]
    t_end = jnp.where(healthy, t_stall, jnp.max(jnp.where(saved_ok, ts, c.t0)))
    max_steps = sol.result == diffrax.RESULTS.max_steps_reached
    inside = (ts >= c.t0) & jnp.where(
        ok, ts <= t_end, jnp.where(max_steps, saved_ok & (ts <= t_stall), ts < t_end)
    )
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
        dt_crit, W_crit = _critical_target(W_end, dW_end, rho, data, field.loss)
    else:
        dt_crit, W_crit = jnp.zeros((), W_end.dtype), W_end

    W_next, memory, frozen, col_mixed = _cross_or_slide(
        field, c, args, W_end, Y_end, s_end, hit.get("cross", false), multi
    )
    slide_time = jnp.where(frozen & ~c.frozen, t_end, c.slide_time)
    rmem, rslide, roff, surface = c.rmem, c.rslide, c.roff, false
    if multi:
        memory, frozen, slide_time, rmem, rslide, roff, surface = _rsurface_step(
            field, c, args, W_next, memory, frozen, slide_time, hit, events.r_scale
        )
        surface = surface | col_mixed

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
    dt_stop = jnp.where(collapsed, dt_rem, jnp.where(critical, dt_crit, 0.0))
    t_stop = jnp.where(max_steps, t_stall, t_end)
    done = ok | stops
    return CellState(
        seg=c.seg + 1,
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
        out_Y=jnp.where(inside[:, None, None], Y_seg, c.out_Y),
        out_s=jnp.where(inside, s_seg, c.out_s),
        status=status,
        event_time=jnp.where(stops, t_stop + dt_stop, c.event_time),
        event_s=jnp.where(stops, s_end + jnp.where(collapsed | critical, ds_end * dt_stop, 0.0), c.event_s),
        collapse_direction=coll_dir,
        W_detect=jnp.where(collapsed | critical, W_end, c.W_detect),
        t_detect=jnp.where(collapsed | critical, t_end, c.t_detect),
        W_stop=jnp.where(critical, W_crit, c.W_stop),
        slide_time=slide_time,
        t_untracked=jnp.where(untracked, t_end, c.t_untracked),
        steps=c.steps + sol.stats["num_steps"],
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
    status = jnp.where(c.done, status, int(Status.MAX_STEPS))  # ran out of segments
    event_time = jnp.where(c.done, c.event_time, c.t0)  # t0: where the segments ran out

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
        num_segments=c.seg,
    )


def solve_cell(
    W0: Float[Array, "L d"],
    rho: Float[Array, ""],
    data: Dataset,
    ts: Float[Array, " n_save"],
    *,
    method: Method,
    clock: Clock,
    settings: SolverSettings,
) -> Trajectory:
    """Solve one cell from W(0) = `W0` at radius `rho`; pure and vmappable.

    The clock starts at 0 and ends at `ts[-1]`. `ts` must be increasing with
    `ts[0] >= 0`; this function does not check (see `solve`). Batch it with
    `jax.vmap` over `W0` and `rho` (and `data` if wanted). The loop of segments
    and what ends each one are described in this module's docstring.

    **Returns:** a `Trajectory` (see there for shapes).

    **Raises:** `ValueError` for log coordinates with linf-SAM, or the tau clock
    on multi-sample linf data (checked when traced).
    """
    method = Method.parse(method)
    clock = Clock.parse(clock)
    L, d = W0.shape
    # linf on multi-sample data: the direction also flips where r_j(W) = 0
    # (`_linf_multi_field`); on one sample r_j = slope mu_j never changes sign.
    multi = method is Method.LINF and data.X.shape[0] > 1
    if settings.coords == "log" and method is Method.LINF:
        raise ValueError("solver.coords = 'log' does not apply to linf-SAM")
    if multi and clock is Clock.TAU:
        raise ValueError("clock 'tau' (rescaled flow) needs a single-sample data set; use clock 't'")
    max_segments = settings.max_segments or (2 * L * d + 2 + (4 * d if multi else 0))
    W0, rho, data, finite = _sanitize(W0, rho, data)
    # Log coordinates: the state is x = log|W| with the signs fixed.
    sign = jnp.where(W0 < 0, -1.0, 1.0).astype(W0.dtype) if settings.coords == "log" else None
    field = SamField(method, clock, get_loss(settings.loss), sign)
    w_scale = jnp.max(jnp.abs(W0))
    events = EventSet.for_cell(field, L, multi, settings, w_scale, _r_scale(data) if multi else None)
    run = _segment_solver(field, events, settings, w_scale)
    init = _initial_state(field, events, W0, rho, data, ts, finite, multi)
    body = lambda c: _segment(c, field=field, events=events, run=run, ts=ts, rho=rho, data=data, multi=multi)
    c = jax.lax.while_loop(lambda c: (~c.done) & (c.seg < max_segments), body, init)
    return _finish(field, c, ts, data)


@eqx.filter_jit
def _solve_batch(W0, rho, data, ts, method, clock, settings):
    fn = lambda W, r: solve_cell(W, r, data, ts, method=method, clock=clock, settings=settings)
    return jax.vmap(fn)(W0, rho)


class Summary(eqx.Module):
    """What the figures and the analysis read of a `Trajectory`, in a fifth of
    the memory (`summarize`; `samflow.sweep.solve_grid(..., summary=True)`).

    Shapes for one cell; a batched solve adds leading axes to each.

    **Fields:**

    - `t`: `(n_save,)` float64, real time at the save times (as `Trajectory.t`).
    - `dominant`: `(n_save,)` int8 (int16 when d > 127): the dominant feature
      argmax_j |beta_j|, 1-based, lowest index on exact ties; 0 where beta is all
      zero; -1 where beta is not finite (`samflow.analysis.dominant_index`).
    - `tied`: `(n_save,)` bool: the two largest |beta_j| are within the relative
      `tie_tol` (`samflow.analysis.tied`; `regime_label` skips tied times).
    - `beta_norm`: `(n_save,)` float64, ||beta||_2 (computed without overflow);
      NaN where beta is not finite.
    - `loss`: `(n_save,)` float64.
    - `status`, `event_time`, `event_t`, `collapse_direction`, `slide_time`,
      `num_steps`, `num_segments`: as in `Trajectory`.
    """

    t: Float[Array, " n_save"]
    dominant: Int[Array, " n_save"]
    tied: Bool[Array, " n_save"]
    beta_norm: Float[Array, " n_save"]
    loss: Float[Array, " n_save"]
    status: Int[Array, ""]
    event_time: Float[Array, ""]
    event_t: Float[Array, ""]
    collapse_direction: Float[Array, " d"]
    slide_time: Float[Array, "L d"]
    num_steps: Int[Array, ""]
    num_segments: Int[Array, ""]


def summarize(traj: Trajectory, tie_tol: float = 1e-9) -> Summary:
    """Reduce a `Trajectory` (any leading batch axes) to a `Summary`; jittable,
    so that a batched solve can reduce on the device before anything is copied.

    `dominant` and `tied` equal `samflow.analysis.dominant_index(beta)` and
    `samflow.analysis.tied(beta, tie_tol)` exactly (`tie_tol` 1e-9 is
    `regime_label`'s default).
    """
    b = traj.beta
    d = b.shape[-1]
    a = jnp.abs(b)
    finite = jnp.all(jnp.isfinite(b), axis=-1)
    a = jnp.where(finite[..., None], a, 0.0)
    m = jnp.max(a, axis=-1)
    idx = jnp.argmax(a, axis=-1) + 1
    dom = jnp.where(finite, jnp.where(m > 0, idx, 0), -1).astype(jnp.int8 if d <= 127 else jnp.int16)
    if d >= 2:
        top2 = jnp.sort(a, axis=-1)[..., -2:]
        tied = finite & (top2[..., 1] > 0) & (top2[..., 0] >= (1.0 - tie_tol) * top2[..., 1])
    else:
        tied = jnp.zeros(finite.shape, bool)
    scale = jnp.where(m > 0, m, 1.0)
    norm = scale * jnp.sqrt(jnp.sum((a / scale[..., None]) ** 2, axis=-1))
    return Summary(
        t=traj.t,
        dominant=dom,
        tied=tied,
        beta_norm=jnp.where(finite, norm, jnp.nan),
        loss=traj.loss,
        status=traj.status,
        event_time=traj.event_time,
        event_t=traj.event_t,
        collapse_direction=traj.collapse_direction,
        slide_time=traj.slide_time,
        num_steps=traj.num_steps,
        num_segments=traj.num_segments,
    )


def _brief(x) -> str:
    """A one-line, short rendering of a user value for an error message."""
    if isinstance(x, (np.ndarray, jax.Array)) or (isinstance(x, (list, tuple)) and len(x) > 0):
        try:
            a = np.asarray(x, dtype=np.float64)
            text = np.array2string(a, separator=", ", threshold=6, edgeitems=2, max_line_width=10**6)
            return text.replace("\n", "") if a.ndim else text
        except (TypeError, ValueError):
            pass
    text = " ".join(repr(x).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _float_array(x, name: str) -> np.ndarray:
    """`x` as a float64 numpy array, or a one-line `ValueError` naming `name`."""
    try:
        if isinstance(x, (str, bytes)) or np.iscomplexobj(x):
            raise TypeError
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or a regular array of real numbers, got {_brief(x)}") from None


def check_save_times(ts: ArrayLike, name: str = "ts") -> np.ndarray:
    """Validate save times: 1-D, finite, >= 0, strictly increasing, last > 0.

    **Returns:** float64 `(n_save,)`.

    **Raises:** `ValueError` naming `name` and what is wrong.
    """
    ts = _float_array(ts, name)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D list of times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError(f"{name} contains a non-finite time")
    if ts[0] < 0:
        raise ValueError(f"{name} must start at a time >= 0 (the flow starts at 0), got {ts[0]}")
    if np.any(np.diff(ts) <= 0):
        raise ValueError(f"{name} must be strictly increasing")
    if ts[-1] <= 0:
        raise ValueError(f"{name} must end at a time > 0, got {ts[-1]}")
    return ts


def check_depth(depth) -> int:
    """`depth` as an int >= 1, or a one-line `ValueError`."""
    if isinstance(depth, (bool, np.bool_)) or not (isinstance(depth, (int, np.integer)) and depth >= 1):
        raise ValueError(f"depth must be an integer >= 1, got {_brief(depth)}")
    return int(depth)


def check_rho(rho: ArrayLike) -> tuple[np.ndarray, bool]:
    """Validate the SAM radius of a call: a scalar (one cell) or a non-empty 1-D
    vector (one cell per entry), finite and >= 0.

    **Returns:** `(rho_b, batched)`: float64 `(B,)` (B = 1 for a scalar) and
    whether `rho` was a vector.

    **Raises:** `ValueError` naming rho and what is wrong.
    """
    r = _float_array(rho, "rho")
    if r.ndim > 1:
        raise ValueError(f"rho must be a scalar or a 1-D vector (one cell per entry), got shape {r.shape}")
    if r.ndim == 1 and r.size == 0:
        raise ValueError("rho is an empty vector: give at least one radius (or a scalar)")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"rho must be finite, got {_brief(rho)}")
    if np.any(r < 0):
        raise ValueError(f"rho must be >= 0, got {_brief(rho)}")
    return np.atleast_1d(r), r.ndim == 1


def check_data(data: Dataset, name: str = "data") -> None:
    """Refuse, in one line naming `name`, anything but a valid `samflow.Dataset`:
    X (n, d) with n, d >= 1, all finite; y (n,) of labels -1 / +1
    (`Dataset.from_arrays` checks, for a `Dataset` built with the plain
    constructor). A non-finite data set is refused here rather than solved into
    a batch of `NONFINITE_INPUT` cells.
    """
    if not isinstance(data, Dataset):
        raise ValueError(
            f"{name} must be a samflow.Dataset (sf.single_sample(mu) or sf.Dataset.from_arrays(X, y)), "
            f"got {type(data).__name__}"
        )
    try:
        Dataset.from_arrays(np.asarray(data.X), np.asarray(data.y))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from None


def batch_cells(alpha: ArrayLike, rho: ArrayLike, depth: int, d: int, *, alpha_batched: bool = False):
    """The cells of a `solve`-style call: `(W0, rho_b, batched)` with `W0`
    float64 `(B, L, d)`, `rho_b` float64 `(B,)` and `batched` (rho was a vector).

    **The rule** (the same in `solve`, `samflow.discrete.run_discrete` and
    `flow_gap`; `samflow.models.solve_model` has `theta0_batched`): the cells are
    the entries of `rho` (B = len(rho), or one cell for a scalar rho).

    - `alpha_batched=False` (default): `alpha` is ONE init shared by every cell:
      a scalar, a (d,) vector or a (L, d) array (`samflow.init_weights`). Its
      shape is never compared with len(rho), so a (d,) or (L, d) alpha means the
      same for any number of radii.
    - `alpha_batched=True`: `alpha` has an explicit leading batch axis of length
      B = len(rho), one init per cell: `(B,)` scalars, `(B, d)` or `(B, L, d)`.
      rho must then be a vector.

    A shared alpha must be finite. A per-cell alpha may hold NaN or inf: that
    cell gets status `NONFINITE_INPUT` and the rest of the batch runs.

    **Raises:** `ValueError` (one line) for a depth < 1; a rho that is not a
    finite scalar or non-empty 1-D vector >= 0; an alpha whose shape fits none
    of the above; a shared alpha that is not finite; `alpha_batched=True` with a
    scalar rho or a leading axis other than len(rho).
    """
    from .model import _init_shape_message

    depth = check_depth(depth)
    rho_b, batched = check_rho(rho)
    B = rho_b.shape[0]
    a = _float_array(alpha, "alpha")
    if not isinstance(alpha_batched, (bool, np.bool_)):
        raise ValueError(f"alpha_batched must be True or False, got {_brief(alpha_batched)}")
    if alpha_batched:
        if not batched:
            raise ValueError(
                "alpha_batched=True needs rho as a 1-D vector, one radius per init; "
                "got a scalar rho (use np.full(len(alpha), rho))"
            )
        if a.ndim == 0 or a.shape[0] != B:
            raise ValueError(
                f"alpha_batched=True: alpha needs a leading axis of length len(rho) = {B}, got shape {a.shape}"
            )
        cell = a.shape[1:]
        if not (cell in ((), (d,), (depth, d))):
            raise ValueError(_init_shape_message(cell, depth, d, per_cell=True))
        W0 = np.broadcast_to(a.reshape((B,) + (1,) * (2 - len(cell)) + cell), (B, depth, d))
    else:
        if not (a.shape in ((), (d,), (depth, d))):
            raise ValueError(_init_shape_message(a.shape, depth, d))
        if not np.all(np.isfinite(a)):
            raise ValueError(
                f"alpha must be finite, got {_brief(alpha)} (per-cell inits with alpha_batched=True "
                "may hold NaN: those cells get status NONFINITE_INPUT)"
            )
        W0 = np.broadcast_to(np.asarray(init_weights(a, depth, d)), (B, depth, d))
    return jnp.asarray(W0), jnp.asarray(rho_b), batched


def solve(
    method: "str | Method",
    data: Dataset,
    alpha: ArrayLike,
    rho: ArrayLike,
    ts: ArrayLike,
    *,
    depth: int = 2,
    clock: "str | Clock" = Clock.T,
    settings: SolverSettings = SolverSettings(),
    alpha_batched: bool = False,
) -> Trajectory:
    """Solve a flow from the init `alpha` at radius `rho`, for one cell or a batch.

    **Arguments:**

    - `method`: "gd", "l2", "linf" or "usam" (`samflow.Method`).
    - `data`: a `samflow.Dataset` (one sample for `clock="tau"`), finite.
    - `alpha`: the init, float. By default ONE init shared by every cell: a
      scalar, a (d,) per-coordinate vector or a (L, d) per-layer array
      (`samflow.init_weights`; a 1-D alpha is always (d,)). With
      `alpha_batched=True`, one init per cell along an explicit leading axis of
      length B = len(rho): `(B,)`, `(B, d)` or `(B, L, d)`. The shape of alpha
      is never matched against len(rho) (`batch_cells`).
    - `rho`: SAM radius >= 0, a scalar (one cell) or a non-empty (B,) vector
      (B cells; ignored by "gd").
    - `ts`: save times in the clock's units, increasing, the last one being the
      horizon. The clock starts at 0.
    - `depth`: L >= 1. `clock`: "t" (real time) or "tau" (rescaled, one sample).
    - `settings`: `SolverSettings`.
    - `alpha_batched`: see `alpha`.

    **Returns:** a `Trajectory`, batched over B when `rho` is a vector.

    **Raises:** `ValueError` (one line, before anything is compiled) for an
    unknown method or clock, a depth < 1, a rho that is negative, non-finite,
    empty or not 1-D, an alpha of a wrong shape or (shared) not finite, bad
    save times, data that is not a finite `Dataset`, or the tau clock on
    multi-sample data. A cell that fails raises nothing: see its `status`.

    Compiles once per (method, clock, settings, depth, d, batch size, number of
    save times); new values of alpha, rho, data or ts reuse the compilation.
    """
    method = Method.parse(method)
    clock = Clock.parse(clock)
    depth = check_depth(depth)
    if not isinstance(settings, SolverSettings):
        raise ValueError(f"settings must be a samflow.SolverSettings, got {type(settings).__name__}")
    check_data(data)
    if clock is Clock.TAU and not data.is_single_sample:
        raise ValueError(
            "clock 'tau' (rescaled flow) needs a single-sample data set; use clock 't'"
        )
    ts = jnp.asarray(check_save_times(ts))
    W0, rho_b, batched = batch_cells(alpha, rho, depth, data.d, alpha_batched=alpha_batched)
    settings = settings.resolved(method, np.asarray(W0), data)
    out = _solve_batch(W0, rho_b, data, ts, method, clock, settings)
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out
