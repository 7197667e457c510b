"""The L-layer linear diagonal network and its hand-written gradient (docs/theory.md s.1).

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
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from ._util.checks import check_count
from .datasets import Dataset
from .losses import AbstractLoss
from ._util.x64 import in_float64

__all__ = ["beta", "prod_excl", "margins", "loss_value", "residual", "grad_loss", "init_weights"]


def beta(W: Float[Array, "L d"], layers: int | None = None) -> Float[Array, " d"]:
    """Linear predictor beta = prod_l w^(l) (elementwise), shape (d,).

    With `layers` = L (a Python int >= 1), `W` is `(1, d)`: one row standing for L
    equal layers (docs/theory.md s.3.5), and beta = w^L.
    """
    if layers is not None:
        return lax.integer_pow(W[0], layers)
    return jnp.prod(W, axis=0)


def prod_excl(W: Float[Array, "L d"], layers: int | None = None) -> Float[Array, "L d"]:
    """Row l holds prod_{k != l} w^(k) (ones when L = 1). Exact at zeros.

    With `layers` = L, `W` is `(1, d)` standing for L equal layers and the result
    is the one row w^(L-1), shape (1, d).
    """
    if layers is not None:
        return lax.integer_pow(W, layers - 1)
    # Running products from each end, one row at a time (the rounding order of
    # `cumprod`'s: w0 w1 ... w_{l-1} times w_{L-1} ... w_{l+1}): elementwise, so XLA
    # fuses them with the field around them (a `cumprod` is a reduce-window, which
    # it runs as a kernel of its own, four per field evaluation).
    L = W.shape[0]
    if L == 1:
        return jnp.ones_like(W)
    before = [None] * L
    after = [None] * L
    for l in range(1, L):
        before[l] = W[0] if l == 1 else before[l - 1] * W[l - 1]
    for l in range(L - 2, -1, -1):
        after[l] = W[L - 1] if l == L - 2 else after[l + 1] * W[l + 1]
    rows = [after[0]] + [before[l] * after[l] for l in range(1, L - 1)] + [before[L - 1]]
    return jnp.stack(rows)


def margins(W: Float[Array, "L d"], data: Dataset, layers: int | None = None) -> Float[Array, " n"]:
    """Margins z_i = y_i <beta(W), x_i>, shape (n,) (`layers`: as `beta`)."""
    # A product and a sum, not a matrix product: XLA picks a dot kernel by the
    # batch shape, and a vmapped dot gave other last bits at other batch widths
    # (the lane engine's results must depend on the cell alone).
    return data.y * jnp.sum(data.X * beta(W, layers)[None, :], axis=1)


def loss_value(W: Float[Array, "L d"], data: Dataset, loss: AbstractLoss) -> Float[Array, ""]:
    """Empirical loss L(W) = (1/n) sum_i ell(z_i), a scalar."""
    return jnp.mean(loss.value(margins(W, data)))


def residual(W: Float[Array, "L d"], data: Dataset, loss: AbstractLoss, layers: int | None = None) -> Float[Array, " d"]:
    """r(W) = (1/n) sum_i slope(z_i) y_i x_i, so that -grad L = r * prod_excl(W)
    (`layers`: as `beta`)."""
    c = loss.slope(margins(W, data, layers))
    return jnp.sum(data.X * (data.y * c)[:, None], axis=0) / data.X.shape[0]  # no dot: see `margins`


def grad_loss(W: Float[Array, "L d"], data: Dataset, loss: AbstractLoss) -> Float[Array, "L d"]:
    """Hand-written gradient of the loss, grad_{w^(l)} L = -r(W) * prod_{k != l} w^(k).

    Shape (L, d), docs/theory.md section 1. Checked against `jax.grad` in the tests.
    """
    return -residual(W, data, loss)[None, :] * prod_excl(W)


@in_float64
def init_weights(alpha: ArrayLike, depth: int, d: int) -> Float[Array, "L d"]:
    """Initial weights W(0) of shape (depth, d) from an init scale (docs/theory.md s.1:
    w^(l)(0) = alpha for every layer; general per-layer inits also allowed).

    **Arguments:**

    - `alpha`: float, one of three shapes, told apart by the number of axes only:
      a scalar (every weight equals alpha); a 1-D vector of shape (d,) (the
      per-coordinate init alpha_j, the same in every layer); or a 2-D array of
      shape (depth, d) (a general per-layer init). A 1-D alpha is always read as
      (d,), also when depth == d: for one value per layer give the (depth, d)
      array `np.repeat(a[:, None], d, axis=1)`. Any sign is allowed (a negative
      entry is a sign pattern of the init).
    - `depth`: L >= 1. `d`: dimension >= 1.

    **Returns:** float64 `(depth, d)`.

    **Raises:** `ValueError` (one line naming alpha, its shape and the shapes
    allowed) when the shape of alpha fits none of these, e.g. a (B, ...) stack of
    per-cell inits: those go to `samflow.solve(..., alpha_batched=True)`; or when
    depth or d is not an integer >= 1.
    """
    depth, d = check_count(depth, "depth"), check_count(d, "d")
    a = jnp.asarray(alpha, dtype=jnp.float64)
    if a.ndim == 0 or a.shape == (d,):
        return jnp.broadcast_to(a, (depth, d))
    if a.shape == (depth, d):
        return a
    raise ValueError(_init_shape_message(np.shape(a), depth, d))


def _init_shape_message(shape: tuple, depth: int, d: int, per_cell: bool = False) -> str:
    """The one-line refusal of an init of shape `shape` (see `init_weights`)."""
    what = "each cell's alpha (alpha[i] with alpha_batched=True)" if per_cell else "alpha"
    msg = f"{what} must be a scalar, shape ({d},) or shape ({depth}, {d}) (depth, d); got shape {tuple(shape)}"
    if per_cell:
        return msg
    if len(shape) == 1 and shape[0] == depth:
        msg += f"; a 1-D alpha is per coordinate (d = {d}): for one value per layer give a ({depth}, {d}) array"
    else:
        msg += "; for one init per cell pass alpha_batched=True with a leading axis of length len(rho)"
    return msg
