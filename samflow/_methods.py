"""The methods and clocks of samflow: their names, and the l2 direction.

`Method` and `Clock` are the vocabulary of configs and result files;
`unit_l2` is the direction G / ||G||_2 of l2-SAM (docs/theory.md s.2).
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


class _Named(str, enum.Enum):
    """A str enum whose `parse` refuses an unknown name in one line naming the
    allowed values (the kind is the class name: "method", "clock")."""

    @classmethod
    def parse(cls, name):
        """The member named `name` (or `name` itself); `ValueError` otherwise."""
        try:
            return cls(name)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown {cls.__name__.lower()} {name!r}: allowed values are {allowed}") from None


class Method(_Named):
    """The four flows. Values are the names used in configs and result files."""

    GD = "gd"
    L2 = "l2"
    LINF = "linf"
    USAM = "usam"


class Clock(_Named):
    """The time variable of a solve: real time `t` or rescaled time `tau`."""

    T = "t"
    TAU = "tau"


METHOD_LABELS = {
    Method.GD: "GD",
    Method.L2: r"$\ell_2$-SAM",
    Method.LINF: r"$\ell_\infty$-SAM",
    Method.USAM: "USAM",
}


def _unit_l2_parts(G):
    m = jnp.max(jnp.abs(G))
    nonzero = m > 0
    safe_m = jnp.where(nonzero, m, 1.0)
    Gs = G / safe_m
    n = jnp.sqrt(jnp.sum(Gs * Gs))
    safe_n = jnp.where(nonzero, n, 1.0)
    return jnp.where(nonzero, Gs / safe_n, 0.0), nonzero, safe_m, safe_n


@jax.custom_jvp
def unit_l2(G: Float[Array, "..."]) -> Float[Array, "..."]:
    """G / ||G||_2 over all entries, and exactly 0 where G = 0.

    Scaled by max|G| first, so the result has norm 1 to rounding however small
    G is (no underflow of G**2), with no additive epsilon. Its JVP is the exact
    (I - u u^T) dG / ||G||, formed from the scaled quantities so that it stays
    finite for G as small as 1e-300 (plain autodiff of the scaling would
    overflow through 1/max|G|**2); at G = 0 the JVP is 0.
    """
    return _unit_l2_parts(G)[0]


@unit_l2.defjvp
def _unit_l2_jvp(primals, tangents):
    (G,), (dG,) = primals, tangents
    u, nonzero, safe_m, safe_n = _unit_l2_parts(G)
    dGs = dG / safe_m
    du = (dGs - u * jnp.sum(u * dGs)) / safe_n
    return u, jnp.where(nonzero, du, 0.0)
