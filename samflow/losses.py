"""Margin losses ell(z) of binary classification (docs/theory.md section 1).

Every loss here is written in terms of the margin z = y <beta, x> and exposes the
three quantities the flows need, each computed without overflow in float64:

- `value(z)`: ell(z);
- `slope(z)`: -ell'(z) > 0, the positive factor in front of the gradient;
- `log_inv_slope(z)`: log(1 / slope(z)), the log of dt/dtau in the rescaled
  flows (docs/theory.md section 3), finite even where `slope` underflows to 0.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

__all__ = ["AbstractLoss", "Logistic", "Exponential", "get_loss", "LOSSES"]


class AbstractLoss(eqx.Module):
    """A margin loss ell(z). Subclasses are stateless and final."""

    name: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def value(self, z: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
        """ell(z), elementwise."""

    @abc.abstractmethod
    def slope(self, z: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
        """-ell'(z) (positive), elementwise."""

    @abc.abstractmethod
    def log_inv_slope(self, z: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
        """log(-1 / ell'(z)), elementwise."""


class Logistic(AbstractLoss):
    """Logistic loss ell(z) = log(1 + exp(-z)) = softplus(-z).

    `slope(z) = sigmoid(-z)`, `log_inv_slope(z) = softplus(z)`. In float64,
    `value(-1000) == 1000` and `value(1000) == 0`; nothing is inf or NaN for any
    finite z.
    """

    name: ClassVar[str] = "logistic"

    def value(self, z):
        return jax.nn.softplus(-jnp.asarray(z))

    def slope(self, z):
        return jax.nn.sigmoid(-jnp.asarray(z))

    def log_inv_slope(self, z):
        return jax.nn.softplus(jnp.asarray(z))


class Exponential(AbstractLoss):
    """Exponential loss ell(z) = exp(-z).

    `slope(z) = exp(-z)`, `log_inv_slope(z) = z`. The value itself exceeds the
    float64 range for z < -709.78 (exp(709.78) is the largest double): there it
    is +inf, which is the true value rounded; `log_inv_slope` stays finite.
    """

    name: ClassVar[str] = "exponential"

    def value(self, z):
        return jnp.exp(-jnp.asarray(z))

    def slope(self, z):
        return jnp.exp(-jnp.asarray(z))

    def log_inv_slope(self, z):
        return jnp.asarray(z)


LOSSES: dict[str, type[AbstractLoss]] = {"logistic": Logistic, "exponential": Exponential}


def get_loss(name: str) -> AbstractLoss:
    """Return the loss called `name` ("logistic" or "exponential").

    **Raises:** `ValueError` naming the allowed values when `name` is unknown.
    """
    try:
        return LOSSES[name]()
    except KeyError:
        raise ValueError(
            f"unknown loss {name!r}: allowed values are {', '.join(LOSSES)}"
        ) from None
