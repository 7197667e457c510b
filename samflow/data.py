"""Binary classification data sets (docs/theory.md section 1).

A data set is n samples (x_i, y_i) with x_i in R^d and labels y_i in {-1, +1}.
The single-sample data set {(mu, +1)} with 0 < mu_1 < ... < mu_d is the paper's
main object: coordinate 1 is the most minor feature, coordinate d the major one.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._x64 import float64

__all__ = ["Dataset", "load_dataset", "single_sample"]


class Dataset(eqx.Module):
    """Binary data (X, y).

    **Fields:**

    - `X`: `Float[Array, "n d"]`, float64, the inputs x_i as rows.
    - `y`: `Float[Array, " n"]`, float64, the labels, each -1 or +1.

    Use `Dataset.from_arrays` to build one with validation; the plain constructor
    does no checks so that it can be used inside `jax.vmap`.
    """

    X: Float[Array, "n d"]
    y: Float[Array, " n"]

    @classmethod
    def from_arrays(cls, X: ArrayLike, y: ArrayLike) -> "Dataset":
        """Validate and build a data set.

        **Arguments:** `X` of shape (n, d), `y` of shape (n,), both finite.

        **Raises:** `ValueError` when the shapes disagree, a value is not finite,
        or a label is not -1 or +1.
        """
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise ValueError(f"X must have shape (n, d) with n, d >= 1, got {X.shape}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains a non-finite value (NaN or inf)")
        if not np.all(np.isin(y, (-1.0, 1.0))):
            raise ValueError("y must contain only the labels -1 and +1")
        with float64():  # float64 arrays even in a float32 program
            return cls(X=jnp.asarray(X), y=jnp.asarray(y))

    @property
    def n(self) -> int:
        """Number of samples."""
        return self.X.shape[0]

    @property
    def d(self) -> int:
        """Input dimension."""
        return self.X.shape[1]

    @property
    def is_single_sample(self) -> bool:
        """True for a one-sample data set, the case the rescaled flows need."""
        return self.X.shape[0] == 1

    @property
    def mu(self) -> Float[Array, " d"]:
        """y_1 x_1 of a one-sample data set: the point mu of {(mu, +1)}.

        **Raises:** `ValueError` when the data set has more than one sample.
        """
        if not self.is_single_sample:
            raise ValueError(f"mu is defined for one sample only, this data set has {self.n}")
        return self.y[0] * self.X[0]


def single_sample(mu: ArrayLike) -> Dataset:
    """The data set {(mu, +1)} of docs/theory.md section 1.

    **Arguments:** `mu`, shape (d,), finite. The paper orders 0 < mu_1 < ... < mu_d,
    but any finite mu is accepted (the analysis calls the largest |mu_j| major).

    **Raises:** `ValueError` when mu is empty, not one-dimensional or not finite.
    """
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim != 1 or mu.size == 0:
        raise ValueError(f"mu must be a non-empty vector, got shape {mu.shape}")
    return Dataset.from_arrays(mu[None, :], np.ones(1))


def load_dataset(path) -> Dataset:
    """Load binary data from a file.

    **Arguments:** `path` of a `.npz` file holding arrays `X` (n, d) and `y` (n,),
    or a `.csv` file of n rows whose last column is the label y and the others x.

    **Raises:** `FileNotFoundError` naming the path when it does not exist;
    `ValueError` for another suffix, missing arrays, or invalid values.
    """
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {p}")
    if p.suffix == ".npz":
        with np.load(p) as f:
            missing = [k for k in ("X", "y") if k not in f]
            if missing:
                raise ValueError(f"{p}: the .npz file lacks the array(s) {', '.join(missing)}")
            X, y = f["X"], f["y"]
    elif p.suffix == ".csv":
        table = np.loadtxt(p, delimiter=",", ndmin=2)
        if table.shape[1] < 2:
            raise ValueError(f"{p}: a data .csv needs at least 2 columns (features, then the label)")
        X, y = table[:, :-1], table[:, -1]
    else:
        raise ValueError(f"{p}: unknown data file type {p.suffix!r}; use .npz (X, y) or .csv")
    return Dataset.from_arrays(X, y)
