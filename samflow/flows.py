"""GD, l2-SAM, linf-SAM, USAM and lp-SAM flows of the diagonal network (docs/theory.md s.2, s.3).

Every flow is one rule, written once:

    W_hat = W + eps(G),   G = grad L(W) = -r * prod_excl(W),
    dW/dt = -grad L(W_hat) = r(W_hat) * prod_excl(W_hat),

with the perturbation eps of the method (`Method.spec.perturbation`, the
table of `samflow._methods`, shared with the generic models):

| method | eps(G)             |
|--------|--------------------|
| gd     | 0                  |
| l2     | rho G / ||G||_2    | (norm over all layers; 0 exactly when G = 0)
| linf   | rho sign(G)        |
| usam   | rho G              |
| lp     | rho sign(G) |G|^(q-1) / ||G||_q^(q-1) | (1/p + 1/q = 1; docs/theory.md s.2 (lp-SAM))

lp-SAM takes its exponent `p` (a float64 scalar, traced is fine) as the
keyword `p` of every function below; the other methods take p = None.

For one sample {(mu, +1)}, r(W) = slope(z) mu with slope > 0. For gd, l2, linf and lp
eps does not depend on that factor (`slope_free`), and dividing the velocity by slope(z_hat)
gives the rescaled flow in tau, dtau/dt = slope(z_hat):

    dW/dtau = mu * prod_excl(W_hat),   log(dt/dtau) = log_inv_slope(z_hat).

(For usam the same time change is exact too; its eps keeps the slope factor.)
`velocity(..., clock="tau")` (`rescaled_velocity`) returns log(dt/dtau), finite even where dt/dtau overflows;
`samflow.solve` turns it into real time (docs/theory.md section 4 on why t is a
secondary quantity of the tau clock).

`memory` is the sign pattern of the linf (and lp) field between two events (see
`sign_with_memory` and `samflow.solve`): the side each weight is on, or came
from when it is held at 0, which gives the one-sided limit of the discontinuous
field; with `memory = None` (or 0) it is plain `sign`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .datasets import Dataset
from ._methods import METHOD_LABELS as METHOD_LABELS
from ._methods import Clock as Clock
from ._methods import Method as Method
from ._methods import unit_l2 as unit_l2
from .losses import AbstractLoss, get_loss
from .diagonal_net import beta, prod_excl, residual

__all__ = [
    "Clock",
    "Method",
    "METHOD_LABELS",
    "unit_l2",
    "perturbation",
    "perturbed_weights",
    "velocity",
    "real_time_velocity",
    "rescaled_velocity",
    "log_velocity",
]


def sign_with_memory(W: Float[Array, "L d"], memory: Float[Array, "L d"] | None) -> Float[Array, "L d"]:
    """The sign pattern of the linf field: `memory` where it is nonzero, else sign(W).

    `samflow.solve` keeps `memory` equal to sign(W) between events and stops at
    every zero crossing, so this equals sign(W) along the solution; but inside a
    Runge-Kutta step that overshoots a crossing the field stays the smooth
    continuation from the current side, so the step is not rejected (no step-size
    collapse at the switch). At a weight held at 0 it gives the one-sided limit.
    Plain `sign(W)` when `memory` is None.
    """
    s = jnp.sign(W)
    if memory is None:
        return s
    return jnp.where(memory != 0, memory, s)


def perturbation(
    W: Float[Array, "L d"],
    r: Float[Array, " d"],
    rho: Float[Array, ""],
    method: Method,
    memory: Float[Array, "L d"] | None = None,
    p: Float[Array, ""] | None = None,
    layers: int | None = None,
) -> Float[Array, "L d"]:
    """The SAM perturbation eps(G) for G = -r * prod_excl(W) (table above).

    **Arguments:** weights `W` (L, d); `r` (d,), the residual with -grad L =
    r * prod_excl(W) (any positive multiple for gd, l2, linf and lp); `rho` >=
    0; `method`; `memory`, the linf / lp sign memory (L, d) or None; `p`, lp's
    exponent in (1, inf) (required for "lp", None otherwise; not checked here,
    see `samflow._methods.check_p`); `layers`, None (the rows of `W` are the
    layers) or a Python int L >= 2: `W` (and `memory`) is `(1, d)`, one row
    standing for L equal layers (docs/theory.md s.3.5), and the result is the
    one row of eps they share.

    **Returns:** eps, shape (L, d) (`(1, d)` with `layers`). For l2, ||eps||_2 =
    rho exactly when G != 0 (over all L layers) and eps = 0 when G = 0; for lp
    the same with ||eps||_p.
    """
    spec = Method.parse(method).spec
    G = -r[None, :] * prod_excl(W, layers)
    # sign(G) = sign(-r) * prod_{k != l} sign(w^(k)): exact, and lets the sign
    # memory stand in for sign(0) on a switching surface (used by linf and lp).
    sign_G = jnp.sign(-r)[None, :] * prod_excl(sign_with_memory(W, memory), layers)
    if layers is not None:
        rho = spec.equal_layers_rho(rho, layers, p)  # the norm over L equal rows, from one
    return spec.perturbation(G, rho, sign=sign_G, p=p)


def perturbed_weights(W, r, rho, method: Method, memory=None, p=None, layers=None):
    """W_hat = W + eps(G) (docs/theory.md section 2), shape (L, d) (`layers`: as
    `perturbation`)."""
    return W + perturbation(W, r, rho, method, memory, p, layers)


def velocity(
    W: Float[Array, "L d"],
    rho: Float[Array, ""],
    method: Method,
    data: Dataset,
    loss: AbstractLoss,
    memory: Float[Array, "L d"] | None = None,
    *,
    clock: Clock | str = Clock.T,
    p: Float[Array, ""] | None = None,
    layers: int | None = None,
) -> tuple[Float[Array, "L d"], Float[Array, ""]]:
    """The flow's field in either clock: (dW/dc, log(dt/dc)) for c = t or tau.

    - `clock="t"` (docs/theory.md section 2), any data: dW/dt = -grad L(W_hat)
      = r(W_hat) * prod_excl(W_hat), W_hat = W + eps(grad L(W)); log(dt/dt) = 0.
    - `clock="tau"` (docs/theory.md section 3), one sample {(mu, +1)} (checked
      by the caller, `samflow.solve`; `mu` is then y_1 x_1): dW/dtau =
      mu * prod_excl(W_hat) and log(dt/dtau) = log_inv_slope(z_hat), finite
      even where dt/dtau overflows.

    **Arguments:** weights `W` (L, d); `rho` >= 0; `method`; `data`; `loss`, a
    `samflow.Logistic()` / `samflow.Exponential()` or its name; `memory`, the
    linf / lp sign memory (L, d) or None (module docstring); `clock`; `p`,
    lp's exponent (required for "lp", docs/theory.md s.2 (lp-SAM)); `layers`,
    None or an int L >= 2: `W` and `memory` are `(1, d)`, one row standing for
    L equal layers, which stay equal (docs/theory.md s.3.5, "Equal layers").

    **Returns:** (dW/dc (L, d), log(dt/dc) ()), float as `W`, in weights per
    unit of the clock (`(1, d)`, the shared row, with `layers`).

    **Raises:** `ValueError` for an unknown method, loss or clock, or the tau
    clock on several samples.
    """
    if isinstance(loss, str):
        loss = get_loss(loss)
    if Clock.parse(clock) is Clock.TAU and data.X.shape[0] != 1:
        raise ValueError(TAU_ONE_SAMPLE)
    if Clock.parse(clock) is Clock.T:
        W_hat = perturbed_weights(W, residual(W, data, loss, layers), rho, method, memory, p, layers)
        return residual(W_hat, data, loss, layers)[None, :] * prod_excl(W_hat, layers), jnp.zeros((), W.dtype)
    mu = data.y[0] * data.X[0]
    r_pert = mu if Method.parse(method).spec.slope_free else residual(W, data, loss, layers)
    W_hat = perturbed_weights(W, r_pert, rho, method, memory, p, layers)
    z_hat = jnp.sum(beta(W_hat, layers) * mu)  # no dot: see `diagonal_net.margins`
    return mu[None, :] * prod_excl(W_hat, layers), loss.log_inv_slope(z_hat)


def real_time_velocity(W, rho, method, data, loss, memory=None, p=None) -> Float[Array, "L d"]:
    """dW/dt, shape (L, d): `velocity(..., clock="t")` without its log rate."""
    return velocity(W, rho, method, data, loss, memory, clock=Clock.T, p=p)[0]


def rescaled_velocity(W, rho, method, data, loss, memory=None, p=None) -> tuple[Float[Array, "L d"], Float[Array, ""]]:
    """(dW/dtau (L, d), log(dt/dtau) ()) of one sample: `velocity(..., clock="tau")`."""
    return velocity(W, rho, method, data, loss, memory, clock=Clock.TAU, p=p)


def log_velocity(
    x: Float[Array, "L d"],
    sign: Float[Array, "L d"],
    rho: Float[Array, ""],
    method: Method,
    data: Dataset,
    loss: AbstractLoss,
    rescaled: bool,
    p: Float[Array, ""] | None = None,
    layers: int | None = None,
) -> tuple[Float[Array, "L d"], Float[Array, ""]]:
    """The gd, l2, usam and lp flows of one sample in log coordinates, x = log|W|.

    With W = sign * exp(x) (the signs fixed), dx/dc = (dW/dc) / W for the clock
    c = t (`rescaled` False, the field of `real_time_velocity`) or c = tau
    (`rescaled` True, `rescaled_velocity`). Written out in logs so that no
    product of weights is formed: with X_j = sum_l x_lj, q = prod_excl(W) and
    E_lj = X_j - 2 x_lj = log|q_lj / w_lj|,

        W_hat = W * a,   a_lj = 1 - rho mu_j sigma_j exp(E_lj) / ||mu q||   (l2),
                         a_lj = 1 - rho r_j sigma_j exp(E_lj)               (usam),
                         a = 1                                               (gd),
        a_lj = 1 - rho sign(mu_j) sigma_j exp((q-1) (log|mu_j q_lj| - log||mu q||_q) - x_lj)   (lp),
        dx_lj/dc = k mu_j sigma_j exp(E_lj) prod_{k != l} a_kj,

    where sigma_j = prod_l sign_lj, k = slope(z_hat) for t and 1 for tau, and
    ||mu q|| = exp(0.5 logsumexp(2 (log|mu_j| + X_j - x_lj))). A weight of
    1e-400 or 1e+400 is as well represented as one of 1: nothing under- or
    overflows as coordinates are suppressed or grow (docs/theory.md s.4, "Underflow").
    The flows are the same as in linear coordinates: the tests check
    dx = dW / W against `real_time_velocity` and `rescaled_velocity`.

    Valid while no weight reaches 0 but by an event: `samflow.solve` uses it
    on one sample with sign(prod_l w_lj(0)) = sign(mu_j) (`log_coords_eligible`),
    where only the l2 collapse (all weights at once) and, under lp with p > 2,
    a column arriving at 0 as a whole reach 0. Such a column is held at x =
    `LOG_ZERO` (exp underflows to 0) with factor 1 (w_hat = 0); its own dx is
    not meaningful and the engine holds it (`samflow._engine.field._velocity`).

    **Arguments:** `x` (L, d) log|W|; `sign` (L, d) the signs of W (+-1); `rho`
    >= 0; `method` gd, l2, usam or lp; `data` one sample; `loss`; `rescaled`;
    `p` lp's exponent (any p > 1);
    `layers`, None or an int L >= 2: `x` and `sign` are `(1, d)`, one row
    standing for L equal layers (X = L x, sigma = sign^L, the products over the
    other layers a^(L-1); the norms of l2 and lp through
    `AbstractSam.equal_layers_rho`; docs/theory.md s.3.5).

    **Returns:** (dx/dc (L, d), log(dt/dtau) ()) (`(1, d)` with `layers`).

    **Raises:** `ValueError` for linf (its field is discontinuous at 0) or data
    of several samples.
    """
    spec = Method.parse(method).spec
    if data.X.shape[0] != 1:
        raise ValueError(LOG_ONE_SAMPLE)
    mu = data.y[0] * data.X[0]
    if layers is None:
        sigma = jnp.prod(sign, axis=0)
        X = jnp.sum(x, axis=0)
    else:
        sigma = jax.lax.integer_pow(sign[0], layers)
        X = layers * x[0]
        rho = spec.equal_layers_rho(rho, layers, p)  # the norm over L equal rows, from one
    E = X[None, :] - 2.0 * x
    beta_abs_log = X
    z = jnp.sum(mu * sigma * jnp.exp(beta_abs_log))
    a = spec.log_factor(x, X, E, rho, mu, sigma, z, loss, p)  # ValueError for linf
    if spec.method is Method.LP:
        # A column held at 0 (p > 2: every x_lj at LOG_ZERO) has w_hat = 0 (its G is 0):
        # factor 1, so that exp(X_j) a = 0 and not 0 x inf.
        a = jnp.where(jnp.all(x <= 0.5 * LOG_ZERO, axis=0)[None, :], 1.0, a)
    prod_a = jnp.prod(a, axis=0) if layers is None else jax.lax.integer_pow(a[0], layers)
    z_hat = jnp.sum(mu * sigma * jnp.exp(beta_abs_log) * prod_a)
    log_rate = loss.log_inv_slope(z_hat)
    k = 1.0 if rescaled else loss.slope(z_hat)
    dx = k * (mu * sigma)[None, :] * jnp.exp(E) * prod_excl(a, layers)
    return dx, log_rate


TAU_ONE_SAMPLE = "clock = 'tau' (the rescaled flow) needs a single sample (data.mu); use clock = 't'"
LOG_NOT_LINF = (
    "solver.coords = 'log' does not apply to linf-SAM (its weights slide at 0); "
    "use coords = 'linear' or drop 'linf' from methods"
)
#: log|w| of a weight held at exactly 0 in log coordinates (and in `_log_abs_beta`):
#: exp(LOG_ZERO) is 0 in float64, and sums of L of them stay finite.
LOG_ZERO = -1.0e4
LOG_ONE_SAMPLE = "solver.coords = 'log' needs one sample (data.mu); use coords = 'linear'"
LOG_NONZERO = (
    "solver.coords = 'log' needs every init alpha > 0 (the log of a weight at 0 is -inf); "
    "drop alpha = 0 (or rho = 0 in a relative grid) or use coords = 'linear'"
)
LOG_SIGNS = (
    "solver.coords = 'log' needs sign(prod_l w_lj(0)) = sign(mu_j) (for equal positive inits: "
    "mu_j >= 0), so that no weight crosses 0; use coords = 'linear'"
)


def log_coords_problem(W0, data: "Dataset | None", method: "str | Method", p=None) -> "str | None":
    """Why a cell (or a batch of cells) may not be solved in log coordinates, in
    one line naming `solver.coords`; None when it may.

    Allowed: gd, l2, usam and lp (any p; `p`, lp's exponent, is not needed) on one
    sample {(mu, +1)} when no initial weight is 0 and sign(prod_l w_lj(0)) =
    sign(mu_j) for every j with mu_j != 0. By the sign symmetries of the diagonal
    network this is the all-positive case, in which the flows keep every weight
    away from 0 but by the solver's events: the collapse of all weights at once
    (l2, lp), and under lp with p > 2 a column arriving at 0 as a whole, captured
    as in linear coordinates and held at `LOG_ZERO` (docs/theory.md s.4.3). Host-side
    check on NumPy arrays `W0` of shape (L, d) or (B, L, d); `W0` or `data`
    None skips the checks that need it (a config before its data are read).
    """
    import numpy as np

    if not Method.parse(method).spec.log_coords:
        return LOG_NOT_LINF
    if data is not None and data.X.shape[0] != 1:
        return LOG_ONE_SAMPLE
    if W0 is None:
        return None
    W0 = np.asarray(W0)
    if not np.all(np.isfinite(W0)) or np.any(W0 == 0):
        return LOG_NONZERO
    if data is None:
        return None
    mu = np.asarray(data.y[0] * data.X[0])
    s = np.sign(np.prod(np.sign(W0), axis=-2))
    return None if np.all((mu == 0) | (s == np.sign(mu))) else LOG_SIGNS


def log_coords_eligible(W0, data: Dataset, method: "str | Method", p=None) -> bool:
    """Whether a cell (or every cell of a batch) may be solved in log coordinates:
    `log_coords_problem` finds no reason against it. Host-side, NumPy `W0` (L, d)
    or (B, L, d); `p` lp's exponent (a float) or None."""
    return log_coords_problem(W0, data, method, p) is None
