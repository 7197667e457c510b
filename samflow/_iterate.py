"""One GD/SAM iteration engine for the diagonal network and any model (docs/theory.md s.2).

Every discrete algorithm is theta_{k+1} = step(theta_k), with `step` the
method's SAM step: the diagonal network's hand-written one
(`samflow.discrete.sam_step`) or the autodiff one of any model
(`samflow.models.model_sam_step`). `iterate` runs it for one cell and saves at
the iterations of `save_iterations`; `safe_inputs` makes a cell's non-finite
inputs harmless, and `finite_prefix` keeps the saved iterates up to the first
non-finite one.

**Memory.** The iterations run as a `lax.scan` over the save intervals with a
`lax.while_loop` inside, so memory grows with the number of save times only,
never with the number of iterations; the trip count depends on the save times
only, so under vmap no cell can stall another.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Int

from .datasets import Dataset
from ._engine.settings import brief, check_save_times, float_array
from .status import Status

Pytree = Any


def save_iterations(ts: ArrayLike, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """Iteration indices and real times of the iterates saved for the times `ts`.

    **Arguments:** `ts` `(n_save,)` save times in real time t (checked as in
    `samflow.solve`); `eta` > 0, the step size.

    **Returns:** `(k, t)`: int64 `(n_save,)` with k_i = round(ts_i / eta)
    (non-decreasing; two save times closer than eta can share an iterate) and
    float64 `(n_save,)` with t_i = k_i eta.

    **Raises:** `ValueError` for bad save times or a step size that is not a
    finite number > 0.
    """
    eta = _check_eta(eta)
    ts = check_save_times(ts)
    ratio = ts / eta
    if ratio[-1] >= 2.0**62:
        raise ValueError(
            f"the horizon {ts[-1]} is {ratio[-1]:.3g} steps of eta = {eta}: too many iterations"
        )
    k = np.rint(ratio).astype(np.int64)
    return k, k * eta


def _check_eta(eta) -> float:
    try:
        eta_arr = float_array(eta, "eta")
    except ValueError:
        raise ValueError(f"eta (the step size) must be a finite number > 0, got {brief(eta)}") from None
    if eta_arr.ndim != 0 or not np.isfinite(eta_arr) or eta_arr <= 0:
        raise ValueError(f"eta (the step size) must be a finite number > 0, got {brief(eta)}")
    return float(eta_arr)


def all_finite(tree) -> Array:
    """() bool: every entry of every leaf is finite."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def safe_inputs(theta0: Pytree, rho, data: Dataset):
    """float64 inputs of one cell, with non-finite ones replaced by harmless zeros
    (the cell is then marked by `ok_in` and its outputs are NaN): returns
    (theta0, rho, data, ok_in)."""
    theta0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), theta0)
    rho = jnp.asarray(rho, jnp.float64)
    ok_in = all_finite(theta0) & jnp.isfinite(rho) & jnp.all(jnp.isfinite(data.X))
    theta0 = jax.tree_util.tree_map(lambda x: jnp.where(ok_in, x, 0.0), theta0)
    rho = jnp.where(ok_in, rho, 0.0)
    data = Dataset(X=jnp.where(ok_in, data.X, 0.0), y=data.y)
    return theta0, rho, data, ok_in


def _finite_rows(tree) -> Array:
    """(n_save,) True where every leaf of a time-stacked pytree is finite."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(x).reshape(x.shape[0], -1), axis=1) for x in leaves]), axis=0
    )


def finite_prefix(thetas: Pytree, ok_in) -> tuple[Pytree, Array]:
    """The saved states (a pytree, leaves with a leading (n_save,) axis) up to
    the first one that is not finite, NaN from there on (an inf may turn back
    into a finite number by cancellation, which would be meaningless), and the
    (n_save,) bool of the rows kept; no row is kept where `ok_in` is False."""
    rows = _finite_rows(thetas) & ok_in
    rows = jnp.cumprod(rows.astype(jnp.int32)).astype(bool)
    masked = jax.tree_util.tree_map(
        lambda x: jnp.where(rows.reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.nan), thetas
    )
    return masked, rows


def iterate(
    step: Callable, theta0: Pytree, ks: Int[Array, " n_save"], ok_in, *, watch: "Callable | None" = None
) -> tuple[Pytree, Array, Array, Array, Array]:
    """Iterate theta_{k+1} = step(theta_k) from `theta0` (one cell) and save
    theta_k at the iterations `ks` (non-decreasing, >= 0).

    `watch(theta_k, theta_{k+1})`, if given, returns a () bool marking an event of
    the step (e.g. `samflow.discrete`'s landing on the absorbing w = 0 of
    linf-SAM); its first iteration k + 1 is returned as `k_watch`.

    **Returns:** (thetas, rows, status, k_bad, k_watch): the saved states, a pytree like
    theta0 with a leading (n_save,) axis, NaN from the first non-finite one on
    (`finite_prefix`); rows (n_save,) bool, the saved states kept; status ()
    int `Status`: FINISHED, FAILED (an iterate became non-finite) or
    NONFINITE_INPUT (`ok_in` False, from `safe_inputs`); k_bad () the first
    non-finite iteration, -1 if none; k_watch () the first iteration at which
    `watch` was True, -1 if none (always -1 without `watch`).
    """

    def first(k_seen, hit, k):
        return jnp.where(hit & (k_seen < 0), k, k_seen)

    def body(carry):
        theta, k, k_bad, k_watch = carry
        new = step(theta)
        k = k + 1
        if watch is not None:
            k_watch = first(k_watch, watch(theta, new), k)
        return new, k, first(k_bad, ~all_finite(new), k), k_watch

    def advance(carry, k_target):
        carry = jax.lax.while_loop(lambda c: c[1] < k_target, body, carry)
        return carry, carry[0]

    k0 = jnp.zeros((), ks.dtype)
    none = -jnp.ones_like(k0)
    (_, _, k_bad, k_watch), thetas = jax.lax.scan(advance, (theta0, k0, none, none), ks)
    thetas, rows = finite_prefix(thetas, ok_in)
    status = jnp.where(
        ~ok_in, int(Status.NONFINITE_INPUT), jnp.where(jnp.all(rows), int(Status.FINISHED), int(Status.FAILED))
    )
    return thetas, rows, status, k_bad, k_watch
