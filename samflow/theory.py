"""Closed forms and predicted marks of the rescaled single-sample flows (docs/theory.md s.3).

Data set {(mu, +1)} with 0 < mu_1 < ... < mu_d; all layers start at the same
w(0) = alpha (a scalar or a vector alpha_j), so they stay equal ("symmetric init")
and each flow is an ODE for one vector w in the rescaled time tau:

- GD, depth 2:        dw_j/dtau = mu_j w_j;
- linf-SAM, depth L:  dw_j/dtau = mu_j (w_j - rho)^(L-1)   (w_j > 0);
- l2-SAM, depth L:    dw/dtau = mu * (w - rho mu w^(L-1) / (sqrt(L) ||mu w^(L-1)||))^(L-1);
- lp-SAM, depth 2:    dw_j/dtau = mu_j (w_j - rho (mu_j w_j)^(q-1) / (2^((q-1)/q) ||mu w||_q^(q-1)))
                      (1/p + 1/q = 1, w > 0).

The functions here are plain float64 NumPy, for checking the simulator and for
drawing the predicted marks on figures. Feature indices are 1-based.

**One argument order.** Every function takes `mu` first (the data) and the rest
by keyword only, e.g. `linf_zero_time(mu, alpha=0.1, rho=0.5, depth=2)` or
`l2_alpha_marks(mu, rho=1.0)`: a call with the arguments in another order raises
`TypeError` instead of silently computing with alpha and mu swapped.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jaxtyping import ArrayLike, Float, Int

from ._util.checks import check_count

__all__ = [
    "AlphaMarks",
    "gd_depth2_symmetric",
    "linf_depth2_symmetric",
    "linf_zero_time",
    "linf_blowup_time",
    "linf_limit_index",
    "l2_growth_rate",
    "l2_growth_threshold",
    "l2_first_dominant",
    "l2_alpha_marks",
    "l2_first_band",
    "l2_major_band_mark",
    "lp_growth_rates",
    "lp_first_dominant",
    "lp_alpha_marks",
    "lp_major_shrink_mark",
    "l1_max_margin_single",
    "l2_max_margin_single",
]


# --- argument checks -------------------------------------------------------------


def _mu(mu: ArrayLike, increasing: bool = False) -> np.ndarray:
    m = np.asarray(mu, dtype=np.float64)
    if m.ndim != 1 or m.size == 0:
        raise ValueError(f"mu must have shape (d,) with d >= 1, got shape {m.shape}")
    if not (np.all(np.isfinite(m)) and np.all(m > 0)):
        raise ValueError("mu must be finite and > 0 in every coordinate")
    if increasing and np.any(np.diff(m) < 0):
        raise ValueError("mu must be increasing (mu_1 <= ... <= mu_d: feature d is the major one)")
    return m


def _nonneg(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be >= 0, got {a if a.ndim == 0 else 'a negative or NaN entry'}")
    return a


def _rho(rho: ArrayLike) -> np.ndarray:
    r = _nonneg(rho, "rho")
    if not np.all(np.isfinite(r)):
        raise ValueError("rho must be finite")
    return r


def _depth(depth: int, least: int) -> int:
    return check_count(depth, "depth", least)


def _with_d(x: np.ndarray, m: np.ndarray, name: str) -> np.ndarray:
    """x broadcast against mu's (d,): a scalar or an array of shape (..., d)."""
    try:
        shape = np.broadcast_shapes(x.shape, m.shape)
    except ValueError:
        raise ValueError(
            f"{name} of shape {x.shape} does not broadcast against mu of shape {m.shape}"
        ) from None
    return np.broadcast_to(x, shape)


def _rho_per_row(r: np.ndarray, batch: tuple) -> np.ndarray:
    """rho as a scalar or of shape (...) matching the leading axes: returns (..., 1)."""
    try:
        return np.broadcast_to(r, np.broadcast_shapes(r.shape, batch))[..., None]
    except ValueError:
        raise ValueError(f"rho of shape {r.shape} does not broadcast against {batch}") from None


# --- GD and linf-SAM -------------------------------------------------------------


def gd_depth2_symmetric(
    mu: ArrayLike, *, alpha: ArrayLike, tau: ArrayLike
) -> Float[np.ndarray, "*batch d"]:
    """GD, depth 2, symmetric init: w_j(tau) = alpha_j exp(mu_j tau) (docs/theory.md s.3).

    **Arguments:** `mu`: `(d,)`, > 0; keyword-only: `alpha`: scalar or `(..., d)`
    init (u = v = alpha); `tau`: scalar or `(...)` rescaled times.

    **Returns:** float64 `(..., d)`, the broadcast of `tau[..., None]`, `alpha` and
    `mu` (so beta = w**2).

    **Raises:** `ValueError` if mu is not a positive `(d,)` vector or alpha does not
    broadcast against it.
    """
    m = _mu(mu)
    a = _with_d(np.asarray(alpha, dtype=np.float64), m, "alpha")
    t = np.asarray(tau, dtype=np.float64)[..., None]
    with np.errstate(over="ignore"):
        return a * np.exp(m * t)


def linf_depth2_symmetric(
    mu: ArrayLike, *, alpha: ArrayLike, rho: ArrayLike, tau: ArrayLike
) -> Float[np.ndarray, "*batch d"]:
    """linf-SAM, depth 2, positive symmetric init (docs/theory.md s.3).

    Solves dw_j/dtau = mu_j sign(w_j)(|w_j| - rho) from w_j(0) = alpha_j >= 0:
    w_j = rho + (alpha_j - rho) exp(mu_j tau) while positive, so alpha_j > rho grows,
    alpha_j = rho stays at rho, and alpha_j < rho reaches 0 at
    tau*_j = ln(rho / (rho - alpha_j)) / mu_j and stays at 0 afterwards (the
    Filippov sliding solution).

    **Arguments:** `mu`: `(d,)`, > 0; keyword-only: `alpha`: scalar or `(..., d)`,
    >= 0; `rho`: scalar >= 0 (or broadcasting against alpha); `tau`: scalar or
    `(...)`, >= 0.

    **Returns:** float64 `(..., d)` (inf past the float64 range).

    **Raises:** `ValueError` if alpha, rho or tau is negative, mu is not a positive
    `(d,)` vector, or the shapes do not broadcast.
    """
    m = _mu(mu)
    a = _with_d(_nonneg(alpha, "alpha"), m, "alpha")
    r = _rho(rho)
    t = _nonneg(tau, "tau")[..., None]
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            w = r + (a - r) * np.exp(m * t)
            below = np.broadcast_to(a < r, w.shape)
            return np.where(below, np.maximum(w, 0.0), np.where(a == r, r, w))
    except ValueError:
        raise ValueError(
            f"alpha {a.shape}, rho {r.shape} and tau {np.shape(tau)} do not broadcast together"
        ) from None


def _linf_args(alpha: ArrayLike, rho: ArrayLike, mu: ArrayLike, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The checked arguments of the linf-SAM closed forms: mu (d,), alpha and rho broadcast
    together to (..., d), and the depth L >= 2."""
    m = _mu(mu)
    a = _with_d(_nonneg(alpha, "alpha"), m, "alpha")
    r = _rho(rho)
    L = _depth(depth, 2)
    try:
        a, r = np.broadcast_arrays(a, r)
    except ValueError:
        raise ValueError(f"alpha {a.shape} and rho {r.shape} do not broadcast together") from None
    return m, a, r, L


def linf_zero_time(
    mu: ArrayLike, *, alpha: ArrayLike, rho: ArrayLike, depth: int = 2
) -> Float[np.ndarray, "*batch d"]:
    """Time tau*_j at which a linf-SAM weight below rho reaches 0 (docs/theory.md s.3).

    From dw/dtau = mu (w - rho)^(L-1) with w(0) = alpha < rho:

    - L = 2: tau* = ln(rho / (rho - alpha)) / mu;
    - L even >= 4: with u = rho - w, du/dtau = mu u^(L-1) from rho - alpha to rho,
      tau* = ((rho - alpha)^-(L-2) - rho^-(L-2)) / ((L-2) mu);
    - L odd: the weight rises towards rho and never reaches 0: inf.

    inf wherever alpha_j >= rho (the weight stays at rho or grows). alpha_j = 0
    gives 0 for even L.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `alpha`: scalar or `(..., d)`,
    >= 0; `rho` >= 0; `depth`: L >= 2.

    **Returns:** float64 `(..., d)`.

    **Raises:** `ValueError` for negative alpha or rho, depth < 2, a bad mu or
    shapes that do not broadcast.
    """
    m, a, r, L = _linf_args(alpha, rho, mu, depth)
    below = a < r
    if L % 2 == 1:
        return np.full(np.broadcast_shapes(a.shape, m.shape), np.inf)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = np.where(below, a / np.where(below, r, 1.0), 0.0)  # alpha / rho in [0, 1)
        if L == 2:
            tz = -np.log1p(-x) / m
        else:
            k = L - 2
            tz = np.where(below, r, 1.0) ** (-k) * np.expm1(-k * np.log1p(-x)) / (k * m)
    return np.where(below, tz, np.inf)


def linf_blowup_time(
    mu: ArrayLike, *, alpha: ArrayLike, rho: ArrayLike, depth: int
) -> Float[np.ndarray, "*batch d"]:
    """Finite-time blow-up of a linf-SAM weight above rho (docs/theory.md s.3, depth L).

    From dw/dtau = mu (w - rho)^(L-1), w(0) = alpha > rho and L >= 3:
    tau*_j = (alpha_j - rho)^-(L-2) / ((L-2) mu_j). inf for alpha_j <= rho and for
    L = 2 (exponential growth, no blow-up).

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `alpha`: scalar or `(..., d)`,
    >= 0; `rho` >= 0; `depth`: L >= 2.

    **Returns:** float64 `(..., d)`.

    **Raises:** `ValueError` for negative alpha or rho, depth < 2, a bad mu or
    shapes that do not broadcast.
    """
    m, a, r, L = _linf_args(alpha, rho, mu, depth)
    shape = a.shape
    if L == 2:
        return np.full(shape, np.inf)
    above = a > r
    k = L - 2
    with np.errstate(divide="ignore", over="ignore"):
        gap = np.where(above, a - r, 1.0)
        tb = np.exp(-k * np.log(gap)) / (k * m)
    return np.where(above, tb, np.inf)


def linf_limit_index(
    mu: ArrayLike, *, alpha: ArrayLike, rho: ArrayLike, depth: int
) -> Int[np.ndarray, "*batch"]:
    """Limit direction e_{j*} of linf-SAM with init alpha_j (docs/theory.md s.3).

    j* = argmax over {j : alpha_j > rho} of mu_j (alpha_j - rho)^(L-2), 1-based: for
    L >= 3 the feature that blows up first (smallest `linf_blowup_time`), for L = 2
    the fastest exponential, argmax {mu_j : alpha_j > rho}. 0 when no alpha_j
    exceeds rho (every weight stays at rho or falls: limit direction 0 for even L).
    Ties go to the lowest index. Computed in logs, so large L does not overflow.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `alpha`: scalar or `(..., d)`,
    >= 0; `rho` >= 0; `depth`: L >= 2.

    **Returns:** int64 `(...)` in 0..d.

    **Raises:** `ValueError` for negative alpha or rho, depth < 2, a bad mu or
    shapes that do not broadcast.
    """
    m, a, r, L = _linf_args(alpha, rho, mu, depth)
    above = a > r
    with np.errstate(divide="ignore"):
        # (at L = 2 the gap does not enter: 0 * log(inf) would be NaN)
        score = np.log(m) + (0.0 if L == 2 else (L - 2) * np.log(np.where(above, a - r, 1.0)))
    score = np.where(above, score, -np.inf)
    j = np.argmax(score, axis=-1) + 1
    return np.where(np.any(above, axis=-1), j, 0).astype(np.int64)


# --- l2-SAM ----------------------------------------------------------------------


def _norm(v: np.ndarray) -> np.ndarray:
    """||v||_2 over the last axis, scaled by max|v| (no overflow or underflow)."""
    s = np.max(np.abs(v), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = v / np.where(s > 0, s, 1.0)
    return s[..., 0] * np.sqrt(np.sum(q * q, axis=-1))


def l2_growth_rate(
    mu: ArrayLike, *, w: ArrayLike, rho: ArrayLike, depth: int = 2
) -> Float[np.ndarray, "*batch d"]:
    """Per-feature growth rate d ln|w_j| / dtau of symmetric l2-SAM (docs/theory.md s.3).

    Depth 2: mu_j (1 - rho mu_j / (sqrt(2) N)), N = ||mu * w||_2. Depth L (from
    the field mu * (w - rho mu w^(L-1) / (sqrt(L) M))^(L-1), M = ||mu w^(L-1)||):

        mu_j w_j^(L-2) (1 - rho mu_j w_j^(L-2) / (sqrt(L) M))^(L-1).

    This factored form is finite at w_j = 0 (for L = 2 it is the rate a
    coordinate at 0 would have). Coordinate j grows exactly where the rate is > 0.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `w`: `(..., d)` common weight of
    the layers; `rho` >= 0, scalar or `(...)`; `depth`: L >= 2.

    **Returns:** float64 `(..., d)`; NaN in rows where w is all zero (the l2
    perturbation is undefined there, docs/theory.md s.4).

    **Raises:** `ValueError` for negative rho, depth < 2, a bad mu, or w whose
    last axis is not d.
    """
    m = _mu(mu)
    W = np.asarray(w, dtype=np.float64)
    if W.ndim < 1 or W.shape[-1] != m.size:
        raise ValueError(f"w must have shape (..., {m.size}) to match mu, got shape {W.shape}")
    L = _depth(depth, 2)
    r = _rho_per_row(_rho(rho), W.shape[:-1])
    p = W ** (L - 2)
    M = _norm(m * W ** (L - 1))[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = m * p * (1.0 - r * m * p / (np.sqrt(L) * M)) ** (L - 1)
    return np.where(M > 0, rate, np.nan)


def l2_growth_threshold(mu: ArrayLike, *, w: ArrayLike, rho: ArrayLike) -> Float[np.ndarray, "*batch"]:
    """Depth-2 l2-SAM growth threshold sqrt(2) ||mu * w|| / rho (docs/theory.md s.3).

    Coordinate j grows exactly when mu_j < threshold; feature j outgrows a feature
    k with mu_k < mu_j exactly when the threshold exceeds mu_j + mu_k.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `w`: `(..., d)`; `rho` >= 0,
    scalar or `(...)` (rho = 0 gives inf).

    **Returns:** float64 `(...)`.

    **Raises:** `ValueError` for negative rho, a bad mu, or w whose last axis is
    not d.
    """
    m = _mu(mu)
    W = np.asarray(w, dtype=np.float64)
    if W.ndim < 1 or W.shape[-1] != m.size:
        raise ValueError(f"w must have shape (..., {m.size}) to match mu, got shape {W.shape}")
    r = _rho_per_row(_rho(rho), W.shape[:-1])[..., 0]
    with np.errstate(divide="ignore"):
        return np.sqrt(2.0) * _norm(m * W) / r


def l2_first_dominant(mu: ArrayLike, *, a: ArrayLike) -> Int[np.ndarray, "*batch"]:
    """First dominant feature of depth-2 l2-SAM from w(0) = alpha 1 (docs/theory.md s.3).

    argmax_j mu_j (1 - mu_j / (sqrt(2) a ||mu||)), 1-based, with a = alpha / rho:
    the largest growth rate at the start (`l2_growth_rate` at w = alpha 1), so the
    feature that leads right after tau = 0. Ties go to the lowest index.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `a`: scalar or `(...)`, > 0.

    **Returns:** int64 `(...)` in 1..d.

    **Raises:** `ValueError` if a is not > 0 or mu is bad.
    """
    m = _mu(mu)
    A = np.asarray(a, dtype=np.float64)
    if not (np.all(np.isfinite(A)) and np.all(A > 0)):
        raise ValueError("a (= alpha / rho) must be finite and > 0")
    rate = m * (1.0 - m / (np.sqrt(2.0) * A[..., None] * _norm(m)))
    return (np.argmax(rate, axis=-1) + 1).astype(np.int64)


class AlphaMarks(NamedTuple):
    """Marks on the alpha axis for depth-2 l2-SAM from w(0) = alpha 1 (docs/theory.md s.3).

    - `all_shrink`: rho mu_1 / (sqrt(2) ||mu||); below it every coordinate shrinks
      at the start (collapse, regime 1). The regime 1 / 2 edge lies higher.
    - `major_first`: rho (mu_{d-1} + mu_d) / (sqrt(2) ||mu||); above it the major
      feature outgrows all others from the start (regime 3). Equal to
      `all_shrink` when d = 1.
    """

    all_shrink: Float[np.ndarray, "*batch"]
    major_first: Float[np.ndarray, "*batch"]


def l2_alpha_marks(mu: ArrayLike, *, rho: ArrayLike) -> AlphaMarks:
    """The all-shrink and major-first marks of depth-2 l2-SAM (docs/theory.md s.3).

    Example: mu = (1, 2), rho = 1 gives 1 / sqrt(10) ~ 0.316 and 3 / sqrt(10) ~ 0.949.

    **Arguments:** `mu` `(d,)`, > 0 and increasing; keyword-only: `rho` >= 0,
    scalar or `(...)`.

    **Returns:** `AlphaMarks`, float64 fields of rho's shape.

    **Raises:** `ValueError` if mu is not positive and increasing or rho < 0.
    """
    m = _mu(mu, increasing=True)
    r = _rho(rho)
    c = r / (np.sqrt(2.0) * _norm(m))
    lo = c * m[0]
    hi = c * (m[-2] + m[-1]) if m.size >= 2 else lo
    return AlphaMarks(all_shrink=np.asarray(lo), major_first=np.asarray(hi))


def _band_index(band: ArrayLike, d: int) -> tuple[np.ndarray, int]:
    """`band` checked as the 0-based band of each of d coordinates: integer,
    shape (d,), every band 0..max(band) non-empty. Returns (band, n_bands).

    **Raises:** `ValueError` naming band otherwise (also used by
    `samflow.analysis.band_dominance`).
    """
    b = np.asarray(band)
    if b.shape != (d,) or not np.issubdtype(b.dtype, np.integer) or b.min() != 0:
        raise ValueError(f"band must be 0-based integer band indices of shape {(d,)}, got {band!r}")
    nb = int(b.max()) + 1
    if any(not np.any(b == k) for k in range(nb)):
        raise ValueError("band: every band 0..max(band) needs at least one coordinate")
    return b, nb


def _band_moments(mu: ArrayLike, band: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per band b: mean_{j in b} mu_j and mean_{j in b} mu_j^2, and ||mu||."""
    m = _mu(mu)
    b, nb = _band_index(band, m.size)
    m1 = np.array([m[b == k].mean() for k in range(nb)])
    m2 = np.array([(m[b == k] ** 2).mean() for k in range(nb)])
    return m1, m2, _norm(m)


def l2_first_band(mu: ArrayLike, *, a: ArrayLike, band: ArrayLike) -> Int[np.ndarray, "*batch"]:
    """First dominant band of depth-2 l2-SAM from w(0) = alpha 1 (docs/theory.md s.3, s.5).

    Coordinate j starts growing at the rate mu_j (1 - mu_j / (sqrt(2) a ||mu||))
    (`l2_growth_rate` at w = alpha 1, a = alpha / rho), so right after the start
    |beta_j| = alpha^2 (1 + 2 rate_j tau + ...), and the band with the largest mean
    |beta_j| is the band with the largest mean rate:

        argmax_b mean_{j in b} mu_j (1 - mu_j / (sqrt(2) a ||mu||)).

    With one coordinate per band this is `l2_first_dominant`. For several samples
    use mu = mean_i y_i x_i: at beta ~ 0 every margin is ~0 and the residual r of
    docs/theory.md s.1 is ell'(0) times it, and the l2 flow does not see that factor.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `a`: scalar or `(...)`, > 0;
    `band` `(d,)` int, the 0-based band of each coordinate (every band 0..max
    non-empty).

    **Returns:** int64 `(...)`, the band in 1..n_bands (ties to the lowest).

    **Raises:** `ValueError` if a is not > 0, mu is bad, or band is malformed.
    """
    m1, m2, n = _band_moments(mu, band)
    A = np.asarray(a, dtype=np.float64)
    if not (np.all(np.isfinite(A)) and np.all(A > 0)):
        raise ValueError("a (= alpha / rho) must be finite and > 0")
    rate = m1 - m2 / (np.sqrt(2.0) * A[..., None] * n)
    return (np.argmax(rate, axis=-1) + 1).astype(np.int64)


def l2_major_band_mark(mu: ArrayLike, *, band: ArrayLike) -> float:
    """alpha / rho above which the last (major) band is the first dominant band.

    The band-mean rates of `l2_first_band`, m1_b - m2_b / (sqrt(2) a ||mu||) with
    m1_b, m2_b the band means of mu_j and mu_j^2, are equal for bands b and B at
    a = (m2_B - m2_b) / (sqrt(2) ||mu|| (m1_B - m1_b)); the mark is the largest
    of these over b < B (docs/theory.md s.3's major-first mark, per band). With one
    coordinate per band and increasing mu it is `l2_alpha_marks(mu, rho=1).major_first`.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `band` `(d,)` as in
    `l2_first_band`.

    **Returns:** the mark, a float (0.0 with a single band).

    **Raises:** `ValueError` if the last band's mean mu is not the largest, or
    mu or band are malformed.
    """
    m1, m2, n = _band_moments(mu, band)
    if m1.size == 1:
        return 0.0
    if not np.all(m1[:-1] < m1[-1]):
        raise ValueError("the last band must have the largest mean mu (the major band)")
    return float(np.max((m2[-1] - m2[:-1]) / (np.sqrt(2.0) * n * (m1[-1] - m1[:-1]))))


# --- lp-SAM ----------------------------------------------------------------------


def _lp_dual(p: ArrayLike) -> np.ndarray:
    """The dual exponent q = p / (p - 1) of p in (1, inf] (q = 1 at p = inf).

    **Arguments:** `p`: scalar or array, every entry in (1, inf].

    **Returns:** float64 of p's shape.

    **Raises:** `ValueError` naming p if an entry is not a number in (1, inf].
    """
    try:
        P = np.asarray(p)
        if not (np.issubdtype(P.dtype, np.number) and not np.issubdtype(P.dtype, np.bool_)):
            raise TypeError
        P = P.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"p must be a number in (1, inf], got {p!r}") from None
    if not np.all(P > 1):  # NaN fails too
        raise ValueError(f"p must be a number in (1, inf], got {p!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isinf(P), 1.0, P / np.where(np.isinf(P), 1.0, P - 1.0))


def _lp_scale(m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """c(q) = 1 / (2^((q-1)/q) ||mu||_q^(q-1)), q of shape (...): returns (..., 1).

    ||mu||_q^(q-1) is computed as max(mu)^(q-1) (sum (mu / max mu)^q)^((q-1)/q),
    which neither overflows at large q nor loses mu^0 = 1 at q = 1."""
    q = q[..., None]
    s = np.max(m)
    norm_pow = s ** (q - 1.0) * np.sum((m / s) ** q, axis=-1, keepdims=True) ** ((q - 1.0) / q)
    return 1.0 / (2.0 ** ((q - 1.0) / q) * norm_pow)


def _positive_a(a: ArrayLike) -> np.ndarray:
    A = np.asarray(a, dtype=np.float64)
    if not (np.all(np.isfinite(A)) and np.all(A > 0)):
        raise ValueError("a (= alpha / rho) must be finite and > 0")
    return A


def lp_growth_rates(mu: ArrayLike, *, a: ArrayLike, p: ArrayLike) -> Float[np.ndarray, "*batch d"]:
    """Growth rates d ln w_j / dtau of depth-2 lp-SAM at w = alpha 1 (docs/theory.md s.3.1).

    With q the dual exponent of p (1/p + 1/q = 1) and a = alpha / rho:

        rate_j = mu_j (1 - mu_j^(q-1) / (a 2^((q-1)/q) ||mu||_q^(q-1))).

    p = 2 gives l2's mu_j (1 - mu_j / (sqrt 2 a ||mu||)) (`l2_growth_rate` at
    w = alpha 1); p = inf (q = 1) gives linf's mu_j (1 - 1 / a), the sign of
    alpha - rho for every j.

    **Arguments:** `mu` `(d,)` > 0; keyword-only: `a`: scalar or `(...)`, > 0;
    `p`: scalar or broadcasting against `a`, in (1, inf].

    **Returns:** float64 `(..., d)`, the leading axes those of a and p broadcast.

    **Raises:** `ValueError` if mu is bad, a is not > 0 or p is not in (1, inf].
    """
    m = _mu(mu)
    A = _positive_a(a)
    q = _lp_dual(p)
    try:
        A, q = np.broadcast_arrays(A, q)
    except ValueError:
        raise ValueError(f"a {A.shape} and p {q.shape} do not broadcast together") from None
    c = _lp_scale(m, q)
    return m * (1.0 - m ** (q[..., None] - 1.0) * c / A[..., None])


def lp_first_dominant(mu: ArrayLike, *, a: ArrayLike, p: ArrayLike) -> Int[np.ndarray, "*batch"]:
    """First dominant feature of depth-2 lp-SAM from w(0) = alpha 1 (docs/theory.md s.3.1).

    argmax_j of `lp_growth_rates`, 1-based (ties to the lowest index). At
    p = 2 this is `l2_first_dominant`.

    **Arguments:** as `lp_growth_rates`. **Returns:** int64 `(...)` in 1..d.

    **Raises:** as `lp_growth_rates`.
    """
    return (np.argmax(lp_growth_rates(mu, a=a, p=p), axis=-1) + 1).astype(np.int64)


def lp_alpha_marks(mu: ArrayLike, *, p: ArrayLike, rho: ArrayLike = 1.0) -> AlphaMarks:
    """The all-shrink and major-first marks of depth-2 lp-SAM (docs/theory.md s.3.1).

    With c = 1 / (2^((q-1)/q) ||mu||_q^(q-1)) the rate of `lp_growth_rates` is
    mu_j - c mu_j^q / a, and for mu_k < mu_d

        rate_d - rate_k = (mu_d - mu_k) - (c / a) (mu_d^q - mu_k^q),

    so feature d outgrows k exactly when a > c (mu_d^q - mu_k^q) / (mu_d - mu_k):
    the secant slope of x^q, which (x^q convex for q >= 1) is largest for the
    largest mu_k. Hence, for increasing mu,

    - `all_shrink` = rho c mu_1^(q-1): below it every rate is < 0 at the start
      (rate_j = 0 at a = c mu_j^(q-1), increasing in mu_j);
    - `major_first` = rho c (mu_d^q - mu_(d-1)^q) / (mu_d - mu_(d-1)): above it
      the major feature has the largest rate (the first leader is d).

    p = 2: `l2_alpha_marks`. p = inf: both are rho (linf's alpha_j against rho).
    The mark below which the major feature shrinks at the start is
    `lp_major_shrink_mark`.

    **Arguments:** `mu` `(d,)` > 0 and increasing, d >= 2 for a distinct
    major-first mark (d = 1: both marks equal); keyword-only: `p` scalar or
    `(...)` in (1, inf]; `rho` >= 0 broadcasting against p.

    **Returns:** `AlphaMarks`, float64 fields of the shape of p and rho broadcast.

    **Raises:** `ValueError` if mu is not positive and increasing, p is not in
    (1, inf] or rho < 0.
    """
    m = _mu(mu, increasing=True)
    q = _lp_dual(p)
    r = _rho(rho)
    c = _lp_scale(m, q)[..., 0] * r
    lo = c * m[0] ** (q - 1.0)
    if m.size >= 2 and m[-1] > m[-2]:
        hi = c * (m[-1] ** q - m[-2] ** q) / (m[-1] - m[-2])
    elif m.size >= 2:  # a tie at the top: the derivative q mu_d^(q-1) of x^q
        hi = c * q * m[-1] ** (q - 1.0)
    else:
        hi = lo
    return AlphaMarks(all_shrink=np.asarray(lo), major_first=np.asarray(hi))


def lp_major_shrink_mark(mu: ArrayLike, *, p: ArrayLike, rho: ArrayLike = 1.0) -> Float[np.ndarray, "*batch"]:
    """alpha below which the major feature shrinks at the start, depth-2 lp-SAM (s.3.1).

    rho c mu_d^(q-1) with c of `lp_alpha_marks` (rate_d = 0 there). For p > 2 a
    shrinking coordinate of depth 2 reaches 0 in finite time unless the norm
    ||mu w||_q rises fast enough (its rate ~ -|w_j|^(q-2) -> -inf), so the
    edge below which the major feature dies lies near this mark; samflow
    measures that edge by simulation (`samflow.figures.lp_family`).

    **Arguments:** as `lp_alpha_marks`. **Returns:** float64, p and rho broadcast.

    **Raises:** as `lp_alpha_marks`.
    """
    m = _mu(mu, increasing=True)
    q = _lp_dual(p)
    return _lp_scale(m, q)[..., 0] * _rho(rho) * m[-1] ** (q - 1.0)


# --- max-margin directions of one sample -----------------------------------------


def l1_max_margin_single(mu: ArrayLike) -> Float[np.ndarray, " d"]:
    """l1 max-margin predictor of {(mu, +1)}: e_d / mu_d, d = argmax mu (docs/theory.md s.5).

    **Arguments:** `mu` `(d,)`, > 0. **Returns:** float64 `(d,)`.

    **Raises:** `ValueError` if mu is not a positive `(d,)` vector.
    """
    m = _mu(mu)
    j = int(np.argmax(m))
    out = np.zeros_like(m)
    out[j] = 1.0 / m[j]
    return out


def l2_max_margin_single(mu: ArrayLike) -> Float[np.ndarray, " d"]:
    """l2 max-margin predictor of {(mu, +1)}: mu / ||mu||^2 (docs/theory.md s.5).

    **Arguments:** `mu` `(d,)`, > 0. **Returns:** float64 `(d,)`.

    **Raises:** `ValueError` if mu is not a positive `(d,)` vector.
    """
    m = _mu(mu)
    return m / _norm(m) ** 2
