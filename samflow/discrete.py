"""The discrete algorithms GD, l2-SAM, linf-SAM, USAM and lp-SAM (docs/theory.md section 2).

With step size eta and radius rho, every method is the iteration

    theta_{k+1} = theta_k - eta grad L(theta_k + eps(theta_k)),

with the perturbation eps of `samflow.flows.perturbation` (0, rho G / ||G||_2,
rho sign(G), rho G or lp's rho sign(G) |G|^(q-1) / ||G||_q^(q-1) for G = grad
L(theta_k), docs/theory.md s.2 (lp-SAM), with its exponent as the keyword `p`); the code calls that function and
`samflow.diagonal_net.grad_loss`, so the discrete algorithms and the flows share one
definition. The flows are the limit eta -> 0 with rho held fixed.

**Time.** Iteration k is real time t = k eta, the clock `t` of `samflow.solve`.
A save time t_i is mapped to the nearest iterate k_i = round(t_i / eta); the
times actually saved, k_i eta, are returned in `DiscreteTrajectory.t` (equal to
the requested `ts` when these are multiples of eta). Use `save_iterations` to see
the mapping in advance.

**Memory.** The iterations run as a `lax.scan` over the save intervals with a
`lax.while_loop` inside (`samflow._iterate.iterate`, the engine shared with
`samflow.models`), so memory grows with the number of save times only, never
with the number of iterations.

**Failures.** linf-SAM at the discontinuity of sign, or any method with a step
size too large for the curvature, can drive the iterates to inf or NaN. That cell
gets status `FAILED` and NaN from its first non-finite saved iterate on; a cell
with a non-finite input gets `NONFINITE_INPUT`. Nothing raises inside a batch.

On a switching surface of linf-SAM (a weight exactly 0) the discrete algorithm
uses sign(0) = 0, as `jnp.sign` does; it has no sign memory (the flow's Filippov
treatment is a property of the eta -> 0 limit).

**The absorbing w = 0 of linf-SAM (a rounding artifact, flagged).** At depth
L >= 2, a coordinate j with two or more layers exactly 0 has G_lj = 0 in every
layer, so eps_lj = rho sign(0) = 0 and its gradient at the perturbed point is 0:
it stays there forever. A coordinate below rho chatters around 0 with kicks of
O(eta rho), and the flow's sliding on w_j = 0 is the limit of that chatter (its
perturbed weights +-rho add mu_j rho^L-sized terms to the margin), not of the
frozen state. In real arithmetic the chatter lands on exactly 0 with probability
0; in floating point the update w - eta g with g ~ w / eta can cancel to 0.0
(measured: linf, depth 2, mu = (0.2, ..., 1), alpha/rho = (1.5, 0.5, 1.2, 0.7,
1.1), rho = 0.5, eta = 0.00625, with the entry points' arithmetic
(`samflow._util.x64.process_flags`): coordinate 4 at t = 32.54375; which iterate lands
depends on the last bits: under XLA's default emitters eta = 0.0125 landed at
t = 39.6, after which beta_3 drifted 0.4% off the chattering run by t = 48). The
iteration itself is unchanged; the first iterate k at which a coordinate enters
that set from outside it is reported as `DiscreteTrajectory.absorbed_t` = k eta
(NaN if none, and always NaN for the other methods, whose perturbation is
continuous at G = 0, and at depth 1, where no weight set is absorbing), and
`flow_gap` refuses (NaN) a cell with such a landing. A coordinate that starts
there (a zero init) is not a landing.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .datasets import Dataset
from .flows import Method, perturbed_weights
from .losses import get_loss
from .diagonal_net import beta as beta_of
from .diagonal_net import grad_loss, loss_value, residual
from ._engine.integrate import batch_cells, solve
from ._iterate import _check_eta as _check_eta
from ._iterate import iterate, safe_inputs
from ._methods import check_p, p_array
from ._iterate import save_iterations as save_iterations
from ._engine.settings import SolverSettings, check_data, check_depth, check_save_times
from ._util.x64 import in_float64

__all__ = ["DiscreteTrajectory", "save_iterations", "sam_step", "run_discrete", "flow_gap"]


class DiscreteTrajectory(eqx.Module):
    """Iterates of a discrete algorithm for one cell (or, with a leading batch axis,
    a batch of cells), saved at the requested times.

    Shapes are given for one cell; a batched run adds a leading axis B to each.

    **Fields:**

    - `ts`: `(n_save,)` the requested save times.
    - `t`: `(n_save,)` the real times k eta of the saved iterates (nearest to `ts`).
    - `steps`: `(n_save,)` int, the iteration indices k of the saved iterates.
    - `eta`: `()` the step size.
    - `W`: `(n_save, L, d)` weights theta_k.
    - `beta`: `(n_save, d)` linear predictor.
    - `loss`: `(n_save,)` empirical loss L(theta_k).
    - `finite`: `()` bool, True when every saved iterate is finite.
    - `status`: `()` int, a `samflow.Status`: `FINISHED`, `FAILED` (the iterates
      became non-finite) or `NONFINITE_INPUT`.
    - `event_t`: `()` real time k eta of the first non-finite iterate; NaN if none.
    - `absorbed_t`: `()` real time k eta of the first iterate at which a
      coordinate of linf-SAM landed on the absorbing w = 0 (two or more of its
      layers exactly 0, depth >= 2), a rounding artifact after which the iterates
      are not those of exact arithmetic (module docstring); NaN if none (always
      for the other methods). Only iterations up to the last save are watched.
    """

    ts: Float[Array, " n_save"]
    t: Float[Array, " n_save"]
    steps: Int[Array, " n_save"]
    eta: Float[Array, ""]
    W: Float[Array, "n_save L d"]
    beta: Float[Array, "n_save d"]
    loss: Float[Array, " n_save"]
    finite: Bool[Array, ""]
    status: Int[Array, ""]
    event_t: Float[Array, ""]
    absorbed_t: Float[Array, ""]


def sam_step(
    W: Float[Array, "L d"],
    rho: Float[Array, ""],
    eta: Float[Array, ""],
    data: Dataset,
    *,
    method: "str | Method",
    loss: str = "logistic",
    p: "Float[Array, ''] | None" = None,
) -> Float[Array, "L d"]:
    """One step theta_{k+1} = theta_k - eta grad L(theta_k + eps(theta_k)).

    docs/theory.md section 2; eps from `samflow.flows.perturbation` (sign(0) = 0).

    **Arguments:** weights `W` `(L, d)`; radius `rho` >= 0; step size `eta`;
    `data`; `method` ("gd", "l2", "linf", "usam", "lp"); `loss` ("logistic",
    "exponential"); `p` lp's exponent (a scalar, traced is fine; required for
    "lp", not checked here).

    **Returns:** the next weights, `(L, d)`. Pure, jittable and vmappable.
    """
    method = Method.parse(method)
    loss_fn = get_loss(loss)
    W_hat = perturbed_weights(W, residual(W, data, loss_fn), rho, method, p=p if method is Method.LP else None)
    return W - eta * grad_loss(W_hat, data, loss_fn)


def _run_cell(W0, rho, eta, data, ts, ks, *, method: Method, loss: str, p=None) -> DiscreteTrajectory:
    """Iterate one cell with `sam_step` (the engine `samflow._iterate.iterate`)
    and save at the iterations `ks` (non-decreasing, >= 0)."""
    loss_fn = get_loss(loss)
    # Bad inputs are replaced by harmless ones so that nothing non-finite is
    # iterated; the cell is marked and its outputs are NaN.
    W0, rho, data, ok_in = safe_inputs(W0, rho, data)
    eta = jnp.asarray(eta, W0.dtype)
    step = lambda W: sam_step(W, rho, eta, data, method=method, loss=loss, p=p)
    watch = _lands_on_absorbing if method is Method.LINF and W0.shape[0] >= 2 else None
    out_W, rows, status, k_bad, k_land = iterate(step, W0, ks, ok_in, watch=watch)
    event_t = jnp.where(ok_in & (k_bad >= 0), k_bad * eta, jnp.nan)
    absorbed_t = jnp.where(ok_in & (k_land >= 0), k_land * eta, jnp.nan)
    beta = jax.vmap(beta_of)(out_W)
    losses = jax.vmap(lambda W: loss_value(W, data, loss_fn))(out_W)
    return DiscreteTrajectory(ts, ks * eta, ks, eta, out_W, beta, losses, jnp.all(rows), status, event_t, absorbed_t)


def _absorbing(W: Float[Array, "L d"]) -> Bool[Array, " d"]:
    """(d,) True for the coordinates with two or more layers exactly 0: the set
    linf-SAM (sign(0) = 0) never leaves at depth >= 2 (module docstring)."""
    return jnp.sum(W == 0.0, axis=0) >= 2


def _lands_on_absorbing(W: Float[Array, "L d"], W_next: Float[Array, "L d"]) -> Bool[Array, ""]:
    """() True when the step W -> W_next puts a coordinate into `_absorbing` from outside it."""
    return jnp.any(_absorbing(W_next) & ~_absorbing(W))


@eqx.filter_jit
def _run_batch(W0, rho, eta, data, ts, ks, method, loss, p=None):
    fn = lambda W, r: _run_cell(W, r, eta, data, ts, ks, method=method, loss=loss, p=p)
    return jax.vmap(fn)(W0, rho)


@in_float64
def run_discrete(
    method: "str | Method",
    data: Dataset,
    alpha: ArrayLike,
    rho: ArrayLike,
    eta: float,
    ts: ArrayLike,
    *,
    depth: int = 2,
    loss: str = "logistic",
    alpha_batched: bool = False,
    p: "float | None" = None,
) -> DiscreteTrajectory:
    """Run a discrete algorithm from the init `alpha` at radius `rho`, one cell or a batch.

    Mirrors `samflow.solve` (clock t): theta_{k+1} = theta_k - eta grad L(theta_k +
    eps(theta_k)), docs/theory.md section 2, saved at the iterates nearest to `ts`.

    **Arguments:**

    - `method`: "gd", "l2", "linf", "usam" or "lp" (`samflow.Method`;
      discrete lp-SAM is "discrete_lp" in a config).
    - `p`: the exponent of "lp" in (1, inf), required for "lp" and refused for
      the other methods, in one line (`samflow._methods.check_p`); traced, so
      every p shares one compilation.
    - `data`: a `samflow.Dataset`.
    - `alpha`: the init, float, as in `samflow.solve`: by default ONE init
      shared by every cell (a scalar, a (d,) vector or a (L, d) per-layer array,
      `samflow.init_weights`); with `alpha_batched=True` one init per cell along
      an explicit leading axis of length B = len(rho): `(B,)`, `(B, d)` or
      `(B, L, d)`. Never inferred from matching lengths
      (`samflow.solver.batch_cells`).
    - `rho`: SAM radius >= 0, a scalar (one cell) or a non-empty (B,) vector
      (a batch).
    - `eta`: the step size, a finite number > 0, shared by the batch.
    - `ts`: save times in real time t, increasing, starting at >= 0; iteration
      k = round(t / eta) is saved for each (see `save_iterations`).
    - `depth`: L >= 1. `loss`: "logistic" or "exponential".
    - `alpha_batched`: see `alpha`.

    **Returns:** a `DiscreteTrajectory`, batched over B when `rho` is a vector.

    **Raises:** `ValueError` (one line, before anything is compiled) for a depth
    < 1, a rho that is negative, non-finite, empty or not 1-D, an alpha of a
    wrong shape or (shared) not finite, a bad step size, bad save times, data
    that is not a finite `Dataset`, or an unknown method or loss. A cell whose
    iterates become non-finite raises nothing: it gets status `FAILED`; a
    per-cell alpha that is not finite gives `NONFINITE_INPUT` (see the module
    docstring).

    Compiles once per (method, loss, depth, d, n, batch size, number of save
    times); new values of alpha, rho, eta, data or ts reuse the compilation.
    Cost: ts[-1] / eta steps per cell.
    """
    method = Method.parse(method)
    p = check_p(method, p)
    get_loss(loss)
    depth = check_depth(depth)
    check_data(data)
    ks, _ = save_iterations(ts, eta)
    ts = check_save_times(ts)
    W0, rho_b, batched = batch_cells(alpha, rho, depth, data.d, alpha_batched=alpha_batched)
    out = _run_batch(
        W0, rho_b, jnp.asarray(eta, jnp.float64), data, jnp.asarray(ts), jnp.asarray(ks), method, loss,
        p_array(method, p),
    )
    if not batched:
        out = jax.tree_util.tree_map(lambda x: x[0], out)
    return out


@in_float64
def flow_gap(
    method: "str | Method",
    data: Dataset,
    alpha: ArrayLike,
    rho: ArrayLike,
    eta: float,
    ts: ArrayLike,
    *,
    depth: int = 2,
    loss: str = "logistic",
    settings: SolverSettings | None = None,
    alpha_batched: bool = False,
    p: "float | None" = None,
) -> Float[np.ndarray, "*batch"]:
    """Distance of the discrete algorithm from its flow: max over the save times of
    ||beta_discrete(t) - beta_flow(t)||_2 / ||beta_flow(t)||_2.

    The flow is `samflow.solve` at clock "t", evaluated at the real times k eta
    of the saved iterates (`save_iterations`), so rounding `ts` to iterates adds
    no error. At fixed rho the gap is O(eta) (the iteration is a one-step method of
    order 1 for the flow), as long as the flow is smooth on [0, ts[-1]].

    **Arguments:** as `run_discrete` (`alpha` shared by every cell unless
    `alpha_batched=True`; `p` for "lp"); `settings` of the flow solve (default
    `SolverSettings(loss=loss)`; its tolerances should be well below eta).

    **Returns:** float64 array, shape `()` for a scalar `rho` or `(B,)`. NaN where
    the discrete run or the flow solve of a cell failed (non-finite values), and
    where the linf iterates landed on the absorbing w = 0 by rounding before the
    last save time (`DiscreteTrajectory.absorbed_t` finite: the iterates after it
    are no longer the algorithm's, so no gap over the requested horizon is
    measured; compare over the save times before `absorbed_t` instead, as figure
    7 does); inf where beta_flow is 0 at a save time other than where beta_discrete is 0 too
    (e.g. after an l2-SAM collapse).

    **Raises:** `ValueError` as `run_discrete`, when every save time rounds to
    iteration 0, or when `settings.loss` differs from `loss`.
    """
    if settings is None:
        settings = SolverSettings(loss=loss)
    elif not isinstance(settings, SolverSettings):
        raise ValueError(f"settings must be a samflow.SolverSettings, got {type(settings).__name__}")
    elif settings.loss != loss:
        raise ValueError(f"settings.loss is {settings.loss!r} but loss is {loss!r}; make them agree")
    _, t_saved = save_iterations(ts, eta)
    t_saved = np.unique(t_saved)
    if t_saved[-1] <= 0:
        raise ValueError(
            f"every save time rounds to iteration 0 with eta = {eta}; use a smaller eta or later times"
        )
    disc = run_discrete(method, data, alpha, rho, eta, t_saved, depth=depth, loss=loss, alpha_batched=alpha_batched, p=p)
    flow = solve(method, data, alpha, rho, t_saved, depth=depth, clock="t", settings=settings, alpha_batched=alpha_batched,
                 p=p)
    rel = relative_gap(np.asarray(disc.beta), np.asarray(flow.beta))
    # NaN (a failed cell) must survive the max, so no nanmax here.
    return np.where(np.isnan(np.asarray(disc.absorbed_t)), np.max(rel, axis=-1), np.nan)


def relative_gap(b: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """||b - ref||_2 / ||ref||_2 over the last axis, without overflow or underflow.

    Both norms are taken on values divided by max(|b|, |ref|) of the row first, so
    predictors of 1e200 (a flow that grew past 1e154, where a plain sum of squares
    overflows) or 1e-200 give the right ratio. 0 where b equals ref (also when both
    are 0), inf where only ref is 0, NaN where a value is NaN or inf.

    **Arguments:** `b`, `ref`: float arrays of one shape (..., d).
    **Returns:** float64 array of shape (...).
    """
    b = np.asarray(b, np.float64)
    ref = np.asarray(ref, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m = np.maximum(np.max(np.abs(b), axis=-1, keepdims=True), np.max(np.abs(ref), axis=-1, keepdims=True))
        m = np.where(m > 0, m, 1.0)
        num = np.sqrt(np.sum(((b - ref) / m) ** 2, axis=-1))
        den = np.sqrt(np.sum((ref / m) ** 2, axis=-1))
        finite = np.all(np.isfinite(b) & np.isfinite(ref), axis=-1)
        rel = np.where(num == 0, 0.0, num / den)
    return np.where(finite, rel, np.nan)
