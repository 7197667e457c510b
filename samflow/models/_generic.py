"""Differentiable models f(theta, x) and their SAM fields, for `samflow.models`.

The models (`Model`: f, effective predictor, init; the diagonal network, a
two-layer linear net, a linear conv net), the loss and its autodiff gradient,
the perturbation eps(G) on pytrees (norms over all leaves together), the flow's
velocity and one discrete step, the distance to a critical point
(`collapse_ratio`), and the checks of a call's inits. The table of eps and the
singular points: `samflow.models` and docs/theory.md s.2, s.4.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from .._util.checks import check_count
from ..datasets import Dataset
from ..flows import Method
from ..losses import AbstractLoss, get_loss
from .._engine.settings import brief, float_array

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


# typed: True (== 1) must not hit the cached model of 1 and skip the size check.
@functools.lru_cache(maxsize=None, typed=True)
def diagonal_network(depth: int, d: int | None = None) -> Model:
    """The L-layer diagonal network f(theta, x) = <w1 * ... * wL, x>, theta = (w1, ..., wL).

    `init(alpha, d)`: every weight equals alpha (as `samflow.init_weights`); `d`
    may be given here instead. Same flow as `samflow.solve` with `depth` = L.
    """
    depth = check_count(depth, "depth")
    d = None if d is None else check_count(d, "d")

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


@functools.lru_cache(maxsize=None, typed=True)
def two_layer_linear(d: int, k: int) -> Model:
    """Two-layer linear network f(theta, x) = <v, U x>, theta = (U (k, d), v (k,)).

    Effective predictor beta = U^T v. `init(alpha, seed=None)`: with `seed` None
    the deterministic U = alpha * eye(k, d), v = alpha * 1 (for k >= d, beta(0) =
    alpha^2 1 as the diagonal network at depth 2); with an int seed, U and v are
    alpha times standard normal draws (`jax.random.PRNGKey(seed)`).

    **Raises:** `ValueError` if d or k is not an integer >= 1.
    """
    d, k = check_count(d, "d"), check_count(k, "k")

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


@functools.lru_cache(maxsize=None, typed=True)
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

    **Raises:** `ValueError` if n_channels, kernel or d is not an integer >= 1.
    """
    n_channels, kernel, d = check_count(n_channels, "n_channels"), check_count(kernel, "kernel"), check_count(d, "d")
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


def loss_obj(loss) -> AbstractLoss:
    """The loss object of a name ("logistic", "exponential") or the object itself; unknown names raise `get_loss`'s ValueError."""
    return get_loss(loss) if isinstance(loss, str) else loss


def model_outputs(f: Callable, theta: Pytree, X: Float[Array, "n d"]) -> Float[Array, " n"]:
    """f(theta, x_i) for every row of X, shape (n,)."""
    return jax.vmap(lambda x: f(theta, x))(X)


def model_loss(f: Callable, theta: Pytree, data: Dataset, loss="logistic") -> Float[Array, ""]:
    """L(theta) = mean_i ell(y_i f(theta, x_i)), a scalar."""
    return jnp.mean(loss_obj(loss).value(data.y * model_outputs(f, theta, data.X)))


def model_grad(f: Callable, theta: Pytree, data: Dataset, loss="logistic") -> Pytree:
    """grad L(theta) by autodiff, a pytree like theta."""
    return jax.grad(lambda th: model_loss(f, th, data, loss))(theta)


def model_perturbation(method: "str | Method", G: Pytree, rho, p=None) -> Pytree:
    """eps(G) of the table in the module docstring, norms over all leaves
    together; `p` lp-SAM's exponent (a scalar, traced is fine; None otherwise)."""
    return Method.parse(method).spec.perturbation(G, rho, p=p)


def model_velocity(method, f: Callable, theta: Pytree, rho, data: Dataset, loss="logistic", p=None) -> Pytree:
    """dtheta/dt = -grad L(theta + eps(grad L(theta))), a pytree like theta."""
    G = model_grad(f, theta, data, loss)
    eps = model_perturbation(method, G, rho, p)
    theta_hat = jax.tree_util.tree_map(jnp.add, theta, eps)
    return jax.tree_util.tree_map(jnp.negative, model_grad(f, theta_hat, data, loss))


def model_sam_step(method, f: Callable, theta: Pytree, rho, eta, data: Dataset, loss="logistic", p=None) -> Pytree:
    """One discrete step theta - eta grad L(theta + eps(theta)) (sign(0) = 0 for linf)."""
    v = model_velocity(method, f, theta, rho, data, loss, p)
    return jax.tree_util.tree_map(lambda th, dv: th + eta * dv, theta, v)


def flat_norm(tree) -> Array:
    """Euclidean norm of all leaves of `tree` together, a float scalar of their dtype (0 for an all-zero tree)."""
    flat, _ = ravel_pytree(tree)
    # Scaled by max|x| first: no overflow above 1e154, no underflow below 1e-154.
    m = jnp.max(jnp.abs(flat))
    safe = jnp.where(m > 0, m, 1.0)
    return jnp.where(m > 0, safe * jnp.sqrt(jnp.sum((flat / safe) ** 2)), 0.0)


def collapse_ratio(f: Callable, theta: Pytree, rho, data: Dataset, loss="logistic", method=Method.L2,
                   p=None) -> tuple[Array, Array]:
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
    scalar; `data`; `loss` a name or an `AbstractLoss`; `method` "l2" (default)
    or "lp" with its exponent `p` (theta_hat = theta + eps(G) of that method).

    **Returns:** (R, ok): () float64 >= 0 (0 where G = 0) and () bool.
    """
    G = model_grad(f, theta, data, loss)
    eps = model_perturbation(method, G, rho, p)
    theta_hat = jax.tree_util.tree_map(jnp.add, theta, eps)
    g, gh = flat_norm(G), flat_norm(model_grad(f, theta_hat, data, loss))
    ratio = jnp.where(g > 0, g / jnp.where(gh > 0, gh, 1.0), 0.0)
    ok = model_loss(f, theta_hat, data, loss) <= 2.0 * model_loss(f, theta, data, loss)
    return ratio, ok


def check_cells(f: Callable, predictor, theta0: Pytree, data: Dataset, B: int, batched: bool, theta0_batched) -> Pytree:
    """Validate the inits of a `solve_model` / `run_model_discrete` call before
    anything is compiled; returns theta0 with float64 numpy leaves.

    The rule (as `samflow.solve`'s `alpha_batched`): theta0 is ONE init shared
    by every cell unless `theta0_batched=True`, when every leaf carries an
    explicit leading axis of length B = len(rho). Leaf shapes are never matched
    against len(rho).
    """
    if not isinstance(theta0_batched, (bool, np.bool_)):
        raise ValueError(f"theta0_batched must be True or False, got {brief(theta0_batched)}")
    leaves, treedef = jax.tree_util.tree_flatten(theta0)
    if not leaves:
        raise ValueError("theta0 has no arrays: give the model's parameters (e.g. model.init(alpha))")
    leaves = [float_array(x, "theta0") for x in leaves]
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
