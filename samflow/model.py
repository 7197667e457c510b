"""The L-layer linear diagonal network and its hand-written gradient (THEORY.md s.1).

Parameters theta = (w^(1), ..., w^(L)) are stored as one array `W` of shape (L, d);
the linear predictor is beta = w^(1) * ... * w^(L) (elementwise) and the output is
f(x) = <beta, x>. For data (X, y) and a margin loss ell,

    r(W) = (1/n) sum_i slope(z_i) y_i x_i,   z_i = y_i <beta(W), x_i>,
    grad_{w^(l)} L = - r(W) * prod_{k != l} w^(k).

`prod_excl` computes the products over k != l with prefix and suffix products, so
it is exact when some weights are 0 (no division).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .data import Dataset
from .losses import AbstractLoss

__all__ = ["beta", "prod_excl", "margins", "loss_value", "residual", "grad_loss", "init_weights"]


def beta(W: Float[Array, "L d"]) -> Float[Array, " d"]:
    """Linear predictor beta = prod_l w^(l) (elementwise), shape (d,)."""
    return jnp.prod(W, axis=0)


def prod_excl(W: Float[Array, "L d"]) -> Float[Array, "L d"]:
    """Row l holds prod_{k != l} w^(k) (ones when L = 1). Exact at zeros."""
    ones = jnp.ones_like(W[:1])
    before = jnp.cumprod(jnp.concatenate([ones, W[:-1]], axis=0), axis=0)
    rev = W[::-1]
    after = jnp.cumprod(jnp.concatenate([ones, rev[:-1]], axis=0), axis=0)[::-1]
    return before * after


def margins(W: Float[Array, "L d"], data: Dataset) -> Float[Array, " n"]:
    """Margins z_i = y_i <beta(W), x_i>, shape (n,)."""
    return data.y * (data.X @ beta(W))


def loss_value(W: Float[Array, "L d"], data: Dataset, loss: AbstractLoss) -> Float[Array, ""]:
    """Empirical loss L(W) = (1/n) sum_i ell(z_i), a scalar."""
    return jnp.mean(loss.value(margins(W, data)))


def residual(W: Float[Array, "L d"], data: Dataset, loss: AbstractLoss) -> Float[Array, " d"]:
    """r(W) = (1/n) sum_i slope(z_i) y_i x_i, so that -grad L = r * prod_excl(W)."""
    c = loss.slope(margins(W, data))
    return (data.X.T @ (data.y * c)) / data.X.shape[0]


def grad_loss(W: Float[Array, "L d"], data: Dataset, loss: AbstractLoss) -> Float[Array, "L d"]:
    """Hand-written gradient of the loss, grad_{w^(l)} L = -r(W) * prod_{k != l} w^(k).

    Shape (L, d), THEORY.md section 1. Checked against `jax.grad` in the tests.
    """
    return -residual(W, data, loss)[None, :] * prod_excl(W)


def init_weights(alpha: ArrayLike, depth: int, d: int) -> Float[Array, "L d"]:
    """Initial weights W(0) of shape (depth, d) from an init scale.

    **Arguments:**

    - `alpha`: a scalar (every weight equals alpha), a vector of shape (d,) (the
      per-coordinate init alpha_j, the same in every layer) or a full (depth, d)
      array (a general per-layer init).
    - `depth`: L >= 1. `d`: dimension >= 1.

    **Raises:** `ValueError` when the shape of alpha fits none of these.
    """
    a = jnp.asarray(alpha, dtype=jnp.float64)
    if a.ndim == 0 or a.shape == (d,):
        return jnp.broadcast_to(a, (depth, d))
    if a.shape == (depth, d):
        return a
    raise ValueError(
        f"alpha must be a scalar, shape ({d},) or shape ({depth}, {d}); got shape {np.shape(a)}"
    )
