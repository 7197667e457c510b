"""Exact switch times of the dominant feature (docs/theory.md s.5).

The dominant index D = argmax_j |beta_j| changes where the leader a and a
challenger b have |beta_a| = |beta_b|. A save grid only dates such a switch to
the next save time; `locate_switches` locates it to the solver's accuracy.

**How.** Each cell is solved by the lane engine (`samflow._engine.lanes`: the same
field, runs and events, so the linf sign switches, the l2 collapse, blow-up
and the other singular points are handled exactly as in a plain solve), with
one more event condition, "lead" (`samflow._engine.events._with_lead`):

    v = log|beta_lead| - max_{j != lead} log|beta_j| + 1e-12

(log|beta_j| = sum_l log|w_lj|, no underflow; dimensionless), which falls
through 0 the moment any challenger overtakes the leader. diffrax's root finder
locates it to 1e-13 relative in time (`EventSet`'s bisection on the step's
dense interpolant); the run ends there, the switch (time, leader, challenger)
is recorded, the challenger becomes the leader and the next run starts at the
event: several switches between two save times, and a switch in a run that
also ends on another event, are all found. The offset 1e-12 keeps the new
leader's condition positive at the start of its run; it dates a switch late by
1e-12 / |d log(|beta_b| / |beta_a|) / dt| (1e-8 at a rate gap of 1e-4).

The leader at the start is the argmax of |beta_j|; among the features tied
with it to 1e-9 relative (the symmetric init is tied at t = 0) the one growing
fastest (largest d log|beta_j|/dt) leads, so a tie at the start is no switch.
At a switch the new leader is chosen by the same rule among the challengers
(three features meeting at one point: the leader passes to the fastest of the
other two). A cell whose beta is 0 (collapse) or not finite (blow-up) ends its
record there.

**Horizon.** Every cell is solved to the last save time: a detour of the lead
(d -> k -> d) between two save times is recorded wherever it happens. (Before
the lane engine a cell was re-solved only up to the first save time of its
last saved leader, and such a detour went unseen with `ok` True; issue 26.) A
sweep records the switches in the same pass as its solve (`solve_grid(...,
switches=K)`), at the solve's own rtol; `locate_switches` and `switch_times`
solve at `REFINE_RTOL`.

**Check.** Diffrax tests the event at the end of each step, so a switch and its
undoing inside ONE step (a near tangency) would go unseen. The solve saves at
the cell's save times too; at every save where the top two |beta_j| differ by
more than 1e-9 relative, the leader the record implies must equal the argmax
of the solve's beta. A cell that fails this (or has more switches than
`max_switches`) is refused: `ok` False and every time NaN, never a wrong time.

**Errors** (docs/theory.md s.5, issue 35). Every time carries `time_err`, a bound
on its error in the clock's units, and `rate`, d(log|beta_to| - log|beta_from|)/dclock
at the switch (an error e of the gap moves the time by e / rate). The engine's
record has the *local* bound (the controller's tolerance summed over the steps,
`samflow._engine.events._switch_time_err`), which misses errors that the flow amplified
after they were made (l2-SAM from small weights: by up to 24x, measured).
`refine_switches` (by default in `locate_switches`, `switch_times` and sweeps)
solves the cells with switches again at rtol 1e-12, 1e-13, 1e-14 until each
time's bound, its distance to the solve one rtol looser plus what both share,
meets 1e-9 relative.

Both clocks: `time` is in the clock of the solve; `t` is real time (equal to
`time` in the t clock; in the tau clock from the engine's s = log(1 + t), +inf
past the tracked range, docs/theory.md s.3). tau is not tracked in the t clock.
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._util.cache import StoredProgram
from .datasets import Dataset
from .flows import Clock, Method
from ._engine.events import _OFFSET, _ROOT_TOL, _TIE
from ._engine.integrate import batch_cells
from ._engine.lanes import DEFAULT_LANES, program_family, solve_lanes
from ._methods import check_p, p_array
from ._engine.settings import STUCK_INIT, SolverSettings, check_data, check_depth, check_rho, check_save_times, float_array, stuck_inits
from ._util.x64 import compile_options, in_float64, require_float64

__all__ = ["SwitchTimes", "locate_switches", "refine_switches", "switch_times", "switches_of", "REFINE_RTOL",
           "REFINE_TO", "REFINE_LADDER"]

# The re-solve's tolerance: tighter than the main solve's default 1e-8, so that
# the switch times meet 1e-6 relative with margin (tests/test_switches.py).
REFINE_RTOL = 1e-10
#: The relative bound `refine_switches` brings every switch time to (docs/theory.md s.5).
REFINE_TO = 1e-9
#: The rtols of `refine_switches`' re-solves, in order (each below the record's own).
REFINE_LADDER = (1e-12, 1e-13, 1e-14)


class SwitchTimes(eqx.Module):
    """The switches of the dominant feature of one cell (leading batch axes for
    a batch), `K = max_switches` slots, in time order.

    **Fields:**

    - `time`: `(K,)` float64, switch times in the clock of the solve; NaN-padded.
    - `t`: `(K,)` float64, the same in real time t (= `time` in the t clock;
      +inf past the tracked range of the tau clock); NaN-padded.
    - `from_`: `(K,)` int32, the leader before (1-based); -1 padded.
    - `to`: `(K,)` int32, the leader after (1-based); -1 padded.
    - `count`: `()` int32, switches found (may exceed K: see `ok`).
    - `first`: `()` int32, the leader at the start (1-based; by the rule of
      the module docstring, also when beta(0) = 0).
    - `ok`: `()` bool. False when the record was refused (more than K switches,
      or the save-time check of the module docstring failed): then every slot
      is NaN / -1.
    - `time_err`: `(K,)` float64, a bound on |time - exact switch time| in the
      clock of the solve (docs/theory.md s.5: from two solves at two tolerances
      after `refine_switches`, else the solve's local bound); NaN-padded.
    - `rate`: `(K,)` float64, d(log|beta_to| - log|beta_from|)/dclock at the
      switch (> 0; a shallow crossing has a small rate); NaN-padded.
    """

    time: Float[Array, " K"]
    t: Float[Array, " K"]
    from_: Int[Array, " K"]
    to: Int[Array, " K"]
    count: Int[Array, ""]
    first: Int[Array, ""]
    ok: Bool[Array, ""]
    time_err: Float[Array, " K"]
    rate: Float[Array, " K"]


def _check(sw: SwitchTimes, W_saved, ts) -> SwitchTimes:
    """Refuse (NaN / -1, ok False) a record that disagrees with the re-solve's
    own leader at a save time where the top two |beta_j| are untied, or that
    overflowed its K slots."""
    K = sw.time.shape[-1]
    beta = jnp.prod(W_saved, axis=-2)  # (n, d)
    a = jnp.abs(beta)
    top2 = jnp.sort(a, axis=-1)[..., -2:]
    valid = jnp.all(jnp.isfinite(beta), -1) & (top2[:, 1] > 0) & (top2[:, 0] < (1.0 - _TIE) * top2[:, 1])
    dom = jnp.argmax(a, axis=-1) + 1
    # Leader implied by the record at each save: `to` of the last switch before it.
    before = jnp.where(jnp.isnan(sw.time)[None, :], False, sw.time[None, :] <= ts[:, None])  # (n, K)
    k_last = jnp.sum(before, axis=1) - 1
    implied = jnp.where(k_last >= 0, sw.to[jnp.maximum(k_last, 0)], sw.first)
    agree = jnp.all(jnp.where(valid, dom == implied, True))
    ok = sw.ok & agree & (sw.count <= K)
    nan = jnp.full_like(sw.time, jnp.nan)
    neg = jnp.full_like(sw.from_, -1)
    return SwitchTimes(
        jnp.where(ok, sw.time, nan), jnp.where(ok, sw.t, nan), jnp.where(ok, sw.from_, neg),
        jnp.where(ok, sw.to, neg), sw.count, sw.first, ok, jnp.where(ok, sw.time_err, nan), jnp.where(ok, sw.rate, nan),
    )


def _switch_batch_fn(W0, rho, data, ts, family, index, clock, settings, K, p, tol):
    """B cells solved by the lane engine with their switches recorded in the
    same pass (`samflow._engine.lanes.solve_lanes`), each record checked (`_check`);
    the method `family[index]` (`index` traced: one program per family) at the
    tolerances `tol` (traced; `settings` a `program_key()`: one program for the
    refinement's rtols)."""
    require_float64("samflow.switches")
    traj, _, raw = solve_lanes(W0, rho, data, ts, method=index, clock=clock, settings=settings, p=p,
                               width=min(W0.shape[0], DEFAULT_LANES), switches=K, family=family, tol=tol)
    return jax.vmap(_check, in_axes=(0, 0, None))(SwitchTimes(*raw), traj.W, ts)


@functools.lru_cache(maxsize=64)
def _stored_switch_batch(family, clock, settings, K):
    """`_switch_batch_fn` for these static arguments, jitted, as a `samflow._util.cache.StoredProgram`:
    with the compile cache on (the command lines), a second process loads it
    instead of tracing it again; same program, same bits. Keyed by the family of
    methods (`samflow._engine.lanes.program_family`; here the called method alone)."""
    def _switch_batch_program(W0, rho, data, ts, p, index, tol):
        return _switch_batch_fn(W0, rho, data, ts, family, index, clock, settings, K, p, tol)

    # With the stored programs off it is the jitted function itself, compiled with
    # samflow's compile options (`samflow._util.x64.compile_options`) either way.
    fn = jax.jit(_switch_batch_program, compiler_options=compile_options())
    return StoredProgram(fn, ("samflow.switches", family, clock, settings, K))


def refine_settings(settings: SolverSettings, rtol: "float | None" = REFINE_RTOL) -> SolverSettings:
    """The settings of the re-solve: `settings` with rtol lowered to `rtol`
    (never raised) and atol scaled by the same factor."""
    if rtol is None or rtol >= settings.rtol:
        return settings
    f = rtol / settings.rtol
    return dataclasses.replace(settings, rtol=rtol, atol=settings.atol * f)


def _validated(method, data, W0, rho, ts, clock, max_switches, p):
    """The arguments of `locate_switches` / `refine_switches` checked and parsed:
    (method, p, clock, ts, W0, rho, K); `ValueError` (one line) as `locate_switches`."""
    method = Method.parse(method)
    p = check_p(method, p)
    clock = Clock.parse(clock)
    check_data(data)
    ts = check_save_times(ts)
    W0 = float_array(W0, "W0")  # float64; a float32 0.1 widened with a warning naming the number it became
    rho = float_array(rho, "rho")
    if W0.ndim != 3 or W0.shape[-1] != data.d:
        raise ValueError(f"W0 must have shape (B, L, d={data.d}), got {W0.shape}")
    if rho.shape != W0.shape[:1]:
        raise ValueError(f"rho must have shape ({W0.shape[0]},), one radius per init, got {rho.shape}")
    check_depth(W0.shape[1])
    check_rho(rho)  # finite and >= 0, as samflow.solve asks (a negative radius ran silently)
    if np.any(stuck_inits(W0)):
        raise ValueError(STUCK_INIT.format(depth=W0.shape[1]))
    if max_switches is not None and (isinstance(max_switches, (bool, np.bool_))
                                     or not isinstance(max_switches, (int, np.integer)) or max_switches < 1):
        raise ValueError(f"max_switches must be an integer >= 1 (or None: 2 d + 2), got {max_switches!r}")
    K = 2 * data.d + 2 if max_switches is None else int(max_switches)
    return method, p, clock, ts, W0, rho, K


def _solve_switches(method, data, W0, rho, ts, clock, settings, K, p, chunk) -> SwitchTimes:
    """The switch records (NumPy) of B cells solved by the lane engine at the
    resolved `settings`, `chunk` cells per compiled call (the last call padded)."""
    B = W0.shape[0]
    width = max(1, min(int(chunk), B))
    family = program_family(method, data.X.shape[0], settings.coords, among=(method,))  # the method alone (as solve)
    index = jnp.asarray(family.index(method), jnp.int32)
    key, tol = settings.program_key(), jnp.asarray(settings.tolerances())  # rtol traced: one program for all
    parts = []
    for i in range(0, B, width):
        idx = np.minimum(np.arange(i, i + width), B - 1)  # pad with the last cell
        args = (jnp.asarray(W0[idx]), jnp.asarray(rho[idx]), data, jnp.asarray(ts), p_array(method, p), index, tol)
        out = _stored_switch_batch(family, clock, key, K)(*args)  # stored: no tracing on a second run
        parts.append(jax.tree_util.tree_map(lambda x: np.asarray(x)[: min(width, B - i)], out))
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *parts)


@in_float64
def locate_switches(
    method: "str | Method",
    data: Dataset,
    W0,
    rho,
    ts,
    *,
    clock: "str | Clock" = Clock.T,
    settings: SolverSettings = SolverSettings(),
    max_switches: "int | None" = None,
    rtol: "float | None" = REFINE_RTOL,
    chunk: int = 256,
    p: "float | None" = None,
    refine_to: "float | None" = REFINE_TO,
) -> SwitchTimes:
    """Every switch of the dominant feature argmax_j |beta_j| of B cells, located
    by an event of the engine (module docstring; docs/theory.md s.5), each time
    with a bound on its error, refined to `refine_to` (`refine_switches`).

    **Arguments:** `method`, `data`, `clock`, `settings` as in `samflow.solve`;
    `W0` float `(B, L, d)` inits (`samflow.solver.batch_cells` makes them from
    alpha); `rho` `(B,)`; `ts` `(n_save,)` the save times of the main solve
    (the horizon is `ts[-1]`; the record is checked at these times);
    `max_switches` K slots per cell (default 2 d + 2); `rtol` the re-solve's
    relative tolerance (default `REFINE_RTOL` = 1e-10; None keeps
    `settings.rtol`); `chunk` cells per compiled call (a fixed batch shape,
    the last chunk padded, so the bits do not depend on how a grid is sliced);
    `p` the exponent of "lp" (as `samflow.solve`: required for "lp", refused
    otherwise; traced); `refine_to` the relative bound every switch time should
    meet (default `REFINE_TO` = 1e-9): the cells with switches are solved again
    at tighter tolerances (`refine_switches`); None returns the first solve's
    record with its local bounds.

    **Returns:** `SwitchTimes` with leading axis B (`time_err` the bound of each
    time's error, in the clock's units).

    **Raises:** `ValueError` (one line) for an unknown method or clock, bad
    save times, `W0` not `(B, L, d)` or `rho` not `(B,)`, a rho that is negative
    or not finite, an init no flow can leave (as `samflow.solve`), K < 1, or a
    `refine_to` that is not a number in (0, 1).
    """
    _check_refine_to(refine_to)
    method, p, clock, ts, W0, rho, K = _validated(method, data, W0, rho, ts, clock, max_switches, p)
    first = refine_settings(settings.resolved(method, W0, data, clock, p), rtol)
    sw = _solve_switches(method, data, W0, rho, ts, clock, first, K, p, chunk)
    return _refine(method, data, W0, rho, ts, sw, clock, first, K, p, chunk, refine_to)


def _check_refine_to(refine_to) -> None:
    if refine_to is not None and (isinstance(refine_to, (bool, np.bool_))
                                  or not isinstance(refine_to, (int, float, np.integer, np.floating))
                                  or not 0.0 < refine_to < 1.0):
        raise ValueError(f"refine_to must be a number in (0, 1) (a relative bound) or None, got {refine_to!r}")


@in_float64
def refine_switches(
    method: "str | Method",
    data: Dataset,
    W0,
    rho,
    ts,
    sw: SwitchTimes,
    *,
    clock: "str | Clock" = Clock.T,
    settings: SolverSettings = SolverSettings(),
    rtol: "float | None" = None,
    chunk: int = 256,
    p: "float | None" = None,
    refine_to: "float | None" = REFINE_TO,
) -> SwitchTimes:
    """Refine the switch record `sw` of B cells (leading axis B, K slots: from
    `locate_switches`, or a sweep's pass, `samflow.sweep.solve_grid(...,
    switches=K)`) until every time's bound meets `refine_to` relative
    (docs/theory.md s.5).

    Each cell with a switch whose time is not yet confirmed by two solves, or
    whose bound exceeds `refine_to` |time|, is solved again from its init at
    the rtols of `REFINE_LADDER` (1e-12, 1e-13, 1e-14) below the record's own, with
    its switches located again. When the tighter solve finds the same switches,
    each time's bound is its distance to the looser solve's time (the tighter
    solve's error is at most half the looser one's: errors fall about 10x per
    decade of rtol) plus what both share: the lead condition's offset 1e-12 /
    rate and the bisection's 1e-13 (1 + |time|). Where they disagree the bound
    is the tighter solve's local one, and the next rtol is tried. A cell stops
    at the first rtol where every bound meets `refine_to` |time|, or at the last
    one: its `time_err` then says what was reached. A refused re-solve (`ok`
    False) keeps the record it had.

    **Arguments:** `method`, `data`, `W0` `(B, L, d)`, `rho` `(B,)`, `ts`,
    `clock`, `settings`, `chunk`, `p` as given to the solve that made `sw`
    (`settings` before any tightening); `rtol` the rtol `sw` was solved at
    (None: `settings.rtol`, a sweep's pass); `refine_to` the relative bound to
    meet (None: `sw` as it is).

    **Returns:** `SwitchTimes` (NumPy) with leading axis B: the cells that
    needed nothing, and the refused records, as in `sw`.

    **Raises:** `ValueError` (one line) as `locate_switches`, or for a record
    `sw` without one row per init.
    """
    _check_refine_to(refine_to)
    K = int(np.shape(sw.time)[-1])
    method, p, clock, ts, W0, rho, K = _validated(method, data, W0, rho, ts, clock, K, p)
    if np.shape(sw.time) != (W0.shape[0], K):
        raise ValueError(f"sw must hold one record per init, time of shape ({W0.shape[0]}, K), got {np.shape(sw.time)}")
    first = refine_settings(settings.resolved(method, W0, data, clock, p), rtol)
    sw = jax.tree_util.tree_map(np.asarray, sw)
    return _refine(method, data, W0, rho, ts, sw, clock, first, K, p, chunk, refine_to)


def _needs(sw: SwitchTimes, confirmed, refine_to) -> np.ndarray:
    """(B,) bool: cells with a kept record, a switch, and a time not confirmed or not within bound."""
    n = np.arange(sw.time.shape[-1])[None, :] < np.minimum(sw.count, sw.time.shape[-1])[:, None]
    loose = ~(sw.time_err <= refine_to * np.abs(sw.time)) | ~confirmed
    return sw.ok & (sw.count > 0) & np.any(n & loose, axis=1)


def _refine(method, data, W0, rho, ts, sw, clock, settings, K, p, chunk, refine_to) -> SwitchTimes:
    """`refine_switches` on validated arguments; `settings` (resolved) those `sw` was solved at."""

    # rtol is data of the program (`SolverSettings.program_key`): calls of the first solve's
    # width (`locate_switches`: min(chunk, B)) run its program at every rtol of the ladder,
    # the cells of a smaller call repeated to fill it.
    width = min(int(chunk), W0.shape[0])

    def solve(idx, tighter):
        take = np.resize(idx, max(width, idx.size))
        out = _solve_switches(method, data, W0[take], rho[take], ts, clock, tighter, K, p, width)
        return jax.tree_util.tree_map(lambda x: x[: idx.size], out)

    return refine_with(sw, settings, refine_to, solve)


def refine_with(sw: SwitchTimes, settings: SolverSettings, refine_to, solve) -> SwitchTimes:
    """The loop of `refine_switches` with the solver given: `solve(idx, settings)`
    returns the `SwitchTimes` (NumPy, K slots) of the cells `idx` (int array into
    `sw`'s leading axis) solved again from their inits at `settings` (`settings`
    with rtol lowered, `refine_settings`); `settings` the ones `sw` was solved at.
    A sweep passes its sharded solve (`samflow.sweep._run`)."""
    if refine_to is None:
        return sw
    sw = jax.tree_util.tree_map(lambda x: np.array(x, copy=True), sw)
    confirmed = np.zeros(sw.time.shape, bool)
    prev_rtol = settings.rtol
    for rtol in REFINE_LADDER:
        need = _needs(sw, confirmed, refine_to)
        if not need.any():
            break
        if rtol >= prev_rtol:
            continue
        prev_rtol = rtol
        idx = np.flatnonzero(need)
        new = jax.tree_util.tree_map(np.asarray, solve(idx, refine_settings(settings, rtol)))
        old = jax.tree_util.tree_map(lambda x: x[idx], sw)
        same = (new.ok & old.ok & (new.count == old.count) & np.all(new.from_ == old.from_, axis=1)
                & np.all(new.to == old.to, axis=1))[:, None] & ~np.isnan(new.time)
        # Both solves share the lead condition's offset (late by 1e-12 / rate) and the bisection's tolerance.
        post = np.abs(new.time - old.time) + _OFFSET / np.abs(new.rate) + _ROOT_TOL * (1.0 + np.abs(new.time))
        new = dataclasses.replace(new, time_err=np.where(same, post, new.time_err))
        keep = new.ok  # a refused re-solve keeps the record it had
        for f in dataclasses.fields(SwitchTimes):
            a, b = getattr(sw, f.name), getattr(new, f.name)
            a[idx] = np.where(keep.reshape((-1,) + (1,) * (b.ndim - 1)), b, a[idx])
        confirmed[idx] = np.where(keep[:, None], same, confirmed[idx])
    return sw


def switch_times(traj, method, data: Dataset, rho, *, clock="t", settings=None, max_switches=None, rtol="default",
                 p=None, refine_to=REFINE_TO):
    """Exact switch times of the dominant feature argmax_j |beta_j| of a
    `Trajectory` (docs/theory.md s.5), located by an event of the engine, not
    dated at save times (`samflow.switches`).

    The cell is solved again by the same engine from its first saved state
    (`traj.W[..., 0, :, :]` at `traj.ts[0]`; the init when `ts[0] = 0`) with
    the event "a challenger overtakes the leader" on, up to the last save time;
    the record is checked against that solve's leader at every untied save
    time.

    **Arguments:** `traj` a `samflow.Trajectory` of one cell or a 1-D batch of
    B cells (a `Summary` has no weights: use `samflow.switches.locate_switches`
    on the inits); `method`, `data`, `rho` (scalar or (B,)), `clock`,
    `settings` (default `SolverSettings()`) as given to `samflow.solve`;
    `max_switches` slots per cell (default 2 d + 2); `rtol` of the re-solve
    ("default": `samflow.switches.REFINE_RTOL` = 1e-10; None: `settings.rtol`);
    `p` the exponent of "lp", as given to `samflow.solve`; `refine_to` the
    relative bound of every time's error to refine to (default 1e-9,
    `refine_switches`; None: the re-solve's record as it is).

    **Returns:** `SwitchTimes` (`time` in the clock of the solve and `t` in
    real time, `from_`, `to` 1-based, `count`, `first`, `ok`), NumPy arrays
    with the batch axis of `traj` (none for one cell). A refused record
    (`ok` False: more than `max_switches` switches, or a switch the check
    found missing) is all NaN / -1, never a wrong time.

    **Raises:** `ValueError` (one line) for a `traj` without weights, fewer
    than two save times, a rho that does not match the batch, or any error of
    `samflow.solve` for these inputs.
    """
    W = getattr(traj, "W", None)
    if W is None:
        raise ValueError("switch_times needs a Trajectory with weights W (a Summary has none); "
                         "use samflow.switches.locate_switches on the inits")
    W = np.asarray(W, dtype=np.float64)
    one = W.ndim == 3
    W = W[None] if one else W
    if W.ndim != 4:
        raise ValueError(f"traj.W must be (n_save, L, d) or (B, n_save, L, d), got shape {W.shape}")
    ts = np.asarray(traj.ts, dtype=np.float64).reshape(-1, W.shape[1])[0]
    t_real = np.asarray(traj.t, dtype=np.float64).reshape(W.shape[0], W.shape[1])[:, 0]
    if ts.size < 2:
        raise ValueError("switch_times needs at least two save times")
    rho_f = float_array(rho, "rho")
    rho_b = np.broadcast_to(rho_f, (W.shape[0],)) if rho_f.ndim == 0 else rho_f
    if rho_b.shape != (W.shape[0],):
        raise ValueError(f"rho must be a scalar or have shape ({W.shape[0]},) like the batch of traj, got {np.shape(rho)}")
    settings = SolverSettings() if settings is None else settings
    out = locate_switches(
        method, data, W[:, 0], rho_b, ts - ts[0], clock=clock, settings=settings,
        max_switches=max_switches, rtol=REFINE_RTOL if rtol == "default" else rtol, p=p, refine_to=refine_to,
    )
    # Back to the trajectory's clocks: the re-solve started at ts[0], t[0].
    out = dataclasses.replace(out, time=out.time + ts[0], t=out.t + t_real[:, None])
    return jax.tree_util.tree_map(lambda x: x[0], out) if one else out


def switches_of(method, data, alpha, rho, ts, *, depth: int = 2, alpha_batched: bool = False, **kw) -> SwitchTimes:
    """`locate_switches` for a `samflow.solve`-style call (alpha, rho as there;
    one cell for a scalar rho: no leading axis)."""
    W0, rho_b, batched = batch_cells(alpha, rho, check_depth(depth), data.d, alpha_batched=alpha_batched)
    out = locate_switches(method, data, np.asarray(W0), np.asarray(rho_b), ts, **kw)
    return out if batched else jax.tree_util.tree_map(lambda x: x[0], out)
