"""Which feature leads: the dominant index argmax_j |beta_j| and whether the lead
is tied (docs/theory.md section 5), on NumPy arrays `(..., time, d)`.

Public as `samflow.analysis.dominant_index` and `samflow.analysis.tied`; kept in
a module of their own, below both `samflow.analysis` and `samflow.switches`
(which dates the switches of the lead and is re-exported by analysis), so that
neither imports the other in a circle.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import ArrayLike, Bool, Int


def _as_beta(beta: ArrayLike) -> np.ndarray:
    b = np.asarray(beta, dtype=np.float64)
    if b.ndim < 2 or b.shape[-1] == 0:
        raise ValueError(f"beta must have shape (..., time, d) with d >= 1, got shape {b.shape}")
    return b


def _check_rel_tol(rel_tol) -> None:
    """A one-line `ValueError` unless `rel_tol` is a number (not a bool) in [0, 1)."""
    if isinstance(rel_tol, (bool, np.bool_)) or not isinstance(rel_tol, (int, float, np.integer, np.floating)) \
            or not (0.0 <= rel_tol < 1.0):
        raise ValueError(f"rel_tol must be a number in [0, 1), got {rel_tol!r}")


def dominant_index(beta: ArrayLike, rel_tol: float = 0.0) -> Int[np.ndarray, "*batch time"]:
    """Dominant feature index argmax_j |beta_j| (docs/theory.md section 5), 1-based.

    **Arguments:**

    - `beta`: `(..., time, d)` (or any `(..., d)`), the linear predictor.
    - `rel_tol`: features with |beta_j| >= (1 - rel_tol) max_k |beta_k| count as
      tied for the maximum, and the lowest tied index is returned. With the
      default 0 this is plain `argmax` (lowest index on exact ties). Use `tied`
      to find the tied times.

    **Returns:** int64 array of shape `beta.shape[:-1]`: values 1..d; 0 where beta
    is exactly all zero (the collapsed state); -1 where beta has a NaN or inf.

    **Raises:** `ValueError` if beta has fewer than 2 axes or d = 0, or if
    `rel_tol` is not in [0, 1).
    """
    b = _as_beta(beta)
    _check_rel_tol(rel_tol)
    a = np.abs(b)
    finite = np.all(np.isfinite(b), axis=-1)
    a = np.where(finite[..., None], a, 0.0)
    m = np.max(a, axis=-1, keepdims=True)
    if rel_tol == 0.0:
        idx = np.argmax(a, axis=-1) + 1
    else:
        idx = np.argmax(a >= (1.0 - rel_tol) * m, axis=-1) + 1
    idx = np.where(m[..., 0] > 0, idx, 0)
    return np.where(finite, idx, -1).astype(np.int64)


def tied(beta: ArrayLike, rel_tol: float = 0.0) -> Bool[np.ndarray, "*batch time"]:
    """Whether the two largest |beta_j| are tied within `rel_tol`.

    A row is tied when it is finite, not all zero, d >= 2 and the second largest
    |beta_j| is >= (1 - rel_tol) times the largest (exact equality for the
    default 0). The symmetric init w(0) = alpha 1 is tied at time 0, so its
    dominant index there says nothing about the dynamics; `regime_label` skips
    tied times.

    **Arguments:** `beta` `(..., time, d)`; `rel_tol` in [0, 1).

    **Returns:** bool array of shape `beta.shape[:-1]`.

    **Raises:** `ValueError` as `dominant_index`.
    """
    b = _as_beta(beta)
    _check_rel_tol(rel_tol)
    if b.shape[-1] < 2:
        return np.zeros(b.shape[:-1], dtype=bool)
    a = np.abs(b)
    finite = np.all(np.isfinite(b), axis=-1)
    top2 = np.sort(np.where(finite[..., None], a, 0.0), axis=-1)[..., -2:]
    return finite & (top2[..., 1] > 0) & (top2[..., 0] >= (1.0 - rel_tol) * top2[..., 1])
