"""SAM flows and discrete SAM for any differentiable model f(theta, x) (THEORY.md s.2).

`samflow.flows` and `samflow.solve` treat the L-layer diagonal network with a
hand-written gradient. This module does the same for any model given as a JAX
function `f(theta, x) -> scalar`, with `theta` any pytree of float64 arrays and
`x` one input (d,). The loss is the mean margin loss of `samflow.losses`,

    L(theta) = (1/n) sum_i ell(y_i f(theta, x_i)),   G = grad L(theta) (autodiff),

and the flows / discrete algorithms use the perturbation eps(G) of THEORY.md s.2
with every norm taken over all leaves of the pytree together:

| method | eps(G)                         |
|--------|--------------------------------|
| gd     | 0                              |
| l2     | rho G / ||G||_2 (0 when G = 0) | (`samflow.flows.unit_l2` on the flattened G)
| linf   | rho sign(G)                    |
| usam   | rho G                          |

    flow:      dtheta/dt = -grad L(theta + eps(G(theta)))
    discrete:  theta_{k+1} = theta_k - eta grad L(theta_k + eps(G(theta_k))),  t = k eta.

**Singular points.** Generic models are integrated as smooth vector fields with an
adaptive Runge-Kutta solver: there is no collapse event (l2-SAM reaching 0) and
no Filippov treatment of the linf sign switch here. Both are handled for the
diagonal network only, by `samflow.solve`. A generic solve that meets such a
point shows it as many small steps, `MAX_STEPS` or `FAILED` in its status.

**Models.** `diagonal_network(depth)`, `two_layer_linear(d, k)` and
`linear_conv(n_channels, kernel, d)` return a `Model` (f, effective_predictor,
init). All three are linear in x, so f(theta, x) = <beta(theta), x> with the
effective predictor beta. Constructors are cached, so the same arguments give the
same function objects and reuse compilations.

`banded_heatmap` draws the dominant band of beta over (t, alpha) on banded data
(`samflow.datasets.banded`) for GD and l2-SAM on the diagonal and two-layer nets.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
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
from .solve import _SOLVERS, SolverSettings, check_save_times
from .status import Status

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
    "solve_model",
    "run_model_discrete",
    "band_dominance",
    "banded_heatmap",
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
    beta_j = sum_c sum_m v_{c,(j-m) mod d} w_{c,m}. `init(alpha, seed=0)`: w and v
    are alpha times standard normal draws.
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
    - `status`: () int `samflow.Status`: FINISHED, MAX_STEPS, FAILED or NONFINITE_INPUT.
    - `num_steps`: () accepted + rejected solver steps.

    Saved values after a failure are NaN.
    """

    ts: Float[Array, " n_save"]
    theta: Pytree
    outputs: Float[Array, "n_save n"]
    loss: Float[Array, " n_save"]
    beta: Float[Array, "n_save d"] | None
    status: Int[Array, ""]
    num_steps: Int[Array, ""]


def solve_model_cell(method, f, theta0, rho, data, ts, *, settings: SolverSettings, loss, predictor=None) -> ModelTrajectory:
    """Solve one cell; pure and vmappable over theta0 and rho (see `solve_model`)."""
    method = Method.parse(method)
    loss_fn = _loss_obj(loss)
    theta0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), theta0)
    rho = jnp.asarray(rho, jnp.float64)
    ok_in = _all_finite(theta0) & jnp.isfinite(rho) & jnp.all(jnp.isfinite(data.X))
    theta0 = jax.tree_util.tree_map(lambda x: jnp.where(ok_in, x, 0.0), theta0)
    rho = jnp.where(ok_in, rho, 0.0)
    data = Dataset(X=jnp.where(ok_in, data.X, 0.0), y=data.y)

    term = diffrax.ODETerm(lambda t, th, args: model_velocity(method, f, th, args, data, loss_fn))
    sol = diffrax.diffeqsolve(
        term,
        _SOLVERS[settings.solver](),
        0.0,
        ts[-1],
        None,
        theta0,
        args=rho,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=settings.rtol, atol=settings.atol),
        max_steps=settings.max_steps,
        throw=False,
    )
    ok = sol.result == diffrax.RESULTS.successful
    rows = _finite_rows(sol.ys) & jnp.isfinite(sol.ts) & ok_in
    rows = jnp.cumprod(rows.astype(jnp.int32)).astype(bool)
    theta = _mask_rows(sol.ys, rows)
    outs = jax.vmap(lambda th: model_outputs(f, th, data.X))(theta)
    losses = jnp.mean(loss_fn.value(data.y[None, :] * outs), axis=1)
    beta = None if predictor is None else jax.vmap(predictor)(theta)
    status = jnp.select(
        [~ok_in, ok, sol.result == diffrax.RESULTS.max_steps_reached],
        [int(Status.NONFINITE_INPUT), int(Status.FINISHED), int(Status.MAX_STEPS)],
        int(Status.FAILED),
    )
    return ModelTrajectory(ts, theta, outs, losses, beta, status, sol.stats["num_steps"])


@eqx.filter_jit
def _solve_model_batch(method, f, theta0, rho, data, ts, settings, loss, predictor, theta0_batched):
    fn = lambda th, r: solve_model_cell(method, f, th, r, data, ts, settings=settings, loss=loss, predictor=predictor)
    return jax.vmap(fn, in_axes=(0 if theta0_batched else None, 0))(theta0, rho)


def _check_rho(rho):
    r = np.asarray(rho, np.float64)
    if r.ndim > 1 or not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError(f"rho must be a finite scalar or 1-D vector >= 0, got {rho!r}")
    return r


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
    f(theta, x) or a `Model` (then `beta` is filled with its effective
    predictor); `theta0` a pytree of float arrays; `rho` >= 0 a scalar (one cell)
    or a (B,) vector (a vmapped batch); `data`; `ts` increasing save times, the
    last one the horizon; `settings` (solver, rtol, atol, max_steps; its `loss`
    unless `loss` is given); `theta0_batched`: theta0 leaves carry a leading B
    axis (one init per rho) instead of one init shared by the batch.

    **Returns:** a `ModelTrajectory`, batched over B when `rho` is a vector.
    Never raises for a failing cell (`throw=False`): see its `status`. No
    collapse or sign-switch events (module docstring).
    """
    method = Method.parse(method)
    loss = settings.loss if loss is None else loss
    get_loss(loss)
    predictor = f.effective_predictor if isinstance(f, Model) else None
    fn = f.f if isinstance(f, Model) else f
    ts = jnp.asarray(check_save_times(ts))
    r = _check_rho(rho)
    batched = r.ndim == 1
    rb = jnp.atleast_1d(jnp.asarray(r))
    if not batched and theta0_batched:
        raise ValueError("theta0_batched needs a vector rho")
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
    theta0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), theta0)
    rho = jnp.asarray(rho, jnp.float64)
    ok_in = _all_finite(theta0) & jnp.isfinite(rho) & jnp.all(jnp.isfinite(data.X))
    theta0 = jax.tree_util.tree_map(lambda x: jnp.where(ok_in, x, 0.0), theta0)
    rho = jnp.where(ok_in, rho, 0.0)
    data = Dataset(X=jnp.where(ok_in, data.X, 0.0), y=data.y)

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
    for each save time (`samflow.discrete.save_iterations`). Arguments as
    `solve_model`; `eta` > 0. Cost ts[-1] / eta steps per cell.
    """
    from .discrete import save_iterations

    method = Method.parse(method)
    get_loss(loss)
    ks, _ = save_iterations(ts, eta)
    ts = jnp.asarray(check_save_times(ts))
    predictor = f.effective_predictor if isinstance(f, Model) else None
    fn = f.f if isinstance(f, Model) else f
    r = _check_rho(rho)
    batched = r.ndim == 1
    rb = jnp.atleast_1d(jnp.asarray(r))
    if not batched and theta0_batched:
        raise ValueError("theta0_batched needs a vector rho")
    out = _run_model_batch(
        method, fn, theta0, rb, jnp.asarray(eta, jnp.float64), data, ts, jnp.asarray(ks), loss, predictor, theta0_batched
    )
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out


# --------------------------------------------------------------------- banded data


def band_dominance(beta, band) -> np.ndarray:
    """Dominant band (1-based) of beta (..., d): the band with the largest mean |beta_j|.

    0 where beta is all zero, -1 where it is not finite. `band` (d,) holds the
    0-based band of each coordinate.
    """
    b = np.asarray(beta, np.float64)
    band = np.asarray(band)
    nb = int(band.max()) + 1
    a = np.abs(b)
    means = np.stack([a[..., band == k].mean(axis=-1) for k in range(nb)], axis=-1)
    finite = np.all(np.isfinite(b), axis=-1)
    means = np.where(finite[..., None], means, 0.0)
    dom = np.argmax(means, axis=-1) + 1
    dom = np.where(means.max(axis=-1) > 0, dom, 0)
    return np.where(finite, dom, -1).astype(np.int64)


def _minor_before_major(dom: np.ndarray, nb: int) -> np.ndarray:
    """Per row (alpha) of dom (alpha, time): a band < nb dominates before band nb first does."""
    out = []
    for row in dom:
        hit = np.nonzero(row == nb)[0]
        first_major = hit[0] if hit.size else row.size
        out.append(bool(np.any((row[:first_major] >= 1) & (row[:first_major] < nb))))
    return np.array(out)


def banded_heatmap(out_png, quick: bool = False) -> dict:
    """Dominant band of beta over (t, alpha) on banded data, GD and l2-SAM, two models.

    Data: `samflow.datasets.banded(n=8, d=12, seed=0)`, 3 bands of 4 coordinates
    with intensities 1/3, 2/3, 1 (minor -> major). Panels: GD and l2-SAM on the
    depth-2 diagonal network (`samflow.solve`, collapse events included) and on the
    two-layer linear network (`solve_model`, k = d, U(0) = alpha I, v(0) = alpha 1).
    rho = 0.01, alpha/rho log-spaced from 0.1 to 10**0.5 (l2-SAM on the diagonal
    net collapses below ~0.2 and shows band 3 from the start above ~0.5), t
    log-spaced from 0.1 to 1e4 (the loss stays near log 2 while beta is small).
    quick: 8 alphas x 16 times (~20 s with compilation); full: 24 x 60. Writes `out_png` and a PDF next to it.

    **Returns:** a dict with, per panel ("diag/gd", "diag/l2", "2layer/gd",
    "2layer/l2"): `frac_minor_first` (fraction of alphas where band 1 or 2
    dominates at some save time before band 3 first does), `frac_minor_then_major`
    (the same and band 3 dominant at the last time: minor first, major last) with
    the alphas where it holds, `frac_major_end`
    (fraction whose dominant band at the last time is 3), `frac_collapsed`
    (dominant band 0 at the end), `statuses` (counts); and `alpha_over_rho`,
    `t`, `rho`, `path`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap

    from .datasets import banded
    from .plots import COLLAPSED_COLOR, MISSING_COLOR, _edges, feature_colors
    from .solve import solve

    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    data, band = banded(8, 12, 0)
    nb = int(band.max()) + 1
    rho = 0.01
    n_a, n_t = (8, 16) if quick else (24, 60)
    a_rel = np.logspace(-1, 0.5, n_a)
    alphas = a_rel * rho
    ts = np.logspace(-1, 4, n_t)
    # The two-layer l2 flow near 0 has no collapse event (smooth field): cap its
    # steps so that those cells end quickly as MAX_STEPS.
    settings = SolverSettings(rtol=1e-6, atol=1e-10) if quick else SolverSettings(rtol=1e-7, atol=1e-11)
    settings_2l = dataclasses.replace(settings, max_steps=1024 if quick else 4096)

    # GD is run as l2-SAM at rho = 0, which is GD exactly (eps = 0 * unit_l2(G) = 0),
    # so each model compiles once: one batch holds the GD and the l2 cells.
    rhos = np.concatenate([np.zeros(n_a), np.full(n_a, rho)])
    a2 = np.concatenate([alphas, alphas])
    panels, timings = {}, {}
    t0 = time.perf_counter()
    tr = solve("l2", data, a2, rhos, ts, depth=2, settings=settings)
    timings["diag"] = time.perf_counter() - t0
    b, st = np.asarray(tr.beta), np.asarray(tr.status)
    panels["diag/gd"], panels["diag/l2"] = (b[:n_a], st[:n_a]), (b[n_a:], st[n_a:])
    model = two_layer_linear(data.d, data.d)
    theta0 = jax.vmap(lambda a: model.init(a))(jnp.asarray(a2))
    t0 = time.perf_counter()
    tr = solve_model("l2", model, theta0, rhos, data, ts, settings_2l, theta0_batched=True)
    timings["2layer"] = time.perf_counter() - t0
    b, st = np.asarray(tr.beta), np.asarray(tr.status)
    panels["2layer/gd"], panels["2layer/l2"] = (b[:n_a], st[:n_a]), (b[n_a:], st[n_a:])

    result = {"timings_s": timings, "alpha_over_rho": a_rel.tolist(), "t": ts.tolist(), "rho": rho, "path": str(out_png)}
    colors = [MISSING_COLOR, COLLAPSED_COLOR] + feature_colors(nb)
    cmap = ListedColormap(colors)
    norm = BoundaryNorm(np.arange(-1.5, nb + 1.5, 1.0), cmap.N)
    te, ae = _edges(ts, True), _edges(a_rel, True)
    titles = {
        "diag/gd": "GD, diagonal net L=2",
        "diag/l2": r"$\ell_2$-SAM, diagonal net L=2",
        "2layer/gd": "GD, two-layer linear",
        "2layer/l2": r"$\ell_2$-SAM, two-layer linear",
    }
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.3), sharey=True)
    mesh = None
    for ax, (key, (beta, status)) in zip(axes, panels.items()):
        dom = band_dominance(beta, band)  # (alpha, time)
        mf = _minor_before_major(dom, nb)
        mesh = ax.pcolormesh(te, ae, dom, cmap=cmap, norm=norm, shading="flat", rasterized=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(titles[key])
        ax.set_xlabel("real time $t$")
        result[key] = {
            "frac_minor_first": float(np.mean(mf)),
            "frac_minor_then_major": float(np.mean(mf & (dom[:, -1] == nb))),
            "alpha_over_rho_minor_then_major": a_rel[mf & (dom[:, -1] == nb)].tolist(),
            "frac_major_end": float(np.mean(dom[:, -1] == nb)),
            "frac_collapsed": float(np.mean(dom[:, -1] == 0)),
            "statuses": {Status(s).name: int(np.sum(status == s)) for s in np.unique(status)},
            "dominant_band": dom.tolist(),
        }
    axes[0].set_ylabel(r"init scale $\alpha/\rho$")
    cbar = fig.colorbar(
        mesh, ax=list(axes), ticks=np.arange(1, nb + 1), boundaries=np.arange(0.5, nb + 1.5, 1.0),
        values=np.arange(1, nb + 1), fraction=0.02, pad=0.01,
    )
    labels = [f"band {b}" for b in range(1, nb + 1)]
    labels[0] += " (minor)"
    labels[-1] += " (major)"
    cbar.ax.set_yticklabels(labels)
    cbar.set_label(r"dominant band (largest mean $|\beta_j|$)")
    fig.suptitle(
        rf"Dominant band over time on banded data (n={data.n}, d={data.d}, 3 bands, intensities 1/3, 2/3, 1), "
        rf"$\rho={rho:g}$"
    )
    fig.text(
        0.45, -0.06,
        "Each pixel: the band with the largest mean |beta_j| at (t, alpha). Grey: collapsed (beta = 0, collapse event of samflow.solve); "
        "black: no value (two-layer l2: the smooth-field solve stops with MAX_STEPS near theta = 0, "
        "where the l2 field is not smooth).\n"
        r"Sequential amplification = colours climbing band 1 $\to$ 2 $\to$ 3 along t. "
        "Diagonal net by samflow.solve (collapse events); two-layer net by solve_model (smooth field).",
        ha="center", fontsize=9,
    )
    fig.savefig(out_png, dpi=120, bbox_inches="tight")
    fig.savefig(out_png.with_suffix(".pdf"), bbox_inches="tight")
    plt.close(fig)
    return result
