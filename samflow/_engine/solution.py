"""What a solve returns: `Trajectory` (every saved state) and `Summary` (what
the figures and the analysis read of it, reduced on the device by `summarize`).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._util.x64 import in_float64


def index_dtype(d: int) -> np.dtype:
    """The smallest signed integer type that holds a 1-based feature index of
    1..d and the codes 0 and -1: int8 for d <= 127, int16 for d <= 32767, else
    int32 (the stored `dominant` and `switch_*` leaders; a narrower type would
    wrap, e.g. leader 200 stored as int8 reads -56)."""
    return np.min_scalar_type(-(int(d) + 1))


class _CellEnd(eqx.Module):
    """The fields that `Trajectory` and `Summary` share: the loss at the save times
    and how the cell ended (status, event times, collapse direction, slide times,
    solver statistics); documented in `Trajectory`. Declared once here, so that a
    field added to one cannot be forgotten in the other."""

    loss: Float[Array, " n_save"]
    status: Int[Array, ""]
    event_time: Float[Array, ""]
    event_t: Float[Array, ""]
    collapse_direction: Float[Array, " d"]
    slide_time: Float[Array, "L d"]
    num_steps: Int[Array, ""]
    num_runs: Int[Array, ""]


class Trajectory(_CellEnd):
    """The solution of one cell (or, with leading batch axes, of a grid of cells).

    Shapes are given for one cell; a batched solve adds leading axes to each.

    **Fields:**

    - `ts`: `(n_save,)` save times in the clock of the solve (t or tau).
    - `t`: `(n_save,)` real time at the save times (equals `ts` for clock t).
    - `W`: `(n_save, L, d)` weights.
    - `beta`: `(n_save, d)` linear predictor.
    - `loss`: `(n_save,)` empirical loss L(W).
    - `status`: `()` int, a `samflow.Status`.
    - `event_time`: `()` clock time of the collapse, critical point, blow-up or
      failure (for MAX_STEPS: the last accepted step, where the solver stalled);
      0 for a stop condition that holds at the start; NaN if none.
    - `event_t`: `()` the same event in real time t; NaN if none.
    - `collapse_direction`: `(d,)` beta/||beta|| just before collapse; NaN otherwise.
    - `slide_time`: `(L, d)` clock time from which each weight slid at 0; NaN if never
      (or if it left 0 again: linf on multi-sample data, when a sign of r_j changed).
    - `num_steps`: `()` accepted + rejected solver steps over all runs.
    - `num_runs`: `()` diffrax solves used.
    """

    ts: Float[Array, " n_save"]
    t: Float[Array, " n_save"]
    W: Float[Array, "n_save L d"]
    beta: Float[Array, "n_save d"]


class Summary(_CellEnd):
    """What the figures and the analysis read of a `Trajectory`, in a fifth of
    the memory (`summarize`; `samflow.sweep.solve_grid(..., summary=True)`).

    Shapes for one cell; a batched solve adds leading axes to each.

    **Fields:**

    - `t`: `(n_save,)` float64, real time at the save times (as `Trajectory.t`).
    - `dominant`: `(n_save,)` int8 (int16 when d > 127, int32 when d > 32767,
      `index_dtype`): the dominant feature
      argmax_j |beta_j|, 1-based, lowest index on exact ties; 0 where beta is all
      zero; -1 where beta is not finite (`samflow.analysis.dominant_index`).
    - `tied`: `(n_save,)` bool: the two largest |beta_j| are within the relative
      `tie_tol` (`samflow.analysis.tied`; `regime_label` skips tied times).
    - `beta_norm`: `(n_save,)` float64, ||beta||_2 (computed without overflow);
      NaN where beta is not finite.
    - `loss`: `(n_save,)` float64.
    - `status`, `event_time`, `event_t`, `collapse_direction`, `slide_time`,
      `num_steps`, `num_runs`: as in `Trajectory`.
    """

    t: Float[Array, " n_save"]
    dominant: Int[Array, " n_save"]
    tied: Bool[Array, " n_save"]
    beta_norm: Float[Array, " n_save"]


@in_float64
def summarize(traj: Trajectory, tie_tol: float = 1e-9) -> Summary:
    """Reduce a `Trajectory` (any leading batch axes) to a `Summary`; jittable,
    so that a batched solve can reduce on the device before anything is copied.

    `dominant` and `tied` equal `samflow.analysis.dominant_index(beta)` and
    `samflow.analysis.tied(beta, tie_tol)` exactly (`tie_tol` 1e-9 is
    `regime_label`'s default).

    **Raises:** `ValueError` if `tie_tol` is not in [0, 1).
    """
    if isinstance(tie_tol, (int, float, np.number)) and not (0.0 <= tie_tol < 1.0):
        raise ValueError(f"tie_tol must be in [0, 1), got {tie_tol!r}")
    b = traj.beta
    d = b.shape[-1]
    a = jnp.abs(b)
    finite = jnp.all(jnp.isfinite(b), axis=-1)
    a = jnp.where(finite[..., None], a, 0.0)
    m = jnp.max(a, axis=-1)
    idx = jnp.argmax(a, axis=-1) + 1
    dom = jnp.where(finite, jnp.where(m > 0, idx, 0), -1).astype(index_dtype(d))
    if d >= 2:
        top2 = jnp.sort(a, axis=-1)[..., -2:]
        tied = finite & (top2[..., 1] > 0) & (top2[..., 0] >= (1.0 - tie_tol) * top2[..., 1])
    else:
        tied = jnp.zeros(finite.shape, bool)
    scale = jnp.where(m > 0, m, 1.0)
    norm = scale * jnp.sqrt(jnp.sum((a / scale[..., None]) ** 2, axis=-1))
    return Summary(
        t=traj.t,
        dominant=dom,
        tied=tied,
        beta_norm=jnp.where(finite, norm, jnp.nan),
        loss=traj.loss,
        status=traj.status,
        event_time=traj.event_time,
        event_t=traj.event_t,
        collapse_direction=traj.collapse_direction,
        slide_time=traj.slide_time,
        num_steps=traj.num_steps,
        num_runs=traj.num_runs,
    )
