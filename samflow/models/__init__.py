"""SAM flows and discrete SAM for any differentiable model f(theta, x) (docs/theory.md s.2).

`samflow.flows` and `samflow.solve` treat the L-layer diagonal network with a
hand-written gradient. This module does the same for any model given as a JAX
function `f(theta, x) -> scalar`, with `theta` any pytree of float64 arrays and
`x` one input (d,). The loss is the mean margin loss of `samflow.losses`,

    L(theta) = (1/n) sum_i ell(y_i f(theta, x_i)),   G = grad L(theta) (autodiff),

and the flows / discrete algorithms use the perturbation eps(G) of docs/theory.md s.2
with every norm taken over all leaves of the pytree together (`Method.spec`, the
one table of `samflow._methods` that the diagonal network uses too):

| method | eps(G)                         |
|--------|--------------------------------|
| gd     | 0                              |
| l2     | rho G / ||G||_2 (0 when G = 0) | (`samflow.flows.unit_l2` on the flattened G)
| linf   | rho sign(G)                    |
| usam   | rho G                          |
| lp     | rho sign(G) |G|^(q-1) / ||G||_q^(q-1) | (`samflow._methods.unit_lp`, exponent `p`)

    flow:      dtheta/dt = -grad L(theta + eps(G(theta)))
    discrete:  theta_{k+1} = theta_k - eta grad L(theta_k + eps(G(theta_k))),  t = k eta.

**Singular points.** Generic models are integrated with an adaptive Runge-Kutta
solver and one event, the l2-SAM collapse (docs/theory.md s.4). The l2 field is
undefined where G = grad L(theta) = 0 (theta = 0 for the diagonal network; the
set {v = 0, U r = 0} for the two-layer net, where U keeps its part orthogonal
to r), and a trajectory can reach such a critical point in finite time. The
solve stops when `collapse_ratio` R = ||G(theta)|| / ||G(theta_hat)|| (~ the
distance to the critical set over rho) falls to `capture_radius`, extrapolates
the remaining time linearly, and reports status `COLLAPSED` with its
`event_time`, as `samflow.solve` does for the diagonal network. There is no
Filippov treatment of the linf sign switch here (the diagonal network has it,
in `samflow.solve`): a generic linf solve that meets it shows it as many small
steps, `MAX_STEPS` or `FAILED`; the same holds for lp-SAM with p > 2 where a
parameter reaches 0 in finite time (docs/theory.md s.2 (lp-SAM)). lp-SAM takes
its exponent as the keyword `p` (traced: one compilation for every p) and has
the collapse event of l2 with its own perturbation.

**Models.** `diagonal_network(depth)`, `two_layer_linear(d, k)` and
`linear_conv(n_channels, kernel, d)` return a `Model` (f, effective_predictor,
init). All three are linear in x, so f(theta, x) = <beta(theta), x> with the
effective predictor beta. Constructors are cached, so the same arguments give the
same function objects and reuse compilations.

The figures `banded` and `generic_models` of `samflow.figures` run these models
on banded data (`samflow.datasets.banded`).
"""

from __future__ import annotations

from typing import Any, Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..datasets import Dataset
from ..flows import Method
from .._methods import check_p, p_array
from ..losses import get_loss
from .._util.cache import no_runtime_checks
from .._engine.events import BracketBisection
from .._engine.singular import extrapolate_to_zero, linear_fill
from .._engine.settings import SOLVERS, SolverSettings, check_data, check_rho, check_save_times
from ..status import Status
from .._util.x64 import in_float64
from ._generic import (
    Model as Model,
    check_cells,
    collapse_ratio as collapse_ratio,
    diagonal_network as diagonal_network,
    flat_norm as _flat_norm,  # noqa: F401  (the name the tests know)
    linear_conv as linear_conv,
    loss_obj,
    model_grad as model_grad,
    model_loss as model_loss,
    model_outputs as model_outputs,
    model_perturbation as model_perturbation,
    model_sam_step as model_sam_step,
    model_velocity as model_velocity,
    two_layer_linear as two_layer_linear,
)
from .._iterate import finite_prefix, iterate, safe_inputs, save_iterations

__all__ = [
    "Model",
    "ModelTrajectory",
    "ModelDiscreteTrajectory",
    "diagonal_network",
    "two_layer_linear",
    "linear_conv",
    "model_outputs",
    "model_loss",
    "model_grad",
    "model_perturbation",
    "model_velocity",
    "model_sam_step",
    "collapse_ratio",
    "solve_model",
    "run_model_discrete",
]

Pytree = Any


# --------------------------------------------------------------------------- flow


class _ModelStates(eqx.Module):
    """The fields every model record shares (`ModelTrajectory`, `ModelDiscreteTrajectory`):
    the saved states, their outputs, loss and effective predictor, and how the cell ended."""

    ts: Float[Array, " n_save"]
    theta: Pytree
    outputs: Float[Array, "n_save n"]
    loss: Float[Array, " n_save"]
    beta: Float[Array, "n_save d"] | None
    status: Int[Array, ""]


class ModelTrajectory(_ModelStates):
    """Solution of a model flow (one cell; a batched solve adds a leading axis B).

    - `ts`: (n_save,) save times (real time t).
    - `theta`: pytree like theta0, each leaf with a leading (n_save,) axis.
    - `outputs`: (n_save, n) f(theta(t), x_i).
    - `loss`: (n_save,) L(theta(t)).
    - `beta`: (n_save, d) effective predictor, or None when none was given.
    - `status`: () int `samflow.Status`: FINISHED, COLLAPSED (l2-SAM reached a
      critical point of L; theta stays there from `event_time` on), MAX_STEPS,
      FAILED or NONFINITE_INPUT.
    - `event_time`: () float64 collapse time in real time t, NaN if none.
    - `num_steps`: () accepted + rejected solver steps.

    Saved values after a failure are NaN.
    """

    event_time: Float[Array, ""]
    num_steps: Int[Array, ""]


def _saved_outputs(f, theta, data: Dataset, loss_fn, predictor):
    """Outputs (n_save, n), loss (n_save,) and effective predictor (n_save, d)
    (None without a predictor) of saved states, a pytree with a leading (n_save,) axis."""
    outs = jax.vmap(lambda th: model_outputs(f, th, data.X))(theta)
    losses = jnp.mean(loss_fn.value(data.y[None, :] * outs), axis=1)
    beta = None if predictor is None else jax.vmap(predictor)(theta)
    return outs, losses, beta


def _after_collapse(f, theta_ts, theta_end, sol, ts, rho, data, loss_fn, velocity, start_collapsed, ok_in):
    """Saved states of an l2 cell whose solve ended at the capture (or started there):
    R = `collapse_ratio` and theta extrapolated linearly to R = 0 (the collapse
    time; `samflow._engine.singular.extrapolate_to_zero`, as the diagonal network's
    critical point), theta frozen after.

    **Returns:** (theta_ts, collapsed (), event_time ()).
    """
    theta_end = jax.tree_util.tree_map(lambda x: x[0], theta_end)
    t_end = jnp.where(start_collapsed, 0.0, sol.ts[1][0])
    collapsed = ((sol.result == diffrax.RESULTS.event_occurred) | start_collapsed) & ok_in
    R_fn = lambda th: collapse_ratio(f, th, rho, data, loss_fn)[0]
    dt_rem, theta_c = extrapolate_to_zero(R_fn, theta_end, velocity(theta_end, rho), moving=~start_collapsed)
    event_time = jnp.where(collapsed, t_end + dt_rem, jnp.nan)
    span = jnp.where(dt_rem > 0, dt_rem, 1.0)
    frac = jnp.clip((ts - t_end) / span, 0.0, 1.0)  # 0 at the capture, 1 at the collapse
    after_capture = collapsed & (ts >= t_end)
    return linear_fill(theta_ts, after_capture, frac, theta_end, theta_c), collapsed, event_time


def solve_model_cell(method, f, theta0, rho, data, ts, *, settings: SolverSettings, loss, predictor=None) -> ModelTrajectory:
    """Solve one cell (docs/theory.md s.2, s.4); pure and vmappable over theta0 and rho.

    Arguments as `solve_model` with `rho` a () float64, `ts` (n_save,) save
    times (checked here as `solve_model` checks them: finite, >= 0, strictly
    increasing, last > 0), `loss` a name or an `AbstractLoss`, `predictor` the
    effective predictor or None. Returns a `ModelTrajectory` of one cell; never
    raises for a failing cell.

    **Raises:** `ValueError` (one line, naming `ts`) for bad save times. Save
    times that are traced (a `jax.jit` taking `ts` as an argument) can only be
    checked when the program runs: an `equinox.error_if` (a host callback, so
    the persistent compile cache does not store that program) raises then.
    The solve itself traces without diffrax's own save-time check
    (`samflow._util.cache.no_runtime_checks`): no host callback, the program is cached.

    l2-SAM with rho > 0 has the collapse event of `samflow.solve` (docs/theory.md
    s.4), written for any model with `collapse_ratio`: the solve stops when R
    falls to `settings.capture_radius`, the remaining time to the critical point
    is extrapolated linearly in R (R falls at a constant rate there: the field is
    bounded), and theta stays at the extrapolated point from the collapse time on
    (linearly interpolated between the capture and the collapse; beta there is
    within O(capture_radius^2 rho^2) of 0).
    """
    ts = _traced_save_times(ts) if isinstance(ts, jax.core.Tracer) else jnp.asarray(check_save_times(ts))
    return _solve_cell(method, f, theta0, rho, data, ts, settings=settings.with_tolerances(2), loss=loss,
                       predictor=predictor)


def _traced_save_times(ts):
    """Traced save times, checked as `check_save_times` does, when the program runs
    (an explicit `on_error="raise"`: unlike the "default" of diffrax's own check,
    `no_runtime_checks` cannot switch it off)."""
    if ts.ndim != 1 or ts.shape[0] == 0:
        raise ValueError(f"ts must be a non-empty 1-D list of times, got shape {ts.shape}")
    bad = ~jnp.all(jnp.isfinite(ts)) | (ts[0] < 0) | jnp.any(jnp.diff(ts) <= 0) | (ts[-1] <= 0)
    return eqx.error_if(ts, bad, "ts must be finite, start at a time >= 0, be strictly increasing and end > 0",
                        on_error="raise")


def _solve_cell(method, f, theta0, rho, data, ts, *, settings, loss, predictor, p=None) -> ModelTrajectory:
    """`solve_model_cell` after its check of `ts` (sorted, finite, inside [0, ts[-1]]:
    diffrax's run-time check of them can never fire, so it is left out of the
    program; `no_runtime_checks`: no host callback, the compile cache keeps it)."""
    method = Method.parse(method)
    loss_fn = loss_obj(loss)
    theta0, rho, data, ok_in = safe_inputs(theta0, rho, data)
    capture = settings.capture_radius

    def velocity(th, rho_):
        return model_velocity(method, f, th, rho_, data, loss_fn, p)

    def collapse_cond(th, rho_):
        ratio, ok = collapse_ratio(f, th, rho_, data, loss_fn, method, p)
        return jnp.where(ok, ratio - capture, 1.0)

    event, watch, start_collapsed = None, jnp.asarray(False), jnp.asarray(False)
    if method.spec.collapses:
        watch = rho > 0
        start_collapsed = watch & (collapse_cond(theta0, rho) <= 0) & ok_in
        # Positive until the capture; bisection on the step's interpolant
        # brackets the capture time (as in samflow.solve).
        event = diffrax.Event(
            lambda t, y, args, **kw: jnp.where(args[1], collapse_cond(y, args[0]), 1.0),
            root_finder=BracketBisection(rtol=1e-13, atol=1e-13, flip=True),
            direction=False,
        )
    # A cell that starts captured does not move (zero field: a trivial solve).
    live = jnp.where(start_collapsed, 0.0, 1.0)
    with no_runtime_checks():  # ts checked (solve_model_cell): diffrax's check of it cannot fire
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, th, args: jax.tree_util.tree_map(lambda v: live * v, velocity(th, args[0]))),
            SOLVERS[settings.solver](),
            0.0,
            ts[-1],
            None,
            theta0,
            args=(rho, watch & ~start_collapsed),
            saveat=diffrax.SaveAt(subs=(diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True))),
            stepsize_controller=diffrax.PIDController(rtol=settings.rtol, atol=settings.atol),
            event=event,
            max_steps=settings.max_steps,
            throw=False,
        )
    theta_ts, theta_end = sol.ys
    if method.spec.collapses:
        theta_ts, collapsed, event_time = _after_collapse(
            f, theta_ts, theta_end, sol, ts, rho, data, loss_fn, velocity, start_collapsed, ok_in
        )
    else:
        collapsed, event_time = jnp.asarray(False), jnp.asarray(jnp.nan, jnp.float64)
    ok = (sol.result == diffrax.RESULTS.successful) | collapsed
    theta, _ = finite_prefix(theta_ts, ok_in)
    outs, losses, beta = _saved_outputs(f, theta, data, loss_fn, predictor)
    status = jnp.select(
        [~ok_in, collapsed, ok, sol.result == diffrax.RESULTS.max_steps_reached],
        [int(Status.NONFINITE_INPUT), int(Status.COLLAPSED), int(Status.FINISHED), int(Status.MAX_STEPS)],
        int(Status.FAILED),
    )
    return ModelTrajectory(ts=ts, theta=theta, outputs=outs, loss=losses, beta=beta, status=status,
                           event_time=event_time, num_steps=sol.stats["num_steps"])


@eqx.filter_jit
def _solve_model_batch(method, f, theta0, rho, data, ts, settings, loss, predictor, theta0_batched, p=None):
    # ts was checked by solve_model (check_save_times) before this trace.
    fn = lambda th, r: _solve_cell(method, f, th, r, data, ts, settings=settings, loss=loss, predictor=predictor, p=p)
    return jax.vmap(fn, in_axes=(0 if theta0_batched else None, 0))(theta0, rho)


def _model_cells(f, theta0, rho, data: Dataset, theta0_batched):
    """The cells of a `solve_model` / `run_model_discrete` call, checked before
    anything is compiled: (f, predictor or None, theta0, rho (B,), batched)."""
    predictor = f.effective_predictor if isinstance(f, Model) else None
    fn = f.f if isinstance(f, Model) else f
    if not callable(fn):
        raise ValueError(f"f must be a function f(theta, x) or a samflow.models.Model, got {type(f).__name__}")
    check_data(data)
    r, batched = check_rho(rho)
    theta0 = check_cells(fn, predictor, theta0, data, r.shape[0], batched, theta0_batched)
    return fn, predictor, theta0, jnp.asarray(r), batched


@in_float64
def solve_model(
    method: "str | Method",
    f: "Callable | Model",
    theta0: Pytree,
    rho,
    data: Dataset,
    ts,
    settings: SolverSettings = SolverSettings(),
    loss: str | None = None,
    *,
    theta0_batched: bool = False,
    p: "float | None" = None,
) -> ModelTrajectory:
    """Integrate the flow of `method` for the model f in real time t (Tsit5 + PID).

    **Arguments:** `method` ("gd", "l2", "linf", "usam", "lp"); `p` the
    exponent of "lp" in (1, inf), required for "lp" and refused otherwise
    (`samflow._methods.check_p`; traced: one compilation for every p); `f` a function
    f(theta, x) -> scalar or a `Model` (then `beta` is filled with its effective
    predictor); `theta0` a pytree of float arrays, by default ONE init shared by
    every cell; `rho` >= 0 a scalar (one cell) or a non-empty (B,) vector (a
    vmapped batch); `data` a finite `samflow.Dataset`; `ts` increasing save
    times, the last one the horizon; `settings` (solver, rtol, atol (unset: those
    of depth 2, `samflow.SolverSettings.with_tolerances`), max_steps,
    capture_radius; its `loss` unless `loss` is given; `coords` is not used:
    theta itself is integrated); `theta0_batched=True`: every leaf of theta0
    carries an explicit leading axis of length B = len(rho), one init per cell
    (the only way to give per-cell inits; leaf shapes are never matched against
    len(rho), as `samflow.solve`'s `alpha_batched`).

    **Returns:** a `ModelTrajectory`, batched over B when `rho` is a vector.
    Never raises for a failing cell (`throw=False`): see its `status`. l2-SAM
    cells that reach a critical point of L (theta = 0 for the diagonal network)
    end as `COLLAPSED` with their `event_time` (docs/theory.md s.4); there is no
    sign-switch event for linf (module docstring).

    **Raises:** `ValueError` (one line, before anything is compiled) for an
    unknown method or loss, bad save times, a rho that is negative, non-finite,
    empty or not 1-D, data that is not a finite `Dataset`, a shared theta0 that
    is not finite, a theta0 that does not fit f and the data (f(theta0, x) fails
    or is not a scalar; a `Model`'s predictor not of shape (d,)), or
    `theta0_batched` with a scalar rho or a leaf whose leading axis is not
    len(rho). A per-cell theta0 (`theta0_batched`) that is not finite gives that
    cell status `NONFINITE_INPUT`.
    """
    method = Method.parse(method)
    p = check_p(method, p)
    if not isinstance(settings, SolverSettings):
        raise ValueError(f"settings must be a samflow.SolverSettings, got {type(settings).__name__}")
    settings = settings.with_tolerances(2)  # a generic model: the tolerances of depth 2 where none are given
    loss = settings.loss if loss is None else loss
    get_loss(loss)
    ts = jnp.asarray(check_save_times(ts))
    fn, predictor, theta0, rb, batched = _model_cells(f, theta0, rho, data, theta0_batched)
    out = _solve_model_batch(method, fn, theta0, rb, data, ts, settings, loss, predictor, theta0_batched,
                             p_array(method, p))
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out


# ------------------------------------------------------------------------ discrete


class ModelDiscreteTrajectory(_ModelStates):
    """Iterates of a discrete algorithm on a model, saved at k_i = round(ts_i / eta).

    Fields as `ModelTrajectory`, plus `t` (n_save,) = k_i eta and `steps` (n_save,)
    = k_i; `status` is FINISHED, FAILED (non-finite iterates, NaN from then on)
    or NONFINITE_INPUT.
    """

    t: Float[Array, " n_save"]
    steps: Int[Array, " n_save"]


def _run_model_cell(method, f, theta0, rho, eta, data, ts, ks, loss, predictor, p=None):
    """Iterate one cell with `model_sam_step` (the engine `samflow._iterate.iterate`)."""
    loss_fn = loss_obj(loss)
    theta0, rho, data, ok_in = safe_inputs(theta0, rho, data)
    step = lambda th: model_sam_step(method, f, th, rho, eta, data, loss_fn, p)
    thetas, _, status, _, _ = iterate(step, theta0, ks, ok_in)
    outs, losses, beta = _saved_outputs(f, thetas, data, loss_fn, predictor)
    return ModelDiscreteTrajectory(ts=ts, theta=thetas, outputs=outs, loss=losses, beta=beta, status=status,
                                   t=ks * eta, steps=ks)


@eqx.filter_jit
def _run_model_batch(method, f, theta0, rho, eta, data, ts, ks, loss, predictor, theta0_batched, p=None):
    fn = lambda th, r: _run_model_cell(method, f, th, r, eta, data, ts, ks, loss, predictor, p)
    return jax.vmap(fn, in_axes=(0 if theta0_batched else None, 0))(theta0, rho)


@in_float64
def run_model_discrete(
    method: "str | Method",
    f: "Callable | Model",
    theta0: Pytree,
    rho,
    eta: float,
    ts,
    data: Dataset,
    loss: str = "logistic",
    *,
    theta0_batched: bool = False,
    p: "float | None" = None,
) -> ModelDiscreteTrajectory:
    """Run theta_{k+1} = theta_k - eta grad L(theta_k + eps(theta_k)) with lax.scan.

    Iteration k is real time k eta; the iterate k_i = round(ts_i / eta) is saved
    for each save time (`samflow.discrete.save_iterations`). Arguments (the
    shared / `theta0_batched` rule included) and errors as `solve_model`; `eta`
    a finite number > 0 (`ValueError` otherwise); `p` lp-SAM's exponent, as
    `solve_model`. Cost ts[-1] / eta steps per cell.
    """
    method = Method.parse(method)
    p = check_p(method, p)
    get_loss(loss)
    ks, _ = save_iterations(ts, eta)
    ts = jnp.asarray(check_save_times(ts))
    fn, predictor, theta0, rb, batched = _model_cells(f, theta0, rho, data, theta0_batched)
    out = _run_model_batch(
        method, fn, theta0, rb, jnp.asarray(eta, jnp.float64), data, ts, jnp.asarray(ks), loss, predictor, theta0_batched,
        p_array(method, p),
    )
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out
