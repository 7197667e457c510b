"""SAM flows and discrete SAM for any differentiable model f(theta, x) (docs/theory.md s.2).

`samflow.flows` and `samflow.solve` treat the L-layer diagonal network with a
hand-written gradient. This module does the same for any model given as a JAX
function `f(theta, x) -> scalar`, with `theta` any pytree of float64 arrays and
`x` one input (d,). The loss is the mean margin loss of `samflow.losses`,

    L(theta) = (1/n) sum_i ell(y_i f(theta, x_i)),   G = grad L(theta) (autodiff),

and the flows / discrete algorithms use the perturbation eps(G) of docs/theory.md s.2
with every norm taken over all leaves of the pytree together:

| method | eps(G)                         |
|--------|--------------------------------|
| gd     | 0                              |
| l2     | rho G / ||G||_2 (0 when G = 0) | (`samflow.flows.unit_l2` on the flattened G)
| linf   | rho sign(G)                    |
| usam   | rho G                          |

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
steps, `MAX_STEPS` or `FAILED`.

**Models.** `diagonal_network(depth)`, `two_layer_linear(d, k)` and
`linear_conv(n_channels, kernel, d)` return a `Model` (f, effective_predictor,
init). All three are linear in x, so f(theta, x) = <beta(theta), x> with the
effective predictor beta. Constructors are cached, so the same arguments give the
same function objects and reuse compilations.

The figures `banded` and `generic_models` of `samflow.figures` run these models
on banded data (`samflow.datasets.banded`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Int

from .data import Dataset
from .flows import Method, unit_l2
from .losses import AbstractLoss, get_loss
from ._events import _BracketEvent
from ._settings import _SOLVERS, SolverSettings, _brief, _float_array, check_data, check_rho, check_save_times
from .status import Status
from ._x64 import in_float64

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


# --------------------------------------------------------------------------- models


class Model(NamedTuple):
    """A model linear in its input.

    - `f(theta, x)`: scalar output for one input x (d,).
    - `effective_predictor(theta)`: beta (d,) with f(theta, x) = <beta, x>.
    - `init(alpha)`: theta(0) at init scale alpha (see each constructor).
    - `name`: a short label.
    """

    f: Callable
    effective_predictor: Callable
    init: Callable
    name: str


@functools.lru_cache(maxsize=None)
def diagonal_network(depth: int, d: int | None = None) -> Model:
    """The L-layer diagonal network f(theta, x) = <w1 * ... * wL, x>, theta = (w1, ..., wL).

    `init(alpha, d)`: every weight equals alpha (as `samflow.init_weights`); `d`
    may be given here instead. Same flow as `samflow.solve` with `depth` = L.
    """
    if not (isinstance(depth, (int, np.integer)) and depth >= 1):
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")

    def beta(theta):
        out = theta[0]
        for w in theta[1:]:
            out = out * w
        return out

    def f(theta, x):
        return jnp.dot(beta(theta), x)

    def init(alpha, d_=None):
        dd = d_ if d_ is not None else d
        if dd is None:
            raise ValueError("give the dimension d to diagonal_network(depth, d) or to init(alpha, d)")
        a = jnp.broadcast_to(jnp.asarray(alpha, jnp.float64), (dd,))
        return tuple(a for _ in range(depth))

    return Model(f, beta, init, f"diagonal L={depth}")


@functools.lru_cache(maxsize=None)
def two_layer_linear(d: int, k: int) -> Model:
    """Two-layer linear network f(theta, x) = <v, U x>, theta = (U (k, d), v (k,)).

    Effective predictor beta = U^T v. `init(alpha, seed=None)`: with `seed` None
    the deterministic U = alpha * eye(k, d), v = alpha * 1 (for k >= d, beta(0) =
    alpha^2 1 as the diagonal network at depth 2); with an int seed, U and v are
    alpha times standard normal draws (`jax.random.PRNGKey(seed)`).
    """

    def f(theta, x):
        U, v = theta
        return jnp.dot(v, U @ x)

    def beta(theta):
        U, v = theta
        return U.T @ v

    def init(alpha, seed=None):
        a = jnp.asarray(alpha, jnp.float64)
        if seed is None:
            return (a * jnp.eye(k, d), a * jnp.ones(k))
        kU, kv = jax.random.split(jax.random.PRNGKey(seed))
        return (a * jax.random.normal(kU, (k, d)), a * jax.random.normal(kv, (k,)))

    return Model(f, beta, init, f"two-layer linear k={k}")


@functools.lru_cache(maxsize=None)
def linear_conv(n_channels: int, kernel: int, d: int) -> Model:
    """Two-layer linear convolutional network on 1-D signals of length d.

    f(theta, x) = sum_c <v_c, conv(x, w_c)>, conv(x, w)_i = sum_m w_m x_{(i+m) mod d}
    (circular, stride 1, output length d), theta = (w (C, K), v (C, d)). The
    effective predictor is beta = grad_x f(theta, x) (f is linear in x), i.e.
    beta_j = sum_c sum_m v_{c,(j-m) mod d} w_{c,m}. `init(alpha, seed=0)`: with
    an int seed, w and v are alpha times standard normal draws
    (`jax.random.PRNGKey(seed)`); with `seed` None the deterministic w = alpha 1,
    v = alpha 1, for which beta(0) = C K alpha^2 1 has equal coordinates (as the
    diagonal network's alpha^2 1) and the C channels stay equal.
    """
    idx = (np.arange(d)[:, None] + np.arange(kernel)[None, :]) % d  # (d, K)

    def f(theta, x):
        w, v = theta
        patches = x[idx]  # (d, K)
        conv = patches @ w.T  # (d, C)
        return jnp.sum(v.T * conv)

    def beta(theta):
        # f is linear in x: its gradient at any x (0 here) is the predictor.
        return jax.grad(lambda x: f(theta, x))(jnp.zeros(d, jnp.result_type(theta[0], jnp.float64)))

    def init(alpha, seed=0):
        a = jnp.asarray(alpha, jnp.float64)
        if seed is None:
            return (a * jnp.ones((n_channels, kernel)), a * jnp.ones((n_channels, d)))
        kw, kv = jax.random.split(jax.random.PRNGKey(seed))
        return (a * jax.random.normal(kw, (n_channels, kernel)), a * jax.random.normal(kv, (n_channels, d)))

    return Model(f, beta, init, f"linear conv C={n_channels} K={kernel}")


# ------------------------------------------------------------------ loss and fields


def _loss_obj(loss) -> AbstractLoss:
    return get_loss(loss) if isinstance(loss, str) else loss


def model_outputs(f: Callable, theta: Pytree, X: Float[Array, "n d"]) -> Float[Array, " n"]:
    """f(theta, x_i) for every row of X, shape (n,)."""
    return jax.vmap(lambda x: f(theta, x))(X)


def model_loss(f: Callable, theta: Pytree, data: Dataset, loss="logistic") -> Float[Array, ""]:
    """L(theta) = mean_i ell(y_i f(theta, x_i)), a scalar."""
    return jnp.mean(_loss_obj(loss).value(data.y * model_outputs(f, theta, data.X)))


def model_grad(f: Callable, theta: Pytree, data: Dataset, loss="logistic") -> Pytree:
    """grad L(theta) by autodiff, a pytree like theta."""
    return jax.grad(lambda th: model_loss(f, th, data, loss))(theta)


def model_perturbation(method: "str | Method", G: Pytree, rho) -> Pytree:
    """eps(G) of the table in the module docstring, norms over all leaves together."""
    method = Method.parse(method)
    if method is Method.GD:
        return jax.tree_util.tree_map(jnp.zeros_like, G)
    if method is Method.LINF:
        return jax.tree_util.tree_map(lambda g: rho * jnp.sign(g), G)
    if method is Method.USAM:
        return jax.tree_util.tree_map(lambda g: rho * g, G)
    if method is Method.L2:
        flat, unravel = ravel_pytree(G)
        return unravel(rho * unit_l2(flat))
    raise ValueError(f"unknown method {method!r}")


def model_velocity(method, f: Callable, theta: Pytree, rho, data: Dataset, loss="logistic") -> Pytree:
    """dtheta/dt = -grad L(theta + eps(grad L(theta))), a pytree like theta."""
    G = model_grad(f, theta, data, loss)
    eps = model_perturbation(method, G, rho)
    theta_hat = jax.tree_util.tree_map(jnp.add, theta, eps)
    return jax.tree_util.tree_map(jnp.negative, model_grad(f, theta_hat, data, loss))


def model_sam_step(method, f: Callable, theta: Pytree, rho, eta, data: Dataset, loss="logistic") -> Pytree:
    """One discrete step theta - eta grad L(theta + eps(theta)) (sign(0) = 0 for linf)."""
    v = model_velocity(method, f, theta, rho, data, loss)
    return jax.tree_util.tree_map(lambda th, dv: th + eta * dv, theta, v)


def _all_finite(tree) -> Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def _safe_inputs(theta0: Pytree, rho, data: Dataset):
    """float64 inputs of one cell, with non-finite ones replaced by harmless zeros
    (the cell is then marked by `ok_in` and its outputs are NaN): returns
    (theta0, rho, data, ok_in)."""
    theta0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), theta0)
    rho = jnp.asarray(rho, jnp.float64)
    ok_in = _all_finite(theta0) & jnp.isfinite(rho) & jnp.all(jnp.isfinite(data.X))
    theta0 = jax.tree_util.tree_map(lambda x: jnp.where(ok_in, x, 0.0), theta0)
    rho = jnp.where(ok_in, rho, 0.0)
    data = Dataset(X=jnp.where(ok_in, data.X, 0.0), y=data.y)
    return theta0, rho, data, ok_in


def _finite_rows(tree) -> Array:
    """(n_save,) True where every leaf of a time-stacked pytree is finite."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(x).reshape(x.shape[0], -1), axis=1) for x in leaves]), axis=0
    )


def _mask_rows(tree, ok):
    return jax.tree_util.tree_map(
        lambda x: jnp.where(ok.reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.nan), tree
    )


# --------------------------------------------------------------------------- flow


class ModelTrajectory(eqx.Module):
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

    ts: Float[Array, " n_save"]
    theta: Pytree
    outputs: Float[Array, "n_save n"]
    loss: Float[Array, " n_save"]
    beta: Float[Array, "n_save d"] | None
    status: Int[Array, ""]
    event_time: Float[Array, ""]
    num_steps: Int[Array, ""]


def _flat_norm(tree) -> Array:
    flat, _ = ravel_pytree(tree)
    # Scaled by max|x| first: no overflow above 1e154, no underflow below 1e-154.
    m = jnp.max(jnp.abs(flat))
    safe = jnp.where(m > 0, m, 1.0)
    return jnp.where(m > 0, safe * jnp.sqrt(jnp.sum((flat / safe) ** 2)), 0.0)


def collapse_ratio(f: Callable, theta: Pytree, rho, data: Dataset, loss="logistic") -> tuple[Array, Array]:
    """How close l2-SAM is to a critical point of L (docs/theory.md s.4): (R, ok).

    R = ||grad L(theta)|| / ||grad L(theta_hat)||, theta_hat = theta + rho G/||G||
    (norms over all leaves), and ok = L(theta_hat) <= 2 L(theta). Near a critical
    point of L (G = 0: theta = 0 for the diagonal network, {v = 0, U r = 0} for the
    two-layer net), where the l2 field G(theta_hat) stays of order rho while G
    vanishes linearly, R ~ dist(theta, critical set) / rho: R <= capture_radius
    is the collapse condition ||W|| <= capture_radius * rho of `samflow.solve`
    for any model. `ok` rules out the other way for R to be small, a perturbation
    that multiplies the loss (large margins: there the losses differ by far more
    than a factor 2). Near a critical point of a depth-2 net the margins at
    theta_hat are O(rho^2 ||x||), so `ok` holds unless rho ||x|| is of order 1 or
    more; where it fails near a collapse the event does not fire and the solve
    shows the singular point as before (many steps, `MAX_STEPS`).

    **Arguments:** `f` f(theta, x); `theta` a pytree of float64 arrays; `rho` >= 0
    scalar; `data`; `loss` a name or an `AbstractLoss`.

    **Returns:** (R, ok): () float64 >= 0 (0 where G = 0) and () bool.
    """
    G = model_grad(f, theta, data, loss)
    eps = model_perturbation(Method.L2, G, rho)
    theta_hat = jax.tree_util.tree_map(jnp.add, theta, eps)
    g, gh = _flat_norm(G), _flat_norm(model_grad(f, theta_hat, data, loss))
    ratio = jnp.where(g > 0, g / jnp.where(gh > 0, gh, 1.0), 0.0)
    ok = model_loss(f, theta_hat, data, loss) <= 2.0 * model_loss(f, theta, data, loss)
    return ratio, ok


def _after_collapse(f, theta_ts, theta_end, sol, ts, rho, data, loss_fn, velocity, start_collapsed, ok_in):
    """Saved states of an l2 cell whose solve ended at the capture (or started there):
    R and theta extrapolated linearly to R = 0 (the collapse time), theta frozen after.

    **Returns:** (theta_ts, collapsed (), event_time ()).
    """
    theta_end = jax.tree_util.tree_map(lambda x: x[0], theta_end)
    t_end = jnp.where(start_collapsed, 0.0, sol.ts[1][0])
    collapsed = ((sol.result == diffrax.RESULTS.event_occurred) | start_collapsed) & ok_in
    v_end = velocity(theta_end, rho)
    R, dR = jax.jvp(lambda th: collapse_ratio(f, th, rho, data, loss_fn)[0], (theta_end,), (v_end,))
    dt_rem = jnp.where((dR < 0) & ~start_collapsed, R / jnp.where(dR < 0, -dR, 1.0), 0.0)
    theta_c = jax.tree_util.tree_map(lambda x, v: x + dt_rem * v, theta_end, v_end)
    event_time = jnp.where(collapsed, t_end + dt_rem, jnp.nan)
    span = jnp.where(dt_rem > 0, dt_rem, 1.0)
    frac = jnp.clip((ts - t_end) / span, 0.0, 1.0)  # 0 at the capture, 1 at the collapse
    after_capture = collapsed & (ts >= t_end)

    def fill(x, xe, xc):
        shape = (-1,) + (1,) * xe.ndim
        path = xe[None] + frac.reshape(shape) * (xc - xe)[None]
        return jnp.where(after_capture.reshape(shape), path, x)

    return jax.tree_util.tree_map(fill, theta_ts, theta_end, theta_c), collapsed, event_time


def solve_model_cell(method, f, theta0, rho, data, ts, *, settings: SolverSettings, loss, predictor=None) -> ModelTrajectory:
    """Solve one cell (docs/theory.md s.2, s.4); pure and vmappable over theta0 and rho.

    Arguments as `solve_model` with `rho` a () float64, `ts` (n_save,) float64
    (not checked here), `loss` a name or an `AbstractLoss`, `predictor` the
    effective predictor or None. Returns a `ModelTrajectory` of one cell; never
    raises for a failing cell.

    l2-SAM with rho > 0 has the collapse event of `samflow.solve` (docs/theory.md
    s.4), written for any model with `collapse_ratio`: the solve stops when R
    falls to `settings.capture_radius`, the remaining time to the critical point
    is extrapolated linearly in R (R falls at a constant rate there: the field is
    bounded), and theta stays at the extrapolated point from the collapse time on
    (linearly interpolated between the capture and the collapse; beta there is
    within O(capture_radius^2 rho^2) of 0).
    """
    method = Method.parse(method)
    loss_fn = _loss_obj(loss)
    theta0, rho, data, ok_in = _safe_inputs(theta0, rho, data)
    capture = settings.capture_radius

    def velocity(th, rho_):
        return model_velocity(method, f, th, rho_, data, loss_fn)

    def collapse_cond(th, rho_):
        ratio, ok = collapse_ratio(f, th, rho_, data, loss_fn)
        return jnp.where(ok, ratio - capture, 1.0)

    event, watch, start_collapsed = None, jnp.asarray(False), jnp.asarray(False)
    if method is Method.L2:
        watch = rho > 0
        start_collapsed = watch & (collapse_cond(theta0, rho) <= 0) & ok_in
        # Positive until the capture; bisection on the step's interpolant
        # brackets the capture time (as in samflow.solve).
        event = diffrax.Event(
            lambda t, y, args, **kw: jnp.where(args[1], collapse_cond(y, args[0]), 1.0),
            root_finder=_BracketEvent(rtol=1e-13, atol=1e-13, flip=True),
            direction=False,
        )
    # A cell that starts captured does not move (zero field: a trivial solve).
    live = jnp.where(start_collapsed, 0.0, 1.0)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, th, args: jax.tree_util.tree_map(lambda v: live * v, velocity(th, args[0]))),
        _SOLVERS[settings.solver](),
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
    if method is Method.L2:
        theta_ts, collapsed, event_time = _after_collapse(
            f, theta_ts, theta_end, sol, ts, rho, data, loss_fn, velocity, start_collapsed, ok_in
        )
    else:
        collapsed, event_time = jnp.asarray(False), jnp.asarray(jnp.nan, jnp.float64)
    ok = (sol.result == diffrax.RESULTS.successful) | collapsed
    rows = _finite_rows(theta_ts) & ok_in
    rows = jnp.cumprod(rows.astype(jnp.int32)).astype(bool)
    theta = _mask_rows(theta_ts, rows)
    outs = jax.vmap(lambda th: model_outputs(f, th, data.X))(theta)
    losses = jnp.mean(loss_fn.value(data.y[None, :] * outs), axis=1)
    beta = None if predictor is None else jax.vmap(predictor)(theta)
    status = jnp.select(
        [~ok_in, collapsed, ok, sol.result == diffrax.RESULTS.max_steps_reached],
        [int(Status.NONFINITE_INPUT), int(Status.COLLAPSED), int(Status.FINISHED), int(Status.MAX_STEPS)],
        int(Status.FAILED),
    )
    return ModelTrajectory(ts, theta, outs, losses, beta, status, event_time, sol.stats["num_steps"])


@eqx.filter_jit
def _solve_model_batch(method, f, theta0, rho, data, ts, settings, loss, predictor, theta0_batched):
    fn = lambda th, r: solve_model_cell(method, f, th, r, data, ts, settings=settings, loss=loss, predictor=predictor)
    return jax.vmap(fn, in_axes=(0 if theta0_batched else None, 0))(theta0, rho)


def _check_rho(rho):
    """rho as float64 `(B,)` and whether it was a vector (`samflow.solve.check_rho`)."""
    return check_rho(rho)


def _check_cells(f: Callable, predictor, theta0: Pytree, data: Dataset, B: int, batched: bool, theta0_batched) -> Pytree:
    """Validate the inits of a `solve_model` / `run_model_discrete` call before
    anything is compiled; returns theta0 with float64 numpy leaves.

    The rule (as `samflow.solve`'s `alpha_batched`): theta0 is ONE init shared
    by every cell unless `theta0_batched=True`, when every leaf carries an
    explicit leading axis of length B = len(rho). Leaf shapes are never matched
    against len(rho).
    """
    if not isinstance(theta0_batched, (bool, np.bool_)):
        raise ValueError(f"theta0_batched must be True or False, got {_brief(theta0_batched)}")
    leaves, treedef = jax.tree_util.tree_flatten(theta0)
    if not leaves:
        raise ValueError("theta0 has no arrays: give the model's parameters (e.g. model.init(alpha))")
    leaves = [_float_array(x, "theta0") for x in leaves]
    if theta0_batched:
        if not batched:
            raise ValueError(
                "theta0_batched=True needs rho as a 1-D vector, one radius per init; "
                "got a scalar rho (use np.full(B, rho))"
            )
        bad = [x.shape for x in leaves if x.ndim == 0 or x.shape[0] != B]
        if bad:
            raise ValueError(
                f"theta0_batched=True: every leaf of theta0 needs a leading axis of length len(rho) = {B}; "
                f"got leaf shape {bad[0]}"
            )
        cell = [x[0] for x in leaves]
    else:
        if not all(np.all(np.isfinite(x)) for x in leaves):
            raise ValueError(
                "theta0 must be finite (per-cell inits with theta0_batched=True may hold NaN: "
                "those cells get status NONFINITE_INPUT)"
            )
        cell = leaves
    theta_cell = jax.tree_util.tree_unflatten(treedef, [jax.ShapeDtypeStruct(x.shape, jnp.float64) for x in cell])
    x = jax.ShapeDtypeStruct((data.d,), jnp.float64)
    hint = "a stack of per-cell inits needs theta0_batched=True" if not theta0_batched else "check the model's shapes"
    try:
        out = jax.eval_shape(f, theta_cell, x)
        beta = None if predictor is None else jax.eval_shape(predictor, theta_cell)
    except Exception as e:  # noqa: BLE001 - any failure of the user's f becomes one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(
            f"theta0 does not fit the model f on data of dimension d = {data.d} ({hint}): "
            f"f(theta0, x) raised {type(e).__name__}: {first}"
        ) from None
    if not (hasattr(out, "shape") and out.shape == ()):
        raise ValueError(
            f"f(theta0, x) must return a scalar for one input x of shape ({data.d},), got "
            f"{getattr(out, 'shape', type(out).__name__)} ({hint})"
        )
    if beta is not None and getattr(beta, "shape", None) != (data.d,):
        raise ValueError(
            f"the model's effective predictor has shape {getattr(beta, 'shape', None)}, but the data have "
            f"d = {data.d}: build the model for d = {data.d}"
        )
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(x) for x in leaves])


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
) -> ModelTrajectory:
    """Integrate the flow of `method` for the model f in real time t (Tsit5 + PID).

    **Arguments:** `method` ("gd", "l2", "linf", "usam"); `f` a function
    f(theta, x) -> scalar or a `Model` (then `beta` is filled with its effective
    predictor); `theta0` a pytree of float arrays, by default ONE init shared by
    every cell; `rho` >= 0 a scalar (one cell) or a non-empty (B,) vector (a
    vmapped batch); `data` a finite `samflow.Dataset`; `ts` increasing save
    times, the last one the horizon; `settings` (solver, rtol, atol, max_steps,
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
    if not isinstance(settings, SolverSettings):
        raise ValueError(f"settings must be a samflow.SolverSettings, got {type(settings).__name__}")
    loss = settings.loss if loss is None else loss
    get_loss(loss)
    predictor = f.effective_predictor if isinstance(f, Model) else None
    fn = f.f if isinstance(f, Model) else f
    if not callable(fn):
        raise ValueError(f"f must be a function f(theta, x) or a samflow.models.Model, got {type(f).__name__}")
    check_data(data)
    ts = jnp.asarray(check_save_times(ts))
    r, batched = _check_rho(rho)
    rb = jnp.asarray(r)
    theta0 = _check_cells(fn, predictor, theta0, data, r.shape[0], batched, theta0_batched)
    out = _solve_model_batch(method, fn, theta0, rb, data, ts, settings, loss, predictor, theta0_batched)
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out


# ------------------------------------------------------------------------ discrete


class ModelDiscreteTrajectory(eqx.Module):
    """Iterates of a discrete algorithm on a model, saved at k_i = round(ts_i / eta).

    Fields as `ModelTrajectory`, plus `t` (n_save,) = k_i eta and `steps` (n_save,)
    = k_i; `status` is FINISHED, FAILED (non-finite iterates, NaN from then on)
    or NONFINITE_INPUT.
    """

    ts: Float[Array, " n_save"]
    t: Float[Array, " n_save"]
    steps: Int[Array, " n_save"]
    theta: Pytree
    outputs: Float[Array, "n_save n"]
    loss: Float[Array, " n_save"]
    beta: Float[Array, "n_save d"] | None
    status: Int[Array, ""]


def _run_model_cell(method, f, theta0, rho, eta, data, ts, ks, loss, predictor):
    loss_fn = _loss_obj(loss)
    theta0, rho, data, ok_in = _safe_inputs(theta0, rho, data)

    def body(c):
        th, k = c
        return model_sam_step(method, f, th, rho, eta, data, loss_fn), k + 1

    def advance(c, k_target):
        c = jax.lax.while_loop(lambda c: c[1] < k_target, body, c)
        return c, c[0]

    _, thetas = jax.lax.scan(advance, (theta0, jnp.zeros((), ks.dtype)), ks)
    rows = _finite_rows(thetas) & ok_in
    rows = jnp.cumprod(rows.astype(jnp.int32)).astype(bool)
    thetas = _mask_rows(thetas, rows)
    outs = jax.vmap(lambda th: model_outputs(f, th, data.X))(thetas)
    losses = jnp.mean(loss_fn.value(data.y[None, :] * outs), axis=1)
    beta = None if predictor is None else jax.vmap(predictor)(thetas)
    status = jnp.where(
        ~ok_in, int(Status.NONFINITE_INPUT), jnp.where(jnp.all(rows), int(Status.FINISHED), int(Status.FAILED))
    )
    return ModelDiscreteTrajectory(ts, ks * eta, ks, thetas, outs, losses, beta, status)


@eqx.filter_jit
def _run_model_batch(method, f, theta0, rho, eta, data, ts, ks, loss, predictor, theta0_batched):
    fn = lambda th, r: _run_model_cell(method, f, th, r, eta, data, ts, ks, loss, predictor)
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
) -> ModelDiscreteTrajectory:
    """Run theta_{k+1} = theta_k - eta grad L(theta_k + eps(theta_k)) with lax.scan.

    Iteration k is real time k eta; the iterate k_i = round(ts_i / eta) is saved
    for each save time (`samflow.discrete.save_iterations`). Arguments (the
    shared / `theta0_batched` rule included) and errors as `solve_model`; `eta`
    a finite number > 0 (`ValueError` otherwise). Cost ts[-1] / eta steps per
    cell.
    """
    from .discrete import save_iterations

    method = Method.parse(method)
    get_loss(loss)
    ks, _ = save_iterations(ts, eta)
    ts = jnp.asarray(check_save_times(ts))
    predictor = f.effective_predictor if isinstance(f, Model) else None
    fn = f.f if isinstance(f, Model) else f
    if not callable(fn):
        raise ValueError(f"f must be a function f(theta, x) or a samflow.models.Model, got {type(f).__name__}")
    check_data(data)
    r, batched = _check_rho(rho)
    rb = jnp.asarray(r)
    theta0 = _check_cells(fn, predictor, theta0, data, r.shape[0], batched, theta0_batched)
    out = _run_model_batch(
        method, fn, theta0, rb, jnp.asarray(eta, jnp.float64), data, ts, jnp.asarray(ks), loss, predictor, theta0_batched
    )
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out
