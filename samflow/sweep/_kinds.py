"""The sweep's other kinds of cells: discrete algorithms (`samflow.discrete.run_discrete`,
`samflow.models.run_model_discrete`) and the flows of generic models
(`samflow.models.solve_model`), solved in fixed-width batches and returned as a
`Trajectory` (or `Summary`) per method, so that `samflow.store.to_dataset` lays
them out beside the flows of the diagonal net.

A discrete method's save time t_i holds the iterate k_i = round(t_i / eta), at
real time k_i eta (`real_time` in the results; docs/theory.md s.2). Fields a
kind does not have are NaN: `collapse_direction` and `slide_time` (no event
handling of that kind), `event_time` of a discrete cell is the time k eta of
its first non-finite iterate. `num_steps` is the iterations to the horizon
(discrete) or the solver's steps (generic flow); `num_runs` is 0 for a
discrete cell, 1 for a generic flow.

Batches have the width of the whole grid's (`batch_width`), the last one padded
with copies of its last cell, so a slice of the grid gives the bits of the whole
run. These cells run on the default device, and are not checkpointed: `--resume`
recomputes them (their numbers do not change).
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from .._engine.solution import Summary, Trajectory, summarize
from ..datasets import Dataset
from ..discrete import run_discrete
from ..models import run_model_discrete, solve_model


def _batches(fn: Callable, n: int, width: int, on_batch: "Callable[[int], None] | None", *arrays) -> dict:
    """`fn` on rows [start, start + width) of every array (the last batch padded by
    repeating the last row); returns its fields (a dict of NumPy arrays, leading axis n)."""
    parts = []
    for start in range(0, n, width):
        n_real = min(width, n - start)
        idx = np.minimum(np.arange(start, start + width), n - 1)
        out = fn(*(a[idx] for a in arrays))
        parts.append({k: np.asarray(v)[:n_real] for k, v in out.items()})
        if on_batch is not None:
            on_batch(n_real)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _nan(*shape) -> np.ndarray:
    return np.full(shape, np.nan)


def p_keyword(p: "float | None") -> dict:
    """The keyword `p` of the solvers for an lp entry of the flow axis, none for the
    other methods (which refuse it)."""
    return {} if p is None else {"p": float(p)}


def solve_other(
    method: str, eta: "float | None", data: Dataset, W0: np.ndarray, rho: np.ndarray, ts: np.ndarray,
    *, model_config, settings, width: int, summary: bool, on_batch: "Callable[[int], None] | None" = None,
    p: "float | None" = None,
) -> "Trajectory | Summary":
    """The cells (W0 (B, L, d), rho (B,)) of one entry of the `flow` axis that
    `solve_grid` does not solve: a discrete method (`eta` the step size) of any
    model, or a flow (`eta` None) of a generic model (`model_config`, the config's
    `[model]` section). For a generic model, W0[:, 0, 0] is each cell's alpha (its
    init is `model.init(1, seed)` times alpha). `settings`: the sweep's
    `SolverSettings` (its loss is the discrete methods' too). `p`: the exponent of
    "lp" (None for the other methods).

    **Returns:** a `Trajectory` with leading axis B (a `Summary` with `summary`).
    """
    B, L, d = W0.shape
    n = ts.size
    loss = settings.loss
    if model_config.generic:
        model = model_config.build(d)
        unit = model.init(1.0, model_config.seed)

        def fn(scale, r):
            theta0 = jax.tree_util.tree_map(lambda x: scale.reshape((-1,) + (1,) * x.ndim) * x[None], unit)
            if eta is None:
                out = solve_model(method, model, theta0, r, data, ts, settings, theta0_batched=True, **p_keyword(p))
                return dict(t=np.broadcast_to(ts, (r.size, n)), beta=out.beta, loss=out.loss, status=out.status,
                            event_time=out.event_time, num_steps=out.num_steps)
            out = run_model_discrete(method, model, theta0, r, eta, ts, data, loss, theta0_batched=True,
                                     **p_keyword(p))
            return dict(t=out.t, beta=out.beta, loss=out.loss, status=out.status,
                        event_time=_nan(r.size), num_steps=out.steps[:, -1])

        f = _batches(fn, B, width, on_batch, W0[:, 0, 0], rho)
        f["W"] = np.zeros((B, n, 0, d))  # no (layer, coord) weights (output.save_weights is refused)
    else:
        def fn(w, r):
            out = run_discrete(method, data, w, r, eta, ts, depth=L, loss=loss, alpha_batched=True, **p_keyword(p))
            return dict(t=out.t, W=out.W, beta=out.beta, loss=out.loss, status=out.status,
                        event_time=out.event_t, num_steps=out.steps[:, -1])

        f = _batches(fn, B, width, on_batch, W0, rho)
    traj = Trajectory(
        ts=np.broadcast_to(ts, (B, n)), t=f["t"], W=f["W"], beta=f["beta"], loss=f["loss"],
        status=f["status"].astype(np.int32), event_time=f["event_time"], event_t=f["event_time"],
        collapse_direction=_nan(B, d), slide_time=_nan(B, L, d), num_steps=f["num_steps"].astype(np.int64),
        num_runs=np.full(B, 0 if eta is not None else 1, np.int32),
    )
    if summary:
        return jax.tree_util.tree_map(np.asarray, summarize(traj))
    return traj
