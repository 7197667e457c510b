"""The methods and clocks of samflow, and what is special about each method.

`Method` and `Clock` are the vocabulary of configs and result files. Each
method maps to one final class of `AbstractSam` (`Method.spec`), which holds
everything that differs between the methods, so that adding one (say,
adaptive SAM) touches one class:

| method | class   | eps(G)          | slope-free | events             | log coords | label |
|--------|---------|-----------------|------------|--------------------|------------|-------|
| gd     | GD      | 0               | yes        | -                  | yes        | GD    |
| l2     | L2Sam   | rho G / ||G||_2 | yes        | collapse, critical | yes        | l2-SAM |
| linf   | LinfSam | rho sign(G)     | yes        | cross (sliding)    | no         | linf-SAM |
| usam   | USam    | rho G           | no         | -                  | yes        | USAM  |

eps(G) is written once on pytrees (norms over all leaves together): the
diagonal network (`samflow.flows`), the discrete algorithms and the generic
models (`samflow.models`) all call `AbstractSam.perturbation`
(docs/theory.md s.2). "Slope-free": eps does not change when G is multiplied
by a positive factor, so the rescaled clock tau of one sample may perturb with
mu in place of r = slope(z) mu (docs/theory.md s.3). The events are the
singular sets of the field that `samflow.solve` stops at (docs/theory.md s.4).
`unit_l2` is the direction G / ||G||_2 of l2-SAM.
"""

from __future__ import annotations

import abc
import enum
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
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

    @property
    def spec(self) -> "AbstractSam":
        """What is special about this method (`AbstractSam`)."""
        return _SPECS[self]


class Clock(_Named):
    """The time variable of a solve: real time `t` or rescaled time `tau`."""

    T = "t"
    TAU = "tau"



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


def _unit_l2_tree(G):
    """`unit_l2` on a pytree, the norm over all leaves together (an array is
    taken as it is; a pytree of arrays is flattened into one vector)."""
    if hasattr(G, "shape"):
        return unit_l2(G)
    flat, unravel = ravel_pytree(G)
    return unravel(unit_l2(flat))


class AbstractSam(eqx.Module):
    """What is special about one method (the table in the module docstring).

    **Class attributes:** `method` (`Method`); `label` (LaTeX for plots);
    `slope_free` (eps(c G) = eps(G) for c > 0); `events`, the names of the
    singular-point events of `samflow._events` that the method needs at depth
    >= 2 (`events_at`); `slides`, the field is discontinuous where a sign of G
    changes (sign memory, Filippov sliding); `collapses`, the field is undefined
    at the critical points of the loss (collapse and critical-point events);
    `log_coords`, log coordinates x = log|W| apply (a field continuous at 0).
    """

    method: ClassVar[Method]
    label: ClassVar[str]
    slope_free: ClassVar[bool] = True
    slides: ClassVar[bool] = False
    collapses: ClassVar[bool] = False
    log_coords: ClassVar[bool] = True

    @abc.abstractmethod
    def perturbation(self, G: Any, rho, sign: Any = None) -> Any:
        """eps(G), a pytree like G (`rho` >= 0 scalar). `sign`, a pytree like
        G, stands for sign(G) where the caller knows it exactly (linf only: the
        diagonal network's sign memory at a weight held at 0)."""

    @abc.abstractmethod
    def log_factor(self, x, X, E, rho, mu, sigma, z, loss):
        """The factor a = W_hat / W of the diagonal network of one sample, in
        log coordinates (`samflow.flows.log_velocity`, which defines the
        arguments); `ValueError` where log coordinates do not apply."""

    def events_at(self, depth: int) -> tuple[str, ...]:
        """The singular-point events of a cell of this depth, in a fixed order."""
        return ()


class GD(AbstractSam):
    """Gradient descent: eps = 0."""

    method: ClassVar[Method] = Method.GD
    label: ClassVar[str] = "GD"

    def perturbation(self, G, rho, sign=None):
        return jax.tree_util.tree_map(jnp.zeros_like, G)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss):
        return jnp.ones_like(x)


class L2Sam(AbstractSam):
    """l2-SAM: eps = rho G / ||G||_2 (0 exactly when G = 0). The field is
    undefined at the critical points of the loss; the flow can reach them in
    finite time (W = 0 at depth >= 2: the collapse)."""

    method: ClassVar[Method] = Method.L2
    label: ClassVar[str] = r"$\ell_2$-SAM"
    collapses: ClassVar[bool] = True

    def perturbation(self, G, rho, sign=None):
        return jax.tree_util.tree_map(lambda u: rho * u, _unit_l2_tree(G))

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss):
        nz = mu != 0
        log_mu = jnp.log(jnp.where(nz, jnp.abs(mu), 1.0))
        terms = jnp.where(nz[None, :], 2.0 * (log_mu[None, :] + X[None, :] - x), -jnp.inf)
        lse = jax.nn.logsumexp(terms)
        has_g = jnp.isfinite(lse)
        log_norm = 0.5 * jnp.where(has_g, lse, 0.0)
        return jnp.where(has_g, 1.0 - rho * mu * sigma * jnp.exp(E - log_norm), 1.0)

    def events_at(self, depth):
        return ("collapse", "critical") if depth >= 2 else ("critical",)


class LinfSam(AbstractSam):
    """linf-SAM: eps = rho sign(G). The field jumps where a sign of G changes
    (a weight at 0, an r_j = 0 surface): sign events and Filippov sliding."""

    method: ClassVar[Method] = Method.LINF
    label: ClassVar[str] = r"$\ell_\infty$-SAM"
    slides: ClassVar[bool] = True
    log_coords: ClassVar[bool] = False

    def perturbation(self, G, rho, sign=None):
        s = jax.tree_util.tree_map(jnp.sign, G) if sign is None else sign
        return jax.tree_util.tree_map(lambda v: rho * v, s)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss):
        raise ValueError("log coordinates do not apply to linf-SAM (its weights slide at 0)")

    def events_at(self, depth):
        return ("cross",)


class USam(AbstractSam):
    """Unnormalized SAM: eps = rho G (its size keeps the slope factor)."""

    method: ClassVar[Method] = Method.USAM
    label: ClassVar[str] = "USAM"
    slope_free: ClassVar[bool] = False

    def perturbation(self, G, rho, sign=None):
        return jax.tree_util.tree_map(lambda g: rho * g, G)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss):
        r = loss.slope(z) * mu
        return 1.0 - rho * r * sigma * jnp.exp(E)


_SPECS = {cls.method: cls() for cls in (GD, L2Sam, LinfSam, USam)}

METHOD_LABELS = {m: m.spec.label for m in Method}
