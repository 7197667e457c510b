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
| lp     | LpSam   | rho sign(G) |G|^(q-1) / ||G||_q^(q-1) | yes | collapse, critical, cross | p <= 2 | lp-SAM (p=3) |
| usam   | USam    | rho G           | no         | -                  | yes        | USAM  |

eps(G) is written once on pytrees (norms over all leaves together): the
diagonal network (`samflow.flows`), the discrete algorithms and the generic
models (`samflow.models`) all call `AbstractSam.perturbation`
(docs/theory.md s.2). "Slope-free": eps does not change when G is multiplied
by a positive factor, so the rescaled clock tau of one sample may perturb with
mu in place of r = slope(z) mu (docs/theory.md s.3). The events are the
singular sets of the field that `samflow.solve` stops at (docs/theory.md s.4).
`unit_l2` is the direction G / ||G||_2 of l2-SAM, `unit_lp` the direction
sign(G) |G|^(q-1) / ||G||_q^(q-1) of lp-SAM (1/p + 1/q = 1; docs/theory.md
s.2 (lp-SAM)). lp-SAM is the one method with a parameter, the exponent `p`
(`check_p`): a traced float64 scalar on every path (`samflow.solve`,
`samflow.discrete`, `samflow.models`, the sweep), so that several p share one
compiled program; the other methods take p = None.
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
    LP = "lp"

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
    return _tree_apply(unit_l2, G)


def _unit_lp_parts(G, q):
    m = jnp.max(jnp.abs(G))
    nonzero = m > 0
    safe_m = jnp.where(nonzero, m, 1.0)
    a = jnp.abs(G / safe_m)  # in [0, 1], max 1: no overflow or underflow of the powers below
    pos = a > 0
    log_a = jnp.log(jnp.where(pos, a, 1.0))
    a_q1 = jnp.where(pos, jnp.exp((q - 1.0) * log_a), 0.0)  # |Gs|^(q-1)
    n_q = jnp.sum(jnp.where(pos, jnp.exp(q * log_a), 0.0))  # ||Gs||_q^q >= 1
    safe_n = jnp.where(nonzero, n_q ** (1.0 / q), 1.0)  # ||Gs||_q
    u = jnp.where(nonzero, jnp.sign(G) * a_q1 / safe_n ** (q - 1.0), 0.0)
    return u, nonzero, safe_m, safe_n, a, pos, log_a


@jax.custom_jvp
def unit_lp(G: Float[Array, "..."], q) -> Float[Array, "..."]:
    """sign(G) |G|^(q-1) / ||G||_q^(q-1) over all entries (q > 1 the dual
    exponent of p), and exactly 0 where G = 0: the unit lp-ball maximiser of
    <G, eps> (its lp norm is 1, docs/theory.md s.2 (lp-SAM)).

    G is scaled by max|G| first (as `unit_l2`), so nothing over- or underflows
    for G from 1e-300 to 1e300. Float64 like G; `q` a scalar (traced is fine).
    Its JVP in G is exact, (q - 1) (|Gs|^(q-2) dGs / N^(q-1) - u <u, dGs> / N)
    with Gs = G / max|G|, dGs = dG / max|G|, N = ||Gs||_q (at q = 2 that of
    `unit_l2`); entries with G = 0 get |Gs|^(q-2) = 1 at q = 2, else 0 (the
    derivative is infinite there for q < 2). No derivative in q (treated as
    constant).
    """
    return _unit_lp_parts(G, q)[0]


@unit_lp.defjvp
def _unit_lp_jvp(primals, tangents):
    (G, q), (dG, _) = primals, tangents
    u, nonzero, safe_m, safe_n, a, pos, log_a = _unit_lp_parts(G, q)
    dGs = dG / safe_m
    a_q2 = jnp.where(pos, jnp.exp((q - 2.0) * log_a), jnp.where(q == 2.0, 1.0, 0.0))
    du = (q - 1.0) * (a_q2 * dGs / safe_n ** (q - 1.0) - u * jnp.sum(u * dGs) / safe_n)
    return u, jnp.where(nonzero, du, 0.0)


def _tree_apply(fn, G):
    """`fn` (an array function, all entries together) on a pytree G: an array
    is taken as it is; a pytree of arrays is flattened into one vector."""
    if hasattr(G, "shape"):
        return fn(G)
    flat, unravel = ravel_pytree(G)
    return unravel(fn(flat))


P_HELP = "give p as a number in (1, inf), e.g. p=3.0 (p = 2 is 'l2'; for p = inf use method 'linf')"


def check_p(method, p) -> "float | None":
    """The exponent p of a method, checked: a float in (1, inf) for "lp"
    (required), None for every other method (refused if given).

    **Raises:** `ValueError`, one line naming `p` and the fix: p missing for
    "lp"; p given with another method; p not a real number (a string, a bool,
    an array of several values), NaN, <= 1 or inf (use "linf").
    """
    import numpy as np

    m = Method.parse(method)
    if m is not Method.LP:
        if p is not None:
            raise ValueError(
                f"p = {p!r} is given but method {m.value!r} takes no p; p is the exponent of method 'lp' only "
                "(drop p, or use method 'lp')"
            )
        return None
    if p is None:
        raise ValueError(f"method 'lp' needs the exponent p: {P_HELP}")
    if isinstance(p, (bool, np.bool_, str, bytes)) or not isinstance(p, (int, float, np.integer, np.floating)):
        if not (isinstance(p, (np.ndarray, jax.Array)) and np.ndim(p) == 0 and np.issubdtype(np.asarray(p).dtype, np.number)
                and not np.issubdtype(np.asarray(p).dtype, np.bool_)):
            raise ValueError(f"p must be a number in (1, inf), got {p!r}: {P_HELP}")
    v = float(p)
    if np.isnan(v) or v <= 1.0:
        raise ValueError(f"p must be in (1, inf), got {v!r}: {P_HELP}")
    if np.isinf(v):
        raise ValueError("p = inf is linf-SAM: use method 'linf' (lp takes p in (1, inf))")
    return v


def p_array(method, p):
    """The p of a batch program: a float64 scalar (NaN for methods without p),
    passed traced so that one compilation serves every p."""
    from ._util.arrays import device_array

    return device_array(float("nan") if p is None else p, jnp.float64)


def dual_exponent(p):
    """q = p / (p - 1), the dual exponent of p (1/p + 1/q = 1); traced is fine."""
    return p / (p - 1.0)


class AbstractSam(eqx.Module):
    """What is special about one method (the table in the module docstring).

    **Class attributes:** `method` (`Method`); `label` (LaTeX for plots);
    `slope_free` (eps(c G) = eps(G) for c > 0); `events`, the names of the
    singular-point events of `samflow._engine.events` that the method needs at depth
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
    def perturbation(self, G: Any, rho, sign: Any = None, p=None) -> Any:
        """eps(G), a pytree like G (`rho` >= 0 scalar). `sign`, a pytree like
        G, stands for sign(G) where the caller knows it exactly (linf and lp:
        the diagonal network's sign memory at a weight held at 0 or inside a
        step across 0). `p`: lp's exponent (a scalar, traced is fine), None for
        the other methods."""

    @abc.abstractmethod
    def log_factor(self, x, X, E, rho, mu, sigma, z, loss, p=None):
        """The factor a = W_hat / W of the diagonal network of one sample, in
        log coordinates (`samflow.flows.log_velocity`, which defines the
        arguments); `ValueError` where log coordinates do not apply."""

    def events_at(self, depth: int) -> tuple[str, ...]:
        """The singular-point events of a cell of this depth, in a fixed order."""
        return ()

    def equal_layers_rho(self, rho, layers: int, p=None):
        """The radius with which eps of ONE of `layers` equal layers follows from
        that layer's G alone: eps(G repeated over `layers` rows) has equal rows,
        each eps(G_row) at this radius (docs/theory.md s.3.5). `rho` itself for a
        perturbation without a norm (gd, linf, usam); see `L2Sam`, `LpSam`."""
        return rho


class GD(AbstractSam):
    """Gradient descent: eps = 0."""

    method: ClassVar[Method] = Method.GD
    label: ClassVar[str] = "GD"

    def perturbation(self, G, rho, sign=None, p=None):
        return jax.tree_util.tree_map(jnp.zeros_like, G)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss, p=None):
        return jnp.ones_like(x)


class L2Sam(AbstractSam):
    """l2-SAM: eps = rho G / ||G||_2 (0 exactly when G = 0). The field is
    undefined at the critical points of the loss; the flow can reach them in
    finite time (W = 0 at depth >= 2: the collapse)."""

    method: ClassVar[Method] = Method.L2
    label: ClassVar[str] = r"$\ell_2$-SAM"
    collapses: ClassVar[bool] = True

    def perturbation(self, G, rho, sign=None, p=None):
        return jax.tree_util.tree_map(lambda u: rho * u, _unit_l2_tree(G))

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss, p=None):
        nz = mu != 0
        log_mu = jnp.log(jnp.where(nz, jnp.abs(mu), 1.0))
        terms = jnp.where(nz[None, :], 2.0 * (log_mu[None, :] + X[None, :] - x), -jnp.inf)
        lse = jax.nn.logsumexp(terms)
        has_g = jnp.isfinite(lse)
        log_norm = 0.5 * jnp.where(has_g, lse, 0.0)
        return jnp.where(has_g, 1.0 - rho * mu * sigma * jnp.exp(E - log_norm), 1.0)

    def events_at(self, depth):
        return ("collapse", "critical") if depth >= 2 else ("critical",)

    def equal_layers_rho(self, rho, layers, p=None):
        # ||G||_2 over L equal rows is sqrt(L) ||G_row||_2.
        return rho / jnp.sqrt(jnp.asarray(layers, jnp.result_type(rho, float)))


class LinfSam(AbstractSam):
    """linf-SAM: eps = rho sign(G). The field jumps where a sign of G changes
    (a weight at 0, an r_j = 0 surface): sign events and Filippov sliding."""

    method: ClassVar[Method] = Method.LINF
    label: ClassVar[str] = r"$\ell_\infty$-SAM"
    slides: ClassVar[bool] = True
    log_coords: ClassVar[bool] = False

    def perturbation(self, G, rho, sign=None, p=None):
        s = jax.tree_util.tree_map(jnp.sign, G) if sign is None else sign
        return jax.tree_util.tree_map(lambda v: rho * v, s)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss, p=None):
        raise ValueError("log coordinates do not apply to linf-SAM (its weights slide at 0)")

    def events_at(self, depth):
        return ("cross",)


class USam(AbstractSam):
    """Unnormalized SAM: eps = rho G (its size keeps the slope factor)."""

    method: ClassVar[Method] = Method.USAM
    label: ClassVar[str] = "USAM"
    slope_free: ClassVar[bool] = False

    def perturbation(self, G, rho, sign=None, p=None):
        return jax.tree_util.tree_map(lambda g: rho * g, G)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss, p=None):
        r = loss.slope(z) * mu
        return 1.0 - rho * r * sigma * jnp.exp(E)


class LpSam(AbstractSam):
    """lp-SAM, 1 < p < inf: eps = rho sign(G) |G|^(q-1) / ||G||_q^(q-1) with
    1/p + 1/q = 1 (`unit_lp`; 0 exactly when G = 0), the maximiser of <G, eps>
    over ||eps||_p <= rho (docs/theory.md s.2 (lp-SAM)). p = 2 is l2-SAM, p ->
    inf tends to linf-SAM. Like l2 the field is undefined at the critical points
    of the loss (collapse and critical events). For p > 2 (q < 2) it is not
    Lipschitz where an entry of G is 0: a weight can reach 0 in finite time, so
    the weights get linf's sign events and Filippov decision (`cross`; the sign
    of G_lj comes from the sign memory between events). For p <= 2 the field is
    C^1 there and the cross events only restart a run where a weight
    changes sign (the memory then follows the sign). Log coordinates apply for
    every p (`log_factor`; for p > 2 a column at 0 is held at `samflow.flows.LOG_ZERO`)."""

    method: ClassVar[Method] = Method.LP
    label: ClassVar[str] = r"$\ell_p$-SAM"
    collapses: ClassVar[bool] = True

    def perturbation(self, G, rho, sign=None, p=None):
        if p is None:
            raise ValueError(f"method 'lp' needs the exponent p: {P_HELP}")
        q = dual_exponent(jnp.asarray(p, jnp.result_type(float)))
        u = _tree_apply(lambda g: unit_lp(g, q), G)
        if sign is not None:  # the sign memory stands in for sign(G) (|u| is the same)
            u = jax.tree_util.tree_map(lambda v, s: jnp.where(s != 0, s * jnp.abs(v), v), u, sign)
        return jax.tree_util.tree_map(lambda v: rho * v, u)

    def log_factor(self, x, X, E, rho, mu, sigma, z, loss, p=None):
        # a_lj = 1 + eps_lj / w_lj = 1 - rho sign(mu_j) sigma_j |mu_j q_lj|^(q-1) / (|w_lj| ||mu q||_q^(q-1)),
        # |mu_j q_lj| = |mu_j| exp(X_j - x_lj): all in logs (docs/theory.md s.2 (lp-SAM)).
        q = dual_exponent(jnp.asarray(p, x.dtype))
        nz = mu != 0
        log_mu = jnp.log(jnp.where(nz, jnp.abs(mu), 1.0))
        log_g = jnp.where(nz[None, :], log_mu[None, :] + X[None, :] - x, -jnp.inf)
        lse = jax.nn.logsumexp(q * log_g)
        has_g = jnp.isfinite(lse)
        log_norm = jnp.where(has_g, lse, 0.0) / q
        expo = (q - 1.0) * (jnp.where(nz[None, :], log_g, 0.0) - log_norm) - x
        return jnp.where(has_g & nz[None, :], 1.0 - rho * jnp.sign(mu) * sigma * jnp.exp(expo), 1.0)

    def events_at(self, depth):
        return ("collapse", "critical", "cross") if depth >= 2 else ("critical",)

    def equal_layers_rho(self, rho, layers, p=None):
        # ||G||_q^(q-1) over L equal rows is L^((q-1)/q) = L^(1/p) times the row's.
        return rho * jnp.power(jnp.asarray(layers, jnp.result_type(rho, float)), -1.0 / p)


_SPECS = {cls.method: cls() for cls in (GD, L2Sam, LinfSam, USam, LpSam)}

METHOD_LABELS = {m: m.spec.label for m in Method}
