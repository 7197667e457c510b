"""The max-margin programs on the margin matrix A = y x (docs/theory.md section 5):
the linear program of the l1 max-margin predictor and the l2 one polished on its
active constraints. `samflow.analysis.max_margin_direction` checks its data and
normalizes; `samflow.datasets` asks the linear program whether drawn data are
separable. NumPy and SciPy only, and no other samflow module, so that both can
use it.
"""

from __future__ import annotations

import numpy as np


def max_margin_beta(A: np.ndarray, p: int) -> np.ndarray:
    """argmin ||beta||_p s.t. A beta >= 1, for A = y_i x_i (n, d) float64, p = 1 or 2.

    **Returns:** float64 `(d,)`, not normalized.

    **Raises:** `ValueError` if the data are not linearly separable (the
    constraints are infeasible); `RuntimeError` if the linear program fails.
    """
    import scipy.optimize  # here, not at the top: 0.25 s of every sweep's start (the figures import samflow.analysis)

    n, d = A.shape
    res = scipy.optimize.linprog(
        c=np.ones(2 * d),
        A_ub=-np.hstack([A, -A]),
        b_ub=-np.ones(n),
        bounds=(0, None),
        method="highs",
    )
    if res.status == 2:
        raise ValueError(
            "data are not linearly separable (no beta with y_i <beta, x_i> >= 1 for all i)"
        )
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    b = res.x[:d] - res.x[d:]
    if p == 2:
        b = _min_norm_l2(A, b)
    return b


def _min_norm_l2(A: np.ndarray, b0: np.ndarray) -> np.ndarray:
    """argmin ||b||_2 s.t. A b >= 1, from the feasible point b0."""
    import scipy.optimize

    res = scipy.optimize.minimize(
        lambda b: 0.5 * b @ b,
        b0,
        jac=lambda b: b,
        constraints=[{"type": "ineq", "fun": lambda b: A @ b - 1.0, "jac": lambda b: A}],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    b = res.x if np.all(A @ res.x >= 1.0 - 1e-6) else b0
    # Polish on the active set: the minimum-norm point of {A_S b = 1}.
    S = A @ b <= 1.0 + 1e-6
    if S.any():
        AS = A[S]
        lam = np.linalg.lstsq(AS @ AS.T, np.ones(int(S.sum())), rcond=None)[0]
        bp = AS.T @ lam
        if np.all(A @ bp >= 1.0 - 1e-12) and bp @ bp <= b @ b * (1 + 1e-8):
            b = bp
    return b
