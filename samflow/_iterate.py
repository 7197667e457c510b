"""One GD/SAM iteration engine for the diagonal network and any model (docs/theory.md s.2).

The save times of a discrete run (`save_iterations`), the float64 inputs of a
cell with non-finite ones made harmless, and the masks of saved iterates that
are finite.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .data import Dataset
from ._settings import _brief, check_save_times


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
    eta_arr = np.asarray(eta, dtype=np.float64)
    if eta_arr.ndim != 0 or not np.isfinite(eta_arr) or eta_arr <= 0:
        raise ValueError(f"eta (the step size) must be a finite number > 0, got {_brief(eta)}")
    return float(eta_arr)


def _all_finite(tree) -> Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def _safe_inputs(theta0: Pytree, rho, data: Dataset):
    """float64 inputs of one cell, with non-finite ones replaced by harmless zeros
    (the cell is then marked by `ok_in` and its outputs are NaN): returns
    (theta0, rho, data, ok_in)."""
    theta0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), theta0)
    rho = jnp.asarray(rho, jnp.float64)
    ok_in = _all_finite(theta0) & jnp.isfinite(rho) & jnp.all(jnp.isfinite(data.X))
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


def _mask_rows(tree, ok):
    return jax.tree_util.tree_map(
        lambda x: jnp.where(ok.reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.nan), tree
    )
